// Package inflight holds what the tool executors (internal/toolexec/*)
// bound their requests with: they are served beside the API, in the
// daemon's process but outside the API's handler, so they count what
// they hold themselves. Slot takes a slot of a semaphore channel, Tenants
// caps one tenant's requests in flight, and BodyDeadline bounds the
// arrival of a request's body, as the API's slow-body guard does for its
// own routes.
package inflight

import (
	"context"
	"net/http"
	"sync"
	"time"
)

// Slot takes one of sem's slots, waiting while ctx lasts; the function
// returned gives it back.
func Slot(ctx context.Context, sem chan struct{}) (func(), error) {
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Tenants counts the requests in flight per tenant, at most Max each, so
// that one tenant's slow requests (a command that runs for an hour)
// cannot hold every slot of a shared cap and refuse every other tenant.
type Tenants struct {
	Max int
	mu  sync.Mutex
	n   map[string]int
}

// Take takes one of tenant's slots; false when it has none left. done
// gives it back.
func (t *Tenants) Take(tenant string) (done func(), ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.n == nil {
		t.n = map[string]int{}
	}
	if t.n[tenant] >= t.Max {
		return nil, false
	}
	t.n[tenant]++
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if t.n[tenant]--; t.n[tenant] == 0 {
			delete(t.n, tenant)
		}
	}, true
}

// BodyDeadline sets w's read deadline to d from now and returns the
// function that clears it once the body is read (a writer that has none,
// as in tests, is left as it is). Set first thing, it bounds both the
// body a handler decodes and the rest the server drains after an early
// answer (an invalid key's 401 waits for that).
func BodyDeadline(w http.ResponseWriter, d time.Duration) (clear func()) {
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return func() {}
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}) }
}
