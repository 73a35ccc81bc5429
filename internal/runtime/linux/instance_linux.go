package linux

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/cgroups"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Instance is one sandbox of the native backend.
type Instance struct {
	r      *Runtime
	id     string
	dir    string
	state  *state
	cg     *cgroups.Sandbox
	exited <-chan struct{} // closed when the agent exits, if it is our child

	destroyOnce sync.Once
	destroyErr  error
	destroyed   chan struct{}
}

var (
	_ runtime.Instance = (*Instance)(nil)
	_ runtime.Pauser   = (*Instance)(nil)
)

func newInstance(r *Runtime, dir string, st *state, cg *cgroups.Sandbox, exited <-chan struct{}) *Instance {
	return &Instance{
		r:         r,
		id:        st.Spec.ID,
		dir:       dir,
		state:     st,
		cg:        cg,
		exited:    exited,
		destroyed: make(chan struct{}),
	}
}

// ID implements runtime.Instance.
func (i *Instance) ID() string { return i.id }

// Spec implements runtime.Instance.
func (i *Instance) Spec() runtime.Spec { return i.state.Spec }

// CreatedAt implements runtime.Instance.
func (i *Instance) CreatedAt() time.Time { return i.state.CreatedAt }

// Pid is the host pid of the sandbox's agent (its PID 1).
func (i *Instance) Pid() int { return i.state.Pid }

// UIDBase is the host uid that root inside the sandbox maps to.
func (i *Instance) UIDBase() uint32 { return i.state.UIDBase }

// Dial implements runtime.Instance.
func (i *Instance) Dial(ctx context.Context) (net.Conn, error) {
	select {
	case <-i.destroyed:
		return nil, fmt.Errorf("sandbox %s: %w", i.id, errdefs.ErrNotFound)
	default:
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", filepath.Join(i.dir, socketFile))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: agent: %w", i.id, errdefs.ErrUnavailable)
	}
	return c, nil
}

func (i *Instance) ping(ctx context.Context) error {
	c := agentclient.New(i.Dial)
	defer c.Close()
	_, err := c.Info(ctx)
	return err
}

// Stats implements runtime.Instance.
func (i *Instance) Stats(ctx context.Context) (runtime.Stats, error) {
	st, err := i.cg.Stats()
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("sandbox %s: stats: %w", i.id, err)
	}
	return runtime.Stats{
		CPUTime:         st.CPUTime,
		MemoryBytes:     st.MemoryBytes,
		PeakMemoryBytes: st.PeakMemoryBytes,
		Pids:            st.Pids,
		OOMKills:        st.OOMKills,
	}, nil
}

// Pause implements runtime.Pauser by freezing every process.
func (i *Instance) Pause(ctx context.Context) error {
	if err := i.cg.Freeze(ctx); err != nil {
		return fmt.Errorf("sandbox %s: pause: %w", i.id, err)
	}
	return nil
}

// Resume implements runtime.Pauser.
func (i *Instance) Resume(ctx context.Context) error {
	if err := i.cg.Thaw(ctx); err != nil {
		return fmt.Errorf("sandbox %s: resume: %w", i.id, err)
	}
	return nil
}

// Destroy implements runtime.Instance. Killing the cgroup subtree kills
// the agent and everything it started; the sandbox's mounts disappear with
// its mount namespace. Then the cgroups, the state directory and the uid
// slot are released.
func (i *Instance) Destroy(ctx context.Context) error {
	i.destroyOnce.Do(func() {
		close(i.destroyed)
		var errs []error
		// Not found: someone (another runtime value after a restart)
		// destroyed it already.
		killErr := i.cg.Kill(ctx)
		if errors.Is(killErr, errdefs.ErrNotFound) {
			killErr = nil
		}
		if killErr != nil {
			errs = append(errs, killErr)
		}
		if i.exited != nil {
			if err := i.awaitExit(ctx); err != nil {
				errs = append(errs, err)
			}
		}
		if err := i.cg.Remove(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			errs = append(errs, err)
		}
		if err := removeStateDir(i.dir); err != nil {
			errs = append(errs, err)
		}
		// A uid range whose processes may still run is never reused.
		i.r.forget(i, killErr == nil)
		if err := errors.Join(errs...); err != nil {
			i.destroyErr = fmt.Errorf("sandbox %s: destroy: %w", i.id, err)
		}
	})
	return i.destroyErr
}

// awaitExit waits until the agent, killed, has been reaped. A v1 kill ends
// when cgroup.procs lists nobody, but the kernel stops listing a process as
// soon as it starts to exit, and the agent is reaped only once everything
// in its PID namespace is gone; so while it waits the cgroup is killed
// again every second, which also thaws anything frozen in it. If the agent
// still is not reaped when ctx ends, the error says where its tree is stuck.
func (i *Instance) awaitExit(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-i.exited:
			return nil
		case <-tick.C:
			_ = i.cg.Kill(ctx)
		case <-ctx.Done():
			return fmt.Errorf("agent not reaped: %w (%s)", ctx.Err(), describeTree(i.state.Pid, i.state.PidStart))
		}
	}
}

// describeTree says what a process that would not die and its children
// are doing: each thread's state and the kernel function it sleeps in, as
// /proc shows them. It is for error messages only, and bounded.
func describeTree(pid int, start uint64) string {
	if st, err := procStartTime(pid); err != nil || st != start {
		return fmt.Sprintf("pid %d is gone or a zombie", pid)
	}
	const maxThreads = 32
	var b strings.Builder
	n := 0
	queue := []int{pid}
	for len(queue) > 0 && n < maxThreads {
		p := queue[0]
		queue = queue[1:]
		dir := "/proc/" + strconv.Itoa(p) + "/task"
		tids, err := os.ReadDir(dir)
		if err != nil {
			fmt.Fprintf(&b, " pid %d: %v;", p, err)
			continue
		}
		fmt.Fprintf(&b, " pid %d:", p)
		for _, t := range tids {
			if n++; n > maxThreads {
				b.WriteString(" ...")
				break
			}
			task := filepath.Join(dir, t.Name())
			state := "?"
			if f, err := statFields(filepath.Join(task, "stat")); err == nil {
				state = f[0]
			}
			wchan, _ := os.ReadFile(filepath.Join(task, "wchan"))
			fmt.Fprintf(&b, " %s %s in %q", t.Name(), state, wchan)
			children, _ := os.ReadFile(filepath.Join(task, "children"))
			for _, c := range strings.Fields(string(children)) {
				if cp, err := strconv.Atoi(c); err == nil {
					queue = append(queue, cp)
				}
			}
		}
		b.WriteString(";")
	}
	return strings.TrimSpace(strings.TrimSuffix(b.String(), ";"))
}
