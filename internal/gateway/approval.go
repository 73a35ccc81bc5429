package gateway

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Bounds and defaults of the approval queue.
const (
	// DefaultApprovalTimeout is how long a call waits for a decision
	// (ApprovalsConfig.Timeout 0); MaxApprovalTimeout caps it.
	DefaultApprovalTimeout = 5 * time.Minute
	MaxApprovalTimeout     = time.Hour
	// DefaultMaxPendingApprovals caps one tenant's approvals pending at
	// once (ApprovalsConfig.MaxPending 0).
	DefaultMaxPendingApprovals = 100
	// ApprovalRetention is how long an ended approval (decided, timed
	// out or abandoned) stays visible; MaxEndedApprovals caps how many
	// are kept, all tenants together, the oldest dropped first.
	ApprovalRetention = time.Hour
	MaxEndedApprovals = 10000
	// MaxApprovalReason caps an approver's reason, in bytes.
	MaxApprovalReason = 1024
)

// The states of an approval (Approval.State).
const (
	ApprovalPending  = "pending"  // the call waits for a decision
	ApprovalApproved = "approved" // an approver let the call go on
	ApprovalDenied   = "denied"   // an approver refused it
	ApprovalExpired  = "expired"  // no decision in time: the call was denied
	ApprovalCanceled = "canceled" // the call ended (its caller went away) first
)

// Approval is one call of a tool that waits, or waited, for a person's
// decision. It is bound to exactly that call: deciding it releases only
// the call that asked, and Hash identifies the call's tenant, sandbox,
// tool and (redacted) arguments for the approver.
type Approval struct {
	// ID is "ap-" and 16 random lowercase base32 characters.
	ID      string
	Tenant  string
	Sandbox string
	// KeyID is the API key behind the calling sandbox.
	KeyID string
	Tool  string
	// Args are the call's arguments as records show them
	// (Governance.Redact applied).
	Args json.RawMessage
	// Hash is the hex SHA-256 of the tenant, sandbox, tool and the
	// canonical JSON of Args, each followed by a zero byte.
	Hash      string
	State     string
	CreatedAt time.Time
	ExpiresAt time.Time
	// DecidedAt, Approver (the deciding API key's ID) and Reason are set
	// once the approval ended; Approver is empty unless a person decided.
	DecidedAt time.Time
	Approver  string
	Reason    string
}

// ApprovalsConfig configures NewApprovals.
type ApprovalsConfig struct {
	// Timeout is how long a call waits for a decision before it is
	// denied (default DefaultApprovalTimeout, at most
	// MaxApprovalTimeout).
	Timeout time.Duration
	// MaxPending caps a tenant's pending approvals (default
	// DefaultMaxPendingApprovals); a call past it is denied at once.
	MaxPending int
	// Notify, if set, is told of each new approval, on the waiting
	// call's goroutine before it waits; it must return soon (the wait's
	// clock is already running).
	Notify func(Approval)
	// Now is the clock of the approvals' times (default time.Now). The
	// wait itself runs on a real timer.
	Now func() time.Time
}

// Approvals is an in-memory queue of approvals: Approve (an ApproveFunc)
// adds one and blocks its call until Decide decides it, it times out
// or the call's context ends. Pending approvals are lost when the
// process ends, which denies their calls. It is safe for concurrent use.
type Approvals struct {
	cfg ApprovalsConfig

	mu      sync.Mutex
	pending map[string]*pendingApproval // by ID
	count   map[string]int              // pending, by tenant
	ended   []Approval                  // in the order they ended
}

// pendingApproval is a pending approval and the signal its call waits
// on: done is closed once a decision is written into a.
type pendingApproval struct {
	a    Approval
	done chan struct{}
}

// NewApprovals returns an empty queue configured by cfg.
func NewApprovals(cfg ApprovalsConfig) (*Approvals, error) {
	switch {
	case cfg.Timeout < 0 || cfg.Timeout > MaxApprovalTimeout:
		return nil, fmt.Errorf("approvals: timeout %s is out of range (at most %s): %w", cfg.Timeout, MaxApprovalTimeout, errdefs.ErrInvalidArgument)
	case cfg.MaxPending < 0:
		return nil, fmt.Errorf("approvals: MaxPending is negative: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultApprovalTimeout
	}
	if cfg.MaxPending == 0 {
		cfg.MaxPending = DefaultMaxPendingApprovals
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Approvals{cfg: cfg, pending: map[string]*pendingApproval{}, count: map[string]int{}}, nil
}

var _ ApproveFunc = (*Approvals)(nil).Approve

// approvalID is lowercase base32 without padding: 10 random bytes make
// 16 characters.
var approvalID = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newApprovalID returns "ap-" and 16 random lowercase base32 characters.
func newApprovalID() string {
	var b [10]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "ap-" + approvalID.EncodeToString(b[:])
}

// CallHash is the hash that binds an approval to one call (Approval.Hash).
func CallHash(tenant, sandbox, tool string, args json.RawMessage) string {
	h := sha256.New()
	for _, s := range []string{tenant, sandbox, tool} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	h.Write(canonicalJSON(args))
	h.Write([]byte{0})
	return hex.EncodeToString(h.Sum(nil))
}

// canonicalJSON re-encodes a JSON value with object keys sorted and no
// insignificant space, numbers kept as written; what does not parse is
// used as it is.
func canonicalJSON(raw json.RawMessage) []byte {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return raw
	}
	out, err := json.Marshal(v) // sorts map keys
	if err != nil {
		return raw
	}
	return out
}

// Pending is how many approvals are pending, all tenants together.
func (q *Approvals) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.pending)
}

// Approve adds an approval for the call of t by c with args and waits
// for its end: it returns true once approved, false and the approver's
// reason once denied, and an error (class timeout) when no decision
// comes within the timeout, or the context's error when ctx ends first.
// A tenant with MaxPending approvals pending is refused at once (class
// resource exhausted).
func (q *Approvals) Approve(ctx context.Context, c Caller, t Tool, args json.RawMessage) (bool, string, error) {
	now := q.cfg.Now()
	p := &pendingApproval{
		a: Approval{
			ID: newApprovalID(), Tenant: c.Tenant, Sandbox: c.Sandbox, KeyID: c.KeyID, Tool: t.Name,
			Args: bytes.Clone(args), Hash: CallHash(c.Tenant, c.Sandbox, t.Name, args),
			State: ApprovalPending, CreatedAt: now, ExpiresAt: now.Add(q.cfg.Timeout),
		},
		done: make(chan struct{}),
	}
	q.mu.Lock()
	if q.count[c.Tenant] >= q.cfg.MaxPending {
		q.mu.Unlock()
		return false, "", errdefs.Publicf(errdefs.ErrResourceExhausted, "too many approvals pending (at most %d)", q.cfg.MaxPending)
	}
	q.pending[p.a.ID] = p
	q.count[c.Tenant]++
	a := p.a
	q.mu.Unlock()

	timer := time.NewTimer(q.cfg.Timeout)
	defer timer.Stop()
	if q.cfg.Notify != nil {
		q.cfg.Notify(a)
	}
	select {
	case <-p.done:
	case <-timer.C:
		if q.end(p, ApprovalExpired, fmt.Sprintf("approval timed out after %s", q.cfg.Timeout)) {
			return false, "", errdefs.Publicf(errdefs.ErrTimeout, "approval timed out after %s", q.cfg.Timeout)
		}
	case <-ctx.Done():
		if q.end(p, ApprovalCanceled, "the call ended before a decision") {
			return false, "", fmt.Errorf("approval %s: %w", a.ID, ctx.Err())
		}
	}
	// Decided (maybe just as the wait ended): the decision stands.
	<-p.done
	q.mu.Lock()
	defer q.mu.Unlock()
	return p.a.State == ApprovalApproved, p.a.Reason, nil
}

// end ends p, if it is still pending, with state and reason and no
// approver; it reports whether it did.
func (q *Approvals) end(p *pendingApproval, state, reason string) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if p.a.State != ApprovalPending {
		return false
	}
	q.finish(p, state, "", reason)
	return true
}

// finish ends pending p with a decision, moves it to the ended ones and
// wakes its call. q.mu is held.
func (q *Approvals) finish(p *pendingApproval, state, approver, reason string) {
	p.a.State, p.a.Approver, p.a.Reason, p.a.DecidedAt = state, approver, reason, q.cfg.Now()
	delete(q.pending, p.a.ID)
	if q.count[p.a.Tenant]--; q.count[p.a.Tenant] <= 0 {
		delete(q.count, p.a.Tenant)
	}
	q.ended = append(q.ended, p.a)
	q.prune()
	close(p.done)
}

// prune drops the ended approvals past ApprovalRetention or
// MaxEndedApprovals. q.mu is held.
func (q *Approvals) prune() {
	cut := q.cfg.Now().Add(-ApprovalRetention)
	n := 0
	for n < len(q.ended) && (len(q.ended)-n > MaxEndedApprovals || q.ended[n].DecidedAt.Before(cut)) {
		n++
	}
	if n > 0 {
		clear(q.ended[:n])
		q.ended = q.ended[n:]
	}
}

// List returns the tenant's approvals, pending and recently ended, the
// newest first.
func (q *Approvals) List(tenant string) []Approval {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.prune()
	var out []Approval
	for _, p := range q.pending {
		if p.a.Tenant == tenant {
			out = append(out, p.a)
		}
	}
	for _, a := range q.ended {
		if a.Tenant == tenant {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, func(a, b Approval) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), cmp.Compare(a.ID, b.ID))
	})
	return out
}

// Get returns the tenant's approval id; another tenant's, an unknown
// one and one ended longer ago than ApprovalRetention are not found.
func (q *Approvals) Get(tenant, id string) (Approval, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.prune()
	return q.lookup(tenant, id)
}

// lookup finds the tenant's approval id, pending or ended. q.mu is held.
func (q *Approvals) lookup(tenant, id string) (Approval, error) {
	if p, ok := q.pending[id]; ok && p.a.Tenant == tenant {
		return p.a, nil
	}
	for _, a := range q.ended {
		if a.ID == id && a.Tenant == tenant {
			return a, nil
		}
	}
	return Approval{}, errdefs.Publicf(errdefs.ErrNotFound, "approval %s not found", clip(id))
}

// Decide approves or denies the tenant's pending approval id on behalf
// of approver (an API key's ID), with reason (at most
// MaxApprovalReason bytes of UTF-8), and releases its call. It returns
// the approval as decided. Another tenant's or an unknown approval is
// not found; one that already ended is a failed precondition.
func (q *Approvals) Decide(tenant, id string, approve bool, approver, reason string) (Approval, error) {
	if len(reason) > MaxApprovalReason || !utf8.ValidString(reason) {
		return Approval{}, errdefs.Publicf(errdefs.ErrInvalidArgument, "reason must be UTF-8 of at most %d bytes", MaxApprovalReason)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.prune()
	p, ok := q.pending[id]
	if !ok || p.a.Tenant != tenant {
		a, err := q.lookup(tenant, id)
		if err != nil {
			return Approval{}, err
		}
		return Approval{}, errdefs.Publicf(errdefs.ErrFailedPrecondition, "approval %s is already %s", a.ID, a.State)
	}
	state := ApprovalDenied
	if approve {
		state = ApprovalApproved
	}
	q.finish(p, state, approver, reason)
	return p.a, nil
}
