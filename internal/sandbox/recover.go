package sandbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// End is a sandbox that the manager ended on its own authority rather
// than through Destroy (expiry, idle timeout, a dead agent, recovery):
// what an auditor needs to tell what became of it.
type End struct {
	ID       string
	Owner    string // "" when its record was unreadable
	Template string
	// Reason is one of the End* reasons.
	Reason string
	// Origin is the Spec.Origin of its create, if it had one.
	Origin string
}

// The reasons of an End.
const (
	// EndCreateInterrupted: a restart found a sandbox created with
	// Spec.Pending and never confirmed; it was removed. Its create was
	// never answered.
	EndCreateInterrupted = "create_interrupted"
	// EndDestroyInterrupted: a restart found a sandbox whose destroy had
	// begun (the reason it was ending is in the record's details); it
	// finished the destroy.
	EndDestroyInterrupted = "destroy_interrupted"
	// EndExpired: the sandbox reached its expiry (ExpiresAt) and the
	// reaper destroyed it, or a restart found it expired while no
	// daemon ran, or its agent was found gone after its expiry: the
	// agent ends its sandbox itself at its own deadline when no daemon
	// did (see deadline.go).
	EndExpired = "expired"
	// EndIdle: the sandbox had no activity for its IdleTimeout and the
	// reaper destroyed it.
	EndIdle = "idle"
	// EndAgentDied: the sandbox's agent (its PID 1) exited while the
	// daemon ran, and every process of the sandbox with it; the
	// manager released what was left. The sandbox is failed.
	EndAgentDied = "agent_died"
	// EndAgentUnhealthy: the sandbox's agent, alive, missed
	// Config.HealthFailures health probes in a row (see health.go); the
	// manager destroyed the sandbox. It is failed.
	EndAgentUnhealthy = "agent_unhealthy"
	// EndAgentGone: a restart found the sandbox's record but no live
	// agent (it died, or the host rebooted) before the sandbox's expiry;
	// what was left was removed.
	EndAgentGone = "agent_gone"
	// EndNoRecord: a restart found a live sandbox without a usable
	// record (so no owner); it was removed.
	EndNoRecord = "no_record"
	// EndDeleted is the EndReason of a sandbox ended by Destroy. It is
	// never reported to an EndRecorder: Destroy's caller (the API's
	// delete) records that end itself.
	EndDeleted = "deleted"
)

// endState is the state a sandbox ended for reason is left in: failed
// when its agent died, stopped otherwise.
func endState(reason string) State {
	switch reason {
	case EndAgentDied, EndAgentGone, EndAgentUnhealthy:
		return StateFailed
	}
	return StateStopped
}

// EndRecorder is told of the sandboxes that the manager ends itself
// (every End reason but EndDeleted). The daemon records each in the audit
// log, so that no sandbox disappears without a trace. Begin is called before the sandbox is touched; finish,
// which it returns, with the result (nil: nothing of the sandbox is left).
// An error from Begin is logged and the end goes ahead: a sandbox whose
// create was never confirmed must not stay because the log is down.
type EndRecorder interface {
	BeginEnd(ctx context.Context, e End) (finish func(err error), err error)
}

// Start recovers what a previous daemon left and starts background work.
// It returns as soon as every sandbox the runtime found alive has its
// record (the slow parts run in the background), so that the API can
// serve while sandboxes are adopted. For each sandbox found:
//
//   - an agent alive, a record neither pending nor ending, not expired: the
//     sandbox is adopting; in the background its cgroup is thawed (a
//     destroy cut by the restart may have frozen it; nothing else freezes
//     a sandbox) and its agent waited for, up to AdoptTimeout. Then it is
//     running, or failed if the agent did not answer: a slow agent is
//     never a reason to destroy a sandbox.
//   - an agent alive but a record that is pending (its create was never
//     confirmed), ending (its destroy had begun), expired, of an unclaimed
//     pool member, or unusable: the sandbox is stopping, and destroyed in
//     the background.
//   - a record without a live agent (the runtime has removed what was
//     left): the record is removed, its end reported as EndExpired when
//     its expiry had passed (the agent ended the sandbox at its own
//     deadline), else EndAgentGone.
//
// Every sandbox that recovery ends, pool members aside, is reported to
// Config.Ends with its reason. WaitRecovered waits for the background
// part. Start may be called once.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.started || m.closed {
		m.mu.Unlock()
		return fmt.Errorf("sandbox manager: already started: %w", errdefs.ErrFailedPrecondition)
	}
	m.started = true
	m.recovering = make(chan struct{})
	m.mu.Unlock()

	insts, err := m.rt.Recover(ctx)
	if err != nil {
		if ctx.Err() != nil {
			close(m.recovering)
			return fmt.Errorf("sandbox manager: recover: %w", errdefs.ErrCanceled)
		}
		m.log.Warn("runtime recovery reported errors", "err", err)
	}
	ids, err := m.state.ids()
	if err != nil {
		close(m.recovering)
		return fmt.Errorf("sandbox manager: state dir: %w: %v", errdefs.ErrInternal, err)
	}
	var work []func(context.Context)
	found := make(map[string]bool, len(insts))
	now := time.Now()
	for _, inst := range insts {
		found[inst.ID()] = true
		if w := m.recoverInstance(inst, now); w != nil {
			work = append(work, w)
		}
	}
	m.pruneOpen()
	for _, id := range ids {
		if !found[id] {
			work = append(work, func(ctx context.Context) { m.forgetGone(ctx, id) })
		}
	}
	if len(insts) > 0 {
		m.log.Info("recovering sandboxes", "found", len(insts), "records", len(ids))
	}

	bgCtx, stop := context.WithCancel(context.Background())
	m.mu.Lock()
	m.stop = stop
	m.mu.Unlock()
	m.bg.Go(func() {
		defer close(m.recovering)
		m.runBounded(bgCtx, work)
	})
	m.bg.Go(func() { m.reapLoop(bgCtx) })
	if m.cfg.HealthInterval > 0 {
		m.bg.Go(func() { m.healthLoop(bgCtx) })
	}
	for _, p := range m.pools {
		m.bg.Go(func() { m.fillLoop(bgCtx, p) })
	}
	return nil
}

// WaitRecovered waits until the background part of Start (adoptions and
// the ends of recovered sandboxes) is done, or ctx ends.
func (m *Manager) WaitRecovered(ctx context.Context) error {
	m.mu.Lock()
	ch := m.recovering
	m.mu.Unlock()
	if ch == nil {
		return fmt.Errorf("sandbox manager is not started: %w", errdefs.ErrUnavailable)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctxErr(ctx, "wait for recovery")
	}
}

// runBounded runs every job, AdoptConcurrency at a time.
func (m *Manager) runBounded(ctx context.Context, work []func(context.Context)) {
	sem := make(chan struct{}, m.cfg.AdoptConcurrency)
	var wg sync.WaitGroup
	for _, w := range work {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w(ctx)
		})
	}
	wg.Wait()
}

// recoverInstance registers the record of a sandbox the runtime found
// alive and returns the background work that adopts or ends it.
func (m *Manager) recoverInstance(inst runtime.Instance, now time.Time) func(context.Context) {
	id := inst.ID()
	log := m.log.With("sandbox", id)
	spec := inst.Spec()
	p, err := decodeRecord([]byte(spec.Labels[labelKey]))
	if sp, ok, serr := m.state.load(id); ok {
		p, err = sp, nil
	} else if serr != nil {
		log.Warn("unreadable sandbox state file; using creation record", "err", serr)
	}
	reason := ""
	switch {
	case err != nil:
		reason = EndNoRecord
		p = persisted{}
	case p.Ending != "":
		reason = EndDestroyInterrupted
	case p.Pending:
		reason = EndCreateInterrupted
	case p.Pool:
		reason = "unclaimed pool member" // not a tenant's: not reported
	case !now.Before(p.ExpiresAt):
		reason = EndExpired
	}
	if p.ExpiresAt.After(p.MaxExpiresAt) {
		p.ExpiresAt = p.MaxExpiresAt
	}
	rec := &record{
		sb: Sandbox{
			ID:           id,
			Owner:        p.Owner,
			Template:     p.Template,
			State:        StateAdopting,
			Limits:       spec.Limits,
			Env:          p.Env,
			Metadata:     p.Metadata,
			Tools:        p.Tools,
			CmdPolicy:    p.CommandPolicy,
			CreatedAt:    p.CreatedAt,
			ExpiresAt:    p.ExpiresAt,
			MaxExpiresAt: p.MaxExpiresAt,
			IdleTimeout:  p.IdleTimeout,
			LastActivity: now,
		},
		inst:    inst,
		client:  agentclient.New(inst.Dial),
		created: closedChan(),
		pending: p.Pending,
		origin:  p.Origin,
		keyID:   p.KeyID,
	}
	if reason == "" {
		rec.adopted = make(chan struct{})
	} else {
		rec.sb.State, rec.sb.EndReason = StateStopping, reason
		rec.ending, rec.endState = true, StateStopped
		rec.destroying = make(chan struct{})
	}
	m.mu.Lock()
	m.records[id] = rec
	m.active++
	m.mu.Unlock()
	if reason == "" {
		if p.Network != nil {
			rec.sb.Network = cloneNetwork(*p.Network)
			m.adoptEgress(rec, p.Network)
		}
		m.adoptTools(rec)
		// An agent that dies while adopting or later is noticed at once.
		m.watchAgent(rec)
		return func(ctx context.Context) { m.adoptRecovered(ctx, rec) }
	}
	ending := p.Ending
	return func(ctx context.Context) {
		log.Info("ending recovered sandbox", "reason", reason, "ending", ending, "err", err)
		var finish func(error)
		if !p.Pool {
			finish = m.beginEnd(ctx, End{ID: id, Owner: p.Owner, Template: p.Template, Reason: reason, Origin: p.Origin})
		}
		derr := m.runDestroy(ctx, rec, "recovery: "+reason, true)
		if finish != nil {
			finish(derr)
		}
		if derr == nil {
			m.forgetFile(id) // the end is on the record
		}
	}
}

// adoptRecovered makes an adopting sandbox running: it thaws the sandbox
// and waits for its agent to answer. An agent that does not answer
// within AdoptTimeout leaves the sandbox failed (health checks bring it
// back when it answers), never destroyed.
func (m *Manager) adoptRecovered(ctx context.Context, rec *record) {
	defer close(rec.adopted)
	id := rec.sb.ID
	t0 := time.Now()
	deadline := t0.Add(m.cfg.AdoptTimeout)
	var err error
	if p, ok := rec.inst.(runtime.Pauser); ok {
		tctx, cancel := context.WithDeadline(ctx, deadline)
		err = p.Resume(tctx)
		cancel()
		if err != nil {
			m.log.Warn("thawing adopted sandbox", "sandbox", id, "err", err)
		}
	}
	// One ping with all the time left: an agent starved of CPU may take
	// seconds to answer a connection, so short pings in a loop would
	// never get through. Quick failures (the socket not there) retry.
	for {
		pctx, cancel := context.WithDeadline(ctx, deadline)
		_, err = rec.client.Info(pctx)
		cancel()
		if err == nil || ctx.Err() != nil || !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		return // shutting down: the next daemon adopts it
	}
	if err == nil {
		// The agent's deadline again, from the record, before anything
		// can change the expiry: a SetTimeout cut by the restart may have
		// reached the agent or the record alone.
		m.mu.Lock()
		exp := rec.sb.ExpiresAt
		m.mu.Unlock()
		if derr := m.tellDeadline(ctx, rec.client, exp); derr != nil {
			m.log.Warn("giving an adopted sandbox's agent its deadline", "sandbox", id, "err", derr)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rec.sb.State != StateAdopting {
		return // destroyed meanwhile
	}
	rec.sb.LastActivity = time.Now()
	if err != nil {
		rec.sb.State, rec.sb.Error, rec.unhealthy = StateFailed, "the sandbox's agent has not answered since the daemon restarted", true
		m.log.Warn("adopted sandbox's agent does not answer", "sandbox", id, "waited", time.Since(t0).Round(time.Millisecond), "err", err)
		return
	}
	rec.sb.State = StateRunning
	m.log.Debug("sandbox adopted", "sandbox", id, "took", time.Since(t0).Round(time.Millisecond))
}

// MaxAdoptWait bounds how long an operation on a sandbox that a
// restarted daemon is still adopting waits for the adoption to end
// before it fails unavailable (retry): adoption usually takes
// milliseconds, but an agent starved of CPU may answer late.
const MaxAdoptWait = 10 * time.Second

// WaitAdopted returns when the sandbox id is not being adopted by this
// (restarted) daemon: at once for any other sandbox, else when its
// adoption ends either way (by AdoptTimeout), after MaxAdoptWait, or
// when ctx ends. A request that arrives just after a
// restart thus runs instead of failing with "retry"; the caller looks
// the sandbox up again afterwards.
func (m *Manager) WaitAdopted(ctx context.Context, id string) {
	m.waitAdopted(ctx, id)
}

func (m *Manager) waitAdopted(ctx context.Context, id string) {
	m.mu.Lock()
	var wait chan struct{}
	if rec, ok := m.records[id]; ok && rec.sb.State == StateAdopting {
		wait = rec.adopted
	}
	m.mu.Unlock()
	if wait == nil {
		return
	}
	t := time.NewTimer(MaxAdoptWait)
	defer t.Stop()
	select {
	case <-wait:
	case <-t.C:
	case <-ctx.Done():
	}
}

// forgetGone removes the record of a sandbox that the runtime did not
// find alive (it has removed what was left of it) and reports its end.
func (m *Manager) forgetGone(ctx context.Context, id string) {
	p, ok, err := m.state.load(id)
	if err != nil {
		m.log.Warn("unreadable state file of a sandbox that is gone", "sandbox", id, "err", err)
	}
	reason := EndAgentGone
	switch {
	case ok && p.Ending != "":
		reason = EndDestroyInterrupted
	case ok && p.Pending:
		reason = EndCreateInterrupted
	case ok && !p.Pool:
		// Past its expiry, the agent ended the sandbox at its own
		// deadline (see deadline.go), or died after the sandbox was due
		// to end anyway.
		reason = expiredEnd(p.ExpiresAt, time.Now(), EndAgentGone)
	}
	finish := m.beginEnd(ctx, End{ID: id, Owner: p.Owner, Template: p.Template, Reason: reason, Origin: p.Origin})
	m.log.Info("sandbox gone at recovery", "sandbox", id, "reason", reason)
	finish(nil) // the sandbox itself is gone
	// Only now that its end is on the record: a daemon killed before
	// finds the file again and records the end then.
	m.forgetFile(id)
	if !ok {
		return // no owner to show it to
	}
	// Its owner sees what became of it for the retention period, like
	// any ended sandbox.
	now := time.Now()
	rec := &record{
		sb: Sandbox{
			ID:           id,
			Owner:        p.Owner,
			Template:     p.Template,
			State:        endState(reason),
			Metadata:     p.Metadata,
			CreatedAt:    p.CreatedAt,
			ExpiresAt:    p.ExpiresAt,
			MaxExpiresAt: p.MaxExpiresAt,
			IdleTimeout:  p.IdleTimeout,
			LastActivity: now,
			StoppedAt:    now,
			EndReason:    reason,
		},
		created: closedChan(),
		origin:  p.Origin,
	}
	if reason == EndAgentGone {
		rec.sb.Error = "the sandbox's agent was gone when the daemon restarted"
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, dup := m.records[id]; !dup {
		m.records[id] = rec
		m.retainLocked(rec)
	}
}

// beginEnd reports e to Config.Ends and returns the function that reports
// its result (a no-op without Ends).
func (m *Manager) beginEnd(ctx context.Context, e End) func(error) {
	if m.cfg.Ends == nil {
		return func(error) {}
	}
	finish, err := m.cfg.Ends.BeginEnd(context.WithoutCancel(ctx), e)
	if err != nil {
		m.log.Error("recording the end of a sandbox failed; ending it anyway", "sandbox", e.ID, "reason", e.Reason, "err", err)
		return func(error) {}
	}
	return finish
}
