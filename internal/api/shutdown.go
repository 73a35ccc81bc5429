package api

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The graceful stop (Handler.Shutdown). net/http's Server.Shutdown waits
// for requests in flight but not for hijacked connections (PTY sessions),
// and gives up on a request that outlasts its context without answering
// it; a request it leaves behind loses its audit outcome when the daemon
// closes the audit log. So the handler ends its own requests: sessions at
// once, the others once a grace period has passed, each through its
// ordinary failure path, which records the outcome (unavailable, with the
// reason in the message) and answers (a 503 JSON error, a stream's error
// line, a PTY's error frame), and Shutdown returns when the last one has.

// sessionRoutes are the routes whose requests last as long as the client
// wants: the graceful stop ends them at once rather than after its grace.
var sessionRoutes = map[string]bool{
	"/v1/sandboxes/{id}/pty":                    true,
	"/v1/sandboxes/{id}/processes/{pid}/output": true,
	portProxyPath:                               true, // a proxied WebSocket or event stream
}

// requests counts the requests being served, for Shutdown. After stop,
// enter refuses new ones.
type requests struct {
	mu      sync.Mutex
	n       int
	stopped bool
	idle    chan struct{} // closed once stopped and n is 0
}

func newRequests() *requests { return &requests{idle: make(chan struct{})} }

// enter counts a request in, or returns false once stop was called.
func (q *requests) enter() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.stopped {
		return false
	}
	q.n++
	return true
}

// leave counts a request out.
func (q *requests) leave() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.n--
	if q.stopped && q.n == 0 {
		close(q.idle)
	}
}

// stop refuses new requests and returns the channel closed once none is
// left.
func (q *requests) stop() <-chan struct{} {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.stopped {
		q.stopped = true
		if q.n == 0 {
			close(q.idle)
		}
	}
	return q.idle
}

// Shutdown stops the handler for the daemon's graceful stop: new requests
// are refused with 503 unavailable ("the server is shutting down"),
// /readyz answers 503, sessions (PTY, followed process output) are ended
// at once, and the other requests in flight get grace to finish before
// they are ended too. Every request ended this way records its outcome
// (unavailable) and gets an answer saying why; an exec's or a PTY's
// process is killed by the end of its agent stream, the sandbox keeps
// running. Shutdown returns once no request is left, or with an error
// wrapping errdefs.ErrTimeout when ctx ends first. Call it before (or
// alongside) http.Server.Shutdown, which does not wait for hijacked
// connections.
func (h *Handler) Shutdown(ctx context.Context, grace time.Duration) error {
	idle := h.reqs.stop()
	h.drain(errShuttingDown)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-idle:
		return nil
	case <-t.C:
	case <-ctx.Done():
	}
	h.stop(errShuttingDown)
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		h.reqs.mu.Lock()
		n := h.reqs.n
		h.reqs.mu.Unlock()
		return fmt.Errorf("api shutdown: %d requests still in flight: %w", n, errdefs.ErrTimeout)
	}
}
