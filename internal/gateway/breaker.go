package gateway

import (
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// breakers keeps one circuit breaker per tool (per tenant and name),
// shared by every sandbox that calls it: after failures in a row of its
// upstream (no answer, a timeout, a 5xx status) it opens, and calls
// are refused without reaching the upstream until it has been open for
// a while; then one call tests the upstream, and closes it again if it
// succeeds.
type breakers struct {
	mu       sync.Mutex
	m        map[string]*breaker
	failures uint32
	open     time.Duration
}

type breaker struct {
	cb       *gobreaker.CircuitBreaker[answer]
	openedAt atomic.Int64 // unix nanoseconds of the last opening
	open     time.Duration
}

// maxBreakers caps the breakers kept; past it, those closed are dropped
// (a closed breaker holds only its count of recent failures).
const maxBreakers = 10000

func newBreakers(failures int, open time.Duration) *breakers {
	return &breakers{m: make(map[string]*breaker), failures: uint32(failures), open: open}
}

// get returns the tool's breaker, made on first use.
func (bs *breakers) get(tenant, tool string) *breaker {
	key := tenant + "\x00" + tool
	bs.mu.Lock()
	defer bs.mu.Unlock()
	if b := bs.m[key]; b != nil {
		return b
	}
	if len(bs.m) >= maxBreakers {
		for k, b := range bs.m {
			if b.cb.State() == gobreaker.StateClosed {
				delete(bs.m, k)
			}
		}
	}
	b := &breaker{open: bs.open}
	b.cb = gobreaker.NewCircuitBreaker[answer](gobreaker.Settings{
		Name:        tool,
		MaxRequests: 1,
		Timeout:     bs.open,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= bs.failures },
		OnStateChange: func(_ string, _, to gobreaker.State) {
			if to == gobreaker.StateOpen {
				b.openedAt.Store(time.Now().UnixNano())
			}
		},
		IsSuccessful: func(err error) bool {
			var se *stageError
			return err == nil || !errors.As(err, &se) || !se.fault
		},
		IsExcluded: func(err error) bool {
			var se *stageError
			return errors.As(err, &se) && se.ignore
		},
	})
	bs.m[key] = b
	return b
}

// execute runs req unless the breaker is open (or half-open and already
// testing the upstream), in which case the call is refused at the
// circuit stage with a hint of when to retry.
func (b *breaker) execute(tool string, req func() (answer, error)) (answer, error) {
	a, err := b.cb.Execute(req)
	switch {
	case errors.Is(err, gobreaker.ErrOpenState):
		left := b.open - time.Since(time.Unix(0, b.openedAt.Load()))
		return a, refuse(StageCircuit, errdefs.ErrUnavailable,
			"tool %s's upstream is failing; retry after %d s", tool, max(1, int(math.Ceil(left.Seconds()))))
	case errors.Is(err, gobreaker.ErrTooManyRequests):
		return a, refuse(StageCircuit, errdefs.ErrUnavailable,
			"tool %s's upstream is failing and being tested again; retry after 1 s", tool)
	}
	return a, err
}
