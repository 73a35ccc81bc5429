package sandbox

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/metrics"
)

// What the daemon's metrics and readiness read of the manager (see
// Config.Metrics for what it counts as it goes).

// Counts reports the sandboxes the manager holds (ended ones kept for
// Get included) by state and template, without copying them: the
// metrics' airlock_sandboxes (metrics.Sources.Sandboxes).
func (m *Manager) Counts() []metrics.SandboxCount {
	type key struct {
		state    State
		template string
	}
	m.mu.Lock()
	n := make(map[key]int)
	for _, rec := range m.records {
		n[key{rec.sb.State, rec.sb.Template}]++
	}
	m.mu.Unlock()
	out := make([]metrics.SandboxCount, 0, len(n))
	for k, v := range n {
		out = append(out, metrics.SandboxCount{State: string(k.state), Template: k.template, N: v})
	}
	return out
}

// PoolGauges is PoolStats for the metrics (metrics.Sources.Pools).
func (m *Manager) PoolGauges() []metrics.PoolState {
	stats := m.PoolStats()
	out := make([]metrics.PoolState, len(stats))
	for i, p := range stats {
		out[i] = metrics.PoolState{Template: p.Template, Target: p.Size, Ready: p.Ready, Filling: p.Filling, Failures: p.Failures}
	}
	return out
}

// Ready returns nil once Start has returned (every sandbox found has its
// record; adoption may go on) and until Close, else an error of class
// unavailable saying which.
func (m *Manager) Ready() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usableLocked(); err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	return nil
}

// errCode is the API's error code of err ("" for nil): a bounded label.
func errCode(err error) string {
	if err == nil {
		return ""
	}
	_, code, _ := errdefs.HTTP(err)
	return code
}

// claimResult is the metrics label of a claim's result.
func claimResult(ok bool, err error) string {
	switch {
	case ok:
		return metrics.ClaimClaimed
	case err != nil:
		return metrics.ClaimFailed
	}
	return metrics.ClaimEmpty
}
