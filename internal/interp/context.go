package interp

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// box holds the contexts of one sandbox.
type box struct {
	m  *Manager
	id string

	adoptMu sync.Mutex // serialises adoption
	adopted bool

	mu       sync.Mutex
	contexts map[string]*codeContext
	defaults map[Language]*codeContext
}

func newBox(m *Manager, id string) *box {
	return &box{m: m, id: id, contexts: map[string]*codeContext{}, defaults: map[Language]*codeContext{}}
}

// add registers a new (not yet started) context, within the cap.
func (b *box) add(lang Language, cwd string, env map[string]string, isDefault bool) (*codeContext, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.contexts) >= b.m.lim.MaxContexts {
		// A failed precondition, not resource exhausted (429): the
		// limit holds until the caller deletes a context, so retrying
		// cannot help.
		return nil, fmt.Errorf("sandbox %s has %d code contexts, the most it may have; delete one (DELETE /v1/sandboxes/%s/contexts/ID) before creating another: %w",
			b.id, len(b.contexts), b.id, errdefs.ErrFailedPrecondition)
	}
	c := &codeContext{
		b: b, id: newContextID(), lang: lang, cwd: cwd, env: env, isDefault: isDefault,
		created: time.Now().UTC(), slot: make(chan struct{}, 1),
	}
	b.contexts[c.id] = c
	if isDefault {
		b.defaults[lang] = c
	}
	return c, nil
}

// defaultContext returns the default context of lang, registering it on
// first use (it starts with its first cell).
func (b *box) defaultContext(lang Language) (*codeContext, error) {
	b.mu.Lock()
	c := b.defaults[lang]
	b.mu.Unlock()
	if c != nil {
		return c, nil
	}
	c, err := b.add(lang, "", nil, true)
	if err != nil {
		return nil, err
	}
	// Two first calls may race: keep the first default.
	b.mu.Lock()
	defer b.mu.Unlock()
	if d := b.defaults[lang]; d != c {
		delete(b.contexts, c.id)
		return d, nil
	}
	return c, nil
}

func (b *box) get(id string) (*codeContext, error) {
	if !ValidContextID(id) {
		return nil, fmt.Errorf("malformed context id; want %s followed by 16 characters [a-z2-7]: %w", IDPrefix, errdefs.ErrInvalidArgument)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	c, ok := b.contexts[id]
	if !ok {
		return nil, contextNotFound(id)
	}
	return c, nil
}

func (b *box) remove(c *codeContext) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.contexts[c.id] == c {
		delete(b.contexts, c.id)
	}
	if b.defaults[c.lang] == c {
		delete(b.defaults, c.lang)
	}
}

// all returns b's contexts, in no order.
func (b *box) all() []*codeContext {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Collect(maps.Values(b.contexts))
}

func (b *box) list() []ContextInfo {
	cs := b.all()
	out := make([]ContextInfo, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.info())
	}
	slices.SortFunc(out, func(x, y ContextInfo) int {
		if d := x.CreatedAt.Compare(y.CreatedAt); d != 0 {
			return d
		}
		return strings.Compare(x.ID, y.ID)
	})
	return out
}

// detach ends the streams of every kernel of b without killing them.
func (b *box) detach() {
	for _, c := range b.all() {
		if k := c.current(); k != nil {
			k.detach()
		}
	}
}

// tagPrefix starts the agent tag of every kernel:
// airlock-interp:CONTEXT:GENERATION:LANGUAGE:d|n:NONCE (d: default).
const tagPrefix = "airlock-interp:"

func kernelTag(c *codeContext, gen int, nonce string) string {
	d := "n"
	if c.isDefault {
		d = "d"
	}
	return fmt.Sprintf("%s%s:%d:%s:%s:%s", tagPrefix, c.id, gen, c.lang, d, nonce)
}

// parsedTag is a kernel tag taken apart.
type parsedTag struct {
	id        string
	gen       int
	lang      Language
	isDefault bool
	nonce     string
}

func parseTag(tag string) (parsedTag, bool) {
	rest, ok := strings.CutPrefix(tag, tagPrefix)
	if !ok {
		return parsedTag{}, false
	}
	f := strings.Split(rest, ":")
	if len(f) != 5 || !ValidContextID(f[0]) || (f[3] != "d" && f[3] != "n") || len(f[4]) != 16 {
		return parsedTag{}, false
	}
	gen, err := strconv.Atoi(f[1])
	if err != nil || gen < 1 {
		return parsedTag{}, false
	}
	lang := Language(f[2])
	if _, ok := drivers[lang]; !ok {
		return parsedTag{}, false
	}
	return parsedTag{id: f[0], gen: gen, lang: lang, isDefault: f[3] == "d", nonce: f[4]}, true
}

// adopt takes over the kernels a previous daemon left in the sandbox (once
// per box): the newest kernel of each context is attached again, older
// ones and unreadable tags are killed.
func (b *box) adopt(ctx context.Context) error {
	b.adoptMu.Lock()
	defer b.adoptMu.Unlock()
	if b.adopted {
		return nil
	}
	sbs := b.m.sb
	procs, err := sbs.ListProcesses(ctx, b.id)
	if err != nil {
		return err
	}
	type found struct {
		t parsedTag
		p agentclient.ProcessInfo
	}
	newest := map[string]found{}
	var kill []int
	for _, p := range procs {
		if !strings.HasPrefix(p.Tag, tagPrefix) {
			continue
		}
		t, ok := parseTag(p.Tag)
		if !ok {
			kill = append(kill, p.PID)
			continue
		}
		if old, ok := newest[t.id]; ok {
			if old.t.gen > t.gen {
				kill = append(kill, p.PID)
				continue
			}
			kill = append(kill, old.p.PID)
		}
		newest[t.id] = found{t, p}
	}
	for _, pid := range kill {
		if err := sbs.SignalProcess(ctx, b.id, pid, 9); err != nil {
			b.m.log.Warn("kill a stray code kernel", "sandbox", b.id, "pid", pid, "err", err)
		}
	}
	for id, f := range newest {
		t, p := f.t, f.p
		c := &codeContext{
			b: b, id: id, lang: t.lang, cwd: p.Cwd, isDefault: t.isDefault, gen: t.gen,
			created: p.StartedAt.UTC(), slot: make(chan struct{}, 1),
		}
		if err := c.attach(ctx, p.PID, t.nonce); err != nil {
			b.m.log.Warn("adopt a code kernel", "sandbox", b.id, "context", id, "err", err)
			_ = sbs.SignalProcess(ctx, b.id, p.PID, 9)
			continue
		}
		b.mu.Lock()
		b.contexts[id] = c
		if t.isDefault && b.defaults[t.lang] == nil {
			b.defaults[t.lang] = c
		}
		b.mu.Unlock()
		b.m.log.Info("adopted a code context", "sandbox", b.id, "context", id, "language", t.lang)
	}
	b.adopted = true
	return nil
}

// codeContext is one context. Its kernel changes over restarts.
type codeContext struct {
	b         *box
	id        string
	lang      Language
	cwd       string
	env       map[string]string
	isDefault bool
	created   time.Time
	// slot is held (a value in it) while a cell, start or restart runs.
	slot chan struct{}

	mu      sync.Mutex
	k       *kernel // nil when not started or dead
	gen     int     // kernels started so far (the tag's generation)
	count   int     // cells run
	dead    string  // why the last kernel died, "" if it did not
	deleted bool
}

func (c *codeContext) info() ContextInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := ContextInfo{
		ID: c.id, Language: c.lang, Cwd: c.cwd, Default: c.isDefault,
		ExecutionCount: c.count, CreatedAt: c.created, State: StateIdle,
	}
	switch {
	case len(c.slot) > 0:
		ci.State = StateBusy
	case c.k == nil && c.dead != "":
		ci.State, ci.Error = StateDead, c.dead
	}
	return ci
}

// tryAcquire takes the slot if it is free.
func (c *codeContext) tryAcquire() error {
	select {
	case c.slot <- struct{}{}:
		return nil
	default:
		return fmt.Errorf("context %s is running another cell; wait for it to end or interrupt it: %w", c.id, errdefs.ErrFailedPrecondition)
	}
}

// acquire waits for the slot.
func (c *codeContext) acquire(ctx context.Context) error {
	select {
	case c.slot <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("context %s is still busy: %w", c.id, ctxErr(ctx))
	}
}

func (c *codeContext) release() { <-c.slot }

// ensureStarted starts the kernel of a new context.
func (c *codeContext) ensureStarted(ctx context.Context) error {
	if err := c.tryAcquire(); err != nil {
		return err
	}
	defer c.release()
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k != nil {
		return nil
	}
	_, err := c.start(ctx)
	return err
}

// kernelExited records that k's stream ended.
func (c *codeContext) kernelExited(k *kernel, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.k == k {
		c.k = nil
		c.dead = reason
	}
}

// current returns the live kernel, or nil.
func (c *codeContext) current() *kernel {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.k
}

// restart kills the kernel and starts a new one.
func (c *codeContext) restart(ctx context.Context) error {
	c.mu.Lock()
	if c.deleted {
		c.mu.Unlock()
		return contextNotFound(c.id)
	}
	old := c.k
	c.mu.Unlock()
	if old != nil {
		old.kill()
	}
	// The running cell, if any, ends once it sees the kernel exit.
	wctx, cancel := context.WithTimeout(ctx, c.b.m.lim.InterruptGrace+10*time.Second)
	defer cancel()
	if err := c.acquire(wctx); err != nil {
		return err
	}
	defer c.release()
	if k := c.current(); k != nil {
		k.kill()
		c.kernelExited(k, "restarted")
	}
	_, err := c.start(ctx)
	return err
}

// delete marks c deleted and kills its kernel.
func (c *codeContext) delete() {
	c.mu.Lock()
	c.deleted = true
	c.mu.Unlock()
	c.kill()
}

// kill kills the kernel, if any.
func (c *codeContext) kill() {
	if k := c.current(); k != nil {
		k.kill()
	}
}

// interruptCell interrupts the running cell, if any.
func (c *codeContext) interruptCell(ctx context.Context) (bool, error) {
	k := c.current()
	if k == nil {
		return false, nil
	}
	cl := k.currentCell()
	if cl == nil {
		return false, nil
	}
	cl.requestInterrupt()
	if err := k.interrupt(ctx); err != nil {
		return true, err
	}
	return true, nil
}

// run runs one cell (see Manager.Run).
func (c *codeContext) run(ctx context.Context, req RunRequest, emit func(Event) error) error {
	if err := c.tryAcquire(); err != nil {
		return err
	}
	var once sync.Once
	release := func() { once.Do(c.release) }
	defer release()
	c.mu.Lock()
	if c.deleted {
		c.mu.Unlock()
		return contextNotFound(c.id)
	}
	k, dead := c.k, c.dead
	c.mu.Unlock()
	if k == nil {
		if dead != "" && !c.isDefault {
			return fmt.Errorf("context %s is not running (%s); restart it: %w", c.id, dead, errdefs.ErrFailedPrecondition)
		}
		var err error
		if k, err = c.start(ctx); err != nil {
			if c.isDefault && c.info().ExecutionCount == 0 {
				c.b.remove(c) // it never ran: it keeps no slot
			}
			return err
		}
	}
	c.mu.Lock()
	c.count++
	n := c.count
	c.mu.Unlock()
	return c.runCell(ctx, k, n, req, emit, release)
}

// ctxErr is the error class of a done context.
func ctxErr(ctx context.Context) error {
	if ctx.Err() == context.DeadlineExceeded {
		return errdefs.ErrTimeout
	}
	return errdefs.ErrCanceled
}
