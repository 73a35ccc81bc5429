package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
)

// bearer adds an API key to every request.
type bearer struct {
	key  string
	next http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return b.next.RoundTrip(r)
}

// mcpSession connects the Go SDK's client to the daemon's /mcp with key,
// speaking protocol version.
func mcpSession(t *testing.T, ctx context.Context, d *daemon, key, version string, progress func(*sdk.ProgressNotificationClientRequest)) *sdk.ClientSession {
	t.Helper()
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, &sdk.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *sdk.ProgressNotificationClientRequest) {
			if progress != nil {
				progress(r)
			}
		},
	})
	hc := &http.Client{Transport: bearer{key, http.DefaultTransport}}
	cs, err := c.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: d.URL + "/mcp", HTTPClient: hc, MaxRetries: -1}, &sdk.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connect (%s): %v", version, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// toolNames lists a session's tools.
func toolNames(t *testing.T, ctx context.Context, cs *sdk.ClientSession) []string {
	t.Helper()
	var names []string
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, tool.Name)
	}
	slices.Sort(names)
	return names
}

// call calls a tool and decodes its structured result into out (if not
// nil); a tool error fails the test.
func call(t *testing.T, ctx context.Context, cs *sdk.ClientSession, name string, args map[string]any, out any) *sdk.CallToolResult {
	t.Helper()
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error: %s", name, contentText(res))
	}
	if out != nil {
		b, _ := json.Marshal(res.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: structured content %s: %v", name, b, err)
		}
	}
	return res
}

func contentText(res *sdk.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// TestMCPGo drives /mcp with the official Go SDK's client, over
// Streamable HTTP at both protocol revisions and over stdio (airlock
// mcp): the tools a key's scopes allow, a sandbox created and used
// (commands with progress, code with state and a chart as an image,
// files written, edited and read), the key-less and scope-limited
// refusals, and bad input that leaves the daemon serving.
func TestMCPGo(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)

	all := []string{"create_sandbox", "destroy_sandbox", "edit_file", "execute_program", "get_tool_result", "list_files", "list_sandboxes", "read_file", "run_code", "run_command", "write_file"}
	for _, version := range []string{"2025-11-25", "2026-07-28"} {
		t.Run(version, func(t *testing.T) {
			var progress atomic.Int64
			cs := mcpSession(t, ctx, d, d.Key, version, func(*sdk.ProgressNotificationClientRequest) { progress.Add(1) })
			if got := toolNames(t, ctx, cs); !slices.Equal(got, all) {
				t.Fatalf("tools %v, want %v", got, all)
			}
			var sb struct {
				SandboxID string `json:"sandbox_id"`
				Default   bool   `json:"default"`
			}
			call(t, ctx, cs, "create_sandbox", map[string]any{"metadata": map[string]string{"v": version}}, &sb)
			track(sb.SandboxID)
			if !sb.Default {
				t.Errorf("the created sandbox is not the default: %+v", sb)
			}
			// The default sandbox serves calls without sandbox_id.
			var cmd struct {
				SandboxID string `json:"sandbox_id"`
				ExitCode  int    `json:"exit_code"`
				Stdout    string `json:"stdout"`
			}
			res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "for i in 1 2 3; do echo line$i; sleep 0.6; done; exit 4"},
				Meta: sdk.Meta{"progressToken": "p1"}})
			if err != nil || res.IsError {
				t.Fatalf("run_command: %v %v", err, res)
			}
			b, _ := json.Marshal(res.StructuredContent)
			_ = json.Unmarshal(b, &cmd)
			if cmd.SandboxID != sb.SandboxID || cmd.ExitCode != 4 || cmd.Stdout != "line1\nline2\nline3\n" {
				t.Errorf("run_command: %s", b)
			}
			if version == "2025-11-25" && progress.Load() == 0 {
				t.Error("no progress notification from a 1.8 s command")
			}
			var code struct {
				Results []struct {
					Text  string `json:"text"`
					Image string `json:"image"`
				} `json:"results"`
				Error *struct{ Name string } `json:"error"`
			}
			call(t, ctx, cs, "run_code", map[string]any{"code": "x = 41"}, nil)
			call(t, ctx, cs, "run_code", map[string]any{"code": "x + 1"}, &code)
			if len(code.Results) != 1 || code.Results[0].Text != "42" {
				t.Errorf("run_code state: %+v", code)
			}
			res = call(t, ctx, cs, "run_code", map[string]any{"code": "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()"}, nil)
			images := 0
			for _, c := range res.Content {
				if ic, ok := c.(*sdk.ImageContent); ok && ic.MIMEType == "image/png" && len(ic.Data) > 100 {
					images++
				}
			}
			if images != 1 {
				t.Errorf("a chart gave %d images: %s", images, contentText(res))
			}
			res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"code": "1/0"}})
			if err != nil || !res.IsError || !strings.Contains(contentText(res), "ZeroDivisionError") {
				t.Errorf("an error cell: %v %v", err, res)
			}
			call(t, ctx, cs, "write_file", map[string]any{"path": "notes.txt", "content": "alpha beta\nbeta gamma\n"}, nil)
			res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "edit_file", Arguments: map[string]any{"path": "notes.txt", "old_str": "beta", "new_str": "BETA"}})
			if err != nil || !res.IsError || !strings.Contains(contentText(res), "appears 2 times") {
				t.Errorf("an ambiguous edit: %v %s", err, contentText(res))
			}
			call(t, ctx, cs, "edit_file", map[string]any{"path": "notes.txt", "old_str": "beta gamma", "new_str": "delta"}, nil)
			var file struct{ Content string }
			call(t, ctx, cs, "read_file", map[string]any{"path": "notes.txt"}, &file)
			if file.Content != "alpha beta\ndelta\n" {
				t.Errorf("read_file after the edit: %q", file.Content)
			}
			var ls struct{ Entries []struct{ Name string } }
			call(t, ctx, cs, "list_files", map[string]any{}, &ls)
			if !slices.ContainsFunc(ls.Entries, func(e struct{ Name string }) bool { return e.Name == "notes.txt" }) {
				t.Errorf("list_files: %+v", ls)
			}
			// Bad input: an unknown tool, arguments against the schema.
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "no_such_tool"}); err == nil && !res.IsError {
				t.Error("an unknown tool was called")
			}
			if res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": 7}}); err == nil && !res.IsError {
				t.Error("a number for command was accepted")
			}
			var gone struct{ Destroyed bool }
			call(t, ctx, cs, "destroy_sandbox", map[string]any{"sandbox_id": sb.SandboxID}, &gone)
			if !gone.Destroyed {
				t.Error("destroy_sandbox did not destroy")
			}
		})
	}

	// A key without sandboxes:write is not offered the tools that need it.
	k, err := d.C.CreateKey(ctx, client.CreateKeyRequest{Name: "mcp-ro", Scopes: []string{"sandboxes:read", "exec", "files"}})
	if err != nil {
		t.Fatal(err)
	}
	cs := mcpSession(t, ctx, d, k.Secret, "", nil)
	if got := toolNames(t, ctx, cs); slices.Contains(got, "destroy_sandbox") || slices.Contains(got, "create_sandbox") || !slices.Contains(got, "run_command") {
		t.Errorf("a read/exec/files key is offered %v", got)
	}

	// Without a key: 401 naming the resource metadata, which is served.
	resp, err := http.Post(d.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "oauth-protected-resource/mcp") {
		t.Errorf("no key: %d %q", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, err = http.Get(d.URL + "/.well-known/oauth-protected-resource/mcp")
	if err != nil {
		t.Fatal(err)
	}
	var meta struct {
		Resource string `json:"resource"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&meta)
	resp.Body.Close()
	if !strings.HasSuffix(meta.Resource, "/mcp") {
		t.Errorf("protected-resource metadata: %+v", meta)
	}
	// Malformed JSON-RPC and an oversize message: protocol errors.
	for name, body := range map[string]string{"malformed": `{"jsonrpc":"2.0","id":`, "oversize": `{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"x":"` + strings.Repeat("x", 5<<20) + `"}}`} {
		req, _ := http.NewRequest("POST", d.URL+"/mcp", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+d.Key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%s message: %d", name, resp.StatusCode)
		}
	}

	// stdio: airlock mcp, a client of the same daemon.
	c := sdk.NewClient(&sdk.Implementation{Name: "e2e-stdio", Version: "v1"}, nil)
	cmd := exec.Command(binPath, "mcp")
	cmd.Env = append(daemonEnv(), "AIRLOCK_URL="+d.URL, "AIRLOCK_API_KEY="+d.Key)
	scs, err := c.Connect(ctx, &sdk.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer scs.Close()
	if got := toolNames(t, ctx, scs); !slices.Equal(got, all) {
		t.Errorf("stdio tools %v", got)
	}
	var out struct {
		SandboxID string `json:"sandbox_id"`
		Stdout    string `json:"stdout"`
	}
	call(t, ctx, scs, "run_command", map[string]any{"command": "echo over stdio"}, &out)
	track(out.SandboxID)
	if out.Stdout != "over stdio\n" {
		t.Errorf("stdio run_command: %+v", out)
	}

	// The daemon served on throughout.
	if _, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestMCPGateway: the tenant's gateway tools are tools of /mcp, governed
// and audited as a sandboxed program's calls are: a call answers, a
// Cedar forbid refuses, and a call that needs approval answers
// "pending" at once, then its result through get_tool_result once a
// person approves.
func TestMCPGateway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /echo", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"echo":` + string(b) + `}`))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	url := "http://" + ln.Addr().String() + "/echo"

	d := newEnv(t, "--gateway-allow", "127.0.0.1/32").start()
	ctx := ctxT(t, 3*time.Minute)
	schema := json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)
	for _, tool := range []client.PutToolRequest{
		{Name: "echo", Description: "Echoes.", InputSchema: schema, Governance: client.ToolGovernance{ReadOnly: true},
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "POST", URL: url}}},
		{Name: "refund", Description: "Needs approval.", InputSchema: schema, Governance: client.ToolGovernance{Approval: true, Destructive: true},
			Upstream: client.ToolUpstream{Kind: "http", HTTP: &client.ToolHTTP{Method: "POST", URL: url}}},
	} {
		if _, err := d.C.CreateTool(ctx, tool); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.C.PutPolicy(ctx, `permit(principal, action, resource);
forbid(principal, action, resource == Airlock::Tool::"echo") when { context.args.n > 100 };`); err != nil {
		t.Fatal(err)
	}
	cs := mcpSession(t, ctx, d, d.Key, "", nil)
	names := toolNames(t, ctx, cs)
	if !slices.Contains(names, "echo") || !slices.Contains(names, "refund") || !slices.Contains(names, "get_tool_result") {
		t.Fatalf("tools %v", names)
	}
	var out struct {
		Echo struct{ N int } `json:"echo"`
	}
	call(t, ctx, cs, "echo", map[string]any{"n": 7}, &out)
	if out.Echo.N != 7 {
		t.Errorf("echo: %+v", out)
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"n": 101}})
	if err != nil || !res.IsError || !strings.Contains(contentText(res), "denied by policy") {
		t.Errorf("a forbidden call: %v %s", err, contentText(res))
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "echo", Arguments: map[string]any{"n": "seven"}})
	if err != nil || !res.IsError {
		t.Errorf("arguments against the schema: %v %s", err, contentText(res))
	}

	// An approval: pending at once, then the result.
	start := time.Now()
	var pend struct {
		Status    string `json:"status"`
		PendingID string `json:"pending_id"`
	}
	call(t, ctx, cs, "refund", map[string]any{"n": 5}, &pend)
	if pend.Status != "pending" || pend.PendingID == "" || time.Since(start) > 20*time.Second {
		t.Fatalf("a call waiting for approval: %+v after %v", pend, time.Since(start))
	}
	aps, err := d.C.ListApprovals(ctx, client.ApprovalPending)
	if err != nil || len(aps) != 1 || aps[0].Tool != "refund" {
		t.Fatalf("approvals: %+v %v", aps, err)
	}
	if _, err := d.C.DecideApproval(ctx, aps[0].ID, true, "ok by the test"); err != nil {
		t.Fatal(err)
	}
	var done struct {
		Echo struct{ N int } `json:"echo"`
	}
	call(t, ctx, cs, "get_tool_result", map[string]any{"pending_id": pend.PendingID, "wait_s": 30}, &done)
	if done.Echo.N != 5 {
		t.Errorf("the approved call's result: %+v", done)
	}
	res, err = cs.CallTool(ctx, &sdk.CallToolParams{Name: "get_tool_result", Arguments: map[string]any{"pending_id": pend.PendingID}})
	if err != nil || !res.IsError {
		t.Errorf("a result taken twice: %v %s", err, contentText(res))
	}

	// Every call is on the record.
	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "tool.call", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for _, r := range recs {
		outcomes[r.Outcome]++
	}
	if outcomes["ok"] != 2 || outcomes["denied"] != 2 {
		t.Errorf("tool.call records by outcome: %v (want 2 ok: echo and the approved refund; 2 denied: the forbid and the schema)", outcomes)
	}
}
