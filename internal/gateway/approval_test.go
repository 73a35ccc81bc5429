package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// approveResult is what one Approve returned.
type approveResult struct {
	ok     bool
	reason string
	err    error
}

// startApprove runs q.Approve for a call of tool by sandbox of tenant in
// the background.
func startApprove(ctx context.Context, q *Approvals, tenant, sandbox, tool, args string) <-chan approveResult {
	ch := make(chan approveResult, 1)
	go func() {
		ok, reason, err := q.Approve(ctx, Caller{Tenant: tenant, Sandbox: sandbox, KeyID: "k-1"}, Tool{Name: tool}, json.RawMessage(args))
		ch <- approveResult{ok, reason, err}
	}()
	return ch
}

// waitPending waits until tenant has n pending approvals and returns them.
func waitPending(t *testing.T, q *Approvals, tenant string, n int) []Approval {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var out []Approval
		for _, a := range q.List(tenant) {
			if a.State == ApprovalPending {
				out = append(out, a)
			}
		}
		if len(out) == n {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d approvals pending for %s, want %d", len(out), tenant, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

func result(t *testing.T, ch <-chan approveResult) approveResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("Approve did not return")
		return approveResult{}
	}
}

func newTestApprovals(t *testing.T, cfg ApprovalsConfig) *Approvals {
	t.Helper()
	q, err := NewApprovals(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// TestApprovalApproveDeny: a decision releases the waiting call with
// it, records the approver and reason, and stays visible.
func TestApprovalApproveDeny(t *testing.T) {
	var notified []Approval
	var mu sync.Mutex
	q := newTestApprovals(t, ApprovalsConfig{Notify: func(a Approval) { mu.Lock(); notified = append(notified, a); mu.Unlock() }})
	ctx := context.Background()

	ch := startApprove(ctx, q, "t1", "sb-1", "pay", `{"amount":5,"to":"bob"}`)
	p := waitPending(t, q, "t1", 1)[0]
	if !strings.HasPrefix(p.ID, "ap-") || len(p.ID) != 19 || p.Sandbox != "sb-1" || p.KeyID != "k-1" || p.Tool != "pay" ||
		string(p.Args) != `{"amount":5,"to":"bob"}` || p.ExpiresAt.Sub(p.CreatedAt) != DefaultApprovalTimeout {
		t.Errorf("pending = %+v", p)
	}
	got, err := q.Decide("t1", p.ID, true, "k-approver", "looks right")
	if err != nil || got.State != ApprovalApproved || got.Approver != "k-approver" || got.Reason != "looks right" || got.DecidedAt.IsZero() {
		t.Fatalf("Decide = %+v, %v", got, err)
	}
	if r := result(t, ch); !r.ok || r.err != nil || r.reason != "looks right" {
		t.Errorf("approved call = %+v", r)
	}

	ch = startApprove(ctx, q, "t1", "sb-1", "pay", `{"amount":500}`)
	p = waitPending(t, q, "t1", 1)[0]
	if _, err := q.Decide("t1", p.ID, false, "k-approver", "too much"); err != nil {
		t.Fatal(err)
	}
	if r := result(t, ch); r.ok || r.err != nil || r.reason != "too much" {
		t.Errorf("denied call = %+v", r)
	}
	if a, err := q.Get("t1", p.ID); err != nil || a.State != ApprovalDenied || a.Approver != "k-approver" {
		t.Errorf("Get denied = %+v, %v", a, err)
	}
	if l := q.List("t1"); len(l) != 2 || l[0].ID != p.ID {
		t.Errorf("List = %+v, want both, the newest first", l)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notified) != 2 || notified[1].ID != p.ID || notified[1].State != ApprovalPending {
		t.Errorf("notified = %+v", notified)
	}
}

// TestApprovalTimeout: no decision in time denies the call with a
// timeout, and the approval reads expired and cannot be decided.
func TestApprovalTimeout(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{Timeout: 30 * time.Millisecond})
	r := result(t, startApprove(context.Background(), q, "t1", "sb-1", "pay", `{}`))
	if r.ok || !errors.Is(r.err, errdefs.ErrTimeout) || !strings.Contains(r.err.Error(), "approval timed out after 30ms") {
		t.Fatalf("timed out call = %+v", r)
	}
	l := q.List("t1")
	if len(l) != 1 || l[0].State != ApprovalExpired || l[0].Approver != "" {
		t.Fatalf("List = %+v", l)
	}
	if _, err := q.Decide("t1", l[0].ID, true, "k", ""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Decide expired = %v, want failed precondition", err)
	}
	if len(q.pending) != 0 || len(q.count) != 0 {
		t.Errorf("left pending %v counts %v", q.pending, q.count)
	}
}

// TestApprovalContextEnds: the call's context ending ends the wait and
// the approval (canceled), which can no longer be approved.
func TestApprovalContextEnds(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := startApprove(ctx, q, "t1", "sb-1", "pay", `{}`)
	p := waitPending(t, q, "t1", 1)[0]
	cancel()
	if r := result(t, ch); r.ok || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("canceled call = %+v", r)
	}
	if a, _ := q.Get("t1", p.ID); a.State != ApprovalCanceled {
		t.Errorf("state = %q, want canceled", a.State)
	}
	if _, err := q.Decide("t1", p.ID, true, "k", ""); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Decide canceled = %v, want failed precondition", err)
	}
}

// TestApprovalTenants: another tenant neither sees nor decides an
// approval, and its attempts read like an unknown ID.
func TestApprovalTenants(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{})
	ch := startApprove(context.Background(), q, "t1", "sb-1", "pay", `{}`)
	p := waitPending(t, q, "t1", 1)[0]
	if l := q.List("t2"); len(l) != 0 {
		t.Errorf("t2 lists %+v", l)
	}
	for _, id := range []string{p.ID, "ap-aaaaaaaaaaaaaaaa"} {
		if _, err := q.Get("t2", id); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("t2 Get %s = %v, want not found", id, err)
		}
		if _, err := q.Decide("t2", id, true, "k", ""); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("t2 Decide %s = %v, want not found", id, err)
		}
	}
	if a, _ := q.Get("t1", p.ID); a.State != ApprovalPending {
		t.Fatalf("after t2's tries: %+v", a)
	}
	if _, err := q.Decide("t1", p.ID, false, "k", ""); err != nil {
		t.Fatal(err)
	}
	result(t, ch)
	if _, err := q.Decide("t2", p.ID, true, "k", ""); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("t2 Decide of a decided one = %v, want not found", err)
	}
}

// TestApprovalDecideTwice: the first decision stands; a second is a
// failed precondition naming the state.
func TestApprovalDecideTwice(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{})
	ch := startApprove(context.Background(), q, "t1", "sb-1", "pay", `{}`)
	p := waitPending(t, q, "t1", 1)[0]
	if _, err := q.Decide("t1", p.ID, false, "k1", "no"); err != nil {
		t.Fatal(err)
	}
	_, err := q.Decide("t1", p.ID, true, "k2", "yes")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "already denied") {
		t.Errorf("second Decide = %v", err)
	}
	if r := result(t, ch); r.ok {
		t.Error("the second decision changed the first")
	}
	if a, _ := q.Get("t1", p.ID); a.Approver != "k1" {
		t.Errorf("approver = %q", a.Approver)
	}
	if _, err := q.Decide("t1", p.ID, true, "k", strings.Repeat("x", MaxApprovalReason+1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("long reason = %v", err)
	}
}

// TestApprovalCap: past MaxPending, a tenant's call is refused at once;
// other tenants are not affected.
func TestApprovalCap(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{MaxPending: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a, b := startApprove(ctx, q, "t1", "sb-1", "pay", `{"n":1}`), startApprove(ctx, q, "t1", "sb-1", "pay", `{"n":2}`)
	waitPending(t, q, "t1", 2)
	r := result(t, startApprove(ctx, q, "t1", "sb-1", "pay", `{"n":3}`))
	if r.ok || !errors.Is(r.err, errdefs.ErrResourceExhausted) {
		t.Errorf("third call = %+v, want resource exhausted", r)
	}
	other := startApprove(ctx, q, "t2", "sb-2", "pay", `{}`)
	waitPending(t, q, "t2", 1)
	cancel()
	result(t, a)
	result(t, b)
	result(t, other)
	if len(q.pending) != 0 || len(q.count) != 0 {
		t.Errorf("left pending %v counts %v", q.pending, q.count)
	}
}

// TestApprovalHash: the hash binds tenant, sandbox, tool and arguments,
// whatever the arguments' key order and spacing.
func TestApprovalHash(t *testing.T) {
	base := CallHash("t1", "sb-1", "pay", json.RawMessage(`{"a":1,"b":[1,2]}`))
	if h := CallHash("t1", "sb-1", "pay", json.RawMessage(` {"b": [1,2], "a": 1}`)); h != base {
		t.Errorf("reordered arguments hash differently")
	}
	for _, h := range []string{
		CallHash("t2", "sb-1", "pay", json.RawMessage(`{"a":1,"b":[1,2]}`)),
		CallHash("t1", "sb-2", "pay", json.RawMessage(`{"a":1,"b":[1,2]}`)),
		CallHash("t1", "sb-1", "pax", json.RawMessage(`{"a":1,"b":[1,2]}`)),
		CallHash("t1", "sb-1", "pay", json.RawMessage(`{"a":2,"b":[1,2]}`)),
		CallHash("t1", "sb-1", "pay", json.RawMessage(`{"a":1.0,"b":[1,2]}`)),
		CallHash("t1", "sb-", "1pay", json.RawMessage(`{"a":1,"b":[1,2]}`)),
	} {
		if h == base {
			t.Errorf("a different call has the same hash %s", h)
		}
	}
	q := newTestApprovals(t, ApprovalsConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	ch := startApprove(ctx, q, "t1", "sb-1", "pay", `{"b":[1,2],"a":1}`)
	if p := waitPending(t, q, "t1", 1)[0]; p.Hash != base {
		t.Errorf("approval hash %s, want %s", p.Hash, base)
	}
	cancel()
	result(t, ch)
}

// TestApprovalRetention: ended approvals are dropped after
// ApprovalRetention.
func TestApprovalRetention(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	q := newTestApprovals(t, ApprovalsConfig{Now: clock})
	ch := startApprove(context.Background(), q, "t1", "sb-1", "pay", `{}`)
	p := waitPending(t, q, "t1", 1)[0]
	if _, err := q.Decide("t1", p.ID, true, "k", ""); err != nil {
		t.Fatal(err)
	}
	result(t, ch)
	mu.Lock()
	now = now.Add(ApprovalRetention + time.Second)
	mu.Unlock()
	if _, err := q.Get("t1", p.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after retention = %v, want not found", err)
	}
	if len(q.ended) != 0 {
		t.Errorf("ended = %v", q.ended)
	}
}

// TestApprovalsConfig: out-of-range settings are refused.
func TestApprovalsConfig(t *testing.T) {
	for _, cfg := range []ApprovalsConfig{{Timeout: -1}, {Timeout: MaxApprovalTimeout + 1}, {MaxPending: -1}} {
		if _, err := NewApprovals(cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewApprovals(%+v) = %v", cfg, err)
		}
	}
}

// TestPipelineApproval: through the gateway, an approved call reaches
// its upstream and a denied one is refused at the approval stage with
// the approver's reason.
func TestPipelineApproval(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{})
	var recs []Record
	var mu sync.Mutex
	reg := &memRegistry{}
	reg.put(Tool{Owner: "t1", Name: "pay", InputSchema: json.RawMessage(`{"type":"object"}`),
		Upstream: Upstream{Kind: UpstreamCaller}, Governance: Governance{Approval: true}})
	g, err := New(Config{Registry: reg, Approve: q.Approve, Record: func(r Record) { mu.Lock(); recs = append(recs, r); mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	c := Caller{Tenant: "t1", Sandbox: "sb-1", Tools: []string{"pay"}}
	done := make(chan error, 1)
	go func() { _, err := g.Call(context.Background(), c, "pay", json.RawMessage(`{}`)); done <- err }()
	p := waitPending(t, q, "t1", 1)[0]
	if _, err := q.Decide("t1", p.ID, false, "k", "not today"); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "denied by its approver: not today") {
		t.Errorf("denied call = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(recs) != 1 || recs[0].Stage != StageApproval || recs[0].Outcome != OutcomeDenied {
		t.Errorf("records = %+v", recs)
	}
}
