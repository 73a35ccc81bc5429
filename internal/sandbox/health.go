package sandbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Health probes. Every Config.HealthInterval the manager asks the agent
// of each running sandbox about itself (agentclient.Info), each probe
// bounded by Config.HealthTimeout or the interval, whichever is shorter.
// The policy:
//
//   - a probe answered: the sandbox is healthy, its missed count back to
//     0; one that was unhealthy is reported healthy again (recovered);
//   - the first probe missed (no answer in time, the connection refused):
//     the sandbox is unhealthy, and reported so, but still running: a
//     starved or briefly stopped agent may answer the next probe;
//   - Config.HealthFailures probes missed in a row: the sandbox is ended
//     with EndAgentUnhealthy, like the other ends the manager decides
//     (reported to Config.Ends, failed with StoppedAt and EndReason, its
//     record kept for EndedRetention): an agent that answers nothing
//     serves nothing, and its sandbox would otherwise hold its resources
//     until it expires.
//
// A sandbox whose agent exits is not left to the probes: the runtime
// reports the exit at once (watchAgent, EndAgentDied). A sandbox adopted
// by a restarted daemon whose agent has not answered within AdoptTimeout
// is failed, not ended (a slow agent is never a reason to destroy what a
// previous daemon left running); it is probed too and returns to running
// when it answers, and only its probes missed once running count.

// The health statuses (Health.Status).
const (
	HealthHealthy   = "healthy"
	HealthUnhealthy = "unhealthy"
)

// Health is what the health probes found of a sandbox's agent.
type Health struct {
	// Status is HealthHealthy or HealthUnhealthy; empty until the first
	// probe (and always when probes are off).
	Status string
	// Missed counts the probes missed in a row: 0 once one is answered.
	Missed int
	// CheckedAt is when the last probe ended; Since when Status last
	// changed.
	CheckedAt, Since time.Time
	// Error says how the last missed probe failed; empty while healthy.
	Error string
}

// HealthChange is a sandbox becoming unhealthy or healthy again, as the
// manager reports it to a HealthRecorder.
type HealthChange struct {
	ID, Owner string
	// Status is the new status; Missed and Error as in Health.
	Status string
	Missed int
	Error  string
}

// HealthRecorder is told of every change of a sandbox's health status
// (its ends go to Config.Ends). The daemon records them in the audit log.
// It is called from the probe loop, one sandbox at a time for each, and
// must not block long.
type HealthRecorder interface {
	HealthChanged(ctx context.Context, c HealthChange)
}

// agentUnhealthyError is the Error of a sandbox ended by the health
// policy.
const agentUnhealthyError = "its agent stopped answering: it missed every health probe for too long"

// healthLoop probes the agents of running sandboxes (and of adopted ones
// failed because their agent did not answer) every HealthInterval until
// ctx is done.
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

// checkHealth probes every running sandbox and every sandbox failed by an
// adoption whose agent did not answer, at most reapConcurrency at once,
// and applies the policy to each result.
func (m *Manager) checkHealth(ctx context.Context) {
	var recs []*record
	m.mu.Lock()
	for _, rec := range m.records {
		if rec.ending || rec.sb.Ended() {
			continue
		}
		if rec.sb.State == StateRunning || (rec.sb.State == StateFailed && rec.unhealthy) {
			recs = append(recs, rec)
		}
	}
	m.mu.Unlock()

	timeout := min(m.cfg.HealthTimeout, m.cfg.HealthInterval)
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
			pctx, cancel := context.WithTimeout(ctx, timeout)
			_, err := rec.client.Info(pctx)
			timedOut := pctx.Err() != nil
			cancel()
			if ctx.Err() != nil {
				return // shutting down: not the sandbox's fault
			}
			if err != nil && timedOut {
				err = fmt.Errorf("no answer within %v: %w", timeout, errdefs.ErrTimeout)
			}
			m.recordHealth(ctx, rec, err, time.Now())
		})
	}
	wg.Wait()
}

// recordHealth applies one probe's result to rec (see the policy above),
// reports a change of status and ends the sandbox once it has missed
// HealthFailures probes in a row.
func (m *Manager) recordHealth(ctx context.Context, rec *record, err error, now time.Time) {
	m.mu.Lock()
	sb := &rec.sb
	if rec.ending || sb.Ended() {
		m.mu.Unlock()
		return // ended while the probe ran
	}
	h := &sb.Health
	was := h.Status
	h.CheckedAt = now
	if err == nil {
		h.Missed, h.Error, h.Status = 0, "", HealthHealthy
		if sb.State == StateFailed && rec.unhealthy {
			sb.State, sb.Error, rec.unhealthy = StateRunning, "", false
			m.log.Info("adopted sandbox's agent answers", "sandbox", sb.ID)
		}
	} else {
		h.Missed++
		h.Error, h.Status = probeError(err), HealthUnhealthy
	}
	changed := h.Status != was
	if changed {
		h.Since = now
	}
	c := HealthChange{ID: sb.ID, Owner: sb.Owner, Status: h.Status, Missed: h.Missed, Error: h.Error}
	due := rec.dueLocked(EndAgentUnhealthy, now) && h.Missed >= m.cfg.HealthFailures
	m.mu.Unlock()

	switch {
	case changed && c.Status == HealthUnhealthy:
		m.log.Warn("sandbox agent missed a health probe", "sandbox", c.ID, "missed", c.Missed, "err", err)
	case changed && was == HealthUnhealthy:
		m.log.Info("sandbox agent answers health probes again", "sandbox", c.ID)
	}
	// The first probe only sets the status: nothing to report.
	if changed && (c.Status == HealthUnhealthy || was != "") && m.cfg.Health != nil {
		m.cfg.Health.HealthChanged(ctx, c)
	}
	if due {
		if err := m.end(ctx, rec, EndAgentUnhealthy, now); err != nil {
			m.log.Warn("ending a sandbox whose agent stopped answering", "sandbox", c.ID, "err", err)
		}
	}
}

// probeError says how a probe failed, in words fit for the sandbox's
// record: no host details.
func probeError(err error) string {
	switch {
	case errors.Is(err, errdefs.ErrTimeout):
		return "its agent did not answer in time"
	case errors.Is(err, errdefs.ErrUnavailable):
		return "its agent refused the connection"
	}
	return "its agent's answer failed"
}
