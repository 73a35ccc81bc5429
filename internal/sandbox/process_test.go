package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// syncBuffer is a bytes.Buffer safe for a process's output goroutine and
// the test reading it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// inflight returns how many operations on sandbox id count as activity.
func inflight(m *Manager, id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.records[id].inflight
}

// wait returns the result of p, failing the test on an error or after 10 s.
func wait(t *testing.T, p *agentclient.Process) *agentclient.ExecResult {
	t.Helper()
	done := make(chan struct{})
	var res *agentclient.ExecResult
	var err error
	go func() { res, err = p.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the process did not end within 10 s")
	}
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestProcessHandle: a process started through the manager comes back as
// a handle that feeds its stdin, closes it, resizes its terminal and
// signals it; the sandbox's Env is under the request's; and the sandbox
// counts as active until the process's output ends.
func TestProcessHandle(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb, err := m.Create(ctx, Spec{Env: map[string]string{"FOO": "from-sandbox", "BAR": "from-sandbox"}})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("stdin", func(t *testing.T) {
		var out syncBuffer
		p, err := m.StartProcess(ctx, sb.ID, agentclient.ExecRequest{
			Shell: `printf '%s %s:' "$FOO" "$BAR"; cat`, Env: map[string]string{"BAR": "from-request"},
			OpenStdin: true, Stdout: &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		if n := inflight(m, sb.ID); n != 1 {
			t.Errorf("%d operations in flight while the process runs, want 1", n)
		}
		if err := p.SendInput(ctx, []byte("ab")); err != nil {
			t.Fatal(err)
		}
		if err := p.StreamInput(ctx, strings.NewReader("cd")); err != nil {
			t.Fatal(err)
		}
		if err := p.CloseStdin(ctx); err != nil {
			t.Fatal(err)
		}
		if res := wait(t, p); res.Status != agentclient.StatusSuccess {
			t.Errorf("result %+v", res)
		}
		if got, want := out.String(), "from-sandbox from-request:abcd"; got != want {
			t.Errorf("output %q, want %q", got, want)
		}
		eventually(t, 5*time.Second, "the activity to end with the output", func() bool { return inflight(m, sb.ID) == 0 })
	})

	t.Run("signal", func(t *testing.T) {
		p, err := m.StartProcess(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Signal(ctx, 15); err != nil {
			t.Fatal(err)
		}
		if res := wait(t, p); res.Signal != 15 {
			t.Errorf("result %+v, want killed by signal 15", res)
		}
	})

	t.Run("resize", func(t *testing.T) {
		var out syncBuffer
		p, err := m.StartProcess(ctx, sb.ID, agentclient.ExecRequest{
			Shell: "read x; stty size", Pty: &agentclient.PtySize{Cols: 80, Rows: 24}, OpenStdin: true, Stdout: &out,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Resize(ctx, agentclient.PtySize{Cols: 101, Rows: 31}); err != nil {
			t.Fatal(err)
		}
		if err := p.SendInput(ctx, []byte("\n")); err != nil {
			t.Fatal(err)
		}
		if res := wait(t, p); res.Status != agentclient.StatusSuccess {
			t.Errorf("result %+v", res)
		}
		if !strings.Contains(out.String(), "31 101") {
			t.Errorf("terminal output %q, want the new size 31 101", out.String())
		}
	})
}

// TestBackgroundProcess: a background process (a code kernel) counts as
// activity only while it starts; it is listed, attached to, fed through
// the attached handle and signalled by pid, all through the manager.
func TestBackgroundProcess(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb, err := m.Create(ctx, Spec{Env: map[string]string{"FOO": "from-sandbox"}})
	if err != nil {
		t.Fatal(err)
	}
	sctx, stop := context.WithCancel(ctx)
	var first syncBuffer
	p, err := m.StartBackground(sctx, sb.ID, agentclient.ExecRequest{
		Shell: `printf '%s:' "$FOO"; cat`, Tag: "kernel", OpenStdin: true, Stdout: &first,
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the sandbox's Env in the output", func() bool { return first.String() == "from-sandbox:" })
	if n := inflight(m, sb.ID); n != 0 {
		t.Errorf("%d operations in flight while a background process waits, want 0", n)
	}
	stop() // detaches; the process keeps running
	if _, err := p.Wait(); err == nil {
		t.Error("the detached stream reported an exit")
	}

	procs, err := m.ListProcesses(ctx, sb.ID)
	if err != nil || len(procs) != 1 || procs[0].PID != p.PID || procs[0].Tag != "kernel" || !procs[0].Background {
		t.Fatalf("ListProcesses = %+v, %v; want the background process %d", procs, err, p.PID)
	}
	var out syncBuffer
	q, err := m.ConnectProcess(ctx, sb.ID, p.PID, &out, io.Discard)
	if err != nil || q.PID != p.PID {
		t.Fatalf("ConnectProcess = %+v, %v", q, err)
	}
	if n := inflight(m, sb.ID); n != 0 {
		t.Errorf("%d operations in flight while the output is followed, want 0", n)
	}
	if err := q.SendInput(ctx, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the input echoed to the attached stream", func() bool { return out.String() == "hello" })
	if err := m.SignalProcess(ctx, sb.ID, p.PID, 9); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, q); res.Signal != 9 {
		t.Errorf("result %+v, want killed by signal 9", res)
	}
}

// TestSandboxProcesses: the sandbox-wide process operations reach every
// process of the sandbox.
func TestSandboxProcesses(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb := mustCreate(t, m)
	sleep := func() *agentclient.Process {
		t.Helper()
		p, err := m.StartProcess(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"sleep", "60"}})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := sleep()
	l, err := m.ListAllProcesses(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sp := range l.Processes {
		found = found || sp.PID == p.PID && sp.Tracked
	}
	if !found {
		t.Errorf("ListAllProcesses = %+v, lacks %d", l.Processes, p.PID)
	}
	if err := m.SignalAnyProcess(ctx, sb.ID, p.PID, 15); err != nil {
		t.Fatal(err)
	}
	if res := wait(t, p); res.Signal != 15 {
		t.Errorf("result %+v, want killed by signal 15", res)
	}
	p = sleep()
	if n, err := m.KillAllProcesses(ctx, sb.ID, 5*time.Second); err != nil || n < 1 {
		t.Errorf("KillAllProcesses = %d, %v", n, err)
	}
	if res := wait(t, p); res.Signal != 9 {
		t.Errorf("result %+v, want killed by signal 9", res)
	}
}

// TestProcessOpsNeedRunning: every process operation, and Touch, goes
// through the manager's check: not found for an unknown sandbox, failed
// precondition for one that ended.
func TestProcessOpsNeedRunning(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	sb := mustCreate(t, m)
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	req := agentclient.ExecRequest{Argv: []string{"true"}}
	ops := map[string]func(id string) error{
		"Exec":            func(id string) error { _, err := m.Exec(ctx, id, req); return err },
		"StartProcess":    func(id string) error { _, err := m.StartProcess(ctx, id, req); return err },
		"StartBackground": func(id string) error { _, err := m.StartBackground(ctx, id, req); return err },
		"ConnectProcess":  func(id string) error { _, err := m.ConnectProcess(ctx, id, 1, nil, nil); return err },
		"ListProcesses":   func(id string) error { _, err := m.ListProcesses(ctx, id); return err },
		"SignalProcess":   func(id string) error { return m.SignalProcess(ctx, id, 1, 9) },
		"ListAll":         func(id string) error { _, err := m.ListAllProcesses(ctx, id); return err },
		"SignalAny":       func(id string) error { return m.SignalAnyProcess(ctx, id, 1, 9) },
		"KillAll":         func(id string) error { _, err := m.KillAllProcesses(ctx, id, time.Second); return err },
		"Touch":           m.Touch,
	}
	for name, op := range ops {
		if err := op(sb.ID); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "has ended (deleted)") {
			t.Errorf("%s on a deleted sandbox = %v, want failed precondition saying it was deleted", name, err)
		}
		if err := op("sb-aaaaaaaaaaaaaaaa"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s on an unknown sandbox = %v, want not found", name, err)
		}
	}
	ended, _ := m.Get(sb.ID)
	if err := ended.CheckRunning(); err == nil || err.Error() != ops["Touch"](sb.ID).Error() {
		t.Errorf("CheckRunning of the deleted sandbox = %v, want the operations' error", err)
	}
}

// TestTouch: Touch marks activity at once and holds nothing.
func TestTouch(t *testing.T) {
	e := newEnv(t)
	m := e.manager(Config{})
	sb := mustCreate(t, m)
	time.Sleep(10 * time.Millisecond)
	if err := m.Touch(sb.ID); err != nil {
		t.Fatal(err)
	}
	got, _ := m.Get(sb.ID)
	if !got.LastActivity.After(sb.LastActivity) {
		t.Errorf("LastActivity %v after Touch, not after %v", got.LastActivity, sb.LastActivity)
	}
	if n := inflight(m, sb.ID); n != 0 {
		t.Errorf("%d operations in flight after Touch", n)
	}
	if err := got.CheckRunning(); err != nil {
		t.Errorf("CheckRunning of a running sandbox: %v", err)
	}
}

// TestEnded: Ended says why a sandbox can no longer serve a request that
// failed on it: nil while its agent answers, its agent gone while the
// manager still lists it running, deleted, or gone from the manager. It
// is not activity.
func TestEnded(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{})
	live, hung, deleted, adopting := mustCreate(t, m), mustCreate(t, m), mustCreate(t, m), mustCreate(t, m)
	if err := m.Ended(ctx, live.ID); err != nil {
		t.Errorf("Ended of a running sandbox: %v", err)
	}
	// A sandbox a restarted daemon is adopting has not ended: the
	// request's own error (unavailable: retry) stands.
	m.mu.Lock()
	m.records[adopting.ID].sb.State = StateAdopting
	m.mu.Unlock()
	if err := m.Ended(ctx, adopting.ID); err != nil {
		t.Errorf("Ended of an adopting sandbox: %v, want nil", err)
	}
	m.mu.Lock()
	m.records[adopting.ID].sb.State = StateRunning
	m.mu.Unlock()
	if got, _ := m.Get(live.ID); !got.LastActivity.Equal(live.LastActivity) {
		t.Errorf("Ended moved LastActivity from %v to %v", live.LastActivity, got.LastActivity)
	}
	if err := e.rt.Hang(hung.ID); err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, deleted.ID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ id, want string }{
		{hung.ID, "sandbox " + hung.ID + " has ended: its agent stopped while the request ran"},
		{deleted.ID, "sandbox " + deleted.ID + " was deleted while the request ran"},
		{"sb-aaaaaaaaaaaaaaaa", "sandbox sb-aaaaaaaaaaaaaaaa ended while the request ran and is gone"},
	} {
		err := m.Ended(ctx, tc.id)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Ended = %v, want failed precondition %q", err, tc.want)
		}
	}
}

// mustCreate creates a sandbox of the default spec in m, failing t if it
// cannot.
func mustCreate(t *testing.T, m *Manager) Sandbox {
	t.Helper()
	sb, err := m.Create(context.Background(), Spec{})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}
