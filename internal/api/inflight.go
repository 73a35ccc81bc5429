package api

import (
	"fmt"
	"strconv"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Admission of the requests that hold an agent stream and buffer its
// output in the daemon: buffered and streamed execs, PTY sessions and
// code cells. Each one in flight takes a slot of its sandbox
// (Limits.MaxInflightPerSandbox) and of its API key
// (Limits.MaxInflightPerKey), and reserves, daemon-wide, the most memory
// it can hold (its cost) from Limits.InflightMemory. A request that finds
// any of the three used up is refused at once with 429
// resource_exhausted and Retry-After: 1; nothing waits in a queue. The
// reservation is the request's worst case, not what it ends up holding,
// so the output the daemon holds for requests in flight never exceeds
// InflightMemory, whatever the sandboxes print.

// Costs of the kinds of requests in flight, besides a buffered exec's
// output caps (see Handler.execCost).
var (
	// agentStreamWindow is what the agent may send on one stream that the
	// daemon has not read yet: a stream whose client reads slowly holds
	// up to that much in the daemon.
	agentStreamWindow = agentclient.StreamWindow()
	// requestOverhead covers, per request, a message being decoded, one
	// encoded output line or response chunk, and the goroutines' stacks.
	requestOverhead int64 = 256 << 10
	// streamCost is the cost of an exec stream or a PTY session.
	streamCost = agentStreamWindow + requestOverhead
)

// codeCellCost is the cost of a code cell: the interpreter's default caps
// per cell (1 MiB of output, 12 MiB of results, see interp.Limits), the
// JSON response built from them and the kernel stream's window.
const codeCellCost int64 = 20 << 20

// inflight counts the requests in flight per sandbox and per key and the
// memory they reserve. It is safe for concurrent use.
type inflight struct {
	perSandbox, perKey int
	budget             int64

	mu        sync.Mutex
	reserved  int64
	sandboxes map[string]int
	keys      map[string]int
}

func newInflight(lim Limits) *inflight {
	return &inflight{
		perSandbox: lim.MaxInflightPerSandbox,
		perKey:     lim.MaxInflightPerKey,
		budget:     lim.InflightMemory,
		sandboxes:  map[string]int{},
		keys:       map[string]int{},
	}
}

// acquire admits one request on sandboxID by keyID that may hold cost
// bytes, or refuses it with an error wrapping
// errdefs.ErrResourceExhausted. The returned release must be called
// once, when the request no longer holds its stream or output.
func (f *inflight) acquire(sandboxID, keyID string, cost int64) (release func(), err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case f.sandboxes[sandboxID] >= f.perSandbox:
		return nil, fmt.Errorf("sandbox %s already has %d execs, streams, PTY sessions and code cells in flight, its limit; retry when one has finished: %w",
			sandboxID, f.perSandbox, errdefs.ErrResourceExhausted)
	case f.keys[keyID] >= f.perKey:
		return nil, fmt.Errorf("this API key already has %d execs, streams, PTY sessions and code cells in flight, its limit; retry when one has finished: %w",
			f.perKey, errdefs.ErrResourceExhausted)
	case f.reserved+cost > f.budget:
		return nil, fmt.Errorf("the server holds as much exec output in flight as it allows (%d MiB); retry shortly: %w",
			f.budget>>20, errdefs.ErrResourceExhausted)
	}
	f.sandboxes[sandboxID]++
	f.keys[keyID]++
	f.reserved += cost
	var once sync.Once
	return func() { once.Do(func() { f.release(sandboxID, keyID, cost) }) }, nil
}

func (f *inflight) release(sandboxID, keyID string, cost int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reserved -= cost
	if f.sandboxes[sandboxID]--; f.sandboxes[sandboxID] <= 0 {
		delete(f.sandboxes, sandboxID)
	}
	if f.keys[keyID]--; f.keys[keyID] <= 0 {
		delete(f.keys, keyID)
	}
}

// usage returns the requests in flight daemon-wide and the memory they
// reserve.
func (f *inflight) usage() (requests int, reserved int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, n := range f.sandboxes {
		requests += n
	}
	return requests, f.reserved
}

// admit admits the call's request on sandboxID with cost (see inflight).
// A refusal carries Retry-After: 1, since requests in flight end on their
// own.
func (c *call) admit(sandboxID string, cost int64) (release func(), err error) {
	release, err = c.h.inflight.acquire(sandboxID, c.p.KeyID, cost)
	if err != nil {
		c.w.Header().Set("Retry-After", strconv.Itoa(1))
		return nil, err
	}
	return release, nil
}

// execCost is the cost of a buffered exec: both output buffers full (the
// agent forwards at most MaxOutputBytes of each stream, so its stream
// window holds no more than that), half a buffer more while one of them
// grows (see capBuffer), and the request's overhead. The response is
// encoded in small chunks (see writeExecResult). An exec also reserves
// what its decoded request holds (execRequest.size).
func (h *Handler) execCost() int64 {
	return 5*int64(h.lim.MaxOutputBytes)/2 + requestOverhead
}
