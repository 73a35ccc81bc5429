package sandbox

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Operations on a running sandbox (its files here, its processes in
// process.go). Each counts as activity for the idle reaper for as long as
// it runs, and fails with ErrNotFound for an unknown sandbox and
// ErrFailedPrecondition for one that is not running. Errors from the
// agent keep their class (see agentclient).

// mergeEnv returns base overlaid with over (over wins). It returns over
// itself when base is empty.
func mergeEnv(base, over map[string]string) map[string]string {
	if len(base) == 0 {
		return over
	}
	out := make(map[string]string, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		out[k] = v
	}
	return out
}

// withEnv applies the sandbox's Env under req.Env, over the tools
// variable (toolsEnv) and its network's (networkEnv).
func (m *Manager) withEnv(rec *record, req agentclient.ExecRequest) agentclient.ExecRequest {
	m.mu.Lock()
	base := rec.sb.Env
	netEnv := m.networkEnv(rec.sb.Network)
	m.mu.Unlock()
	req.Env = mergeEnv(mergeEnv(mergeEnv(m.toolsEnv(), netEnv), base), req.Env)
	return req
}

// ReadFile streams the file at path in sandbox id into w. The file
// operations act as the sandbox's default user unless opts name another
// (agentclient.AsUser).
func (m *Manager) ReadFile(ctx context.Context, id, path string, w io.Writer, opts ...agentclient.FileOption) (*agentclient.EntryInfo, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.ReadFile(ctx, path, w, opts...)
}

// WriteFile streams r into the file at path in sandbox id.
func (m *Manager) WriteFile(ctx context.Context, id, path string, r io.Reader, opts agentclient.WriteOptions) (*agentclient.EntryInfo, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.WriteFile(ctx, path, r, opts)
}

// ListDir lists the directory at path in sandbox id to depth levels.
func (m *Manager) ListDir(ctx context.Context, id, path string, depth int, opts ...agentclient.FileOption) ([]agentclient.EntryInfo, bool, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, false, err
	}
	defer done()
	return rec.client.ListDir(ctx, path, depth, opts...)
}

// WatchDir watches the directory at path in sandbox id (with recursive,
// its subdirectories too) and returns once the watch is in place. The
// channel is closed when ctx ends or the watch ends (an abnormal end is
// a last event with Err set); the caller drains it or ends ctx. The
// watch counts as an operation in flight until then.
func (m *Manager) WatchDir(ctx context.Context, id, path string, recursive bool, opts ...agentclient.FileOption) (<-chan agentclient.WatchEvent, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	ch, err := rec.client.Watch(ctx, path, recursive, opts...)
	if err != nil {
		done()
		return nil, err
	}
	out := make(chan agentclient.WatchEvent)
	go func() {
		defer done()
		defer close(out)
		for ev := range ch {
			select {
			case out <- ev:
			case <-ctx.Done():
				for range ch { // the agent's stream ends with ctx
				}
				return
			}
		}
	}()
	return out, nil
}

// Stat describes path in sandbox id.
func (m *Manager) Stat(ctx context.Context, id, path string, opts ...agentclient.FileOption) (*agentclient.EntryInfo, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.Stat(ctx, path, opts...)
}

// MakeDir creates the directory path in sandbox id.
func (m *Manager) MakeDir(ctx context.Context, id, path string, parents bool, opts ...agentclient.FileOption) (*agentclient.EntryInfo, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.MakeDir(ctx, path, parents, opts...)
}

// Remove deletes path in sandbox id.
func (m *Manager) Remove(ctx context.Context, id, path string, recursive bool, opts ...agentclient.FileOption) error {
	rec, done, err := m.acquire(id)
	if err != nil {
		return err
	}
	defer done()
	return rec.client.Remove(ctx, path, recursive, opts...)
}

// Move renames src to dst in sandbox id.
func (m *Manager) Move(ctx context.Context, id, src, dst string, opts ...agentclient.FileOption) (*agentclient.EntryInfo, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	defer done()
	return rec.client.Move(ctx, src, dst, opts...)
}

// Stats reports the resource use of sandbox id. It does not count as
// activity, so monitoring does not keep an idle sandbox alive.
func (m *Manager) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	m.mu.Lock()
	if err := m.usableLocked(); err != nil {
		m.mu.Unlock()
		return runtime.Stats{}, err
	}
	rec, ok := m.records[id]
	if !ok {
		m.mu.Unlock()
		return runtime.Stats{}, notFound(id)
	}
	state := rec.sb.State
	m.mu.Unlock()
	if state != StateRunning {
		return runtime.Stats{}, fmt.Errorf("sandbox %s is %s: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	return rec.inst.Stats(ctx)
}

// agentProbeTimeout bounds the ping of Ended, which tells a dead agent
// from a slow one.
const agentProbeTimeout = time.Second

// Ended explains why an operation on sandbox id failed when the error it
// got (a cut agent stream: internal, unavailable) hides the cause: it
// returns the error that says why the sandbox can no longer serve it, or
// nil if, as far as the manager can tell, it still can. A sandbox the
// manager still lists as running is pinged: an agent that refuses the
// connection is gone (a slow one only times out, and is not called
// ended). The errors are failed preconditions worded for the request
// that failed ("... while the request ran"). Ended does not count as
// activity.
func (m *Manager) Ended(ctx context.Context, id string) error {
	c, ended := m.endedState(id)
	if c == nil {
		return ended
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), agentProbeTimeout)
	defer cancel()
	_, err := c.Info(pctx)
	if err == nil || pctx.Err() != nil || errdefs.Class(err) == errdefs.ErrTimeout {
		return nil
	}
	if c, ended := m.endedState(id); c == nil {
		return ended
	}
	return fmt.Errorf("sandbox %s has ended: its agent stopped while the request ran: %w", id, errdefs.ErrFailedPrecondition)
}

// endedState returns the agent client of sandbox id while the manager
// lists it as running, and otherwise the error that says what became of
// it: why it ended (its EndReason: deleted, expired, idle, its agent
// died...), as far as the manager still knows. Both are nil where nothing
// can be told: a running sandbox of a manager that is shut down, and one
// that a restarted daemon is still adopting (it has not ended; the
// request's own error, unavailable, says to retry).
func (m *Manager) endedState(id string) (*agentclient.Client, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[id]
	if !ok {
		// Its record is gone already (Config.EndedRetention).
		return nil, fmt.Errorf("sandbox %s ended while the request ran and is gone: %w", id, errdefs.ErrFailedPrecondition)
	}
	sb := &rec.sb
	switch {
	case sb.State == StateRunning:
		if m.usableLocked() != nil {
			return nil, nil
		}
		return rec.client, nil
	case sb.State == StateAdopting:
		return nil, nil
	case sb.EndReason == EndDeleted:
		return nil, fmt.Errorf("sandbox %s was deleted while the request ran: %w", id, errdefs.ErrFailedPrecondition)
	case sb.State == StateFailed && sb.Error != "":
		return nil, fmt.Errorf("sandbox %s ended while the request ran (%s): %w", id, sb.Error, errdefs.ErrFailedPrecondition)
	case sb.EndReason != "":
		return nil, fmt.Errorf("sandbox %s ended while the request ran (%s): %w", id, EndWords(sb.EndReason), errdefs.ErrFailedPrecondition)
	case sb.State == StateFailed:
		return nil, fmt.Errorf("sandbox %s ended while the request ran (it failed): %w", id, errdefs.ErrFailedPrecondition)
	}
	return nil, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrFailedPrecondition)
}
