package sandbox

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
)

// endLog is an EndRecorder that keeps what it is told.
type endLog struct {
	mu       sync.Mutex
	begun    map[string]End
	finished map[string]error
}

func (l *endLog) BeginEnd(ctx context.Context, e End) (func(error), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.begun == nil {
		l.begun, l.finished = map[string]End{}, map[string]error{}
	}
	l.begun[e.ID] = e
	return func(err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.finished[e.ID] = err
	}, nil
}

// reasons returns the reason of every end begun and finished without
// error; an end begun and not finished, or finished with an error, is
// listed as "unfinished".
func (l *endLog) reasons() map[string]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]string{}
	for id, e := range l.begun {
		if err, ok := l.finished[id]; !ok || err != nil {
			out[id] = "unfinished"
			continue
		}
		out[id] = e.Reason
	}
	return out
}

// crash plays the death of m's daemon: its background work stops, and
// nothing else of it runs (no Close, which a killed daemon never gets).
func crash(m *Manager) {
	m.mu.Lock()
	stop := m.stop
	m.closed = true
	m.mu.Unlock()
	stop()
	m.bg.Wait()
}

// TestKillMatrix kills the manager (as a SIGKILL of the daemon would) at
// every step of a create and of a destroy, restarts it on the same
// runtime and state, and checks that each sandbox is either complete
// (adopted, running, its create confirmed) or gone, with its end on the
// record naming why; never a sandbox whose create was not confirmed, and
// never one that vanished without a record.
func TestKillMatrix(t *testing.T) {
	const origin = "42"
	cases := []struct {
		step string // where the daemon dies
		// confirm: the caller confirms the create (the API's step after
		// its audit outcome); destroy: then destroys it.
		confirm, destroy bool
		kept             bool   // the sandbox must be adopted
		end              string // else the reason recorded
	}{
		{step: stepCreateRecorded, end: EndCreateInterrupted},
		{step: stepCreateStarted, end: EndCreateInterrupted},
		{step: "create.returned", end: EndCreateInterrupted}, // Create returned, Confirm never called
		{step: stepCreateConfirmed, confirm: true, kept: true},
		{step: stepDestroyMarked, confirm: true, destroy: true, end: EndDestroyInterrupted},
		{step: stepDestroyKilled, confirm: true, destroy: true, end: EndDestroyInterrupted},
		// The API's delete: destroyed, the daemon killed before the
		// delete's outcome was committed.
		{step: "destroy.unrecorded", confirm: true, destroy: true, end: EndDestroyInterrupted},
	}
	for _, tc := range cases {
		t.Run(tc.step, func(t *testing.T) {
			ctx := context.Background()
			e := newEnv(t)
			m1 := e.newManager(Config{})
			var id string
			reached := make(chan struct{})
			m1.step = func(name, sid string) {
				if name != tc.step {
					return
				}
				id = sid
				close(reached)
				goruntime.Goexit() // the daemon dies here
			}
			if err := m1.Start(ctx); err != nil {
				t.Fatal(err)
			}
			go func() {
				sb, err := m1.Create(ctx, Spec{Owner: "tenant", Pending: true, Origin: origin})
				if err != nil {
					t.Errorf("create: %v", err)
					return
				}
				if tc.step == "create.returned" {
					id = sb.ID
					close(reached)
					return
				}
				if tc.confirm {
					if err := m1.Confirm(ctx, sb.ID); err != nil {
						t.Errorf("confirm: %v", err)
						return
					}
				}
				if tc.destroy && tc.step == "destroy.unrecorded" {
					_ = m1.DestroyRecorded(ctx, sb.ID, func() error {
						id = sb.ID
						close(reached)
						goruntime.Goexit() // the daemon dies before the outcome
						return nil
					})
				} else if tc.destroy {
					if err := m1.Destroy(ctx, sb.ID); err != nil {
						t.Errorf("destroy: %v", err)
					}
				}
				t.Errorf("the manager did not stop at %s", tc.step)
			}()
			select {
			case <-reached:
			case <-time.After(20 * time.Second):
				t.Fatalf("step %s not reached", tc.step)
			}
			crash(m1)

			ends := &endLog{}
			m2 := e.manager(Config{Ends: ends})
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			if err := m2.WaitRecovered(wctx); err != nil {
				t.Fatal(err)
			}
			live := slices.Contains(e.rt.Live(), id)
			sb, gerr := m2.Get(id)
			_, ferr := os.Stat(filepath.Join(e.stateDir, id+".json"))
			if tc.kept {
				if !live || gerr != nil || sb.State != StateRunning || sb.Owner != "tenant" {
					t.Errorf("sandbox %s: live %v, %+v %v; want adopted and running", id, live, sb, gerr)
				}
				if len(ends.reasons()) != 0 {
					t.Errorf("ends recorded for a kept sandbox: %v", ends.reasons())
				}
				m2.mu.Lock()
				pending := m2.records[id].pending
				m2.mu.Unlock()
				if pending || ferr != nil {
					t.Errorf("kept sandbox: pending %v, record file %v", pending, ferr)
				}
				return
			}
			if live {
				t.Errorf("sandbox %s survived the restart", id)
			}
			if gerr == nil && sb.State != StateStopped {
				t.Errorf("sandbox %s is %s after the restart, want stopped or gone", id, sb.State)
			}
			if !errors.Is(ferr, os.ErrNotExist) {
				t.Errorf("record file of %s: %v, want removed", id, ferr)
			}
			if got, want := ends.reasons(), map[string]string{id: tc.end}; !maps.Equal(got, want) {
				t.Errorf("ends recorded %v, want %v", got, want)
			}
			ends.mu.Lock()
			got := ends.begun[id]
			ends.mu.Unlock()
			if got.Owner != "tenant" || got.Origin != origin || got.Template != "host" {
				t.Errorf("end %+v, want owner, template and origin of the create", got)
			}
		})
	}
}

// TestAdoptSlowSandbox checks that a sandbox whose agent is slow to
// answer after a restart is adopting meanwhile (its operations say
// "retry", not "not found"), becomes running when the agent answers, and
// is never destroyed for being slow: past AdoptTimeout it is failed, and
// running again once its agent answers a health check.
func TestAdoptSlowSandbox(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m1 := e.manager(Config{})
	var ids []string
	for range 2 {
		sb, err := m1.Create(ctx, Spec{Owner: "tenant"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	crash(m1)

	gate := make(chan struct{})
	ends := &endLog{}
	cfg := Config{StateDir: e.stateDir, AdoptTimeout: 300 * time.Millisecond, HealthInterval: 50 * time.Millisecond, Ends: ends}
	m2, err := New(runtimefake.Gated(e.rt, gate), e.templates, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close(context.Background()) })
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if s := stateOf(m2, id); s != StateAdopting {
			t.Fatalf("%s is %q while its agent has not answered, want adopting", id, s)
		}
	}
	// An exec waits for the adoption; past AdoptTimeout the sandbox is
	// failed and the exec says so.
	t0 := time.Now()
	_, err = m2.Exec(ctx, ids[0], agentclient.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "has not answered since the daemon restarted") {
		t.Errorf("exec in a sandbox whose adoption fails: %v, want failed precondition (not answered)", err)
	}
	if d := time.Since(t0); d < 250*time.Millisecond || d > 5*time.Second {
		t.Errorf("exec in an adopting sandbox returned after %v, want about AdoptTimeout (300ms)", d)
	}
	// Deleting an adopting sandbox works.
	if err := m2.Destroy(ctx, ids[1]); err != nil {
		t.Errorf("destroy an adopting sandbox: %v", err)
	}
	if err := m2.WaitRecovered(ctx); err != nil {
		t.Fatal(err)
	}
	sb, err := m2.Get(ids[0])
	if err != nil || sb.State != StateFailed || !slices.Contains(e.rt.Live(), ids[0]) {
		t.Fatalf("slow sandbox after AdoptTimeout: %+v %v (live %v), want failed and kept", sb, err, e.rt.Live())
	}
	if len(ends.reasons()) != 0 {
		t.Errorf("ends recorded: %v", ends.reasons())
	}
	close(gate)
	eventually(t, 5*time.Second, "the slow sandbox answering", func() bool { return stateOf(m2, ids[0]) == StateRunning })
	if _, err := m2.Exec(ctx, ids[0], agentclient.ExecRequest{Argv: []string{"true"}}); err != nil {
		t.Errorf("exec once adopted: %v", err)
	}
}

// TestAdoptWaitsForRequests checks that an operation on a sandbox the
// restarted manager is still adopting waits for the adoption and runs,
// rather than failing "retry" (as a client's first request after a
// restart otherwise would), and that the wait is bounded.
func TestAdoptWaitsForRequests(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m1 := e.manager(Config{})
	sb, err := m1.Create(ctx, Spec{Owner: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	crash(m1)

	gate := make(chan struct{})
	m2, err := New(runtimefake.Gated(e.rt, gate), e.templates, Config{StateDir: e.stateDir, AdoptTimeout: time.Minute, HealthInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m2.Close(context.Background()) })
	if err := m2.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(m2, sb.ID); s != StateAdopting {
		t.Fatalf("%s is %q while its agent has not answered, want adopting", sb.ID, s)
	}
	// A request whose context ends first gives up then, still "retry".
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	m2.WaitAdopted(cctx, sb.ID)
	cancel()
	if s := stateOf(m2, sb.ID); s != StateAdopting {
		t.Fatalf("%s is %q, want still adopting", sb.ID, s)
	}
	time.AfterFunc(200*time.Millisecond, func() { close(gate) })
	t0 := time.Now()
	var out strings.Builder
	res, err := m2.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"echo", "adopted"}, Stdout: &out})
	if err != nil || out.String() != "adopted\n" {
		t.Fatalf("exec during the adoption: %+v %q %v, want it to wait and run", res, out.String(), err)
	}
	if d := time.Since(t0); d < 150*time.Millisecond {
		t.Errorf("exec returned after %v, before the agent could answer", d)
	}
	// Unknown and running sandboxes do not wait.
	t0 = time.Now()
	m2.WaitAdopted(ctx, sb.ID)
	m2.WaitAdopted(ctx, "sb-aaaaaaaaaaaaaaaa")
	if d := time.Since(t0); d > 50*time.Millisecond {
		t.Errorf("WaitAdopted of a running and an unknown sandbox took %v", d)
	}
}

// TestAdoptThenRun checks the ordinary case: after a restart every live
// sandbox is running once recovery is done and nothing is recorded as
// ended.
func TestAdoptThenRun(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m1 := e.manager(Config{})
	var ids []string
	for range 20 {
		sb, err := m1.Create(ctx, Spec{Owner: "tenant", Pending: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := m1.Confirm(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	crash(m1)
	ends := &endLog{}
	m2 := e.manager(Config{Ends: ends, AdoptConcurrency: 4})
	if err := m2.WaitRecovered(ctx); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if s := stateOf(m2, id); s != StateRunning {
			t.Errorf("%s is %q, want running", id, s)
		}
	}
	if len(ends.reasons()) != 0 {
		t.Errorf("ends recorded: %v", ends.reasons())
	}
}

// TestMinCPUs checks that a CPU limit below MinCPUs is refused, as the
// request's, the template's or the daemon's default.
func TestMinCPUs(t *testing.T) {
	e := newEnv(t)
	m := e.manager(Config{})
	_, err := m.Create(context.Background(), Spec{Limits: runtime.Limits{CPUs: MinCPUs / 2}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("create with cpus %g: %v, want invalid argument", MinCPUs/2, err)
	}
	sb, err := m.Create(context.Background(), Spec{Limits: runtime.Limits{CPUs: MinCPUs}})
	if err != nil || sb.Limits.CPUs != MinCPUs {
		t.Errorf("create with cpus %g: %+v %v", MinCPUs, sb.Limits, err)
	}
	cfg := Config{StateDir: t.TempDir(), DefaultLimits: runtime.Limits{CPUs: 0.01}}
	if _, err := New(e.rt, e.templates, cfg, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("default cpus 0.01: %v, want invalid argument", err)
	}
}
