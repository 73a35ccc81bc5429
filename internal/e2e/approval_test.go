package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestApproval drives a tool that needs a person's approval through a
// real daemon: a call from the sandbox waits, pending in GET
// /v1/approvals with its (redacted) arguments; approved, it runs and
// returns its result; a second call, denied with a reason, fails in the
// program with permission_denied and that reason, and never reaches the
// upstream. Both calls and the decisions are on the audit record.
func TestApproval(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var reached atomic.Int64
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		w.Write([]byte(`{"refunded":true}`))
	}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	d := newEnv(t, "--gateway-allow", "127.0.0.1/32").start()
	ctx := ctxT(t, 2*time.Minute)
	if _, err := d.C.CreateTool(ctx, client.PutToolRequest{Name: "refund",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"},"card":{"type":"string"}}}`),
		Governance:  client.ToolGovernance{Approval: true, Destructive: true, Redact: []string{"card"}},
		Upstream:    client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "POST", URL: "http://" + ln.Addr().String() + "/refund"}}}); err != nil {
		t.Fatal(err)
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"refund"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)

	// call runs one call in the sandbox in the background; decide waits
	// for it to be pending and decides it.
	call := func(amount string) chan string {
		out := make(chan string, 1)
		go func() {
			res := mustExec(t, d, sb.ID, client.ExecRequest{Timeout: time.Minute, Command: `python3 -c '
import tools
try:
    print(tools.call("refund", amount=` + amount + `, card="4111-1111"))
except tools.ToolError as e:
    print(e.code, e)
'`})
			out <- string(res.Stdout) + string(res.Stderr)
		}()
		return out
	}
	decide := func(approve bool, reason string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			pending, err := d.C.ListApprovals(ctx, "pending")
			if err != nil {
				t.Fatal(err)
			}
			if len(pending) == 1 {
				p := pending[0]
				if p.Tool != "refund" || p.Sandbox != sb.ID || !strings.Contains(string(p.Args), "[redacted]") || strings.Contains(string(p.Args), "4111-1111") {
					t.Errorf("pending approval %+v (args %s)", p, p.Args)
				}
				if _, err := d.C.DecideApproval(ctx, p.ID, approve, reason); err != nil {
					t.Fatal(err)
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no pending approval within 30 s: %+v", pending)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	out := call("10")
	decide(true, "looks fine")
	if got := <-out; !strings.Contains(got, "'refunded': True") {
		t.Errorf("approved call: %q", got)
	}
	out = call("100000")
	decide(false, "too large for a refund")
	if got := <-out; !strings.HasPrefix(got, "permission_denied") || !strings.Contains(got, "too large for a refund") {
		t.Errorf("denied call: %q", got)
	}
	if n := reached.Load(); n != 1 {
		t.Errorf("the upstream was reached %d times, want once (the denied call must not reach it)", n)
	}

	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for _, r := range recs {
		var det struct {
			Stage string `json:"stage"`
		}
		json.Unmarshal(r.Details, &det)
		if r.Action != "tool.call" && r.Action != "approval.decide" {
			continue // the exec's record holds the command as sent
		}
		got[r.Action+" "+r.Outcome+" "+det.Stage]++
		if strings.Contains(string(r.Details), "4111-1111") {
			t.Errorf("a redacted argument is on the record: %s %s", r.Action, r.Details)
		}
	}
	if got["tool.call ok "] != 1 || got["tool.call denied approval"] != 1 {
		t.Errorf("tool.call records: %v", got)
	}
	if n := got["approval.decide ok "]; n < 2 {
		t.Errorf("approval.decide records: %v", got)
	}
}
