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
