package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Bounds of the relay of caller-executed tools.
const (
	// DefaultMaxRelayed caps the caller-executed calls waiting at once,
	// all sandboxes together (RelayConfig.MaxPending 0).
	DefaultMaxRelayed = 4096
	// MaxRelayError caps the error message a caller answers with, in
	// bytes.
	MaxRelayError = 4096
)

// RelayedCall is one call of a caller-executed tool (UpstreamCaller),
// waiting for the program's caller to run the tool and answer it. It
// passed every stage of the pipeline before the upstream: the caller
// only runs it.
type RelayedCall struct {
	// ID is "tc-" and 16 random lowercase base32 characters.
	ID      string
	Tenant  string
	Sandbox string
	Tool    string
	// Args are the call's validated arguments, unredacted: the caller
	// needs them to run the tool.
	Args      json.RawMessage
	CreatedAt time.Time
	// ExpiresAt is when the call gives up waiting (the tool's timeout).
	ExpiresAt time.Time
}

// RelayConfig configures NewRelay.
type RelayConfig struct {
	// MaxPending caps the calls waiting at once (default
	// DefaultMaxRelayed); a call past it fails at once.
	MaxPending int
	// MaxOutputBytes caps an answer's output (default
	// DefaultMaxOutputBytes).
	MaxOutputBytes int
}

// Relay hands the calls of caller-executed tools to the program's
// caller and waits for the caller's answers: Execute (the pipeline's
// upstream stage for such tools) adds a call and blocks until Answer
// answers it, its timeout passes or its context ends. Callers find the
// calls with Pending and learn of new ones with Subscribe. Everything is
// confined to a tenant and a sandbox: a call is visible to, and
// answerable by, only a caller naming both. It is safe for concurrent
// use.
type Relay struct {
	cfg RelayConfig

	mu      sync.Mutex
	pending map[string]*relayed                   // by ID
	subs    map[string]map[chan struct{}]struct{} // by sandbox
}

// relayed is a waiting call and its answer: done is closed once out or
// errMsg is set.
type relayed struct {
	c      RelayedCall
	done   chan struct{}
	out    json.RawMessage
	errMsg string
}

// NewRelay returns an empty relay configured by cfg.
func NewRelay(cfg RelayConfig) (*Relay, error) {
	if cfg.MaxPending < 0 || cfg.MaxOutputBytes < 0 {
		return nil, fmt.Errorf("relay: a negative bound: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxRelayed
	}
	if cfg.MaxOutputBytes == 0 {
		cfg.MaxOutputBytes = DefaultMaxOutputBytes
	}
	return &Relay{cfg: cfg, pending: map[string]*relayed{}, subs: map[string]map[chan struct{}]struct{}{}}, nil
}

// newRelayID returns "tc-" and 16 random lowercase base32 characters.
func newRelayID() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "tc-" + approvalID.EncodeToString(b[:])
}

// Execute relays the call of tool by c with args (validated JSON) to
// the caller and waits up to timeout for its answer. It returns the
// caller's output, or a stage error: the caller's error (class failed
// precondition, its message quoted), no answer in time (class timeout)
// or too many calls waiting (class resource exhausted). When ctx ends
// first the call is withdrawn (class canceled).
func (r *Relay) Execute(ctx context.Context, c Caller, tool string, args json.RawMessage, timeout time.Duration) (json.RawMessage, error) {
	now := time.Now()
	p := &relayed{
		c: RelayedCall{
			ID: newRelayID(), Tenant: c.Tenant, Sandbox: c.Sandbox, Tool: tool,
			Args: bytes.Clone(args), CreatedAt: now, ExpiresAt: now.Add(timeout),
		},
		done: make(chan struct{}),
	}
	r.mu.Lock()
	if len(r.pending) >= r.cfg.MaxPending {
		r.mu.Unlock()
		return nil, failure(StageUpstream, errdefs.ErrResourceExhausted, "too many caller-executed calls are waiting (at most %d)", r.cfg.MaxPending)
	}
	r.pending[p.c.ID] = p
	r.notifyLocked(c.Sandbox)
	r.mu.Unlock()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-p.done:
	case <-timer.C:
		if r.withdraw(p) {
			return nil, failure(StageUpstream, errdefs.ErrTimeout, "tool %s is caller-executed, and its caller did not answer within %s", tool, timeout)
		}
	case <-ctx.Done():
		if r.withdraw(p) {
			e := failure(StageUpstream, errdefs.ErrCanceled, "the call of tool %s was canceled before its caller answered", tool)
			e.ignore = true
			return nil, e
		}
	}
	<-p.done // answered, maybe just as the wait ended: the answer stands
	if p.out == nil {
		return nil, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s failed at its caller: %s", tool, p.errMsg)
	}
	return p.out, nil
}

// withdraw removes p if it still waits; it reports whether it did.
func (r *Relay) withdraw(p *relayed) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.pending[p.c.ID]; !ok {
		return false
	}
	delete(r.pending, p.c.ID)
	close(p.done)
	return true
}

// notifyLocked wakes the subscribers of sandbox. r.mu is held.
func (r *Relay) notifyLocked(sandbox string) {
	for ch := range r.subs[sandbox] {
		select {
		case ch <- struct{}{}:
		default: // already signalled
		}
	}
}

// Pending returns the calls of the tenant's sandbox that wait for an
// answer, the oldest first.
func (r *Relay) Pending(tenant, sandbox string) []RelayedCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []RelayedCall
	for _, p := range r.pending {
		if p.c.Tenant == tenant && p.c.Sandbox == sandbox {
			out = append(out, p.c)
		}
	}
	slices.SortFunc(out, func(a, b RelayedCall) int {
		return cmp.Or(a.CreatedAt.Compare(b.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Subscribe returns a channel that receives a value (coalesced: at most
// one is buffered) whenever a call of sandbox starts waiting, and a
// function that ends the subscription. Subscribers read Pending after
// each signal; a call is never missed, only signals merged.
func (r *Relay) Subscribe(sandbox string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	r.mu.Lock()
	if r.subs[sandbox] == nil {
		r.subs[sandbox] = map[chan struct{}]struct{}{}
	}
	r.subs[sandbox][ch] = struct{}{}
	r.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			r.mu.Lock()
			defer r.mu.Unlock()
			delete(r.subs[sandbox], ch)
			if len(r.subs[sandbox]) == 0 {
				delete(r.subs, sandbox)
			}
		})
	}
}

// Answer answers the tenant's sandbox's waiting call id, with output (a
// JSON value, at most RelayConfig.MaxOutputBytes) when the tool ran or
// errMsg (UTF-8, at most MaxRelayError bytes) when it failed: exactly
// one of them. A call of another tenant or sandbox, an unknown one and
// one no longer waiting (answered, timed out or withdrawn) are not
// found.
func (r *Relay) Answer(tenant, sandbox, id string, output json.RawMessage, errMsg string) error {
	switch {
	case len(output) == 0 && errMsg == "":
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "an answer needs an output or an error")
	case len(output) > 0 && errMsg != "":
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "an answer has an output or an error, not both")
	case len(output) > r.cfg.MaxOutputBytes:
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "the output is %d bytes, over the limit of %d", len(output), r.cfg.MaxOutputBytes)
	case len(output) > 0 && !json.Valid(output):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "the output is not valid JSON")
	case len(errMsg) > MaxRelayError || !utf8.ValidString(errMsg):
		return errdefs.Publicf(errdefs.ErrInvalidArgument, "the error must be UTF-8 of at most %d bytes", MaxRelayError)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, ok := r.pending[id]
	if !ok || p.c.Tenant != tenant || p.c.Sandbox != sandbox {
		return errdefs.Publicf(errdefs.ErrNotFound, "tool call %s is not waiting for an answer", clip(id))
	}
	delete(r.pending, id)
	if len(output) > 0 {
		p.out = bytes.Clone(output)
	} else {
		p.errMsg = errMsg
	}
	close(p.done)
	return nil
}
