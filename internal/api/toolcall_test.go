package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/gateway/mcptest"
)

// The test binary is also the stdio MCP server of the MCP tools here.
func init() { mcptest.ServeStdioIfAsked() }

// gatewayEnv is a realEnv whose handler registers tools in a registry
// over its database, pinned by a real gateway, and calls them through
// it (POST /v1/tools/{name}/call); recs are the gateway's records.
type gatewayEnv struct {
	*realEnv
	gw     *gateway.Gateway
	mu     sync.Mutex
	recs   []gateway.Record
	policy string
}

func newGatewayEnv(t *testing.T) *gatewayEnv {
	t.Helper()
	e := &gatewayEnv{realEnv: newRealEnv(t)}
	reg := gateway.NewRegistry(e.st)
	gw, err := gateway.New(gateway.Config{
		Registry:      reg,
		Record:        func(r gateway.Record) { e.mu.Lock(); e.recs = append(e.recs, r); e.mu.Unlock() },
		Policies:      func(context.Context, string) (string, error) { e.mu.Lock(); defer e.mu.Unlock(); return e.policy, nil },
		AllowUpstream: func(a netip.Addr) bool { return a.IsLoopback() },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	reg.SetPinner(gw.PinMCP)
	e.gw = gw
	e.h.tools = reg
	e.h.toolGateway = gw
	return e
}

func (e *gatewayEnv) records() []gateway.Record {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]gateway.Record(nil), e.recs...)
}

func TestToolCallRoute(t *testing.T) {
	e := newGatewayEnv(t)
	mcpSrv := httptest.NewServer(mcptest.Handler(nil))
	defer mcpSrv.Close()
	ctx := context.Background()
	writer := e.key(tenantA, auth.ScopeToolsWrite, auth.ScopeToolsRead)
	callKey := e.key(tenantA, auth.ScopeToolsCall)

	// A URL upstream needs only tools:write; registering pins the
	// upstream's tool.
	st, body := e.doBody("POST", "/v1/tools", writer, `{"name":"lookup","input_schema":{"type":"object","properties":{"q":{"type":"string"}},"additionalProperties":false},
		"upstream":{"kind":"mcp","mcp":{"url":"`+mcpSrv.URL+`","pinned":{"description":"forged","input_schema_sha256":"x","pinned_at":"2020-01-01T00:00:00Z"}}},
		"governance":{"read_only":true}}`)
	if st != http.StatusCreated {
		t.Fatalf("create = %d %s", st, body)
	}
	var tl wire.Tool
	_ = json.Unmarshal([]byte(body), &tl)
	if m := tl.Upstream.MCP; m == nil || m.Pinned == nil || m.Pinned.Description != "echoes its arguments and the credential it was given" ||
		len(m.Pinned.InputSchemaSHA256) != 64 || !strings.Contains(string(m.Pinned.Annotations), `"readOnlyHint":true`) {
		t.Errorf("created %s", body)
	}
	// A tool the upstream does not have is refused at registration.
	st, body = e.doBody("POST", "/v1/tools", writer, `{"name":"nope","input_schema":{"type":"object"},"upstream":{"kind":"mcp","mcp":{"url":"`+mcpSrv.URL+`"}}}`)
	if st != http.StatusBadRequest || !strings.Contains(body, `lists no tool \"nope\"`) {
		t.Errorf("create of a tool the upstream lacks = %d %s", st, body)
	}
	// A command on the host needs the operator scope.
	exe, _ := os.Executable()
	stdio := `{"name":"pid","input_schema":{"type":"object"},"upstream":{"kind":"mcp","mcp":{"command":` + quote(exe) + `,"env":{"` + mcptest.ServeEnv + `":"1"}}}}`
	st, body = e.doBody("POST", "/v1/tools", e.adminA, stdio)
	if st != http.StatusForbidden || !strings.Contains(body, "needs the operator scope") {
		t.Errorf("stdio tool by an admin = %d %s, want 403", st, body)
	}
	if st, body := e.doBody("POST", "/v1/tools", e.key(tenantA, auth.ScopeOperator), stdio); st != http.StatusCreated {
		t.Errorf("stdio tool by the operator = %d %s", st, body)
	}

	// Calls, as the key.
	c := e.client(callKey)
	out, err := c.CallTool(ctx, "lookup", map[string]any{"q": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), `"args":{"q":"x"}`) {
		t.Errorf("result %s", out)
	}
	if out, err := c.CallTool(ctx, "pid", nil); err != nil || !strings.Contains(string(out), `"pid"`) {
		t.Errorf("stdio call: %s %v", out, err)
	}
	recs := e.records()
	if len(recs) != 2 {
		t.Fatalf("%d records", len(recs))
	}
	keyID := recs[0].Caller.KeyID
	if recs[0].Outcome != gateway.OutcomeOK || recs[0].Caller.Sandbox != DirectCaller(keyID) || keyID == "" || recs[0].Caller.Tenant != tenantA {
		t.Errorf("record %+v", recs[0])
	}
	// Refusals: the schema, the tenant's policy, a missing tool, another
	// tenant's key.
	_, err = c.CallTool(ctx, "lookup", map[string]any{"q": 1})
	if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "do not match its input schema") {
		t.Errorf("bad args: %v", err)
	}
	e.mu.Lock()
	e.policy = `permit(principal, action, resource);
@id("no-key-lookups") forbid(principal, action, resource == Airlock::Tool::"lookup") when { principal.key == "` + keyID + `" };`
	e.mu.Unlock()
	_, err = c.CallTool(ctx, "lookup", map[string]any{"q": "x"})
	if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "denied by policy: forbidden by no-key-lookups") {
		t.Errorf("forbidden call: %v", err)
	}
	if r := e.records()[len(e.records())-1]; r.Outcome != gateway.OutcomeDenied || r.Stage != gateway.StagePolicy {
		t.Errorf("record %+v", r)
	}
	if _, err := c.CallTool(ctx, "missing", nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("missing tool: %v", err)
	}
	if _, err := e.client(e.key(tenantB, auth.ScopeToolsCall)).CallTool(ctx, "lookup", nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("another tenant's tool: %v", err)
	}
	if st, body := e.doBody("POST", "/v1/tools/lookup/call", callKey, `{"args":[1]}`); st != http.StatusBadRequest {
		t.Errorf("args not an object = %d %s", st, body)
	}
	if st, body := e.doBody("POST", "/v1/tools/lookup/call", callKey, `{"argz":{}}`); st != http.StatusBadRequest {
		t.Errorf("unknown field = %d %s", st, body)
	}
	// Every call has its intent and outcome records.
	got := e.outcomes(t, ActionToolInvoke)
	if !got[ActionToolInvoke+" ok"] || len(got) < 2 {
		t.Errorf("outcomes %v", got)
	}
}

func TestToolCallNotServed(t *testing.T) {
	e := newToolsEnv(t)
	st, body := e.doBody("POST", "/v1/tools/x/call", e.key(tenantA, auth.ScopeToolsCall), `{}`)
	if st != http.StatusNotImplemented {
		t.Errorf("call without a gateway = %d %s", st, body)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
