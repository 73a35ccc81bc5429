package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// callerTravel is the seed scenario's three tools run by the caller (the
// test process) instead of an HTTP service: the same data as
// travelService, the budgets only with the caller's key, which never
// goes to the daemon or the sandbox.
func callerTravel(key string, calls *atomic.Int64) map[string]client.ToolFunc {
	return map[string]client.ToolFunc{
		"list_team_members": func(ctx context.Context, _ json.RawMessage) (any, error) {
			calls.Add(1)
			var members []map[string]any
			for i := range 20 {
				members = append(members, map[string]any{"id": fmt.Sprintf("e%02d", i), "name": fmt.Sprintf("Engineer %d", i), "level": []string{"junior", "senior"}[i%2]})
			}
			return map[string]any{"members": members}, nil
		},
		"get_expenses": func(ctx context.Context, args json.RawMessage) (any, error) {
			calls.Add(1)
			var a struct{ ID, Quarter string }
			if err := json.Unmarshal(args, &a); err != nil {
				return nil, err
			}
			var n int
			if _, err := fmt.Sscanf(a.ID, "e%d", &n); err != nil {
				return nil, fmt.Errorf("no employee %s", a.ID)
			}
			return map[string]any{"id": a.ID, "quarter": a.Quarter, "travel_usd": 1000 + 250*n}, nil
		},
		"get_budgets": func(ctx context.Context, _ json.RawMessage) (any, error) {
			calls.Add(1)
			if key == "" {
				return nil, errors.New("no key")
			}
			return map[string]any{"junior": 3000, "senior": 5000}, nil
		},
	}
}

// TestToolCaller is the seed scenario with caller-executed tools, as a
// one-shot program (POST /v1/run): the program's 22 tool calls stream to
// the caller, which runs them in its own process and answers; only the
// answer and the trace come back, and the sandbox is gone. The key that
// runs it has only the tools:call scope. Then, on a long-lived sandbox
// (POST /v1/sandboxes/{id}/run, not streamed), a second client answers
// the waiting calls through /tool-calls; a caller's error reaches the
// program as a ToolError; an unanswered call times out; a run that is
// not streamed cannot grant caller-executed tools.
func TestToolCaller(t *testing.T) {
	rnd := make([]byte, 12)
	_, _ = rand.Read(rnd)
	canary := "canary-" + hex.EncodeToString(rnd)
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	obj := func(props string, required ...string) json.RawMessage {
		req, _ := json.Marshal(append([]string{}, required...))
		return json.RawMessage(`{"type":"object","properties":{` + props + `},"required":` + string(req) + `,"additionalProperties":false}`)
	}
	caller := client.ToolUpstream{Kind: "caller"}
	for _, tool := range []client.PutToolRequest{
		{Name: "list_team_members", InputSchema: obj(``), Upstream: caller},
		{Name: "get_expenses", InputSchema: obj(`"id":{"type":"string","pattern":"^e[0-9]+$"},"quarter":{"enum":["Q1","Q2","Q3","Q4"]}`, "id", "quarter"),
			OutputSchema: obj(`"id":{"type":"string"},"quarter":{"type":"string"},"travel_usd":{"type":"number"}`, "travel_usd"), Upstream: caller},
		{Name: "get_budgets", InputSchema: obj(``), Upstream: caller},
		{Name: "slow_tool", InputSchema: obj(``), Upstream: caller, Governance: client.ToolGovernance{TimeoutS: 1}},
	} {
		if _, err := d.C.CreateTool(ctx, tool); err != nil {
			t.Fatalf("create tool %s: %v", tool.Name, err)
		}
	}
	if _, err := d.C.CreateToolset(ctx, client.PutToolsetRequest{Name: "travel", Tools: []string{"list_team_members", "get_expenses", "get_budgets"}}); err != nil {
		t.Fatal(err)
	}
	k, err := d.C.CreateKey(ctx, client.CreateKeyRequest{Name: "runner", Scopes: []string{"tools:call"}})
	if err != nil {
		t.Fatal(err)
	}
	runner, err := client.New(d.URL, k.Secret)
	if err != nil {
		t.Fatal(err)
	}

	program := `
from concurrent.futures import ThreadPoolExecutor
from tools import list_team_members, get_expenses, get_budgets

members = list_team_members()["members"]
with ThreadPoolExecutor(8) as ex:
    spent = list(ex.map(lambda m: get_expenses(id=m["id"], quarter="Q3")["travel_usd"], members))
budgets = get_budgets()
print(", ".join(m["name"] for m, s in zip(members, spent) if s > budgets[m["level"]]))
`
	var answered atomic.Int64
	var traced atomic.Int64
	start := time.Now()
	res, err := runner.RunOnce(ctx, client.RunRequest{Language: client.LangPython, Code: program, Toolsets: []string{"travel"}, Timeout: time.Minute},
		&client.RunOptions{Tools: callerTravel(canary, &answered), OnToolCall: func(client.ToolCallTrace) { traced.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	track(res.SandboxID)
	want := "Engineer 10, Engineer 12, Engineer 14, Engineer 16, Engineer 17, Engineer 18, Engineer 19\n"
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("the program: exit %d\nstdout %q\nstderr %q\nwant %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}
	t.Logf("one-shot run with 22 caller-executed calls: %v", time.Since(start))
	if answered.Load() != 22 || traced.Load() != 22 || len(res.ToolCalls) != 22 {
		t.Errorf("%d calls answered, %d traced as they ended, %d in the result; want 22", answered.Load(), traced.Load(), len(res.ToolCalls))
	}
	for _, c := range res.ToolCalls {
		if c.Outcome != "ok" {
			t.Errorf("trace: %+v", c)
		}
	}
	// The sandbox is gone, and the runner's key reaches no sandbox.
	if sb, err := d.C.GetSandbox(ctx, res.SandboxID); err == nil && sb.State != "stopped" {
		t.Errorf("the run's sandbox is %s after the answer", sb.State)
	}
	if _, err := runner.ListSandboxes(ctx, client.ListOptions{}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a tools:call key lists sandboxes: %v", err)
	}
	// On the record: the run (intent and outcome, destroyed), 22 tool
	// calls and 22 answers, none with the caller's key.
	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Target: res.SandboxID, Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	// The intent comes before the sandbox: it names none.
	runs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "run", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, r := range append(recs, runs...) {
		count[r.Action+"/"+r.Outcome]++
		if r.Action == "run" && r.Outcome == "ok" && !strings.Contains(string(r.Details), `"destroyed":true`) {
			t.Errorf("the run's outcome does not say the sandbox was destroyed: %s", r.Details)
		}
	}
	if count["run/intent"] != 1 || count["run/ok"] != 2 || count["tool.call/ok"] != 22 || count["tool.answer/ok"] != 22 {
		t.Errorf("audit records of the run: %v", count)
	}
	all, _, err := d.C.AuditList(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(all); strings.Contains(string(b), canary) || strings.Contains(readLog(e, 1), canary) {
		t.Error("the caller's key is in the audit log or the daemon log")
	}

	// A run that is not streamed cannot have caller-executed tools.
	if _, err := runner.RunOnce(ctx, client.RunRequest{Language: client.LangPython, Code: "print(1)", Toolsets: []string{"travel"}}, nil); !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "stream the run") {
		t.Errorf("a buffered run with caller-executed tools: %v", err)
	}

	// A long-lived sandbox: the program waits on its calls while
	// another client answers them at /tool-calls; an error answer and
	// no answer reach the program as clear errors.
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"get_expenses", "slow_tool"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			reqs, err := d.C.ToolRequests(ctx, sb.ID)
			if err != nil {
				t.Error(err)
				return
			}
			for _, r := range reqs {
				if r.Tool != "get_expenses" {
					continue // slow_tool is never answered
				}
				var a struct{ ID string }
				_ = json.Unmarshal(r.Args, &a)
				var answer any = map[string]any{"travel_usd": 42}
				var aerr error
				if a.ID == "e99" {
					answer, aerr = nil, errors.New("no employee e99")
				}
				if err := d.C.AnswerToolCall(ctx, sb.ID, r.ID, answer, aerr); err != nil {
					t.Error(err)
				}
			}
		}
	})
	res, err = d.C.Run(ctx, sb.ID, client.RunRequest{Language: client.LangPython, Code: `
import tools
print(tools.get_expenses(id="e1", quarter="Q3")["travel_usd"])
for args in ({"id": "e99", "quarter": "Q3"},):
    try:
        tools.call("get_expenses", **args)
    except tools.ToolError as e:
        print("error:", e)
try:
    tools.call("slow_tool")
except tools.ToolError as e:
    print("slow:", e.code)
`}, nil)
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	out := string(res.Stdout)
	if res.ExitCode != 0 || !strings.HasPrefix(out, "42\nerror: ") || !strings.Contains(out, "no employee e99") || !strings.HasSuffix(out, "slow: timeout\n") {
		t.Errorf("the program: exit %d, stdout %q, stderr %q", res.ExitCode, out, res.Stderr)
	}
	if len(res.ToolCalls) != 3 || res.ToolCalls[0].Outcome != "ok" || res.ToolCalls[1].Stage != "upstream" || res.ToolCalls[2].Outcome != "error" {
		t.Errorf("trace: %+v", res.ToolCalls)
	}
	// Nothing waits any more, and a late answer finds nothing.
	if reqs, err := d.C.ToolRequests(ctx, sb.ID); err != nil || len(reqs) != 0 {
		t.Errorf("waiting calls after the run: %v %v", reqs, err)
	}
	if err := d.C.AnswerToolCall(ctx, sb.ID, "tc-aaaaaaaaaaaaaaaa", 1, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("answering a call that does not wait: %v", err)
	}
}
