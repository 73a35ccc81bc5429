package sandbox

import (
	"context"
	"errors"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// A sandbox's agent holds a deadline of its own: its ExpiresAt plus
// Config.DeadlineGrace. When that passes and the agent is still alive, no
// daemon ended the sandbox (none ran, or its reaper was stuck): the agent
// kills every process and exits, which ends the sandbox, and the next
// daemon records the end as EndExpired (see forgetGone and agentDied).
// The manager gives the deadline with the runtime spec of a cold create
// (runtime.Spec.Deadline), to a pool member when it is claimed, to the
// agent whenever SetTimeout moves the expiry, and again to every sandbox
// it adopts. The idle timeout is the daemon's alone: an idle sandbox with
// no daemon to notice it lives until its deadline.

// defaultDeadlineGrace is Config.DeadlineGrace's default: the reaper runs
// every ReapInterval (1 s) and records the end in the audit log before it
// kills, so it normally wins by seconds; the agent acts only when it did
// not.
const defaultDeadlineGrace = 5 * time.Second

// maxDeadlineGrace caps Config.DeadlineGrace: a sandbox outlives its
// expiry by at most this long when no daemon runs.
const maxDeadlineGrace = time.Minute

// agentDeadline is when the agent of a sandbox expiring at exp ends it by
// itself.
func (m *Manager) agentDeadline(exp time.Time) time.Time {
	return exp.Add(m.cfg.DeadlineGrace)
}

// tellDeadline gives c's agent the deadline of a sandbox expiring at exp,
// within HealthTimeout. An agent that cannot hold one (an agent of an
// older version, adopted after an upgrade) is not an error: it never ends
// its sandbox by itself, so it cannot end it too early either.
func (m *Manager) tellDeadline(ctx context.Context, c *agentclient.Client, exp time.Time) error {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.HealthTimeout)
	defer cancel()
	_, _, err := c.SetDeadline(ctx, m.agentDeadline(exp))
	if errors.Is(err, errdefs.ErrNotSupported) {
		return nil
	}
	return err
}

// expiredEnd is the reason of the end of a sandbox whose agent is found
// gone (at a restart, or while the daemon runs): EndExpired when its
// expiry had passed, which is what the agent's own deadline does, else
// the reason given.
func expiredEnd(exp, now time.Time, otherwise string) string {
	if !exp.IsZero() && !now.Before(exp) {
		return EndExpired
	}
	return otherwise
}
