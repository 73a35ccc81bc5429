package gateway

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// budgets keeps each sandbox's counters per tool: its calls so far, its
// calls in flight and its rate limiter. Memory is bounded: a sandbox has
// counters only for the tools granted to it (at most MaxToolsetTools
// names), Forget drops a sandbox's, and at most max sandboxes are kept
// (past it, the one idle longest without a call in flight is dropped).
type budgets struct {
	mu        sync.Mutex
	max       int
	sandboxes map[string]*sandboxBudget
	now       func() time.Time
}

type sandboxBudget struct {
	lastUsed time.Time
	inFlight int // over all its tools, for eviction
	tools    map[string]*toolBudget
}

type toolBudget struct {
	calls    int64
	inFlight int
	perMin   int
	limiter  *rate.Limiter // nil when perMin is 0
}

func newBudgets(max int) *budgets {
	return &budgets{max: max, sandboxes: make(map[string]*sandboxBudget), now: time.Now}
}

// calls returns how many calls of tool the sandbox has made (that
// passed the budget stage).
func (b *budgets) calls(sandbox, tool string) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s := b.sandboxes[sandbox]; s != nil {
		if t := s.tools[tool]; t != nil {
			return t.calls
		}
	}
	return 0
}

// forget drops the sandbox's counters.
func (b *budgets) forget(sandbox string) {
	b.mu.Lock()
	delete(b.sandboxes, sandbox)
	b.mu.Unlock()
}

// acquire counts one call of tool by the sandbox against the tool's
// budgets: its count per sandbox, its calls in flight and its rate, in
// that order. It returns the function that ends the call's place in
// flight (never nil) and, when a budget is spent, the refusal. A refused
// call takes nothing unless dry is set (the tool's dry-run mode), in
// which case it is counted as if it had passed.
func (b *budgets) acquire(sandbox, tool string, g Governance, defaultMax int, dry bool) (func(), *stageError) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	s := b.sandboxes[sandbox]
	if s == nil {
		if len(b.sandboxes) >= b.max && !b.evictLocked() {
			return func() {}, refuse(StageBudget, errdefs.ErrResourceExhausted,
				"the gateway is serving calls for %d sandboxes, its limit; retry later", b.max)
		}
		s = &sandboxBudget{tools: make(map[string]*toolBudget)}
		b.sandboxes[sandbox] = s
	}
	s.lastUsed = now
	t := s.tools[tool]
	if t == nil {
		t = &toolBudget{}
		s.tools[tool] = t
	}
	if t.perMin != g.RatePerMinute { // new, or the tool's rate changed
		t.perMin, t.limiter = g.RatePerMinute, nil
		if g.RatePerMinute > 0 {
			t.limiter = rate.NewLimiter(rate.Limit(float64(g.RatePerMinute)/60), g.RatePerMinute)
		}
	}
	maxInFlight := g.MaxConcurrent
	if maxInFlight == 0 {
		maxInFlight = defaultMax
	}
	var refusal *stageError
	switch {
	case g.MaxCallsPerSandbox > 0 && t.calls >= int64(g.MaxCallsPerSandbox):
		refusal = refuse(StageBudget, errdefs.ErrResourceExhausted,
			"tool %s has been called %d times by this sandbox, its limit", tool, g.MaxCallsPerSandbox)
	case t.inFlight >= maxInFlight:
		refusal = refuse(StageBudget, errdefs.ErrResourceExhausted,
			"tool %s already has %d calls in flight from this sandbox, its limit; retry when one ends", tool, maxInFlight)
	case t.limiter != nil:
		r := t.limiter.ReserveN(now, 1)
		if d := r.DelayFrom(now); !r.OK() || d > 0 {
			r.CancelAt(now)
			refusal = refuse(StageBudget, errdefs.ErrResourceExhausted,
				"tool %s may be called %d times a minute by this sandbox; retry after %d s", tool, g.RatePerMinute, max(1, int(math.Ceil(d.Seconds()))))
		}
	}
	if refusal != nil && !dry {
		return func() {}, refusal
	}
	t.calls++
	t.inFlight++
	s.inFlight++
	return func() {
		b.mu.Lock()
		t.inFlight--
		s.inFlight--
		b.mu.Unlock()
	}, refusal
}

// evictLocked drops the counters of the sandbox idle longest that has no
// call in flight; false when every sandbox has one.
func (b *budgets) evictLocked() bool {
	var oldest string
	var at time.Time
	for id, s := range b.sandboxes {
		if s.inFlight == 0 && (oldest == "" || s.lastUsed.Before(at)) {
			oldest, at = id, s.lastUsed
		}
	}
	if oldest == "" {
		return false
	}
	delete(b.sandboxes, oldest)
	return true
}
