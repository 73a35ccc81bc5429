package sandbox

import (
	"context"
	"sync"
	"time"
)

// reapConcurrency bounds the destroys and pings the reaper and the health
// checker run at once.
const reapConcurrency = 16

// reapLoop runs reap every ReapInterval until ctx is done.
func (m *Manager) reapLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.reap(ctx, now)
		}
	}
}

// reap ends sandboxes past their expiry or idle timeout (each end on the
// record, see end), drops ended records past EndedRetention and recycles
// old pool members.
func (m *Manager) reap(ctx context.Context, now time.Time) {
	type victim struct {
		rec    *record
		reason string
	}
	var victims []victim
	m.mu.Lock()
	for _, rec := range m.records {
		switch {
		case rec.dueLocked(EndExpired, now):
			victims = append(victims, victim{rec, EndExpired})
		case rec.dueLocked(EndIdle, now):
			victims = append(victims, victim{rec, EndIdle})
		}
	}
	m.purgeEndedLocked(now)
	old := m.recycleMembersLocked(now)
	m.mu.Unlock()

	sem := make(chan struct{}, reapConcurrency)
	var wg sync.WaitGroup
	for _, v := range victims {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_ = m.end(ctx, v.rec, v.reason, now) // logged by runDestroy
		})
	}
	for _, pm := range old {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := m.destroyMember(ctx, pm); err != nil {
				m.log.Warn("recycling pool member", "sandbox", pm.inst.ID(), "err", err)
			}
		})
	}
	wg.Wait()
}

// healthLoop pings the agents of running and unhealthy sandboxes every
// HealthInterval until ctx is done.
func (m *Manager) healthLoop(ctx context.Context) {
	t := time.NewTicker(m.cfg.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			m.checkHealth(ctx)
		}
	}
}

// checkHealth pings every running sandbox and every sandbox failed by
// earlier health checks. HealthFailures consecutive failures mark a
// sandbox failed; one success makes it running again.
func (m *Manager) checkHealth(ctx context.Context) {
	var recs []*record
	m.mu.Lock()
	for _, rec := range m.records {
		if rec.sb.State == StateRunning || (rec.sb.State == StateFailed && rec.unhealthy) {
			recs = append(recs, rec)
		}
	}
	m.mu.Unlock()

	sem := make(chan struct{}, reapConcurrency)
	var wg sync.WaitGroup
	for _, rec := range recs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return
		}
		wg.Go(func() {
			defer func() { <-sem }()
			pctx, cancel := context.WithTimeout(ctx, m.cfg.HealthTimeout)
			_, err := rec.client.Info(pctx)
			cancel()
			if ctx.Err() != nil {
				return // shutting down: not the sandbox's fault
			}
			m.recordHealth(rec, err)
		})
	}
	wg.Wait()
}

// recordHealth applies one ping result to rec.
func (m *Manager) recordHealth(rec *record, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := &rec.sb
	if err == nil {
		rec.healthFails = 0
		if sb.State == StateFailed && rec.unhealthy {
			sb.State, sb.Error, rec.unhealthy = StateRunning, "", false
			m.log.Info("sandbox agent answers again", "sandbox", sb.ID)
		}
		return
	}
	rec.healthFails++
	if sb.State == StateRunning && rec.healthFails >= m.cfg.HealthFailures {
		sb.State, sb.Error, rec.unhealthy = StateFailed, "the sandbox's agent is not responding", true
		m.log.Warn("sandbox agent is not responding", "sandbox", sb.ID, "err", err)
	}
}
