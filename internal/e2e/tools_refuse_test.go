package e2e

import (
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestToolRefuse drives the gateway's refusals that need state through a
// real daemon, each a clear error to the program and an audit record: a
// per-sandbox call budget exceeded (the third call of a tool allowed two),
// and a circuit opened by a failing upstream (five 500s in a row, then
// the sixth call is refused without reaching the upstream).
func TestToolRefuse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var failing int
	mux := http.NewServeMux()
	mux.HandleFunc("POST /ok", func(w http.ResponseWriter, r *http.Request) { w.Write([]byte(`{"ok":true}`)) })
	mux.HandleFunc("POST /fail", func(w http.ResponseWriter, r *http.Request) {
		failing++
		http.Error(w, "down", http.StatusInternalServerError)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String()

	d := newEnv(t, "--gateway-allow", "127.0.0.1/32").start()
	ctx := ctxT(t, 2*time.Minute)
	schema := json.RawMessage(`{"type":"object"}`)
	for _, tool := range []client.PutToolRequest{
		{Name: "twice", InputSchema: schema, Governance: client.ToolGovernance{MaxCallsPerSandbox: 2},
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "POST", URL: url + "/ok"}}},
		{Name: "flaky", InputSchema: schema,
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "POST", URL: url + "/fail"}}},
	} {
		if _, err := d.C.CreateTool(ctx, tool); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"twice", "flaky"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	program := `
import tools
for name in ["twice"] * 3 + ["flaky"] * 6:
    try:
        tools.call(name)
        print(name, "ok")
    except tools.ToolError as e:
        print(name, e.code, "retry-after" if "retry after" in str(e) else "")
`
	res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "python3 -c '" + program + "'", Timeout: time.Minute})
	// A failing upstream and an open circuit are both unavailable; the
	// open circuit says when to retry, and the records tell them apart.
	want := "twice ok\ntwice ok\ntwice resource_exhausted \n" + strings.Repeat("flaky unavailable \n", 5) + "flaky unavailable retry-after\n"
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("the program: exit %d\nstdout %q\nstderr %q\nwant %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	if failing != 5 {
		t.Errorf("the failing upstream was called %d times, want 5 (the open circuit must not reach it)", failing)
	}
	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "tool.call", Target: sb.ID, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]int{}
	for _, r := range recs {
		var det struct {
			Stage string `json:"stage"`
		}
		json.Unmarshal(r.Details, &det)
		stages[r.Outcome+"/"+det.Stage]++
	}
	if stages["ok/"] != 2 || stages["denied/budget"] != 1 || stages["error/upstream"] != 5 || stages["denied/circuit"] != 1 {
		t.Errorf("tool.call records by outcome/stage: %v", stages)
	}
}
