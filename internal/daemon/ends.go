package daemon

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ActionSandboxEnd is the audit action of a sandbox that the daemon ended
// on its own authority (sandbox.End: expiry, idle timeout, a dead agent,
// what a restart found): by the daemon (no key), in the sandbox owner's
// tenant, targeting the sandbox, with details "reason" (a sandbox.End*
// reason) and "origin" (for an API create, the seq of that create's
// intent record).
const ActionSandboxEnd = "sandbox.end"

// auditEnds records the sandboxes the manager ends in the audit log: an
// intent before the sandbox is touched and an outcome after, like every
// API mutation.
type auditEnds struct {
	log     *audit.Log
	timeout time.Duration
	logger  *slog.Logger
}

var _ sandbox.EndRecorder = auditEnds{}

// BeginEnd implements sandbox.EndRecorder.
func (a auditEnds) BeginEnd(ctx context.Context, e sandbox.End) (func(error), error) {
	details := map[string]any{"reason": e.Reason}
	if e.Origin != "" {
		details["origin"] = e.Origin
	}
	if e.Template != "" {
		details["template"] = e.Template
	}
	ev := audit.Event{TenantID: e.Owner, Action: ActionSandboxEnd, Target: e.ID, Details: details}
	in := ev
	in.Outcome = audit.OutcomeIntent
	in.Time = time.Now().UTC()
	actx, cancel := context.WithTimeout(ctx, a.timeout)
	rec, err := a.log.AppendRecord(actx, in)
	cancel()
	if err != nil {
		return nil, err
	}
	return func(err error) {
		out := ev
		out.Outcome, out.IntentSeq, out.Time = endOutcome(err), rec.Seq, time.Now().UTC()
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
		defer cancel()
		if aerr := a.log.Append(actx, out); aerr != nil {
			a.logger.Error("audit append failed", "action", ActionSandboxEnd, "target", e.ID, "err", aerr)
		}
	}, nil
}

// endOutcome is the audit outcome of a sandbox's end: "ok" when nothing
// of it is left, otherwise the error's class as the API would name it.
func endOutcome(err error) string {
	switch {
	case err == nil:
		return audit.OutcomeOK
	case errors.Is(err, errdefs.ErrTimeout):
		return "timeout"
	default:
		return "unavailable"
	}
}

// ActionSandboxHealth is the audit action of a change of a sandbox's
// health (sandbox.HealthChange: unhealthy at its agent's first missed
// probe, healthy again at the next answered one): by the daemon, in the
// sandbox owner's tenant, targeting the sandbox, with details "status",
// "missed" and, when unhealthy, "error". The end that the policy may
// follow with is a sandbox.end (reason agent_unhealthy).
const ActionSandboxHealth = "sandbox.health"

var _ sandbox.HealthRecorder = auditEnds{}

// HealthChanged implements sandbox.HealthRecorder: one record, outcome
// ok; a failed append is logged (the probe loop goes on).
func (a auditEnds) HealthChanged(ctx context.Context, c sandbox.HealthChange) {
	details := map[string]any{"status": c.Status, "missed": c.Missed}
	if c.Error != "" {
		details["error"] = c.Error
	}
	ev := audit.Event{TenantID: c.Owner, Action: ActionSandboxHealth, Target: c.ID, Details: details,
		Outcome: audit.OutcomeOK, Time: time.Now().UTC()}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.timeout)
	defer cancel()
	if err := a.log.Append(actx, ev); err != nil {
		a.logger.Error("audit append failed", "action", ActionSandboxHealth, "target", c.ID, "err", err)
	}
}

// healthInterval is the sandbox manager's probe interval for the
// configured one: 0 (never) turns the probes off.
func healthInterval(d Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return time.Duration(d)
}
