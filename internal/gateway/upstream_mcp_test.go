package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway/mcptest"
)

// The test binary is also the stdio MCP server (mcptest), when run with
// mcptest.ServeEnv=1.
func init() { mcptest.ServeStdioIfAsked() }

const mcpCanary = "mcp-canary-51d0\"q"

// stdioUpstream runs this test binary as the test server, with the
// tenant's secret tok as MCPTEST_TOKEN.
func stdioUpstream(t *testing.T, extraEnv ...string) *MCPUpstream {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{mcptest.ServeEnv: "1", "MCPTEST_TOKEN": "{secret.tok}"}
	for i := 0; i+1 < len(extraEnv); i += 2 {
		env[extraEnv[i]] = extraEnv[i+1]
	}
	return &MCPUpstream{Command: exe, Env: env}
}

// httpUpstream serves s (nil: a new test server) over Streamable HTTP
// on loopback; the upstream sends the secret tok as a bearer token.
func httpUpstream(t *testing.T, s *mcp.Server) (*MCPUpstream, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(mcptest.Handler(s))
	t.Cleanup(srv.Close)
	return &MCPUpstream{URL: srv.URL, Headers: map[string]string{"Authorization": "Bearer {secret.tok}"}}, srv
}

// mcpTool is an Airlock tool name running upstream tool (name if "")
// of m.
func mcpTool(name string, m *MCPUpstream, tool string) Tool {
	mm := *m
	mm.Tool = tool
	return Tool{Owner: "tenant-a", Name: name, InputSchema: json.RawMessage(objSchema),
		Upstream: Upstream{Kind: UpstreamMCP, MCP: &mm}}
}

// register pins each tool through the gateway (as the registry does)
// and puts it in the harness's registry.
func (h *harness) register(t *testing.T, tools ...Tool) {
	t.Helper()
	for _, tl := range tools {
		if err := tl.Validate(); err != nil {
			t.Fatalf("tool %s: %v", tl.Name, err)
		}
		pin, err := h.g.PinMCP(context.Background(), "tenant-a", tl)
		if err != nil {
			t.Fatalf("pin %s: %v", tl.Name, err)
		}
		m := *tl.Upstream.MCP
		m.Pinned = pin
		tl.Upstream.MCP = &m
		h.reg.put(tl)
	}
}

func newMCPHarness(t *testing.T, tune func(*Config)) *harness {
	h := newHarness(t, tune)
	h.sec.values["tenant-a/tok"] = mcpCanary
	return h
}

// callPID calls the tool pid and returns the server's process id.
func callPID(t *testing.T, h *harness, c Caller) int {
	t.Helper()
	res, err := h.g.Call(context.Background(), c, "pid", nil)
	if err != nil {
		t.Fatal(err)
	}
	var out struct{ PID int }
	if err := json.Unmarshal(res.Output, &out); err != nil || out.PID == 0 {
		t.Fatalf("pid output %s: %v", res.Output, err)
	}
	return out.PID
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// checkSecretKept checks that the canary shows in none of the outputs,
// errors and records, and that every revealed value was wiped.
func checkSecretKept(t *testing.T, h *harness, seen ...string) {
	t.Helper()
	recs, _ := json.Marshal(h.rec.all())
	all := strings.Join(seen, "\n") + string(recs)
	for _, r := range h.rec.all() {
		all += r.Reason + string(r.Args)
	}
	for _, form := range []string{mcpCanary, jsonEscapedString(mcpCanary), "mcp-canary"} {
		if strings.Contains(all, form) {
			t.Errorf("the canary (%q) shows in an output, error or record: %s", form, all)
		}
	}
	h.sec.mu.Lock()
	defer h.sec.mu.Unlock()
	if len(h.sec.given) == 0 {
		t.Fatal("no secret was revealed")
	}
	for _, v := range h.sec.given {
		if strings.Trim(string(v.Bytes()), "\x00") != "" {
			t.Error("a revealed value was not wiped")
		}
	}
}

func jsonEscapedString(s string) string { return string(jsonEscaped([]byte(s))) }

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// lookupOut is the test server's lookup answer.
type lookupOut struct {
	Args        map[string]any `json:"args"`
	Token       string         `json:"token"`
	TokenSHA256 string         `json:"token_sha256"`
}

func TestMCPStdio(t *testing.T) {
	h := newMCPHarness(t, nil)
	up := stdioUpstream(t)
	h.register(t, mcpTool("lookup", up, ""), mcpTool("find", up, "lookup"), mcpTool("text", up, ""), mcpTool("pid", up, ""))
	ctx := context.Background()
	c := caller("lookup", "find", "text", "pid")

	res, err := h.g.Call(ctx, c, "find", json.RawMessage(`{"q":"x","n":2}`))
	if err != nil {
		t.Fatal(err)
	}
	var out lookupOut
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	// The secret reached the upstream (its digest), and is scrubbed
	// from what came back.
	if out.Args["q"] != "x" || out.Args["n"] != float64(2) || out.TokenSHA256 != sha(mcpCanary) || out.Token != "[redacted]" {
		t.Errorf("output %s", res.Output)
	}
	wantRecord(t, h.rec.last(t), OutcomeOK, "")
	if r := h.rec.last(t); r.Tool != "find" || string(r.Args) != `{"n":2,"q":"x"}` {
		t.Errorf("record %+v", r)
	}
	// Text content comes back joined, as a JSON string.
	res, err = h.g.Call(ctx, c, "text", json.RawMessage(`{"text":"hi"}`))
	if err != nil || string(res.Output) != `"hi\nhi"` {
		t.Errorf("text: %s %v", res.Output, err)
	}
	// One process serves every tool of the upstream, across calls.
	pid := callPID(t, h, c)
	if pid2 := callPID(t, h, c); pid2 != pid || h.g.mcp.len() != 1 {
		t.Errorf("pids %d then %d, %d sessions: the session was not reused", pid, pid2, h.g.mcp.len())
	}
	// An environment without the secret's value gets another process
	// (a rotated secret starts a new session).
	h.sec.mu.Lock()
	h.sec.values["tenant-a/tok"] = mcpCanary + "2"
	h.sec.mu.Unlock()
	if pid3 := callPID(t, h, c); pid3 == pid {
		t.Error("a rotated secret reused the old session")
	}
	checkSecretKept(t, h, string(res.Output))
}

func TestMCPHTTP(t *testing.T) {
	h := newMCPHarness(t, nil)
	up, _ := httpUpstream(t, nil)
	h.register(t, mcpTool("lookup", up, ""), mcpTool("text", up, ""))
	c := caller("lookup", "text")
	res, err := h.g.Call(context.Background(), c, "lookup", json.RawMessage(`{"q":"y"}`))
	if err != nil {
		t.Fatal(err)
	}
	var out lookupOut
	if err := json.Unmarshal(res.Output, &out); err != nil {
		t.Fatalf("output %s: %v", res.Output, err)
	}
	if out.Args["q"] != "y" || out.TokenSHA256 != sha("Bearer "+mcpCanary) || out.Token != "Bearer [redacted]" {
		t.Errorf("output %s", res.Output)
	}
	res2, err := h.g.Call(context.Background(), c, "text", json.RawMessage(`{"text":"{\"a\":1}"}`))
	if err != nil || string(res2.Output) != `"{\"a\":1}\n{\"a\":1}"` {
		t.Errorf("text: %s %v", res2.Output, err)
	}
	checkSecretKept(t, h, string(res.Output))
}

func TestMCPIsError(t *testing.T) {
	h := newMCPHarness(t, func(c *Config) { c.BreakerFailures = 2 })
	up := stdioUpstream(t)
	h.register(t, mcpTool("fail", up, ""), mcpTool("lookup", up, ""))
	c := caller("fail", "lookup")
	for range 4 {
		_, err := h.g.Call(context.Background(), c, "fail", json.RawMessage(`{"msg":"boom `+strings.ReplaceAll(mcpCanary, `"`, `\"`)+`"}`))
		wantErr(t, err, errdefs.ErrFailedPrecondition, `upstream reported an error: "it failed: boom [redacted]"`)
		wantRecord(t, h.rec.last(t), OutcomeError, StageUpstream)
	}
	// An error result is the upstream answering: its circuit stays
	// closed.
	if _, err := h.g.Call(context.Background(), c, "lookup", nil); err != nil {
		t.Fatal(err)
	}
}

func TestMCPTimeout(t *testing.T) {
	h := newMCPHarness(t, nil)
	up := stdioUpstream(t)
	slow := mcpTool("slow", up, "")
	slow.Governance.TimeoutS = 1
	h.register(t, slow, mcpTool("pid", up, ""))
	c := caller("slow", "pid")
	pid := callPID(t, h, c)
	start := time.Now()
	_, err := h.g.Call(context.Background(), c, "slow", json.RawMessage(`{"ms":20000}`))
	wantErr(t, err, errdefs.ErrTimeout, "did not answer within 1s")
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the call took %v", d)
	}
	wantRecord(t, h.rec.last(t), OutcomeError, StageUpstream)
	// The session outlives a call's timeout.
	if pid2 := callPID(t, h, c); pid2 != pid {
		t.Errorf("pid %d after the timeout, was %d", pid2, pid)
	}
	// The caller going away ends the call too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = h.g.Call(ctx, c, "slow", json.RawMessage(`{"ms":20000}`))
	if err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("canceled call: %v", err)
	}
}

func TestMCPDeadRestarted(t *testing.T) {
	h := newMCPHarness(t, nil)
	up := stdioUpstream(t)
	h.register(t, mcpTool("pid", up, ""))
	c := caller("pid")
	pid := callPID(t, h, c)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The dead server is reaped, and the next call starts another.
	waitFor(t, "the dead server to be reaped", func() bool { return !alive(pid) })
	var pid2 int
	waitFor(t, "a new server", func() bool {
		res, err := h.g.Call(context.Background(), c, "pid", nil)
		if err != nil {
			return false
		}
		var out struct{ PID int }
		_ = json.Unmarshal(res.Output, &out)
		pid2 = out.PID
		return true
	})
	if pid2 == pid || pid2 == 0 {
		t.Errorf("pid %d after the kill, was %d", pid2, pid)
	}
}

func TestMCPCommandFails(t *testing.T) {
	h := newMCPHarness(t, func(c *Config) { c.BreakerFailures = 2 })
	tl := mcpTool("gone", &MCPUpstream{Command: "/nonexistent/mcp-server"}, "")
	tl.Upstream.MCP.Pinned = &MCPPin{Description: "x"}
	exits := mcpTool("exits", &MCPUpstream{Command: "/bin/true"}, "")
	exits.Upstream.MCP.Pinned = &MCPPin{Description: "x"}
	h.reg.put(tl)
	h.reg.put(exits)
	c := caller("gone", "exits")
	_, err := h.g.Call(context.Background(), c, "exits", nil)
	wantErr(t, err, errdefs.ErrUnavailable)
	for range 2 {
		_, err = h.g.Call(context.Background(), c, "gone", nil)
		wantErr(t, err, errdefs.ErrUnavailable, "tool gone's upstream command could not be started")
		if strings.Contains(err.Error(), "nonexistent") {
			t.Errorf("the error names the host path: %v", err)
		}
	}
	// A failing upstream opens its circuit, as an HTTP one does.
	_, err = h.g.Call(context.Background(), c, "gone", nil)
	wantErr(t, err, errdefs.ErrUnavailable, "is failing")
	wantRecord(t, h.rec.last(t), OutcomeDenied, StageCircuit)
	// Registration fails as clearly.
	_, err = h.g.PinMCP(context.Background(), "tenant-a", mcpTool("gone", &MCPUpstream{Command: "/nonexistent/mcp-server"}, ""))
	wantErr(t, err, errdefs.ErrUnavailable, "could not be asked for its tool", "could not be started")
	_, err = h.g.PinMCP(context.Background(), "tenant-a", mcpTool("no_such_tool", stdioUpstream(t), ""))
	wantErr(t, err, errdefs.ErrInvalidArgument, `lists no tool "no_such_tool"`)
}

func TestMCPSSRF(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		mcptest.Handler(nil).ServeHTTP(w, r)
	}))
	defer srv.Close()
	h := newMCPHarness(t, func(c *Config) { c.AllowUpstream = nil })
	up := &MCPUpstream{URL: srv.URL}
	_, err := h.g.PinMCP(context.Background(), "tenant-a", mcpTool("lookup", up, ""))
	wantErr(t, err, errdefs.ErrPermissionDenied, "a loopback address, which tools may not reach")
	tl := mcpTool("lookup", up, "")
	tl.Upstream.MCP.Pinned = &MCPPin{Description: "x"}
	h.reg.put(tl)
	for range DefaultBreakerFailures + 1 {
		_, err = h.g.Call(context.Background(), caller("lookup"), "lookup", nil)
		wantErr(t, err, errdefs.ErrPermissionDenied, "a loopback address, which tools may not reach")
		wantRecord(t, h.rec.last(t), OutcomeDenied, StageUpstream)
	}
	if hits.Load() != 0 {
		t.Errorf("the loopback server was reached %d times", hits.Load())
	}
}

func TestMCPPinChanged(t *testing.T) {
	t.Run("stdio", func(t *testing.T) {
		h := newMCPHarness(t, nil)
		up := stdioUpstream(t)
		h.register(t, mcpTool("mutating", up, ""), mcpTool("set_description", up, ""))
		c := caller("mutating", "set_description")
		if _, err := h.g.Call(context.Background(), c, "mutating", nil); err != nil {
			t.Fatal(err)
		}
		if _, err := h.g.Call(context.Background(), c, "set_description", json.RawMessage(`{"description":"now it deletes things"}`)); err != nil {
			t.Fatal(err)
		}
		_, err := h.g.Call(context.Background(), c, "mutating", nil)
		wantErr(t, err, errdefs.ErrFailedPrecondition, "the upstream tool changed since it was registered (description): re-register to accept")
		wantRecord(t, h.rec.last(t), OutcomeDenied, StageUpstream)
		// Re-registering accepts the change.
		tl, _ := h.reg.Tool(context.Background(), "tenant-a", "mutating")
		tl.Upstream.MCP.Pinned = nil
		h.register(t, tl)
		if _, err := h.g.Call(context.Background(), c, "mutating", nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("http", func(t *testing.T) {
		h := newMCPHarness(t, nil)
		s := mcptest.NewServer()
		up, _ := httpUpstream(t, s)
		h.register(t, mcpTool("mutating", up, ""))
		if _, err := h.g.Call(context.Background(), caller("mutating"), "mutating", nil); err != nil {
			t.Fatal(err)
		}
		mcptest.SetDescription(s, "changed")
		_, err := h.g.Call(context.Background(), caller("mutating"), "mutating", nil)
		wantErr(t, err, errdefs.ErrFailedPrecondition, "changed since it was registered")
	})
	t.Run("unpinned", func(t *testing.T) {
		h := newMCPHarness(t, nil)
		h.reg.put(mcpTool("lookup", stdioUpstream(t), ""))
		_, err := h.g.Call(context.Background(), caller("lookup"), "lookup", nil)
		wantErr(t, err, errdefs.ErrFailedPrecondition, "never pinned")
		if h.g.mcp.len() != 0 {
			t.Error("an unpinned tool started a session")
		}
	})
	t.Run("differs", func(t *testing.T) {
		ro := &mcp.Tool{Name: "x", Description: "d", InputSchema: map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}},
			Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}
		p := pinOf(ro, time.Now())
		if w := pinOf(ro, time.Time{}).differs(p); w != "" {
			t.Errorf("the same tool differs: %s", w)
		}
		// The pin survives the registry's JSON.
		b, _ := json.Marshal(p)
		var back MCPPin
		_ = json.Unmarshal(b, &back)
		if w := pinOf(ro, time.Time{}).differs(back); w != "" {
			t.Errorf("the stored pin differs: %s", w)
		}
		ch := *ro
		ch.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: false}
		ch.InputSchema = map[string]any{"type": "object"}
		if w := pinOf(&ch, time.Time{}).differs(p); w != "annotations, input schema" {
			t.Errorf("differs %q", w)
		}
	})
}

func TestMCPIdleAndClose(t *testing.T) {
	h := newMCPHarness(t, func(c *Config) { c.MCPIdle = 300 * time.Millisecond })
	up := stdioUpstream(t)
	h.register(t, mcpTool("pid", up, ""))
	c := caller("pid")
	pid := callPID(t, h, c)
	waitFor(t, "the idle server to end", func() bool { return !alive(pid) && h.g.mcp.len() == 0 })
	pid2 := callPID(t, h, c)
	if pid2 == pid {
		t.Fatal("same pid")
	}
	h.g.Close()
	if alive(pid2) {
		t.Error("the server outlived Gateway.Close")
	}
	_, err := h.g.Call(context.Background(), c, "pid", nil)
	wantErr(t, err, errdefs.ErrUnavailable)
}

func TestMCPSessionCap(t *testing.T) {
	h := newMCPHarness(t, func(c *Config) { c.MaxMCPSessions = 1 })
	a, b := stdioUpstream(t, "WHICH", "a"), stdioUpstream(t, "WHICH", "b")
	slow := mcpTool("slow", a, "")
	h.register(t, slow, mcpTool("pid", b, ""))
	c := caller("slow", "pid")
	if h.g.mcp.len() != 1 {
		t.Fatalf("%d sessions, want 1 (the cap)", h.g.mcp.len())
	}
	// A session in use is not evicted: the other upstream's call is
	// refused.
	done := make(chan error, 1)
	go func() {
		_, err := h.g.Call(context.Background(), c, "slow", json.RawMessage(`{"ms":1500}`))
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	_, err := h.g.Call(context.Background(), c, "pid", nil)
	wantErr(t, err, errdefs.ErrResourceExhausted, "upstream MCP sessions is in use")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// An idle one is.
	callPID(t, h, c)
	if h.g.mcp.len() != 1 {
		t.Errorf("%d sessions, want 1", h.g.mcp.len())
	}
}

func TestMCPOversizeAnswer(t *testing.T) {
	h := newMCPHarness(t, func(c *Config) { c.MaxOutputBytes = 1000 })
	up := stdioUpstream(t)
	h.register(t, mcpTool("text", up, ""))
	_, err := h.g.Call(context.Background(), caller("text"), "text", json.RawMessage(`{"text":"`+strings.Repeat("x", 800)+`"}`))
	wantErr(t, err, errdefs.ErrResourceExhausted, "over the limit of 1000 bytes")
	// A message past the transport's cap fails the call, not the daemon.
	_, err = h.g.Call(context.Background(), caller("text"), "text", json.RawMessage(`{"text":"`+strings.Repeat("x", 100_000)+`"}`))
	if err == nil || errors.Is(err, errdefs.ErrInternal) {
		t.Errorf("oversize message: %v", err)
	}
}

// TestMCPHungServer: a server that never answers the handshake costs a
// call its timeout, not more, and goes when the gateway closes.
func TestMCPHungServer(t *testing.T) {
	const marker = "4242.4242"
	h := newMCPHarness(t, nil)
	tl := mcpTool("hung", &MCPUpstream{Command: "/bin/sleep", Args: []string{marker}}, "")
	tl.Governance.TimeoutS = 1
	tl.Upstream.MCP.Pinned = &MCPPin{Description: "x"}
	h.reg.put(tl)
	start := time.Now()
	_, err := h.g.Call(context.Background(), caller("hung"), "hung", nil)
	wantErr(t, err, errdefs.ErrTimeout, "did not answer within 1s")
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("the call took %v", d)
	}
	running := func() bool {
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, _ := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if strings.Contains(string(b), "sleep\x00"+marker) {
				return true
			}
		}
		return false
	}
	if !running() {
		t.Fatal("the hung server is not running (the test checks nothing)")
	}
	start = time.Now()
	h.g.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Close took %v", d)
	}
	waitFor(t, "the hung server to be killed", func() bool { return !running() })
}
