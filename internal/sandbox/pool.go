package sandbox

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Warm pools.
//
// Each template in Config.PoolSize has a pool of ready sandboxes created
// with the template's default limits. A Create whose resolved limits
// equal those claims a member (one agent ping and a state-file write) instead of
// creating one; the sandbox's Env is applied per process by the Manager,
// so any env fits. A claimed member gets its record (metadata, expiry,
// env) in the state file, because its creation labels only say "pool
// member". Pool members do not count against MaxConcurrent; MaxPooled
// caps them instead, so a host must have room for MaxConcurrent +
// MaxPooled sandboxes. They are not carried across restarts: Close
// destroys them, and Start destroys any that a crashed daemon left
// (labels say pool, no state file).
//
// Fillers keep each pool full in the background: at most
// PoolFillConcurrency creations at once across all pools, with
// exponential backoff (100 ms to 30 s) after failures. Members older than
// MaxLifetime are recycled by the reaper.

// Backoff bounds of the pool fillers, and how often an idle filler looks
// at its pool even without a nudge.
const (
	minFillBackoff = 100 * time.Millisecond
	maxFillBackoff = 30 * time.Second
	fillRecheck    = 5 * time.Second
)

// pool is the warm pool of one template. Its fields other than template,
// size and wake are guarded by Manager.mu.
type pool struct {
	template string
	size     int
	members  []*poolMember // oldest first
	filling  int           // members being created
	failures int           // consecutive failed creations
	retryAt  time.Time     // no creation before this (backoff)
	wake     chan struct{} // nudges the filler
}

// poolMember is a ready, unclaimed sandbox.
type poolMember struct {
	inst    runtime.Instance
	client  *agentclient.Client
	created time.Time
}

// PoolStats describes one warm pool.
type PoolStats struct {
	Template string
	Size     int // configured size
	Ready    int // members ready to be claimed
	Filling  int // members being created
	Failures int // consecutive failed creations (0 when healthy)
}

// PoolStats reports every warm pool, sorted by template.
func (m *Manager) PoolStats() []PoolStats {
	m.mu.Lock()
	out := make([]PoolStats, 0, len(m.pools))
	for _, p := range m.pools {
		out = append(out, PoolStats{Template: p.template, Size: p.size, Ready: len(p.members), Filling: p.filling, Failures: p.failures})
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out
}

// nudge wakes the filler of p without blocking.
func (p *pool) nudge() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// claim hands the oldest healthy member of p to the caller as a sandbox
// described by rs. ok is false when the pool is empty. The caller has
// reserved a concurrency slot; claim keeps it only when ok.
func (m *Manager) claim(ctx context.Context, p *pool, rs resolvedSpec) (sb Sandbox, ok bool, err error) {
	// The refill is a cold create: on a small host it would compete for
	// the CPU with this claim, so it starts once the claim is done.
	defer p.nudge()
	for {
		m.mu.Lock()
		if len(p.members) == 0 {
			m.mu.Unlock()
			return Sandbox{}, false, nil
		}
		pm := p.members[0]
		p.members[0] = nil
		p.members = p.members[1:]
		m.mu.Unlock()

		now := time.Now()
		rec := m.claimRecord(pm, p, rs, now)
		// A member whose agent died would hand out a broken sandbox: the
		// agent must take the sandbox's deadline, which doubles as the
		// ping. That and the state file are independent: do them side
		// by side.
		saved := make(chan error, 1)
		p := rec.persisted()
		go func() { saved <- m.state.save(rec.sb.ID, p) }()
		perr := m.tellDeadline(ctx, pm.client, rec.sb.ExpiresAt)
		serr := <-saved
		if perr != nil || serr != nil {
			_ = m.state.remove(rec.sb.ID)
		}
		if perr == nil && serr != nil {
			if derr := m.destroyMember(ctx, pm); derr != nil {
				m.log.Warn("destroying pool member", "sandbox", pm.inst.ID(), "err", derr)
			}
			return Sandbox{}, false, serr
		}
		if perr != nil {
			if err := m.destroyMember(ctx, pm); err != nil {
				m.log.Warn("destroying pool member", "sandbox", pm.inst.ID(), "err", err)
			}
			if ctx.Err() != nil {
				return Sandbox{}, false, ctxErr(ctx, "create")
			}
			m.log.Warn("discarding pool member whose agent does not answer", "sandbox", pm.inst.ID(), "err", perr)
			continue
		}

		m.mu.Lock()
		m.records[rec.sb.ID] = rec
		sb = rec.snapshot()
		m.mu.Unlock()
		m.watchAgent(rec)
		m.log.Info("sandbox claimed from pool", "sandbox", sb.ID, "template", sb.Template,
			"took", time.Since(now).Round(time.Microsecond))
		return sb, true, nil
	}
}

// claimRecord is the record of pool member pm handed out as rs at now.
func (m *Manager) claimRecord(pm *poolMember, p *pool, rs resolvedSpec, now time.Time) *record {
	return &record{
		sb: Sandbox{
			ID:           pm.inst.ID(),
			Owner:        rs.owner,
			Template:     p.template,
			State:        StateRunning,
			Limits:       rs.limits,
			Env:          rs.env,
			Metadata:     rs.metadata,
			Network:      rs.network,
			Tools:        rs.tools,
			CmdPolicy:    rs.cmdPolicy,
			CreatedAt:    now,
			ExpiresAt:    now.Add(rs.timeout),
			MaxExpiresAt: now.Add(m.cfg.MaxLifetime),
			IdleTimeout:  rs.idleTimeout,
			LastActivity: now,
		},
		inst:    pm.inst,
		client:  pm.client,
		created: closedChan(),
		pending: rs.pending,
		origin:  rs.origin,
		keyID:   rs.keyID,
	}
}

// fillLoop keeps p full until ctx is done.
func (m *Manager) fillLoop(ctx context.Context, p *pool) {
	for {
		m.launchFills(ctx, p)
		m.mu.Lock()
		wait := time.Until(p.retryAt)
		m.mu.Unlock()
		if wait <= 0 {
			wait = fillRecheck
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.wake:
			t.Stop()
		case <-t.C:
		}
	}
}

// launchFills starts creations until p is full (counting those in
// flight), the filler is backing off, or ctx is done.
func (m *Manager) launchFills(ctx context.Context, p *pool) {
	for {
		m.mu.Lock()
		if m.closed || ctx.Err() != nil || len(p.members)+p.filling >= p.size || time.Now().Before(p.retryAt) {
			m.mu.Unlock()
			return
		}
		p.filling++
		m.mu.Unlock()
		select {
		case m.fillSem <- struct{}{}:
		case <-ctx.Done():
			m.mu.Lock()
			p.filling--
			m.mu.Unlock()
			return
		}
		m.bg.Go(func() {
			defer func() { <-m.fillSem }()
			m.fillOne(ctx, p)
		})
	}
}

// fillOne creates one member of p. The creation counts in p.filling until
// the member is in the pool (or discarded).
func (m *Manager) fillOne(ctx context.Context, p *pool) {
	inst, err := m.createMember(ctx, p)
	if err != nil {
		m.mu.Lock()
		p.filling--
		if p.failures < 20 {
			p.failures++
		}
		backoff := min(minFillBackoff<<(p.failures-1), maxFillBackoff)
		p.retryAt = time.Now().Add(backoff)
		m.mu.Unlock()
		p.nudge() // the filler sleeps until retryAt
		if ctx.Err() == nil {
			m.log.Warn("filling warm pool failed", "template", p.template, "retry_in", backoff, "err", err)
		}
		return
	}
	// Open the client's connection now so that the claim's ping reuses it.
	pm := &poolMember{inst: inst, client: agentclient.New(inst.Dial), created: time.Now()}
	pctx, cancel := context.WithTimeout(ctx, m.cfg.HealthTimeout)
	_, _ = pm.client.Info(pctx) // a failure is caught by the claim's ping
	cancel()

	m.mu.Lock()
	p.filling--
	p.failures = 0
	p.retryAt = time.Time{}
	if m.closed || ctx.Err() != nil {
		m.mu.Unlock()
		if err := m.destroyMember(context.Background(), pm); err != nil {
			m.log.Warn("destroying pool member", "sandbox", inst.ID(), "err", err)
		}
		return
	}
	p.members = append(p.members, pm)
	m.mu.Unlock()
	p.nudge()
}

// createMember creates a sandbox for p.
func (m *Manager) createMember(ctx context.Context, p *pool) (runtime.Instance, error) {
	src, err := m.templates.Get(p.template)
	if err != nil {
		return nil, err
	}
	id, err := newID()
	if err != nil {
		return nil, err
	}
	limits := m.cfg.defaultsFor(src)
	if err := checkLimits(limits, m.cfg.MaxLimits, true); err != nil {
		return nil, fmt.Errorf("template %s: %v: %w", p.template, err, errdefs.ErrInvalidArgument)
	}
	rec := persisted{Version: 1, ID: id, Template: p.template, Pool: true, CreatedAt: time.Now()}
	return m.startInstance(ctx, src, id, limits, rec)
}

// destroyMember destroys an unclaimed member; the destroy goes on even if
// ctx ends, within DestroyTimeout.
func (m *Manager) destroyMember(ctx context.Context, pm *poolMember) error {
	pm.client.Close()
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.DestroyTimeout)
	defer cancel()
	return pm.inst.Destroy(dctx)
}

// recycleMembersLocked removes members older than MaxLifetime and returns
// them for destruction. Call with Manager.mu held.
func (m *Manager) recycleMembersLocked(now time.Time) []*poolMember {
	var old []*poolMember
	for _, p := range m.pools {
		keep := p.members[:0]
		for _, pm := range p.members {
			if now.Sub(pm.created) >= m.cfg.MaxLifetime {
				old = append(old, pm)
			} else {
				keep = append(keep, pm)
			}
		}
		for i := len(keep); i < len(p.members); i++ {
			p.members[i] = nil
		}
		if len(keep) != len(p.members) {
			p.members = keep
			p.nudge()
		}
	}
	return old
}
