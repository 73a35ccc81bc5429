package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// fakeToolCalls is a real relay with a hand-driven observer: the tests
// play the gateway, calling Execute and record as a program would.
type fakeToolCalls struct {
	*gateway.Relay
	mu  sync.Mutex
	obs map[string][]func(gateway.Record)
}

func newFakeToolCalls(t *testing.T) *fakeToolCalls {
	r, err := gateway.NewRelay(gateway.RelayConfig{})
	if err != nil {
		t.Fatal(err)
	}
	return &fakeToolCalls{Relay: r, obs: map[string][]func(gateway.Record){}}
}

func (f *fakeToolCalls) Observe(sb string, fn func(gateway.Record)) func() {
	f.mu.Lock()
	f.obs[sb] = append(f.obs[sb], fn)
	n := len(f.obs[sb]) - 1
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		f.obs[sb][n] = nil
		f.mu.Unlock()
	}
}

func (f *fakeToolCalls) record(sb string, r gateway.Record) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fn := range f.obs[sb] {
		if fn != nil {
			fn(r)
		}
	}
}

// liveSandbox waits for tenant A's one live sandbox.
func liveSandbox(t *testing.T, e *testEnv) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if l := e.mgr.List(sandbox.Filter{Owner: tenantA, Live: true}); len(l) == 1 {
			return l[0].ID
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("no live sandbox")
	return ""
}

// TestRunSandbox: a program runs in a sandbox and answers with its output
// and trace; the audit records hold the code's digest, not the code;
// bad requests are 400 and run nothing.
func TestRunSandbox(t *testing.T) {
	ctx := context.Background()
	tc := newFakeToolCalls(t)
	e := newTestEnv(t, func(c *Config) { c.ToolCalls = tc })
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	e.audit.take()
	res, err := c.Run(ctx, sb.ID, client.RunRequest{Language: client.LangBash, Code: "echo out-$X; echo err >&2; exit 3", Env: map[string]string{"X": "1"}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.SandboxID != sb.ID || res.ExitCode != 3 || string(res.Stdout) != "out-1\n" || string(res.Stderr) != "err\n" || res.ToolCalls == nil || len(res.ToolCalls) != 0 {
		t.Errorf("run: %+v", res)
	}
	evs := e.audit.take()
	if len(evs) != 2 || evs[0].Action != ActionSandboxRun || evs[1].Outcome != audit.OutcomeOK {
		t.Fatalf("audit: %+v", evs)
	}
	det, _ := json.Marshal(evs[1].Details)
	if strings.Contains(string(det), "echo out") || !strings.Contains(string(det), `"code_sha256"`) || !strings.Contains(string(det), `"exit_code":3`) {
		t.Errorf("the run's record: %s", det)
	}

	for _, tt := range []struct{ body, want string }{
		{`{"language":"cobol","code":"x"}`, "language must be"},
		{`{"language":"bash","code":"  "}`, "code is required"},
		{`{"language":"bash","code":"` + strings.Repeat("x", maxCodeBytes+1) + `"}`, "at most 102400"},
		{`{"language":"bash","code":"true","template":"other"}`, "are for POST /v1/run"},
		{`{"language":"bash","code":"true","tools":["x"]}`, "are for POST /v1/run"},
		{`{"language":"bash","code":"true","timeout_s":-1}`, "timeout_s"},
	} {
		resp, body := e.do("POST", "/v1/sandboxes/"+sb.ID+"/run", keyA, "application/json", []byte(tt.body))
		if resp.StatusCode != 400 || !strings.Contains(string(body), tt.want) {
			t.Errorf("%.60s: %d %s, want 400 saying %q", tt.body, resp.StatusCode, body, tt.want)
		}
	}
	for _, ev := range e.audit.take() {
		if ev.Outcome == audit.OutcomeIntent {
			t.Errorf("a refused run started: %+v", ev)
		}
	}
}

// TestRunOnceStream: POST /v1/run streams the start line first, then the
// output, the tool requests (answered by the client's tool functions
// through the answer route) and the tool calls, then the exit; the
// sandbox is destroyed before the exit line; the client's answers reach
// the waiting call.
func TestRunOnceStream(t *testing.T) {
	ctx := context.Background()
	tc := newFakeToolCalls(t)
	e := newTestEnv(t, func(c *Config) { c.ToolCalls = tc })
	c := e.client(keyA)

	// The "program" sleeps while the test plays its tool call.
	got := make(chan string, 1)
	go func() {
		id := liveSandbox(t, e)
		out, err := tc.Execute(ctx, gateway.Caller{Tenant: tenantA, Sandbox: id}, "lookup", json.RawMessage(`{"q":"x"}`), 10*time.Second)
		if err != nil {
			got <- "error: " + err.Error()
			return
		}
		tc.record(id, gateway.Record{Tool: "lookup", Outcome: gateway.OutcomeOK, Start: time.Now(), Duration: time.Millisecond, OutputBytes: len(out)})
		got <- string(out)
	}()
	var lines []string
	var mu sync.Mutex
	res, err := c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "echo start; sleep 1; echo end"}, &client.RunOptions{
		Tools: map[string]client.ToolFunc{"lookup": func(ctx context.Context, args json.RawMessage) (any, error) {
			return map[string]any{"echo": json.RawMessage(args)}, nil
		}},
		OnOutput: func(s client.Stream, data []byte) error {
			mu.Lock()
			lines = append(lines, string(s)+":"+string(data))
			mu.Unlock()
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if out := <-got; out != `{"echo":{"q":"x"}}` {
		t.Errorf("the call got %s", out)
	}
	if res.ExitCode != 0 || strings.Join(lines, "") != "stdout:start\nstdout:end\n" || len(res.ToolCalls) != 1 || res.ToolCalls[0].Tool != "lookup" {
		t.Errorf("run: exit %d, output %q, trace %+v", res.ExitCode, lines, res.ToolCalls)
	}
	if l := e.mgr.List(sandbox.Filter{Live: true}); len(l) != 0 {
		t.Errorf("the run's sandbox is live after the run: %+v", l)
	}
	var runOK, answers int
	for _, ev := range e.audit.take() {
		switch {
		case ev.Action == ActionRun && ev.Outcome == audit.OutcomeOK:
			runOK++
			if ev.Details["destroyed"] != true || ev.Target != res.SandboxID {
				t.Errorf("the run's outcome: %+v", ev)
			}
		case ev.Action == ActionToolAnswer && ev.Outcome == audit.OutcomeOK:
			answers++
			if ev.Details["tool"] != "lookup" || ev.Details["output_sha256"] == nil {
				t.Errorf("the answer's record: %+v", ev)
			}
		}
	}
	if runOK != 1 || answers != 1 {
		t.Errorf("%d run outcomes and %d answers recorded, want 1 and 1", runOK, answers)
	}

	// The raw stream: start first, exit last.
	resp, err := func() (*http.Response, error) {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/run", strings.NewReader(`{"language":"bash","code":"echo hi"}`))
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", ndjsonType)
		return e.srv.Client().Do(req)
	}()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var l struct{ Type string }
		_ = json.Unmarshal(sc.Bytes(), &l)
		types = append(types, l.Type)
	}
	if strings.Join(types, ",") != "start,stdout,exit" {
		t.Errorf("stream lines %v", types)
	}
}

// callerRegistry knows one tool, local, caller-executed; its other
// methods are not served.
type callerRegistry struct{ ToolRegistry }

func (callerRegistry) Tool(_ context.Context, tenant, name string) (gateway.Tool, error) {
	if name != "local" {
		return gateway.Tool{}, sandboxNotFound(name)
	}
	return gateway.Tool{Owner: tenant, Name: name, Upstream: gateway.Upstream{Kind: gateway.UpstreamCaller}}, nil
}

func (callerRegistry) Resolve(_ context.Context, _ string, tools, _ []string) ([]string, error) {
	return tools, nil
}

// TestRunOnceRefusals: a buffered run cannot grant caller-executed tools;
// a run over the quota creates nothing; a key without tools:call is
// refused.
func TestRunOnceRefusals(t *testing.T) {
	ctx := context.Background()
	tc := newFakeToolCalls(t)
	reg := callerRegistry{}
	e := newTestEnv(t, func(c *Config) { c.ToolCalls = tc; c.ToolResolver = reg; c.Tools = reg })
	c := e.client(keyA)
	_, err := c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "true", Tools: []string{"local"}}, nil)
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "tool local is caller-executed") {
		t.Errorf("buffered run with a caller-executed tool: %v", err)
	}
	e.quota.set(tenantA, 1)
	e.sandbox(ctx)
	if _, err := c.RunOnce(ctx, client.RunRequest{Language: client.LangBash, Code: "true"}, nil); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("a run over the quota: %v", err)
	}
	if n := len(e.mgr.List(sandbox.Filter{})); n != 1 {
		t.Errorf("%d sandboxes, want 1", n)
	}
}
