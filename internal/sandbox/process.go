package sandbox

import (
	"context"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

// The processes of a running sandbox. The manager is the only door to a
// sandbox's agent: every call goes through acquire (the state check and
// the activity mark, see ops.go), and a started process comes back as an
// *agentclient.Process, a handle bound to its pid and to the agent client
// that started it, which carries the process's own stdin, close, resize,
// signal and wait. Its holder never looks the sandbox up again.

// Exec runs a process to completion in sandbox id (see
// agentclient.Client.Exec); the sandbox's Env is merged under req.Env.
func (m *Manager) Exec(ctx context.Context, id string, req agentclient.ExecRequest) (*agentclient.ExecResult, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.Exec(ctx, m.withEnv(rec, req))
}

// StartProcess starts a process in sandbox id and returns its handle once
// it runs (see agentclient.Client.Start); the sandbox's Env is merged
// under req.Env. The sandbox counts as active until the process's output
// stream ends.
func (m *Manager) StartProcess(ctx context.Context, id string, req agentclient.ExecRequest) (*agentclient.Process, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	p, err := rec.client.Start(ctx, m.withEnv(rec, req))
	if err != nil {
		done()
		return nil, err
	}
	go func() {
		_, _ = p.Wait()
		done()
	}()
	return p, nil
}

// StartBackground starts a long-lived background process in sandbox id
// (req.Background is set: it outlives ctx, which bounds only its output
// stream; see agentclient.Client.Start), such as a code context's
// kernel. The sandbox's Env is merged under req.Env. Unlike StartProcess,
// only the start counts as activity: a process that waits for work must
// not keep its sandbox from its idle timeout, so its user marks activity
// (Touch) while it works with it.
func (m *Manager) StartBackground(ctx context.Context, id string, req agentclient.ExecRequest) (*agentclient.Process, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	req.Background = true
	return rec.client.Start(ctx, m.withEnv(rec, req))
}

// ConnectProcess attaches to a running (or recently exited) process of
// sandbox id that the agent started (see agentclient.Client.Connect):
// its output from now on goes to stdout and stderr, and the handle's
// Wait returns its result. Ending ctx detaches without killing the
// process. The attach counts as activity; following the output does not.
func (m *Manager) ConnectProcess(ctx context.Context, id string, pid int, stdout, stderr io.Writer) (*agentclient.Process, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.Connect(ctx, pid, stdout, stderr)
}

// SendProcessInput writes data to the stdin of process pid of sandbox
// id (a process started with its stdin kept open), and closes it after
// when closeStdin is set.
func (m *Manager) SendProcessInput(ctx context.Context, id string, pid int, data []byte, closeStdin bool) error {
	rec, done, err := m.acquire(id)
	if err != nil {
		return err
	}
	defer done()
	if len(data) > 0 {
		if err := rec.client.SendInput(ctx, pid, data); err != nil {
			return err
		}
	}
	if closeStdin {
		return rec.client.CloseStdin(ctx, pid)
	}
	return nil
}

// ResizeProcess sets the terminal size of process pid of sandbox id.
func (m *Manager) ResizeProcess(ctx context.Context, id string, pid int, size agentclient.PtySize) error {
	rec, done, err := m.acquire(id)
	if err != nil {
		return err
	}
	defer done()
	return rec.client.Resize(ctx, pid, size)
}

// ListProcesses returns the running processes of sandbox id that the
// agent started, ordered by pid (see agentclient.Client.List).
func (m *Manager) ListProcesses(ctx context.Context, id string) ([]agentclient.ProcessInfo, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.List(ctx)
}

// SignalProcess sends a signal (1..64) to process pid of sandbox id that
// the agent started, found by pid where no handle is at hand (a listed
// process); SIGKILL kills its tree (see agentclient.Client.Signal).
func (m *Manager) SignalProcess(ctx context.Context, id string, pid, signal int) error {
	rec, done, err := m.acquire(id)
	if err != nil {
		return err
	}
	defer done()
	return rec.client.Signal(ctx, pid, signal)
}

// ListAllProcesses lists every process of sandbox id but its agent,
// whoever started it (see agentclient.Client.ListAll).
func (m *Manager) ListAllProcesses(ctx context.Context, id string) (*agentclient.ProcessList, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.ListAll(ctx)
}

// SignalAnyProcess sends a signal (1..64) to any process of sandbox id
// but its agent, by pid (see agentclient.Client.SignalAny).
func (m *Manager) SignalAnyProcess(ctx context.Context, id string, pid, signal int) error {
	rec, done, err := m.acquire(id)
	if err != nil {
		return err
	}
	defer done()
	return rec.client.SignalAny(ctx, pid, signal)
}

// KillAllProcesses kills every process of sandbox id but its agent and
// returns how many it killed; wait bounds the wait for the last to be
// reaped (see agentclient.Client.KillAll).
func (m *Manager) KillAllProcesses(ctx context.Context, id string, wait time.Duration) (int, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return 0, err
	}
	defer done()
	return rec.client.KillAll(ctx, wait)
}

// Touch marks activity on running sandbox id now, as an operation that
// ends at once: for a user of a process whose output stream does not
// count (StartBackground, ConnectProcess) while it works with it. It
// fails as every operation does on a sandbox that is unknown or not
// running.
func (m *Manager) Touch(id string) error {
	_, done, err := m.acquire(id)
	if err != nil {
		return err
	}
	done()
	return nil
}

// CheckRunning returns nil for a snapshot of a running sandbox, else the
// error an operation on the sandbox fails with (it is being adopted, or
// has ended and why). A caller that must refuse before it acts (before
// an audit intent) checks the snapshot its lookup returned instead of
// looking the sandbox up again; the operation itself checks once more.
func (sb *Sandbox) CheckRunning() error {
	if sb.State == StateRunning {
		return nil
	}
	return sb.notRunningErr()
}
