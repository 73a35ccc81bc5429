package auth

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// LimiterOptions configures a Limiter.
type LimiterOptions struct {
	// Rate is the sustained number of requests per second each key may
	// make. Required (> 0).
	Rate float64
	// Burst is how many requests a key may make at once after being
	// idle. Required (>= 1).
	Burst int
	// IdleTTL is how long a key's state is kept after its last request.
	// It is raised to the time a bucket needs to refill (Burst/Rate),
	// so that forgetting an idle key never grants it more than a full
	// bucket, which it would have had anyway. Default 1 minute.
	IdleTTL time.Duration
	// MaxKeys caps the keys tracked. When it is reached, idle keys are
	// dropped first, then arbitrary ones (which then start again with a
	// full bucket). Default 100000.
	MaxKeys int
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Limiter rate-limits requests per API key with token buckets
// (golang.org/x/time/rate). Its memory is bounded by MaxKeys. Call it
// after authentication, with the Principal's KeyID, so that only real keys
// take space. It is safe for concurrent use.
type Limiter struct {
	opts      LimiterOptions
	mu        sync.Mutex
	keys      map[string]*limiterEntry
	lastSweep time.Time
}

type limiterEntry struct {
	lim  *rate.Limiter
	last time.Time
}

// NewLimiter returns a Limiter, or ErrInvalidArgument for bad options.
func NewLimiter(o LimiterOptions) (*Limiter, error) {
	if !(o.Rate > 0) || o.Rate > 1e9 || o.Burst < 1 || o.Burst > 1e9 {
		return nil, fmt.Errorf("rate limit %v/s burst %d: need rate > 0 and burst >= 1: %w", o.Rate, o.Burst, errdefs.ErrInvalidArgument)
	}
	if o.IdleTTL <= 0 {
		o.IdleTTL = time.Minute
	}
	if refill := time.Duration(float64(o.Burst) / o.Rate * float64(time.Second)); o.IdleTTL < refill {
		o.IdleTTL = refill
	}
	if o.MaxKeys <= 0 {
		o.MaxKeys = 100000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{opts: o, keys: map[string]*limiterEntry{}, lastSweep: o.Now()}, nil
}

// Allow reports whether the key may make one more request now, and
// counts it if so.
func (l *Limiter) Allow(keyID string) bool {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.keys[keyID]
	if !ok {
		if len(l.keys) >= l.opts.MaxKeys || now.Sub(l.lastSweep) >= l.opts.IdleTTL {
			l.sweepLocked(now)
		}
		e = &limiterEntry{lim: rate.NewLimiter(rate.Limit(l.opts.Rate), l.opts.Burst)}
		l.keys[keyID] = e
	}
	e.last = now
	return e.lim.AllowN(now, 1)
}

// sweepLocked forgets idle keys and, if still at MaxKeys, arbitrary ones
// down to 90% of it, so that a full map is not swept at every new key.
func (l *Limiter) sweepLocked(now time.Time) {
	l.lastSweep = now
	for id, e := range l.keys {
		if now.Sub(e.last) >= l.opts.IdleTTL {
			delete(l.keys, id)
		}
	}
	if len(l.keys) < l.opts.MaxKeys {
		return
	}
	for id := range l.keys {
		if len(l.keys) < l.opts.MaxKeys*9/10 || len(l.keys) == 0 {
			break
		}
		delete(l.keys, id)
	}
}

// Len returns the number of keys tracked.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
