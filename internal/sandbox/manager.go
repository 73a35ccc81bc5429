package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Manager owns the sandboxes of one runtime. It is safe for concurrent
// use.
//
// Lifecycle: New, then Start (adopts what a previous daemon left running
// and starts the reaper, health checks and pool fillers), then any
// operations, then Close (stops background work and destroys idle pool
// members; sandboxes keep running so that the next daemon adopts them).
type Manager struct {
	rt        runtime.Runtime
	templates *template.Registry
	cfg       Config
	log       *slog.Logger
	state     stateStore

	mu      sync.Mutex
	records map[string]*record
	active  int // records creating, running, stopping or failed
	started bool
	closed  bool
	pools   map[string]*pool

	stop    context.CancelFunc // ends background work
	bg      sync.WaitGroup
	fillSem chan struct{} // bounds pool members being created

	recovering chan struct{} // closed when Start's background recovery ends
	closing    chan struct{} // closed by Close: agent watchers stop
	// ended are the ended records kept for Get and List, oldest end
	// first (see retainLocked).
	ended []*record

	// step, if set, is called at each named step of create and destroy
	// (see the step constants); tests stop a manager there to play a
	// daemon killed at that point.
	step func(name, id string)
}

// record is the manager's view of one sandbox. Its fields are guarded by
// Manager.mu, except that inst and client are set once (before the record
// leaves StateCreating) and read without the lock afterwards.
type record struct {
	sb     Sandbox
	inst   runtime.Instance
	client *agentclient.Client

	inflight      int  // exec/file operations in progress
	unhealthy     bool // failed because of health checks (may recover)
	destroyWanted bool // Destroy was called while creating
	pending       bool // created with Spec.Pending, not confirmed yet
	origin        string
	// ending is set while a destroy or release runs (destroying is
	// open); endState is the state it leaves the sandbox in when it
	// succeeds: stopped, or failed for a dead agent.
	ending   bool
	endState State

	created    chan struct{} // closed when creation ends, either way
	adopted    chan struct{} // non-nil for a recovered sandbox; closed when its adoption ends, either way
	destroying chan struct{} // non-nil while a destroy runs; closed at its end
	destroyErr error         // result of the last destroy

	saveMu sync.Mutex // serialises state-file writes of this sandbox
	net    netState   // its egress proxy (network.go)
	keyID  string     // Spec.KeyID
	tools  toolsState // its tools server (tools.go)
}

// snapshot returns a copy of the sandbox's state. Call with Manager.mu
// held.
func (r *record) snapshot() Sandbox {
	sb := r.sb
	sb.Env = cloneMap(sb.Env)
	sb.Metadata = cloneMap(sb.Metadata)
	sb.Network = cloneNetwork(sb.Network)
	sb.Tools = slices.Clone(sb.Tools)
	return sb
}

// New returns a manager for rt. It validates cfg (after filling defaults)
// and checks that every pooled template is registered. It starts nothing;
// call Start.
func New(rt runtime.Runtime, templates *template.Registry, cfg Config, log *slog.Logger) (*Manager, error) {
	if rt == nil || templates == nil {
		return nil, fmt.Errorf("sandbox: runtime and templates are required: %w", errdefs.ErrInvalidArgument)
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for name := range cfg.PoolSize {
		if _, err := templates.Get(name); err != nil {
			return nil, fmt.Errorf("sandbox config: pool: %w", err)
		}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	st := stateStore{dir: cfg.StateDir}
	if err := st.init(); err != nil {
		return nil, err
	}
	m := &Manager{
		rt:        rt,
		templates: templates,
		cfg:       cfg,
		log:       log,
		state:     st,
		records:   make(map[string]*record),
		closing:   make(chan struct{}),
		pools:     make(map[string]*pool),
		fillSem:   make(chan struct{}, cfg.PoolFillConcurrency),
	}
	for name, n := range cfg.PoolSize {
		if n > 0 {
			m.pools[name] = &pool{template: name, size: n, wake: make(chan struct{}, 1)}
		}
	}
	m.subscribeOpen()
	return m, nil
}

// Template returns the template a Spec with this Owner and Template would
// be created from (an empty name is Config.DefaultTemplate), resolved as
// Create resolves it: owner's template of that name, else the shared
// one. Callers use it to read a template's defaults that the manager
// does not apply itself (template.Toolsetter); ErrNotFound when there is
// none.
func (m *Manager) Template(owner, name string) (template.Source, error) {
	return m.cfg.lookupTemplate(m.templates, owner, name)
}

// Config returns the effective configuration (defaults filled in).
func (m *Manager) Config() Config {
	c := m.cfg
	c.PoolSize = make(map[string]int, len(m.cfg.PoolSize))
	for k, v := range m.cfg.PoolSize {
		c.PoolSize[k] = v
	}
	return c
}

// Close stops the reaper, health checks and pool fillers, destroys the
// idle pool members and releases connections. Sandboxes keep running; a
// new Manager over the same runtime adopts them. Operations after Close
// fail with ErrUnavailable. Close waits for background work (at most a
// destroy in progress) or until ctx is done.
func (m *Manager) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.closing)
	stop := m.stop
	var members []*poolMember
	for _, p := range m.pools {
		members = append(members, p.members...)
		p.members = nil
	}
	var clients []*agentclient.Client
	var recs []*record
	for _, rec := range m.records {
		if rec.client != nil {
			clients = append(clients, rec.client)
		}
		recs = append(recs, rec)
	}
	m.mu.Unlock()
	// The egress proxies stop with the daemon; the next one starts them
	// again when it adopts their sandboxes.
	for _, rec := range recs {
		m.stopEgress(rec)
		m.stopTools(rec)
	}

	if stop != nil {
		stop()
	}
	done := make(chan struct{})
	go func() { m.bg.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("sandbox manager: close: background work still running: %w", errdefs.ErrTimeout))
	}
	for _, pm := range members {
		errs = append(errs, m.destroyMember(ctx, pm))
	}
	for _, c := range clients {
		c.Close()
	}
	return errors.Join(errs...)
}

// Create validates spec and returns a running sandbox: claimed from the
// template's warm pool when the resolved limits equal the pool's (the
// template's defaults), created cold otherwise. It fails with
// ErrResourceExhausted when MaxConcurrent sandboxes exist.
func (m *Manager) Create(ctx context.Context, spec Spec) (sb Sandbox, err error) {
	began, origin := time.Now(), metrics.OriginCold
	defer func() { m.cfg.Metrics.Created(sb.Template, origin, time.Since(began), errCode(err)) }()
	ctx, span := tracing.Start(ctx, "sandbox.create")
	defer func() {
		if span.IsRecording() {
			span.SetAttributes(tracing.KeyOrigin.String(origin))
			if sb.ID != "" {
				span.SetAttributes(tracing.KeySandbox.String(sb.ID), tracing.KeyTemplate.String(sb.Template))
			}
		}
		tracing.End(span, err)
	}()
	rs, err := m.cfg.resolve(spec, m.templates)
	if err != nil {
		return Sandbox{}, err
	}
	if err := m.checkNetworkLimits(rs.network.Limits); err != nil {
		return Sandbox{}, err
	}
	if err := m.checkCredentials(ctx, spec.Owner, rs.network); err != nil {
		return Sandbox{}, err
	}
	if err := m.checkOpen(rs.network); err != nil {
		return Sandbox{}, err
	}
	m.mu.Lock()
	if err := m.usableLocked(); err != nil {
		m.mu.Unlock()
		return Sandbox{}, err
	}
	if m.active >= m.cfg.MaxConcurrent {
		m.mu.Unlock()
		return Sandbox{}, fmt.Errorf("sandbox limit of %d reached: %w", m.cfg.MaxConcurrent, errdefs.ErrResourceExhausted)
	}
	m.active++
	p := m.pools[rs.template.Name()]
	m.mu.Unlock()

	if p != nil && rs.limits == rs.defaults {
		cctx, cspan := tracing.Start(ctx, "sandbox.pool_claim", tracing.KeyTemplate.String(p.template))
		sb, ok, err := m.claim(cctx, p, rs)
		m.cfg.Metrics.Claimed(p.template, claimResult(ok, err))
		cspan.SetAttributes(tracing.KeyPoolResult.String(claimResult(ok, err)))
		tracing.End(cspan, err)
		if ok {
			origin = metrics.OriginPool
		}
		if ok || err != nil {
			if err != nil {
				m.release()
			}
			sb, err = m.createEgress(ctx, sb, err, rs.policy)
			return m.createTools(ctx, sb, err)
		}
	}
	sb, err = m.createCold(ctx, rs)
	sb, err = m.createEgress(ctx, sb, err, rs.policy)
	return m.createTools(ctx, sb, err)
}

// release gives back a concurrency slot reserved by Create.
func (m *Manager) release() {
	m.mu.Lock()
	m.active--
	m.mu.Unlock()
}

// usableLocked reports whether the manager accepts operations.
func (m *Manager) usableLocked() error {
	switch {
	case m.closed:
		return fmt.Errorf("sandbox manager is shut down: %w", errdefs.ErrUnavailable)
	case !m.started:
		return fmt.Errorf("sandbox manager is not started: %w", errdefs.ErrUnavailable)
	}
	return nil
}

// createCold creates a sandbox in the runtime. The caller has reserved a
// concurrency slot; createCold gives it back on failure.
func (m *Manager) createCold(ctx context.Context, rs resolvedSpec) (Sandbox, error) {
	id, err := newID()
	if err != nil {
		m.release()
		return Sandbox{}, err
	}
	now := time.Now()
	rec := &record{
		sb: Sandbox{
			ID:           id,
			Owner:        rs.owner,
			Template:     rs.template.Name(),
			State:        StateCreating,
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
		created: make(chan struct{}),
		pending: rs.pending,
		origin:  rs.origin,
		keyID:   rs.keyID,
	}
	m.mu.Lock()
	if _, dup := m.records[id]; dup {
		m.mu.Unlock()
		m.release()
		return Sandbox{}, fmt.Errorf("sandbox id collision: %w", errdefs.ErrInternal)
	}
	m.records[id] = rec
	m.mu.Unlock()

	// The record is on disk before anything of the sandbox exists, so
	// that a restart at any later step knows whose sandbox it was, and
	// whether its creation was confirmed (see Start).
	p := rec.persisted()
	err = m.state.save(id, p)
	if err == nil {
		m.atStep(stepCreateRecorded, id)
		var inst runtime.Instance
		inst, err = m.startInstance(ctx, rs.template, id, rs.limits, p)
		if err == nil {
			rec.inst = inst
			m.atStep(stepCreateStarted, id)
		} else if rerr := m.state.remove(id); rerr != nil {
			m.log.Warn("removing sandbox state", "sandbox", id, "err", rerr)
		}
	}
	m.mu.Lock()
	if err != nil {
		delete(m.records, id)
		m.active--
		close(rec.created)
		m.mu.Unlock()
		return Sandbox{}, err
	}
	inst := rec.inst
	rec.inst, rec.client = inst, agentclient.New(inst.Dial)
	rec.sb.State = StateRunning
	rec.sb.LastActivity = time.Now()
	wanted := rec.destroyWanted
	close(rec.created)
	sb := rec.snapshot()
	m.mu.Unlock()
	m.log.Info("sandbox created", "sandbox", id, "template", sb.Template, "took", time.Since(now).Round(time.Microsecond))
	m.watchAgent(rec)
	if wanted {
		// Destroyed while being created: finish the job for the caller
		// of Destroy and report what is left.
		err := m.destroyRecord(ctx, rec, "destroyed while creating", false)
		m.mu.Lock()
		sb = rec.snapshot()
		m.mu.Unlock()
		return sb, err
	}
	return sb, nil
}

// Confirm ends the provisional state of a sandbox created with
// Spec.Pending: from now on a restart adopts it. The API calls it once
// the create's outcome is in the audit log, before it answers. Confirming
// a sandbox that is not pending does nothing.
func (m *Manager) Confirm(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return ctxErr(ctx, "confirm")
	}
	m.mu.Lock()
	rec, ok := m.records[id]
	m.mu.Unlock()
	if !ok {
		return notFound(id)
	}
	rec.saveMu.Lock()
	defer rec.saveMu.Unlock()
	m.mu.Lock()
	if !rec.pending {
		m.mu.Unlock()
		return nil
	}
	if s := rec.sb.State; (s != StateRunning && s != StateFailed) || rec.ending || rec.sb.Ended() {
		err := rec.notRunningErr()
		m.mu.Unlock()
		return err
	}
	p := rec.persisted()
	p.Pending = false
	m.mu.Unlock()
	if err := m.state.save(id, p); err != nil {
		return err
	}
	m.mu.Lock()
	rec.pending = false
	m.mu.Unlock()
	m.atStep(stepCreateConfirmed, id)
	return nil
}

// The steps of create and destroy at which Manager.step is called.
const (
	stepCreateRecorded  = "create.recorded"  // record file written; nothing else exists
	stepCreateStarted   = "create.started"   // the runtime made the sandbox; Create has not returned
	stepCreateConfirmed = "create.confirmed" // Confirm wrote the record
	stepDestroyMarked   = "destroy.marked"   // the record says the sandbox is ending
	stepDestroyKilled   = "destroy.killed"   // the runtime destroyed it; its record file is still there
)

// atStep calls the test hook, if any.
func (m *Manager) atStep(name, id string) {
	if m.step != nil {
		m.step(name, id)
	}
}

// startInstance resolves the template and creates the runtime instance,
// within CreateTimeout.
func (m *Manager) startInstance(ctx context.Context, src template.Source, id string, limits runtime.Limits, p persisted) (runtime.Instance, error) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.CreateTimeout)
	defer cancel()
	rctx, span := tracing.Start(ctx, "sandbox.rootfs")
	rootfs, err := src.Resolve(rctx)
	if err == nil {
		span.SetAttributes(tracing.KeyLayers.Int(len(rootfs.Layers)))
	}
	tracing.End(span, err)
	if err != nil {
		return nil, err
	}
	labels, err := encodeLabels(p)
	if err != nil {
		return nil, err
	}
	spec := runtime.Spec{ID: id, Rootfs: rootfs, Limits: limits, Labels: labels}
	spec.Rootfs.Binds = slices.Concat(rootfs.Binds, m.trustBind(), m.toolsLibBind())
	if !p.Pool {
		// A pool member gets its deadline when it is claimed.
		spec.Deadline = m.agentDeadline(p.ExpiresAt)
	}
	rctx, span = tracing.Start(ctx, "runtime.create", tracing.KeySandbox.String(id))
	inst, err := m.rt.Create(rctx, spec)
	tracing.End(span, err)
	if err != nil {
		m.log.Warn("runtime create failed", "sandbox", id, "err", err)
		if ctx.Err() != nil {
			return nil, ctxErr(ctx, "create sandbox")
		}
		return nil, createErr(id, err)
	}
	return inst, nil
}

// createErr is publicErr for a failed create in the runtime. The runtime
// names the sandbox by the id it was to have; the create failed, so the
// caller never got that id and it names nothing: it is left out of the
// message, which keeps the cause and its class.
func createErr(id string, err error) error {
	err = publicErr("create sandbox", err)
	return &rewordedErr{msg: strings.ReplaceAll(err.Error(), "sandbox "+id+": ", ""), err: err}
}

// rewordedErr is err with another message.
type rewordedErr struct {
	msg string
	err error
}

func (e *rewordedErr) Error() string { return e.msg }
func (e *rewordedErr) Unwrap() error { return e.err }

// publicErr wraps a runtime error for callers that may show it to users.
// Internal and unavailable errors typically carry OS details (host
// paths); they are logged by the caller and reduced to their class here.
func publicErr(op string, err error) error {
	switch class := errdefs.Class(err); class {
	case errdefs.ErrInternal, errdefs.ErrUnavailable:
		return fmt.Errorf("%s: %w", op, class)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}

// TemplateInUse reports whether a sandbox that exists or is being made,
// pool members included, uses the template called name. The template
// store asks it before removing a template. Records are registered before
// their template is resolved, so a template cannot vanish under a create.
func (m *Manager) TemplateInUse(name string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, rec := range m.records {
		if rec.sb.Template == name && rec.sb.State != StateStopped && rec.sb.State != StateFailed {
			return true
		}
	}
	if p := m.pools[name]; p != nil && (len(p.members) > 0 || p.filling > 0) {
		return true
	}
	return false
}

// Get returns the sandbox called id, or ErrNotFound.
func (m *Manager) Get(id string) (Sandbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[id]
	if !ok {
		return Sandbox{}, notFound(id)
	}
	return rec.snapshot(), nil
}

// List returns the sandboxes that f selects, oldest first.
func (m *Manager) List(f Filter) []Sandbox {
	m.mu.Lock()
	out := make([]Sandbox, 0, len(m.records))
	for _, rec := range m.records {
		if f.matches(&rec.sb) {
			out = append(out, rec.snapshot())
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// matches reports whether f selects sb.
func (f Filter) matches(sb *Sandbox) bool {
	if len(f.States) > 0 {
		found := false
		for _, s := range f.States {
			if s == sb.State {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	if f.Owner != "" && f.Owner != sb.Owner {
		return false
	}
	if f.Live && sb.Ended() {
		return false
	}
	for k, v := range f.Metadata {
		if got, ok := sb.Metadata[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// Destroy kills the sandbox and frees its resources. A sandbox being
// created is destroyed as soon as its creation ends; destroying an ended
// sandbox (still in the record) is a no-op, and one whose destroy or
// release is under way waits for it. If the runtime fails to destroy it,
// the sandbox becomes failed and the error is returned. Its EndReason is
// EndDeleted.
func (m *Manager) Destroy(ctx context.Context, id string) error {
	m.mu.Lock()
	rec, ok := m.records[id]
	m.mu.Unlock()
	if !ok {
		return notFound(id)
	}
	return m.destroyRecord(ctx, rec, "requested", false)
}

// DestroyRecorded is Destroy for a caller that records the end itself:
// once the sandbox is destroyed it calls recorded (the API commits the
// delete's audit outcome there) and only then forgets the sandbox's record
// file. A daemon killed between the two finds the file at its next start,
// with the sandbox gone, and records the end itself (destroy_interrupted):
// no sandbox vanishes without a record. recorded is not called when the
// destroy fails; its error is returned.
func (m *Manager) DestroyRecorded(ctx context.Context, id string, recorded func() error) error {
	m.mu.Lock()
	rec, ok := m.records[id]
	m.mu.Unlock()
	if !ok {
		return notFound(id)
	}
	if err := m.destroyRecord(ctx, rec, "requested", true); err != nil {
		return err
	}
	if err := recorded(); err != nil {
		return err
	}
	m.forgetFile(id)
	return nil
}

// forgetFile removes the record file of a sandbox whose end is on the
// record.
func (m *Manager) forgetFile(id string) {
	if err := m.state.remove(id); err != nil {
		m.log.Warn("removing sandbox state", "sandbox", id, "err", err)
	}
}

// destroyRecord drives rec to stopped (see Destroy). With keepFile the
// record file stays (marked ending) once the sandbox is destroyed, for the
// caller to remove when the end is on the record (forgetFile).
func (m *Manager) destroyRecord(ctx context.Context, rec *record, reason string, keepFile bool) error {
	for {
		m.mu.Lock()
		if rec.ending {
			ch := rec.destroying
			m.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctxErr(ctx, "destroy")
			}
			m.mu.Lock()
			err := rec.destroyErr
			m.mu.Unlock()
			return err
		}
		if rec.sb.Ended() {
			m.mu.Unlock()
			return nil
		}
		switch rec.sb.State {
		case StateCreating:
			rec.destroyWanted = true
			ch := rec.created
			m.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return ctxErr(ctx, "destroy")
			}
			m.mu.Lock()
			gone := m.records[rec.sb.ID] != rec
			m.mu.Unlock()
			if gone {
				return nil // its creation failed: nothing left
			}
			continue
		}
		// adopting, running or failed: this call destroys it.
		m.beginDestroyLocked(rec, EndDeleted, StateStopping)
		m.mu.Unlock()
		break
	}
	return m.runDestroy(ctx, rec, reason, keepFile)
}

// beginDestroyLocked marks rec as being destroyed for reason, showing
// state meanwhile. Call with Manager.mu held, then runDestroy.
func (m *Manager) beginDestroyLocked(rec *record, reason string, state State) {
	rec.sb.State, rec.sb.EndReason = state, reason
	rec.ending, rec.endState = true, endState(reason)
	rec.destroying = make(chan struct{})
}

// runDestroy destroys rec, which its caller marked (beginDestroyLocked),
// and reports the result to those waiting. On success the sandbox has
// ended: it is in its endState, its MaxConcurrent slot is free and its
// record is kept for EndedRetention; its record file is removed unless
// keepFile (see destroyRecord).
func (m *Manager) runDestroy(ctx context.Context, rec *record, reason string, keepFile bool) (err error) {
	id := rec.sb.ID
	rec.client.Close()
	m.stopEgress(rec)
	m.stopTools(rec)
	m.forgetTools(id)
	m.detachOpen(rec)
	// The record says the sandbox is ending before the runtime starts on
	// it: a destroy cut by a restart can leave it frozen, and the next
	// daemon must then finish the destroy rather than thaw and adopt it.
	rec.saveMu.Lock()
	m.mu.Lock()
	p := rec.persisted()
	endReason := rec.sb.EndReason
	m.mu.Unlock()
	defer func() { m.cfg.Metrics.Destroyed(endReason, err != nil) }()
	p.Ending = reason
	if err := m.state.save(id, p); err != nil {
		m.log.Warn("marking sandbox as ending", "sandbox", id, "err", err)
	}
	rec.saveMu.Unlock()
	m.atStep(stepDestroyMarked, id)
	// The destroy must complete even if the caller goes away.
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.DestroyTimeout)
	err = rec.inst.Destroy(dctx)
	cancel()
	if err == nil {
		m.atStep(stepDestroyKilled, id)
		if !keepFile {
			rec.saveMu.Lock()
			m.forgetFile(id)
			rec.saveMu.Unlock()
		}
	}

	m.mu.Lock()
	rec.ending = false
	if err != nil {
		rec.sb.State = StateFailed
		if rec.sb.EndReason == EndAgentDied {
			rec.sb.Error = agentDiedError + "; releasing what the sandbox held failed: delete it to retry"
		} else {
			rec.sb.Error = "destroying the sandbox failed"
		}
		rec.sb.EndReason = ""
		rec.unhealthy = false
		m.log.Warn("runtime destroy failed", "sandbox", id, "err", err)
		err = publicErr("destroy sandbox "+id, err)
	} else {
		rec.sb.State = rec.endState
		rec.sb.StoppedAt = time.Now()
		rec.sb.Env = nil // may hold secrets; an ended sandbox runs nothing
		m.active--
		m.retainLocked(rec)
	}
	rec.destroyErr = err
	close(rec.destroying)
	m.mu.Unlock()
	if err != nil {
		m.log.Error("sandbox destroy failed", "sandbox", id, "reason", reason, "err", err)
	} else {
		m.log.Info("sandbox destroyed", "sandbox", id, "reason", reason)
	}
	return err
}

// SetTimeout makes the sandbox expire d from now. The new expiry may not
// pass the sandbox's MaxExpiresAt (ErrInvalidArgument). The sandbox's
// agent takes the new deadline first (see deadline.go); when it does not
// (its error, typically ErrUnavailable), nothing changes. It returns the
// updated sandbox.
func (m *Manager) SetTimeout(ctx context.Context, id string, d time.Duration) (Sandbox, error) {
	if d <= 0 {
		return Sandbox{}, fmt.Errorf("timeout must be positive: %w", errdefs.ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return Sandbox{}, ctxErr(ctx, "set timeout")
	}
	m.mu.Lock()
	rec, ok := m.records[id]
	m.mu.Unlock()
	if !ok {
		return Sandbox{}, notFound(id)
	}
	rec.saveMu.Lock()
	defer rec.saveMu.Unlock()
	m.mu.Lock()
	if err := m.usableLocked(); err != nil {
		m.mu.Unlock()
		return Sandbox{}, err
	}
	if s := rec.sb.State; (s != StateRunning && s != StateFailed) || rec.ending || rec.sb.Ended() {
		err := rec.notRunningErr()
		m.mu.Unlock()
		return Sandbox{}, err
	}
	exp := time.Now().Add(d)
	if exp.After(rec.sb.MaxExpiresAt) {
		left := time.Until(rec.sb.MaxExpiresAt).Truncate(time.Second)
		m.mu.Unlock()
		return Sandbox{}, fmt.Errorf("timeout %v passes the sandbox's maximum lifetime (%v left): %w", d, left, errdefs.ErrInvalidArgument)
	}
	old := rec.sb.ExpiresAt
	m.mu.Unlock()
	// The agent first: its own deadline must never come before the
	// expiry the daemon keeps, or it would end the sandbox early.
	if err := m.tellDeadline(ctx, rec.client, exp); err != nil {
		m.log.Warn("the agent did not take the new deadline", "sandbox", id, "err", err)
		return Sandbox{}, publicErr("set timeout: the sandbox's agent did not take its new deadline", err)
	}
	m.mu.Lock()
	if s := rec.sb.State; (s != StateRunning && s != StateFailed) || rec.ending || rec.sb.Ended() {
		err := rec.notRunningErr()
		m.mu.Unlock()
		return Sandbox{}, err
	}
	rec.sb.ExpiresAt = exp
	p := rec.persisted()
	m.mu.Unlock()
	if err := m.state.save(id, p); err != nil {
		m.mu.Lock()
		if rec.sb.ExpiresAt.Equal(exp) {
			rec.sb.ExpiresAt = old
		}
		m.mu.Unlock()
		// Best effort: the agent's deadline back to the expiry kept.
		_ = m.tellDeadline(ctx, rec.client, old)
		return Sandbox{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return rec.snapshot(), nil
}

// acquire marks an operation on sandbox id as in flight (so the idle
// reaper leaves it alone) and returns the record and the function that
// ends the operation.
func (m *Manager) acquire(id string) (*record, func(), error) {
	m.waitAdopted(context.Background(), id)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.usableLocked(); err != nil {
		return nil, nil, err
	}
	rec, ok := m.records[id]
	if !ok {
		return nil, nil, notFound(id)
	}
	if rec.sb.State != StateRunning {
		return nil, nil, rec.notRunningErr()
	}
	rec.inflight++
	rec.sb.LastActivity = time.Now()
	var once sync.Once
	return rec, func() {
		once.Do(func() {
			m.mu.Lock()
			rec.inflight--
			rec.sb.LastActivity = time.Now()
			m.mu.Unlock()
		})
	}, nil
}

// notFound is the error for an unknown sandbox.
func notFound(id string) error {
	if len(id) > 80 {
		id = id[:80] + "..."
	}
	return fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

// ctxErr maps a done context onto an error class.
func ctxErr(ctx context.Context, op string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, errdefs.ErrTimeout)
	}
	return fmt.Errorf("%s: %w", op, errdefs.ErrCanceled)
}

// idEncoding is lowercase base32 without padding: 10 random bytes make 16
// characters from [a-z2-7].
var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// IDPrefix starts every sandbox ID.
const IDPrefix = "sb-"

// newID returns "sb-" followed by 16 random lowercase base32 characters.
func newID() (string, error) {
	var b [10]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("sandbox id: %w: %v", errdefs.ErrInternal, err)
	}
	return IDPrefix + idEncoding.EncodeToString(b[:]), nil
}

// ValidID reports whether id has the syntax of a sandbox ID, so that API
// handlers can reject garbage before a lookup.
func ValidID(id string) bool {
	rest, ok := strings.CutPrefix(id, IDPrefix)
	if !ok || len(rest) != 16 {
		return false
	}
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if !(c >= 'a' && c <= 'z' || c >= '2' && c <= '7') {
			return false
		}
	}
	return true
}

func closedChan() chan struct{} {
	ch := make(chan struct{})
	close(ch)
	return ch
}
