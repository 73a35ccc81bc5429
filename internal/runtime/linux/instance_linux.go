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

	"golang.org/x/sys/unix"

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
	agent  *agentProc      // the agent's pidfd; nil once destroyed (guarded by destroyMu)
	exited <-chan struct{} // closed when the agent has exited

	destroyOnce sync.Once     // closes destroyed
	destroyMu   sync.Mutex    // serializes Destroy; guards destroyDone
	destroyDone bool          // everything is gone: later calls succeed at once
	destroyed   chan struct{} // closed once Destroy starts: the sandbox serves no more
}

var (
	_ runtime.Instance = (*Instance)(nil)
	_ runtime.Pauser   = (*Instance)(nil)
)

// newInstance makes the Instance of a started or adopted sandbox. It takes
// ownership of agent.
func newInstance(r *Runtime, dir string, st *state, cg *cgroups.Sandbox, agent *agentProc) *Instance {
	return &Instance{
		r:         r,
		id:        st.Spec.ID,
		dir:       dir,
		state:     st,
		cg:        cg,
		agent:     agent,
		exited:    agent.exited,
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

// Exited implements runtime.Instance: the channel is closed as soon as the
// agent has exited, seen through its pidfd in the netpoller (for an agent
// this daemon started, once it is reaped).
func (i *Instance) Exited() <-chan struct{} { return i.exited }

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

// Destroy implements runtime.Instance. It kills the sandbox (see
// killSandbox: the agent by pidfd, which ends the sandbox's PID namespace,
// then everything in its cgroup tree, however deep) and only once no
// process of it is left removes the cgroups and the state directory and
// frees the uid slot; the sandbox's mounts went with its mount namespace.
// If a process survives until ctx ends, Destroy fails closed: the state
// directory and the uid slot stay (a uid range whose processes may still
// run is never reused), the details go to the log, and a later Destroy (or
// Recover after a restart) tries again.
func (i *Instance) Destroy(ctx context.Context) error {
	i.destroyOnce.Do(func() { close(i.destroyed) })
	i.destroyMu.Lock()
	defer i.destroyMu.Unlock()
	if i.destroyDone {
		return nil
	}
	if err := i.r.killSandbox(ctx, i.id, i.cg, i.agent, i.state); err != nil {
		return fmt.Errorf("sandbox %s: destroy: %w", i.id, err)
	}
	// Nothing of the sandbox runs any more: its uid range is free.
	i.r.forget(i, true)
	if i.agent != nil {
		i.agent.close()
		i.agent = nil
	}
	var errs []error
	// Not found: someone (another runtime value after a restart)
	// destroyed it already.
	if err := i.cg.Remove(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		errs = append(errs, err)
	}
	if err := removeStateDir(i.dir); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox %s: destroy: %w", i.id, err)
	}
	i.destroyDone = true
	return nil
}

// killSandbox kills every process of sandbox id and waits until none is
// left. First the agent, through its pidfd (agent nil when there is no
// live agent):
// it is PID 1 of the sandbox's PID namespace, so when it dies the kernel
// kills every process in the namespace, whatever cgroups say. Then
// everything in the sandbox's cgroup tree (cg, nil when it has none),
// which thaws what is frozen and catches any process that would sit in
// those cgroups outside the namespace. It succeeds only once the agent has
// exited (and, if it is our child, been reaped) and the tree holds no process;
// until then, or ctx's end, it repeats both kills every second. On failure
// the error says only that processes are left (it reaches API callers);
// what they are doing goes to the log.
func (r *Runtime) killSandbox(ctx context.Context, id string, cg *cgroups.Sandbox, agent *agentProc, st *state) error {
	if ctx.Err() != nil {
		// Still kill: a cancelled caller must not leave the sandbox
		// running. The checks below get a short grace.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	killAgent := func() {
		if agent != nil {
			agent.signal(unix.SIGKILL)
		}
	}
	var killErr error
	killTree := func(ctx context.Context) {
		if cg == nil {
			return
		}
		killErr = cg.Kill(ctx)
		if errors.Is(killErr, errdefs.ErrNotFound) {
			killErr = nil
		}
	}
	killAgent()
	treeCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	killTree(treeCtx)
	cancel()
	var left []int
	var procsErr error
	gone := func() bool {
		if agent != nil && !agent.hasExited() {
			return false
		}
		if cg == nil {
			return true
		}
		left, procsErr = cg.Procs()
		if errors.Is(procsErr, errdefs.ErrNotFound) {
			left, procsErr = nil, nil
		}
		return len(left) == 0 && procsErr == nil
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	for !gone() {
		select {
		case <-poll.C:
		case <-tick.C:
			killAgent()
			tctx, cancel := context.WithTimeout(ctx, time.Second)
			killTree(tctx)
			cancel()
		case <-ctx.Done():
			if gone() {
				return nil
			}
			agent := "gone"
			if st != nil {
				agent = describeTree(st.Pid, st.PidStart)
			}
			r.log.Warn("sandbox processes survive the kill; its uid range and state are kept",
				"sandbox", id, "agent", agent, "cgroup_procs", left, "procs_err", procsErr, "kill_err", killErr)
			return fmt.Errorf("processes of the sandbox are still running after the kill; its resources are kept until a retry succeeds: %w", errdefs.ErrUnavailable)
		}
	}
	return nil
}

// describeTree says what a process that would not die and its children
// are doing: each thread's state and the kernel function it sleeps in, as
// /proc shows them. It names host pids, so it is for the log only, and
// bounded.
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
