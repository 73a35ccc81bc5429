package daemon

import (
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestEgressAuditDrops: Record never blocks; over the queue's length
// events are dropped and counted.
func TestEgressAuditDrops(t *testing.T) {
	a := &egressAudit{logger: slog.New(slog.DiscardHandler), queue: make(chan sandbox.EgressEvent, 2)}
	done := make(chan struct{})
	go func() {
		for range 5 {
			a.Record(sandbox.EgressEvent{Sandbox: "sb-x"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Record blocked on a full queue")
	}
	if n := a.dropped.Load(); n != 3 {
		t.Fatalf("dropped %d, want 3", n)
	}
}

// TestEgressRecord: the record names the sandbox, its tenant, the
// destination, the verdict and its reason.
func TestEgressRecord(t *testing.T) {
	ev := sandbox.EgressEvent{Sandbox: "sb-a", Owner: "t1", Event: egress.Event{
		Start: time.Now(), Protocol: egress.ProtoConnect, Host: "denied.example", Port: 443,
		Addr: netip.MustParseAddr("192.0.2.1"), Reason: "not_allowed", Duration: time.Millisecond,
	}}
	r := egressRecord(ev)
	if r.Action != ActionEgressConnect || r.Target != "sb-a" || r.TenantID != "t1" || r.Outcome != "permission_denied" ||
		r.Details["host"] != "denied.example" || r.Details["port"] != uint16(443) || r.Details["addr"] != "192.0.2.1" ||
		r.Details["reason"] != "not_allowed" || r.Details["allowed"] != false {
		t.Fatalf("record: %+v", r)
	}
	ev.Allowed = true
	if r := egressRecord(ev); r.Outcome != "ok" {
		t.Fatalf("allowed outcome %q", r.Outcome)
	}
}
