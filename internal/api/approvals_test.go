package api

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// pendingCall starts a call of tool by a sandbox of tenant that waits in
// q, and returns the approval's ID and the call's result.
func pendingCall(t *testing.T, q *gateway.Approvals, tenant, tool string) (string, <-chan bool) {
	t.Helper()
	done := make(chan bool, 1)
	go func() {
		ok, _, _ := q.Approve(context.Background(), gateway.Caller{Tenant: tenant, Sandbox: "sb-1", KeyID: "k-1"},
			gateway.Tool{Name: tool}, json.RawMessage(`{"amount":5}`))
		done <- ok
	}()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
		for _, a := range q.List(tenant) {
			if a.Tool == tool && a.State == gateway.ApprovalPending {
				return a.ID, done
			}
		}
	}
	t.Fatal("the call did not become pending")
	return "", nil
}

// TestApprovalRoutes: list, inspect and decide; the decision releases
// the call and records the approver; another tenant sees nothing; a
// second decision is 409; the decisions are audited.
func TestApprovalRoutes(t *testing.T) {
	e := newRealEnv(t)
	q, err := gateway.NewApprovals(gateway.ApprovalsConfig{})
	if err != nil {
		t.Fatal(err)
	}
	e.h.approvals = q
	approver := e.key(tenantA, auth.ScopeApprovals)
	id, done := pendingCall(t, q, tenantA, "pay")

	st, body := e.doBody("GET", "/v1/approvals?state=pending", approver, "")
	var l wire.ApprovalList
	if err := json.Unmarshal([]byte(body), &l); st != 200 || err != nil || len(l.Approvals) != 1 || l.Approvals[0].ID != id ||
		string(l.Approvals[0].Args) != `{"amount":5}` || l.Approvals[0].DecidedAt != nil || len(l.Approvals[0].Hash) != 64 {
		t.Fatalf("list = %d %s", st, body)
	}
	if st, body := e.doBody("GET", "/v1/approvals", e.adminB, ""); st != 200 || body != `{"approvals":[]}`+"\n" {
		t.Errorf("tenant B list = %d %q", st, body)
	}
	for _, c := range []struct{ method, body string }{{"GET", ""}, {"POST", `{"decision":"approve"}`}} {
		if st, body := e.doBody(c.method, "/v1/approvals/"+id, e.adminB, c.body); st != 404 {
			t.Errorf("tenant B %s = %d %s, want 404", c.method, st, body)
		}
	}
	for _, c := range []struct{ path, body, want string }{
		{"/v1/approvals/" + id, `{"decision":"maybe"}`, "decision must be"},
		{"/v1/approvals/" + id, `{"decision":"approve","reason":"` + strings.Repeat("x", 1025) + `"}`, "reason must be"},
		{"/v1/approvals/ap-x", `{"decision":"approve"}`, "malformed"},
	} {
		if st, body := e.doBody("POST", c.path, approver, c.body); st != 400 || !strings.Contains(body, c.want) {
			t.Errorf("POST %s %.40s = %d %s, want 400 %q", c.path, c.body, st, body, c.want)
		}
	}
	if st, body := e.doBody("GET", "/v1/approvals?state=odd", approver, ""); st != 400 {
		t.Errorf("bad state = %d %s", st, body)
	}
	if ok := len(done); ok != 0 {
		t.Fatal("the call was released before a decision")
	}
	st, body = e.doBody("POST", "/v1/approvals/"+id, approver, `{"decision":"approve","reason":"checked the amount"}`)
	var a wire.Approval
	if err := json.Unmarshal([]byte(body), &a); st != 200 || err != nil || a.State != wire.ApprovalApproved || a.Reason != "checked the amount" || a.DecidedAt == nil {
		t.Fatalf("approve = %d %s", st, body)
	}
	if !<-done {
		t.Error("the approved call was not approved")
	}
	if st, body := e.doBody("POST", "/v1/approvals/"+id, approver, `{"decision":"deny"}`); st != 409 || !strings.Contains(body, "already approved") {
		t.Errorf("second decision = %d %s, want 409", st, body)
	}
	if st, body := e.doBody("GET", "/v1/approvals/"+id, approver, ""); st != 200 || !strings.Contains(body, `"state":"approved"`) {
		t.Errorf("get decided = %d %s", st, body)
	}
	// The approver is the deciding key.
	if a.Approver == "" || a.Approver == "k-1" {
		t.Errorf("approver = %q", a.Approver)
	}

	id2, done2 := pendingCall(t, q, tenantA, "wire")
	if st, body := e.doBody("POST", "/v1/approvals/"+id2, approver, `{"decision":"deny","reason":"no"}`); st != 200 {
		t.Fatalf("deny = %d %s", st, body)
	}
	if <-done2 {
		t.Error("the denied call was approved")
	}
	got := e.outcomes(t, ActionApprovalDecide)
	for _, want := range []string{"approval.decide ok", "approval.decide failed_precondition", "approval.decide not_found"} {
		if !got[want] {
			t.Errorf("no audit outcome %q among %v", want, got)
		}
	}
	page, err := e.log.Select(context.Background(), audit.Query{Action: ActionApprovalDecide, Target: id2, Limit: 10}, audit.PhaseIntent)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Records) != 1 || page.Records[0].KeyID != a.Approver {
		t.Fatalf("intent records = %+v", page.Records)
	}
	for _, want := range []string{`"decision":"deny"`, `"reason":"no"`, `"tool":"wire"`, `"sandbox":"sb-1"`} {
		if !strings.Contains(string(page.Records[0].Details), want) {
			t.Errorf("intent details %s lack %s", page.Records[0].Details, want)
		}
	}
}

// TestApprovalScopes: only the approvals scope (or admin) lists and
// decides; the tool scopes do not.
func TestApprovalScopes(t *testing.T) {
	e := newRealEnv(t)
	q, _ := gateway.NewApprovals(gateway.ApprovalsConfig{})
	e.h.approvals = q
	id, done := pendingCall(t, q, tenantA, "pay")
	other := e.key(tenantA, auth.ScopeToolsRead, auth.ScopeToolsWrite, auth.ScopeExec)
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/approvals", ""}, {"GET", "/v1/approvals/" + id, ""}, {"POST", "/v1/approvals/" + id, `{"decision":"approve"}`},
	} {
		if st, body := e.doBody(c.method, c.path, other, c.body); st != 403 {
			t.Errorf("%s %s without the scope = %d %s, want 403", c.method, c.path, st, body)
		}
	}
	if st, body := e.doBody("POST", "/v1/approvals/"+id, e.adminA, `{"decision":"deny"}`); st != 200 {
		t.Errorf("admin decide = %d %s", st, body)
	}
	<-done
}

// TestApprovalsNotServed: without Config.Approvals the routes answer 501.
func TestApprovalsNotServed(t *testing.T) {
	e := newRealEnv(t)
	if st, body := e.doBody("GET", "/v1/approvals", e.adminA, ""); st != http.StatusNotImplemented {
		t.Errorf("GET = %d %s, want 501", st, body)
	}
}
