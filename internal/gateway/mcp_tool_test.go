package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestMCPUpstreamValidate(t *testing.T) {
	stdio := func() Tool {
		return Tool{Name: "t", InputSchema: json.RawMessage(objSchema), Upstream: Upstream{Kind: UpstreamMCP,
			MCP: &MCPUpstream{Command: "/usr/bin/server", Args: []string{"--x"}, Env: map[string]string{"TOKEN": "{secret.tok}", "A": "b"}, Tool: "get.thing-1"}}}
	}
	web := func() Tool {
		return Tool{Name: "t", InputSchema: json.RawMessage(objSchema), Upstream: Upstream{Kind: UpstreamMCP,
			MCP: &MCPUpstream{URL: "https://mcp.example.com/mcp", Headers: map[string]string{"Authorization": "Bearer {secret.tok}"}}}}
	}
	for _, ok := range []Tool{stdio(), web()} {
		if err := ok.Validate(); err != nil {
			t.Fatalf("valid tool: %v", err)
		}
	}
	for _, tt := range []struct {
		name, want string
		base       func() Tool
		mod        func(m *MCPUpstream)
	}{
		{"neither", "upstream.mcp.command (a stdio server run on the host) or upstream.mcp.url", stdio, func(m *MCPUpstream) { m.Command = "" }},
		{"both", "upstream.mcp.command and upstream.mcp.url are exclusive", stdio, func(m *MCPUpstream) { m.URL = "https://a.example.com" }},
		{"relative command", "upstream.mcp.command \"server\" must be an absolute, clean path", stdio, func(m *MCPUpstream) { m.Command = "server" }},
		{"unclean command", "absolute, clean path", stdio, func(m *MCPUpstream) { m.Command = "/usr/bin/../bin/server" }},
		{"NUL command", "upstream.mcp.command must be at most", stdio, func(m *MCPUpstream) { m.Command = "/bin/a\x00b" }},
		{"too many args", "upstream.mcp.args has 65 entries", stdio, func(m *MCPUpstream) { m.Args = make([]string, 65) }},
		{"secret in args", "upstream.mcp.args[0]: placeholders are not replaced in args", stdio, func(m *MCPUpstream) { m.Args = []string{"--key={secret.tok}"} }},
		{"long arg", "upstream.mcp.args[0] must be at most", stdio, func(m *MCPUpstream) { m.Args = []string{strings.Repeat("a", MaxMCPArgBytes+1)} }},
		{"bad env name", `upstream.mcp.env: "1X" is not a valid variable name`, stdio, func(m *MCPUpstream) { m.Env = map[string]string{"1X": "a"} }},
		{"args in env", "upstream.mcp.env.A: only {secret.NAME} may stand here", stdio, func(m *MCPUpstream) { m.Env = map[string]string{"A": "{args.x}"} }},
		{"bad secret in env", "upstream.mcp.env.A: {secret.", stdio, func(m *MCPUpstream) { m.Env = map[string]string{"A": "{secret.no such}"} }},
		{"unclosed secret", "has no closing", stdio, func(m *MCPUpstream) { m.Env = map[string]string{"A": "{secret.tok"} }},
		{"control in env", "upstream.mcp.env.A has a control character", stdio, func(m *MCPUpstream) { m.Env = map[string]string{"A": "a\nb"} }},
		{"headers on command", "upstream.mcp.headers are for a url", stdio, func(m *MCPUpstream) { m.Headers = map[string]string{"X": "y"} }},
		{"bad tool", "upstream.mcp.tool \"a b\"", stdio, func(m *MCPUpstream) { m.Tool = "a b" }},
		{"env on url", "upstream.mcp.args and env are for a command", web, func(m *MCPUpstream) { m.Env = map[string]string{"A": "b"} }},
		{"file url", "upstream.mcp.url must be an absolute http or https URL", web, func(m *MCPUpstream) { m.URL = "file:///etc/passwd" }},
		{"url user", "upstream.mcp.url may not carry a user", web, func(m *MCPUpstream) { m.URL = "https://u:p@a.example.com/" }},
		{"url placeholder", "upstream.mcp.url may hold no placeholder", web, func(m *MCPUpstream) { m.URL = "https://a.example.com/{secret.tok}" }},
		{"url fragment", "upstream.mcp.url may not have a fragment", web, func(m *MCPUpstream) { m.URL = "https://a.example.com/#x" }},
		{"long url", "upstream.mcp.url is longer", web, func(m *MCPUpstream) { m.URL = "https://a.example.com/" + strings.Repeat("a", MaxURLBytes) }},
		{"session header", "upstream.mcp.headers: Mcp-Session-Id is set by the gateway", web, func(m *MCPUpstream) { m.Headers = map[string]string{"Mcp-Session-Id": "x"} }},
		{"host header", "upstream.mcp.headers: Host is set by the gateway", web, func(m *MCPUpstream) { m.Headers = map[string]string{"Host": "x"} }},
		{"twice", "is given twice", web, func(m *MCPUpstream) { m.Headers = map[string]string{"X-A": "1", "x-a": "2"} }},
		{"args in header", "upstream.mcp.headers.X-A: only {secret.NAME}", web, func(m *MCPUpstream) { m.Headers = map[string]string{"X-A": "{args.q}"} }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tl := tt.base()
			tt.mod(tl.Upstream.MCP)
			err := tl.Validate()
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want invalid argument saying %q", err, tt.want)
			}
		})
	}
	for _, tt := range []struct {
		name, want string
		u          Upstream
	}{
		{"mcp without mcp", "upstream.mcp is required", Upstream{Kind: UpstreamMCP}},
		{"mcp with http", "upstream.http must be empty", Upstream{Kind: UpstreamMCP, HTTP: &HTTPUpstream{}, MCP: &MCPUpstream{Command: "/a"}}},
		{"http with mcp", "upstream.mcp must be empty", Upstream{Kind: UpstreamHTTP, HTTP: &HTTPUpstream{Method: "GET", URL: "https://a.example.com"}, MCP: &MCPUpstream{}}},
		{"caller with mcp", "must be empty", Upstream{Kind: UpstreamCaller, MCP: &MCPUpstream{}}},
	} {
		if err := tt.u.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestRegistryPinsMCP(t *testing.T) {
	ctx := context.Background()
	g, _ := newTestRegistry(t)
	tl := Tool{Name: "lookup", InputSchema: json.RawMessage(objSchema), Upstream: Upstream{Kind: UpstreamMCP,
		MCP: &MCPUpstream{Command: "/usr/bin/server", Pinned: &MCPPin{Description: "what the caller claims"}}}}
	// Without a pinner, an MCP tool is refused: it could not be checked.
	if _, err := g.CreateTool(ctx, "t1", tl); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Fatalf("create without a pinner: %v", err)
	}
	var asked []Tool
	sawPin := false
	g.SetPinner(func(_ context.Context, tenant string, t Tool) (*MCPPin, error) {
		asked = append(asked, t)
		sawPin = sawPin || t.Upstream.MCP.Pinned != nil
		if t.Upstream.MCP.Tool == "missing" {
			return nil, errdefs.Publicf(errdefs.ErrInvalidArgument, "upstream.mcp.tool: no such tool")
		}
		return &MCPPin{Description: "from " + tenant, InputSchemaSHA256: "abc"}, nil
	})
	got, err := g.CreateTool(ctx, "t1", tl)
	if err != nil {
		t.Fatal(err)
	}
	if p := got.Upstream.MCP.Pinned; p == nil || p.Description != "from t1" || p.InputSchemaSHA256 != "abc" {
		t.Errorf("pinned %+v", got.Upstream.MCP.Pinned)
	}
	if len(asked) != 1 || sawPin {
		t.Errorf("the pinner was asked %d times, with the caller's pin: %v", len(asked), sawPin)
	}
	if tl.Upstream.MCP.Pinned.Description != "what the caller claims" {
		t.Error("the caller's tool was changed")
	}
	stored, err := g.Tool(ctx, "t1", "lookup")
	if err != nil || stored.Upstream.MCP.Pinned == nil || stored.Upstream.MCP.Pinned.Description != "from t1" {
		t.Errorf("stored %+v %v", stored.Upstream.MCP, err)
	}
	// A replace pins again; a pin that fails leaves the tool as it was.
	tl.Upstream.MCP.Tool = "missing"
	if _, err := g.ReplaceTool(ctx, "t1", tl); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("replace with a failing pin: %v", err)
	}
	if stored, _ := g.Tool(ctx, "t1", "lookup"); stored.Upstream.MCP.Tool != "" {
		t.Errorf("a failed replace changed the tool: %+v", stored.Upstream.MCP)
	}
	// Other kinds are not pinned.
	if _, err := g.CreateTool(ctx, "t1", callerTool("other")); err != nil || len(asked) != 2 {
		t.Errorf("caller tool: %v, pinner asked %d times", err, len(asked))
	}
}
