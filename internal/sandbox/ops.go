package sandbox

import (
	"context"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Operations on a running sandbox. Each counts as activity for the idle
// reaper for as long as it runs, and fails with ErrNotFound for an unknown
// sandbox and ErrFailedPrecondition for one that is not running. Errors
// from the agent keep their class (see agentclient).

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

// withEnv applies the sandbox's Env under req.Env.
func (m *Manager) withEnv(rec *record, req agentclient.ExecRequest) agentclient.ExecRequest {
	m.mu.Lock()
	base := rec.sb.Env
	m.mu.Unlock()
	req.Env = mergeEnv(base, req.Env)
	return req
}

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

// StartProcess starts a process in sandbox id and returns once it runs
// (see agentclient.Client.Start); the sandbox's Env is merged under
// req.Env. The sandbox counts as active until the process's output
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
