package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestCedarDeny: a tenant's Cedar policy, set at /v1/policies, governs
// its sandboxes' tool calls through a real daemon. With a policy that
// permits everything but calls of pay over 100, a program's pay(amount=5)
// reaches the upstream and pay(amount=500) is refused with
// permission_denied and never reaches it; the audit log holds one call
// answered and one denied at the policy stage. Removing the policy lets
// the large call through.
func TestCedarDeny(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Query().Get("amount"))
		mu.Unlock()
		json.NewEncoder(w).Encode(map[string]any{"paid": r.URL.Query().Get("amount")})
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	e := newEnv(t, "--gateway-allow", "127.0.0.1/32")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	if _, err := d.C.CreateTool(ctx, client.PutToolRequest{Name: "pay", Description: "Pays an amount.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"amount":{"type":"integer"}},"required":["amount"]}`),
		Upstream:    client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "GET", URL: "http://" + ln.Addr().String() + "/pay?amount={args.amount}"}},
	}); err != nil {
		t.Fatal(err)
	}
	const policy = `permit(principal, action, resource);
@id("no-large-payments")
forbid(principal, action, resource == Airlock::Tool::"pay") when { context.args.amount > 100 };`
	if _, err := d.C.PutPolicy(ctx, policy); err != nil {
		t.Fatal(err)
	}
	if p, err := d.C.GetPolicy(ctx); err != nil || p.Cedar != policy {
		t.Fatalf("GetPolicy = %+v, %v", p, err)
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"pay"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)

	const program = `
import tools
print(tools.call("pay", amount=5)["paid"])
try:
    tools.call("pay", amount=500)
    print("REFUSAL MISSING")
except tools.ToolError as e:
    print("refused:", e.code, "no-large-payments" in str(e))
`
	res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "python3 -c '" + program + "'", Timeout: time.Minute})
	if want := "5\nrefused: permission_denied True\n"; res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("the program: exit %d\nstdout %q\nstderr %q\nwant %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	if got != "5" {
		t.Errorf("the upstream saw amounts %q, want only 5: a denied call reached it", got)
	}

	var recs []client.AuditRecord
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, _, err = d.C.AuditList(ctx, client.AuditQuery{Action: "tool.call", Target: sb.ID, Limit: 100})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	outcomes := map[string]string{}
	for _, r := range recs {
		var det struct {
			Stage string `json:"stage"`
		}
		json.Unmarshal(r.Details, &det)
		outcomes[r.Outcome] = det.Stage
	}
	if len(recs) != 2 || outcomes["denied"] != "policy" {
		t.Errorf("tool.call records: %v (outcome: stage), want one ok and one denied at the policy stage", outcomes)
	}
	if _, ok := outcomes["ok"]; !ok {
		t.Errorf("tool.call records: %v, want one ok", outcomes)
	}
	if recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "policy.update", Limit: 10}); err != nil || len(recs) == 0 {
		t.Errorf("policy.update records: %d, %v", len(recs), err)
	}

	// Without the policy, the large call goes through.
	if err := d.C.DeletePolicy(ctx); err != nil {
		t.Fatal(err)
	}
	res = mustExec(t, d, sb.ID, client.ExecRequest{Command: `python3 -c 'import tools; print(tools.call("pay", amount=500)["paid"])'`, Timeout: time.Minute})
	if res.ExitCode != 0 || string(res.Stdout) != "500\n" {
		t.Errorf("after DeletePolicy: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
}
