package auth

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func TestLimiterRateAndBurst(t *testing.T) {
	clk := newClock()
	l, err := NewLimiter(LimiterOptions{Rate: 10, Burst: 5, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	allowed := 0
	for range 20 {
		if l.Allow("k1") {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("burst: %d allowed, want 5", allowed)
	}
	if !l.Allow("k2") {
		t.Error("another key is limited by k1")
	}
	clk.Add(100 * time.Millisecond) // one token at 10/s
	if !l.Allow("k1") || l.Allow("k1") {
		t.Error("refill after 100ms is not exactly one request")
	}
	clk.Add(time.Hour)
	allowed = 0
	for range 20 {
		if l.Allow("k1") {
			allowed++
		}
	}
	if allowed != 5 {
		t.Errorf("after idle: %d allowed, want 5 (a full bucket, no more)", allowed)
	}
}

func TestLimiterEvictsIdleKeys(t *testing.T) {
	clk := newClock()
	l, _ := NewLimiter(LimiterOptions{Rate: 1, Burst: 2, IdleTTL: time.Second, Now: clk.Now})
	for i := range 100 {
		l.Allow(fmt.Sprint("old", i))
	}
	if l.Len() != 100 {
		t.Fatalf("len = %d", l.Len())
	}
	// IdleTTL is raised to the refill time (2 s): after 1.5 s the keys
	// are kept.
	clk.Add(1500 * time.Millisecond)
	l.Allow("new1")
	if l.Len() != 101 {
		t.Errorf("keys dropped before their bucket refilled: len %d", l.Len())
	}
	clk.Add(time.Second)
	l.Allow("new2")
	if l.Len() != 2 {
		t.Errorf("idle keys kept: len %d, want 2", l.Len())
	}
}

func TestLimiterMaxKeys(t *testing.T) {
	clk := newClock()
	l, _ := NewLimiter(LimiterOptions{Rate: 1, Burst: 1, MaxKeys: 50, Now: clk.Now})
	for i := range 1000 {
		l.Allow(fmt.Sprint("k", i))
		if n := l.Len(); n > 50 {
			t.Fatalf("len %d exceeds MaxKeys", n)
		}
	}
	// The key just seen is still limited.
	if l.Allow("k999") {
		t.Error("the most recent key was forgotten")
	}
}

func TestLimiterOptions(t *testing.T) {
	for _, o := range []LimiterOptions{{}, {Rate: 1}, {Burst: 1}, {Rate: -1, Burst: 1}, {Rate: 1, Burst: -1}} {
		if _, err := NewLimiter(o); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewLimiter(%+v) = %v", o, err)
		}
	}
}

func TestLimiterConcurrent(t *testing.T) {
	l, _ := NewLimiter(LimiterOptions{Rate: 0.001, Burst: 100})
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 8 {
		wg.Go(func() {
			for range 50 {
				if l.Allow("k") {
					mu.Lock()
					allowed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if allowed != 100 {
		t.Errorf("%d allowed, want the burst of 100", allowed)
	}
}
