package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// travelService is the seed scenario's local test service: 20 team
// members, each one's Q3 travel expenses, and the budget thresholds,
// which answer only with the right API key.
type travelService struct {
	url string
	key string
	mu  sync.Mutex
	// calls counts requests by path prefix; keys are the API keys the
	// budget endpoint saw.
	calls map[string]int
	keys  []string
}

func newTravelService(t *testing.T, key string) *travelService {
	ts := &travelService{key: key, calls: map[string]int{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	count := func(p string) {
		ts.mu.Lock()
		ts.calls[p]++
		ts.mu.Unlock()
	}
	mux.HandleFunc("GET /team", func(w http.ResponseWriter, r *http.Request) {
		count("team")
		var members []map[string]any
		for i := range 20 {
			members = append(members, map[string]any{"id": fmt.Sprintf("e%02d", i), "name": fmt.Sprintf("Engineer %d", i), "level": []string{"junior", "senior"}[i%2]})
		}
		json.NewEncoder(w).Encode(map[string]any{"members": members})
	})
	mux.HandleFunc("GET /expenses/{id}", func(w http.ResponseWriter, r *http.Request) {
		count("expenses")
		n, _ := strconv.Atoi(strings.TrimPrefix(r.PathValue("id"), "e"))
		json.NewEncoder(w).Encode(map[string]any{"id": r.PathValue("id"), "quarter": r.URL.Query().Get("quarter"), "travel_usd": 1000 + 250*n})
	})
	mux.HandleFunc("GET /budgets", func(w http.ResponseWriter, r *http.Request) {
		count("budgets")
		ts.mu.Lock()
		ts.keys = append(ts.keys, r.Header.Get("X-Api-Key"))
		ts.mu.Unlock()
		if r.Header.Get("X-Api-Key") != ts.key {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		json.NewEncoder(w).Encode(map[string]any{"junior": 3000, "senior": 5000})
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	ts.url = "http://" + ln.Addr().String()
	return ts
}

// TestToolSeed is the tool gateway's seed scenario through a real daemon:
// "Which engineering team members exceeded their Q3 travel budget?" One
// program in a sandbox lists 20 team members, fetches each one's expenses
// (concurrently) and the budget thresholds through three tools of a
// toolset granted at create — the budgets tool needs a secret header the
// gateway adds — filters, and prints only the answer. Shown: the answer,
// 22 audited tool calls, the secret reaching the service and nowhere in
// the sandbox, its outputs or the audit records, and refusals (a tool not
// granted, arguments that violate the schema) as clear errors to the
// program and audit records.
func TestToolSeed(t *testing.T) {
	rnd := make([]byte, 12)
	_, _ = rand.Read(rnd)
	canary := "canary-" + hex.EncodeToString(rnd)
	svc := newTravelService(t, canary)
	e := newEnv(t, "--gateway-allow", "127.0.0.1/32")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	if _, err := d.C.PutSecret(ctx, "TRAVEL_KEY", client.PutSecretRequest{Value: []byte(canary)}); err != nil {
		t.Fatal(err)
	}
	obj := func(props string, required ...string) json.RawMessage {
		req, _ := json.Marshal(append([]string{}, required...))
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `,"additionalProperties":false}`)
	}
	for _, tool := range []client.PutToolRequest{
		{Name: "list_team_members", Description: "The engineering team.", InputSchema: obj(``),
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "GET", URL: svc.url + "/team"}}},
		{Name: "get_expenses", Description: "A member's travel expenses in a quarter.",
			InputSchema: obj(`"id":{"type":"string","pattern":"^e[0-9]+$"},"quarter":{"enum":["Q1","Q2","Q3","Q4"]}`, "id", "quarter"),
			Upstream:    client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "GET", URL: svc.url + "/expenses/{args.id}?quarter={args.quarter}"}}},
		{Name: "get_budgets", Description: "Travel budget thresholds by level.", InputSchema: obj(``),
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "GET", URL: svc.url + "/budgets",
				Headers: map[string]string{"X-Api-Key": "{secret.TRAVEL_KEY}"}}}},
		{Name: "delete_team", Description: "Not granted.", InputSchema: obj(``),
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "DELETE", URL: svc.url + "/team"}}},
	} {
		if _, err := d.C.CreateTool(ctx, tool); err != nil {
			t.Fatalf("create tool %s: %v", tool.Name, err)
		}
	}
	if _, err := d.C.CreateToolset(ctx, client.PutToolsetRequest{Name: "travel", Tools: []string{"list_team_members", "get_expenses", "get_budgets"}}); err != nil {
		t.Fatal(err)
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Toolsets: []string{"travel"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)

	program := `
from concurrent.futures import ThreadPoolExecutor
import tools
from tools import list_team_members, get_expenses, get_budgets

members = list_team_members()["members"]
with ThreadPoolExecutor(8) as ex:
    spent = list(ex.map(lambda m: get_expenses(id=m["id"], quarter="Q3")["travel_usd"], members))
budgets = get_budgets()
over = [m["name"] for m, s in zip(members, spent) if s > budgets[m["level"]]]
print(", ".join(over))

for bad in (lambda: tools.call("delete_team"), lambda: get_expenses(id="x", quarter="Q3")):
    try:
        bad()
        print("REFUSAL MISSING")
    except tools.ToolError as e:
        print("refused:", e.code)
`
	var outputs []string
	run := func(cmd string) *client.ExecResult {
		t.Helper()
		res := mustExec(t, d, sb.ID, client.ExecRequest{Command: cmd, Timeout: 2 * time.Minute})
		outputs = append(outputs, string(res.Stdout), string(res.Stderr))
		return res
	}
	res := run("python3 -c '" + strings.ReplaceAll(program, "'", `'"'"'`) + "'")
	// Spent 1000+250n: juniors (even n) over 3000 from n=10, seniors
	// (odd n) over 5000 from n=17.
	want := "Engineer 10, Engineer 12, Engineer 14, Engineer 16, Engineer 17, Engineer 18, Engineer 19\nrefused: permission_denied\nrefused: invalid_argument\n"
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("the program: exit %d\nstdout %q\nstderr %q\nwant %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	svc.mu.Lock()
	calls, keys := fmt.Sprint(svc.calls), svc.keys
	svc.mu.Unlock()
	if calls != "map[budgets:1 expenses:20 team:1]" || len(keys) != 1 || keys[0] != canary {
		t.Errorf("the service saw %s with keys %d; want 22 requests, the budgets one with the secret", calls, len(keys))
	}

	// The tool command and the JavaScript module reach the same gateway.
	if res := run(`/.airlock/lib/bin/tool call get_expenses id=e3 quarter=Q3`); res.ExitCode != 0 || !strings.Contains(string(res.Stdout), `"travel_usd": 1750`) && !strings.Contains(string(res.Stdout), `"travel_usd":1750`) {
		t.Errorf("tool call: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := run(`node -e 'const t=require("tools"); t.call("get_expenses",{id:"e4",quarter:"Q3"}).then(r=>console.log(r.travel_usd))'`); res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout)) != "2000" {
		t.Errorf("node: exit %d, %q %q", res.ExitCode, res.Stdout, res.Stderr)
	}

	// Every call is on the record: 22 of the program's and the
	// command's and node's answered, the two refusals denied.
	var recs []client.AuditRecord
	deadline := time.Now().Add(15 * time.Second)
	for {
		recs, _, err = d.C.AuditList(ctx, client.AuditQuery{Action: "tool.call", Target: sb.ID, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) >= 26 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	outcomes := map[string]int{}
	stages := map[string]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
		var det struct {
			Stage string `json:"stage"`
		}
		json.Unmarshal(r.Details, &det)
		stages[det.Stage]++
	}
	if outcomes["ok"] != 24 || outcomes["denied"] != 2 || stages["grant"] != 1 || stages["schema"] != 1 {
		t.Errorf("tool.call records: outcomes %v stages %v, want 24 ok and the grant and schema refusals", outcomes, stages)
	}

	// The secret is nowhere in the sandbox, its outputs or the records.
	half := len(canary) / 2
	res = mustExec(t, d, sb.ID, client.ExecRequest{User: "root", Command: fmt.Sprintf(
		`C1=%s; C2=%s; grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys -e "$C1$C2" / ; echo " rc=$?"; env; cat /proc/*/environ 2>/dev/null | tr '\0' '\n'; ps auxwwe`,
		canary[:half], canary[half:])})
	if out := string(res.Stdout); strings.Contains(out, canary) || !strings.Contains(out, " rc=1") && !strings.Contains(out, " rc=2") {
		t.Errorf("the secret is in the sandbox: %q", res.Stdout)
	}
	all, _, err := d.C.AuditList(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	audit, _ := json.Marshal(all)
	for what, s := range map[string]string{"outputs": strings.Join(outputs, "\n"), "audit records": string(audit), "daemon log": readLog(e, 1)} {
		if strings.Contains(s, canary) {
			t.Errorf("the secret is in the %s", what)
		}
	}
}
