package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/gateway/mcptest"
)

// The test binary is also the stdio MCP server the daemon runs.
func init() { mcptest.ServeStdioIfAsked() }

// TestMCPUpstream: a tool of an upstream MCP server (this test binary
// as a stdio server, run by the daemon, with a secret in its
// environment) called from a sandboxed Python program through the
// gateway and by the key directly (POST /v1/tools/{name}/call); a Cedar
// forbid refuses the same upstream tool under another name both ways;
// the audit log has every call, and the secret is in none of the
// outputs or records.
func TestMCPUpstream(t *testing.T) {
	const canary = "mcpup-canary-0c9e41"
	d := newEnv(t).start()
	ctx := ctxT(t, 2*time.Minute)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.PutSecret(ctx, "mcp_tok", client.PutSecretRequest{Value: []byte(canary)}); err != nil {
		t.Fatal(err)
	}
	up := func(tool string) *client.ToolMCP {
		return &client.ToolMCP{Command: exe, Env: map[string]string{mcptest.ServeEnv: "1", "MCPTEST_TOKEN": "{secret.mcp_tok}"}, Tool: tool}
	}
	schema := json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)
	for _, tool := range []client.PutToolRequest{
		{Name: "lookup", InputSchema: schema, Governance: client.ToolGovernance{ReadOnly: true}, Upstream: client.ToolUpstream{Kind: "mcp", MCP: up("")}},
		{Name: "blocked", InputSchema: schema, Upstream: client.ToolUpstream{Kind: "mcp", MCP: up("lookup")}},
	} {
		got, err := d.C.CreateTool(ctx, tool)
		if err != nil {
			t.Fatal(err)
		}
		if got.Upstream.MCP == nil || got.Upstream.MCP.Pinned == nil || got.Upstream.MCP.Pinned.InputSchemaSHA256 == "" {
			t.Fatalf("tool %s was not pinned: %+v", tool.Name, got.Upstream.MCP)
		}
	}
	if _, err := d.C.PutPolicy(ctx, `permit(principal, action, resource);
@id("no-blocked") forbid(principal, action, resource == Airlock::Tool::"blocked");`); err != nil {
		t.Fatal(err)
	}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Tools: []string{"lookup", "blocked"}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	program := `
import json, tools
r = tools.call("lookup", q="from-sandbox")
print(r["args"]["q"], r["token"], r["token_sha256"])
try:
    tools.call("blocked", q="x")
    print("blocked ok")
except tools.ToolError as e:
    print("blocked", e.code)
`
	res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "python3 -c '" + program + "'", Timeout: time.Minute})
	sum := sha256.Sum256([]byte(canary))
	want := "from-sandbox [redacted] " + hex.EncodeToString(sum[:]) + "\nblocked permission_denied\n"
	if res.ExitCode != 0 || string(res.Stdout) != want {
		t.Fatalf("the program: exit %d\nstdout %q\nstderr %q\nwant %q", res.ExitCode, res.Stdout, res.Stderr, want)
	}

	// The same tools, called by the key.
	out, err := d.C.CallTool(ctx, "lookup", map[string]string{"q": "direct"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"q":"direct"`) || strings.Contains(string(out), canary) {
		t.Errorf("direct result %s", out)
	}
	if _, err := d.C.CallTool(ctx, "blocked", map[string]string{"q": "x"}); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "no-blocked") {
		t.Errorf("direct call of the forbidden tool: %v", err)
	}

	// And from an MCP client through /mcp: the same tool, governed the same.
	cs := mcpSession(t, ctx, d, d.Key, "", nil)
	var viaMCP map[string]any
	call(t, ctx, cs, "lookup", map[string]any{"q": "via-mcp"}, &viaMCP)
	if b, _ := json.Marshal(viaMCP); !strings.Contains(string(b), `"q":"via-mcp"`) || strings.Contains(string(b), canary) {
		t.Errorf("the upstream tool through /mcp: %s", b)
	}
	if r, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "blocked", Arguments: map[string]any{"q": "x"}}); err != nil || !r.IsError || !strings.Contains(contentText(r), "no-blocked") {
		t.Errorf("the forbidden tool through /mcp: %v %v", err, r)
	}

	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "tool.call", Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]int{}
	for _, r := range recs {
		var det struct {
			Tool  string `json:"tool"`
			Stage string `json:"stage"`
		}
		_ = json.Unmarshal(r.Details, &det)
		from := "sandbox"
		if r.Target != sb.ID {
			from = r.Target[:min(4, len(r.Target))]
		}
		calls[from+" "+det.Tool+" "+r.Outcome+"/"+det.Stage]++
	}
	// The direct calls and the MCP client's are the key's: two each.
	for w, n := range map[string]int{"sandbox lookup ok/": 1, "sandbox blocked denied/policy": 1, "key: lookup ok/": 2, "key: blocked denied/policy": 2} {
		if calls[w] != n {
			t.Errorf("tool.call records %v: want %d %q", calls, n, w)
		}
	}
	inv, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "tool.invoke", Limit: 100})
	if err != nil || len(inv) < 2 {
		t.Errorf("tool.invoke records: %d %v", len(inv), err)
	}
	all, _, err := d.C.AuditList(ctx, client.AuditQuery{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(all)
	if strings.Contains(string(b)+string(res.Stdout)+string(res.Stderr), canary) {
		t.Error("the secret shows in the audit log or the program's output")
	}
}
