package gateway

import (
	"context"
	"testing"
)

// TestApprovalPendingCount: Pending counts the calls waiting, all
// tenants together, and drops each as it ends.
func TestApprovalPendingCount(t *testing.T) {
	q := newTestApprovals(t, ApprovalsConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startApprove(ctx, q, "t1", "sb-1", "pay", `{}`)
	startApprove(ctx, q, "t2", "sb-2", "pay", `{}`)
	waitPending(t, q, "t1", 1)
	waitPending(t, q, "t2", 1)
	if n := q.Pending(); n != 2 {
		t.Fatalf("Pending = %d, want 2", n)
	}
	p := q.List("t1")[0]
	if _, err := q.Decide("t1", p.ID, true, "k-admin", "ok"); err != nil {
		t.Fatal(err)
	}
	result(t, a)
	if n := q.Pending(); n != 1 {
		t.Errorf("Pending after a decision = %d, want 1", n)
	}
}
