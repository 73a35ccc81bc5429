package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The ends the manager decides itself while it runs: expiry and idle
// timeout (the reaper), a dead agent (watchAgent) and an agent that
// stopped answering (the health policy, health.go). Each is reported to
// Config.Ends before the sandbox is touched and with its result, and
// leaves the sandbox's record for EndedRetention (retainLocked).

// agentDiedError is the Error of a sandbox whose agent exited.
const agentDiedError = "its agent stopped: the sandbox's PID 1 died, and every process of the sandbox with it"

// watchAgent ends rec as soon as the runtime reports that its agent
// exited (see agentDied), until the manager closes. It costs a parked
// goroutine, no OS thread.
func (m *Manager) watchAgent(rec *record) {
	exited := rec.inst.Exited()
	go func() {
		select {
		case <-exited:
			m.agentDied(rec)
		case <-m.closing:
		}
	}()
}

// agentDied ends a sandbox whose agent exited on its own: it is failed at
// once (operations on it fail saying so) and released at once, as a
// destroy does, with EndAgentDied on the record; or, past its expiry
// (the agent ended it at its deadline), stopped with EndExpired. An exit that a destroy
// caused, or that comes after the sandbox ended, changes nothing.
func (m *Manager) agentDied(rec *record) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return // the next daemon finds it gone and records that
	}
	// An agent that exits after the sandbox's expiry ended it at its
	// own deadline (deadline.go): the reaper did not get there first.
	now := time.Now()
	reason := EndAgentDied
	m.mu.Lock()
	if rec.dueLocked(EndExpired, now) {
		reason = EndExpired
	}
	m.mu.Unlock()
	if err := m.end(context.Background(), rec, reason, now); err != nil {
		m.log.Warn("releasing a sandbox whose agent exited", "sandbox", rec.sb.ID, "err", err)
	}
}

// end ends rec for reason (EndExpired, EndIdle, EndAgentDied or
// EndAgentUnhealthy) if it is
// still due at now: it marks it (stopping, or failed for a dead agent),
// reports the end to Config.Ends, destroys it and reports the result. It
// returns nil without doing anything when the sandbox is no longer due
// (a destroy got there first, SetTimeout extended it, an exec started).
func (m *Manager) end(ctx context.Context, rec *record, reason string, now time.Time) error {
	m.mu.Lock()
	if !rec.dueLocked(reason, now) {
		m.mu.Unlock()
		return nil
	}
	state := StateStopping
	switch reason {
	case EndAgentDied:
		state = StateFailed
		rec.sb.Error, rec.unhealthy = agentDiedError, false
	case EndAgentUnhealthy:
		state = StateFailed
		rec.sb.Error = agentUnhealthyError
	}
	m.beginDestroyLocked(rec, reason, state)
	e := End{ID: rec.sb.ID, Owner: rec.sb.Owner, Template: rec.sb.Template, Reason: reason, Origin: rec.origin}
	m.mu.Unlock()
	m.log.Info("ending sandbox", "sandbox", e.ID, "reason", reason)
	finish := m.beginEnd(ctx, e)
	err := m.runDestroy(ctx, rec, reason, true)
	finish(err)
	if err == nil {
		m.forgetFile(e.ID) // the end is on the record
	}
	return err
}

// dueLocked reports whether rec is to end for reason at now. Call with
// Manager.mu held.
func (r *record) dueLocked(reason string, now time.Time) bool {
	sb := &r.sb
	if r.ending || sb.Ended() {
		return false
	}
	switch reason {
	case EndExpired:
		return (sb.State == StateRunning || sb.State == StateFailed) && !now.Before(sb.ExpiresAt)
	case EndIdle:
		return sb.State == StateRunning && sb.IdleTimeout > 0 && r.inflight == 0 && now.Sub(sb.LastActivity) >= sb.IdleTimeout
	case EndAgentDied:
		return sb.State == StateRunning || sb.State == StateAdopting || sb.State == StateFailed
	case EndAgentUnhealthy:
		return sb.State == StateRunning && sb.Health.Status == HealthUnhealthy
	}
	return false
}

// retainLocked keeps the record of rec, which has just ended, for
// EndedRetention, dropping the oldest ended records beyond MaxEnded. Call
// with Manager.mu held.
func (m *Manager) retainLocked(rec *record) {
	if m.cfg.EndedRetention < 0 {
		m.dropLocked(rec)
		return
	}
	m.ended = append(m.ended, rec)
	for len(m.ended) > m.cfg.MaxEnded {
		m.dropLocked(m.ended[0])
		m.ended[0] = nil
		m.ended = m.ended[1:]
	}
}

// purgeEndedLocked drops the ended records older than EndedRetention at
// now. Call with Manager.mu held.
func (m *Manager) purgeEndedLocked(now time.Time) {
	for len(m.ended) > 0 && now.Sub(m.ended[0].sb.StoppedAt) >= m.cfg.EndedRetention {
		m.dropLocked(m.ended[0])
		m.ended[0] = nil
		m.ended = m.ended[1:]
	}
}

// dropLocked forgets rec if it is still the record of its sandbox.
func (m *Manager) dropLocked(rec *record) {
	if m.records[rec.sb.ID] == rec {
		delete(m.records, rec.sb.ID)
	}
}

// notRunningErr is the error of an operation on rec, which is not
// running. Call with Manager.mu held.
func (r *record) notRunningErr() error { return r.sb.notRunningErr() }

// notRunningErr is the error of an operation on sb, which is not running:
// retry for an adopting sandbox, otherwise a failed precondition that
// says what became of it.
func (sb *Sandbox) notRunningErr() error {
	switch {
	case sb.State == StateAdopting:
		return fmt.Errorf("sandbox %s is being adopted by the restarted daemon; retry in a moment: %w", sb.ID, errdefs.ErrUnavailable)
	case sb.EndReason == EndAgentDied:
		return fmt.Errorf("sandbox %s has ended: %s; create a new sandbox: %w", sb.ID, agentDiedError, errdefs.ErrFailedPrecondition)
	case sb.EndReason == EndAgentUnhealthy:
		return fmt.Errorf("sandbox %s has ended: %s; create a new sandbox: %w", sb.ID, agentUnhealthyError, errdefs.ErrFailedPrecondition)
	case sb.EndReason != "":
		return fmt.Errorf("sandbox %s has ended (%s): %w", sb.ID, EndWords(sb.EndReason), errdefs.ErrFailedPrecondition)
	case sb.State == StateFailed && sb.Error != "":
		return fmt.Errorf("sandbox %s is failed: %s: %w", sb.ID, sb.Error, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("sandbox %s is %s: %w", sb.ID, sb.State, errdefs.ErrFailedPrecondition)
}

// EndWords says an end reason (Sandbox.EndReason) in words, for errors:
// "deleted", "it expired", ... An unknown reason is returned as it is.
func EndWords(reason string) string {
	switch reason {
	case EndDeleted:
		return "deleted"
	case EndExpired:
		return "it expired"
	case EndIdle:
		return "idle for longer than its idle timeout"
	case EndAgentGone:
		return "its agent was gone when the daemon restarted"
	case EndAgentUnhealthy:
		return "its agent stopped answering health probes"
	case EndCreateInterrupted:
		return "its create was interrupted by a daemon restart"
	case EndDestroyInterrupted:
		return "its destroy was interrupted by a daemon restart and then finished"
	case EndNoRecord:
		return "it had no usable record at a daemon restart"
	}
	return reason
}
