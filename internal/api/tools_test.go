package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// newToolsEnv is a realEnv whose handler serves /v1/tools and
// /v1/toolsets from a registry over the env's database.
func newToolsEnv(t *testing.T) *realEnv {
	t.Helper()
	e := newRealEnv(t)
	e.h.tools = gateway.NewRegistry(e.st)
	return e
}

const expensesTool = `{
  "name": "get_expenses",
  "description": "Expenses of one employee.",
  "input_schema": {"type": "object", "properties": {"employee_id": {"type": "string"}}, "required": ["employee_id"]},
  "upstream": {"kind": "http", "http": {"method": "GET",
    "url": "https://expenses.example.com/v1/{args.employee_id}",
    "headers": {"Authorization": "Bearer {secret.EXPENSES_TOKEN}"}}},
  "governance": {"read_only": true, "timeout_s": 10, "redact": ["employee_id"]}
}`

// TestToolRoutes: create, get, list, replace and delete a tool and a
// toolset; the answers' bodies and statuses; the audit records.
func TestToolRoutes(t *testing.T) {
	e := newToolsEnv(t)
	st, body := e.doBody("POST", "/v1/tools", e.adminA, expensesTool)
	if st != http.StatusCreated {
		t.Fatalf("create = %d %s", st, body)
	}
	var tl wire.Tool
	if err := json.Unmarshal([]byte(body), &tl); err != nil {
		t.Fatal(err)
	}
	if tl.Name != "get_expenses" || tl.Upstream.HTTP == nil || tl.Upstream.HTTP.Headers["Authorization"] != "Bearer {secret.EXPENSES_TOKEN}" ||
		tl.Governance.TimeoutS != 10 || !tl.Governance.ReadOnly || tl.CreatedAt.IsZero() || !strings.Contains(string(tl.InputSchema), "employee_id") {
		t.Errorf("created = %+v", tl)
	}
	if st, body := e.doBody("POST", "/v1/tools", e.adminA, expensesTool); st != http.StatusConflict || !strings.Contains(body, "already_exists") {
		t.Errorf("create again = %d %s, want 409", st, body)
	}
	if st, body := e.doBody("GET", "/v1/tools/get_expenses", e.adminA, ""); st != http.StatusOK || !strings.Contains(body, `"get_expenses"`) {
		t.Errorf("get = %d %s", st, body)
	}
	caller := `{"input_schema":{"type":"object"},"upstream":{"kind":"caller"},"description":"by the caller"}`
	st, body = e.doBody("PUT", "/v1/tools/get_expenses", e.adminA, caller)
	if st != http.StatusOK {
		t.Fatalf("replace = %d %s", st, body)
	}
	var repl wire.Tool
	_ = json.Unmarshal([]byte(body), &repl)
	if repl.Upstream.Kind != "caller" || repl.Upstream.HTTP != nil || repl.Description != "by the caller" || !repl.CreatedAt.Equal(tl.CreatedAt) {
		t.Errorf("replaced = %+v", repl)
	}
	if st, body := e.doBody("PUT", "/v1/tools/nope", e.adminA, caller); st != http.StatusNotFound {
		t.Errorf("replace missing = %d %s, want 404", st, body)
	}
	if st, body := e.doBody("PUT", "/v1/tools/get_expenses", e.adminA, `{"name":"other","input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`); st != http.StatusBadRequest || !strings.Contains(body, "not the path's") {
		t.Errorf("replace with another name = %d %s, want 400", st, body)
	}
	if st, body := e.doBody("GET", "/v1/tools", e.adminA, ""); st != http.StatusOK || !strings.Contains(body, `"tools":[{"name":"get_expenses"`) {
		t.Errorf("list = %d %s", st, body)
	}

	if st, body := e.doBody("POST", "/v1/toolsets", e.adminA, `{"name":"expenses","tools":["get_expenses"]}`); st != http.StatusCreated || !strings.Contains(body, `"tools":["get_expenses"]`) {
		t.Errorf("create toolset = %d %s", st, body)
	}
	if st, body := e.doBody("POST", "/v1/toolsets", e.adminA, `{"name":"bad","tools":["get_expenses","nope"]}`); st != http.StatusBadRequest || !strings.Contains(body, "tools[1]: tool nope is not registered") {
		t.Errorf("create toolset with an unknown tool = %d %s, want 400 naming it", st, body)
	}
	if st, body := e.doBody("PUT", "/v1/toolsets/expenses", e.adminA, `{"tools":[]}`); st != http.StatusOK || !strings.Contains(body, `"tools":[]`) {
		t.Errorf("replace toolset = %d %s", st, body)
	}
	if st, body := e.doBody("GET", "/v1/toolsets", e.adminA, ""); st != http.StatusOK || !strings.Contains(body, `"toolsets":[{"name":"expenses","tools":[]`) {
		t.Errorf("list toolsets = %d %s", st, body)
	}
	if st, body := e.doBody("GET", "/v1/toolsets/expenses", e.adminA, ""); st != http.StatusOK {
		t.Errorf("get toolset = %d %s", st, body)
	}
	if st, body := e.doBody("DELETE", "/v1/toolsets/expenses", e.adminA, ""); st != http.StatusNoContent {
		t.Errorf("delete toolset = %d %s", st, body)
	}
	if st, body := e.doBody("DELETE", "/v1/tools/get_expenses", e.adminA, ""); st != http.StatusNoContent {
		t.Errorf("delete = %d %s", st, body)
	}
	if st, body := e.doBody("GET", "/v1/tools/get_expenses", e.adminA, ""); st != http.StatusNotFound {
		t.Errorf("get deleted = %d %s", st, body)
	}
	if st, body := e.doBody("DELETE", "/v1/tools/get_expenses", e.adminA, ""); st != http.StatusNotFound {
		t.Errorf("delete again = %d %s", st, body)
	}

	got := e.outcomes(t, ActionToolCreate, ActionToolUpdate, ActionToolDelete, ActionToolsetCreate, ActionToolsetUpdate, ActionToolsetDelete)
	for _, want := range []string{"tool.create ok", "tool.create already_exists", "tool.update ok", "tool.update not_found", "tool.delete ok",
		"toolset.create ok", "toolset.update ok", "toolset.delete ok"} {
		if !got[want] {
			t.Errorf("no audit outcome %q among %v", want, got)
		}
	}
	// The intent names the tool and what runs it, never a header.
	page, err := e.log.Select(context.Background(), audit.Query{Limit: 1000}, audit.PhaseIntent)
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, r := range page.Records {
		if r.Action == ActionToolCreate {
			found = true
			var d map[string]any
			_ = json.Unmarshal(r.Details, &d)
			if r.Target != "get_expenses" || d["upstream"] != "http" || d["method"] != "GET" || d["url"] != "https://expenses.example.com/v1/{args.employee_id}" {
				t.Errorf("tool.create intent = %+v", r)
			}
			if b, _ := json.Marshal(r); strings.Contains(string(b), "EXPENSES_TOKEN") {
				t.Errorf("audit record holds a header: %s", b)
			}
		}
	}
	if !found {
		t.Error("no tool.create intent")
	}
}

// TestToolRequestsRefused: bodies and names the registry refuses are
// 400s naming the field, and nothing is stored.
func TestToolRequestsRefused(t *testing.T) {
	e := newToolsEnv(t)
	for _, c := range []struct {
		method, path, body, want string
	}{
		{"POST", "/v1/tools", `{"input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`, "name is required"},
		{"POST", "/v1/tools", `{"name":"Bad","input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`, `name \"Bad\"`},
		{"POST", "/v1/tools", `{"name":"class","input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`, "reserved"},
		{"POST", "/v1/tools", `{"name":"x","upstream":{"kind":"caller"}}`, "input_schema is required"},
		{"POST", "/v1/tools", `{"name":"x","input_schema":{"type":"object","properties":{"a":{"$ref":"https://schemas.example.com/a.json"}}},"upstream":{"kind":"caller"}}`, "input_schema: schema"},
		{"POST", "/v1/tools", `{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"ftp"}}`, "upstream.kind"},
		{"POST", "/v1/tools", `{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"http","http":{"method":"GET","url":"https://{args.h}/"}}}`, "host"},
		{"POST", "/v1/tools", `{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"http","http":{"method":"GET","url":"https://a.example.com/?k={secret.K}"}}}`, "secrets may be used only in header values"},
		{"POST", "/v1/tools", `{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"governance":{"timeout_s":301}}`, "governance.timeout_s"},
		{"POST", "/v1/tools", `{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"owner":"tenant-b"}`, "unknown field"},
		{"POST", "/v1/tools?x=1", `{}`, "no query parameters"},
		{"GET", "/v1/tools/Bad", ``, `name \"Bad\"`},
		{"PUT", "/v1/tools/x", `{"input_schema":{"type":"object"},"upstream":{"kind":"caller"},"governance":{"redact":["a","a"]}}`, "governance.redact"},
		{"POST", "/v1/toolsets", `{"tools":[]}`, "name is required"},
		{"POST", "/v1/toolsets", `{"name":"s","tools":["a","a"]}`, "twice"},
		{"POST", "/v1/toolsets", `{"name":"s","tools":["A"]}`, "tools[0]"},
	} {
		st, body := e.doBody(c.method, c.path, e.adminA, c.body)
		if st != http.StatusBadRequest || !strings.Contains(body, c.want) {
			t.Errorf("%s %s %s = %d %s, want 400 saying %q", c.method, c.path, c.body, st, body, c.want)
		}
	}
	if st, body := e.doBody("GET", "/v1/tools", e.adminA, ""); st != http.StatusOK || body != `{"tools":[]}`+"\n" {
		t.Errorf("after refusals, list = %d %q, want none", st, body)
	}
}

// TestToolsTenantIsolation: a tenant never sees, replaces or deletes
// another tenant's tools and toolsets, and may use the same names.
func TestToolsTenantIsolation(t *testing.T) {
	e := newToolsEnv(t)
	ctx := context.Background()
	a, b := e.client(e.adminA), e.client(e.adminB)
	req := client.PutToolRequest{Name: "shared_name", Description: "A's", InputSchema: json.RawMessage(`{"type":"object"}`)}
	req.Upstream.Kind = "caller"
	if _, err := a.CreateTool(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateToolset(ctx, client.PutToolsetRequest{Name: "set", Tools: []string{"shared_name"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.GetTool(ctx, "shared_name"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B gets A's tool: %v", err)
	}
	if _, err := b.GetToolset(ctx, "set"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B gets A's toolset: %v", err)
	}
	if l, err := b.ListTools(ctx); err != nil || len(l) != 0 {
		t.Errorf("B lists %+v, %v", l, err)
	}
	if l, err := b.ListToolsets(ctx); err != nil || len(l) != 0 {
		t.Errorf("B lists toolsets %+v, %v", l, err)
	}
	if _, err := b.ReplaceTool(ctx, "shared_name", req); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B replaces A's tool: %v", err)
	}
	if err := b.DeleteTool(ctx, "shared_name"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B deletes A's tool: %v", err)
	}
	if err := b.DeleteToolset(ctx, "set"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("B deletes A's toolset: %v", err)
	}
	// B's toolset may not list A's tool.
	if _, err := b.CreateToolset(ctx, client.PutToolsetRequest{Name: "set", Tools: []string{"shared_name"}}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("B's toolset of A's tool: %v", err)
	}
	req.Description = "B's"
	if _, err := b.CreateTool(ctx, req); err != nil {
		t.Errorf("B registers the same name: %v", err)
	}
	if tl, err := a.GetTool(ctx, "shared_name"); err != nil || tl.Description != "A's" {
		t.Errorf("A's tool after B's = %+v, %v", tl, err)
	}
}

// TestToolScopes: tools:read lists and inspects, tools:write changes;
// neither does the other's work, and sandbox scopes do neither.
func TestToolScopes(t *testing.T) {
	e := newToolsEnv(t)
	read := e.key(tenantA, auth.ScopeToolsRead)
	write := e.key(tenantA, auth.ScopeToolsWrite)
	other := e.key(tenantA, auth.ScopeSandboxesWrite, auth.ScopeExec)
	create := `{"name":"t1","input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`
	if st, body := e.doBody("POST", "/v1/tools", write, create); st != http.StatusCreated {
		t.Fatalf("tools:write create = %d %s", st, body)
	}
	for _, c := range []struct {
		method, path, key, body string
		want                    int
	}{
		{"GET", "/v1/tools", read, "", 200},
		{"GET", "/v1/tools/t1", read, "", 200},
		{"GET", "/v1/toolsets", read, "", 200},
		{"POST", "/v1/tools", read, `{"name":"t2","input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`, 403},
		{"DELETE", "/v1/tools/t1", read, "", 403},
		{"POST", "/v1/toolsets", read, `{"name":"s","tools":[]}`, 403},
		{"GET", "/v1/tools", write, "", 403},
		{"GET", "/v1/toolsets/s", write, "", 403},
		{"GET", "/v1/tools", other, "", 403},
		{"POST", "/v1/tools", other, create, 403},
	} {
		if st, body := e.doBody(c.method, c.path, c.key, c.body); st != c.want {
			t.Errorf("%s %s = %d %s, want %d", c.method, c.path, st, body, c.want)
		}
	}
}

// TestToolsNotServed: without Config.Tools the routes answer 501.
func TestToolsNotServed(t *testing.T) {
	e := newRealEnv(t)
	for _, p := range []string{"/v1/tools", "/v1/tools/x", "/v1/toolsets", "/v1/toolsets/x"} {
		if st, body := e.doBody("GET", p, e.adminA, ""); st != http.StatusNotImplemented || !strings.Contains(body, "not_supported") {
			t.Errorf("GET %s = %d %s, want 501", p, st, body)
		}
	}
}

// TestToolWireConversion: every field of a request reaches the gateway's
// tool, and every field of the tool reaches the answer.
func TestToolWireConversion(t *testing.T) {
	var req wire.PutToolRequest
	if err := json.Unmarshal([]byte(expensesTool), &req); err != nil {
		t.Fatal(err)
	}
	req.OutputSchema = json.RawMessage(`{"type":"array"}`)
	req.Upstream.HTTP.Body = "b"
	req.Governance = wire.ToolGovernance{ReadOnly: true, Destructive: true, Approval: true, TimeoutS: 1, RatePerMinute: 2,
		MaxCallsPerSandbox: 3, MaxConcurrent: 4, Redact: []string{"r"}, DryRun: true}
	tl := toolFromWire(req)
	if !reflect.DeepEqual(tl.Governance, gateway.Governance{ReadOnly: true, Destructive: true, Approval: true, TimeoutS: 1, RatePerMinute: 2,
		MaxCallsPerSandbox: 3, MaxConcurrent: 4, Redact: []string{"r"}, DryRun: true}) ||
		tl.Upstream.HTTP.Body != "b" || string(tl.OutputSchema) != `{"type":"array"}` {
		t.Errorf("toolFromWire = %+v", tl)
	}
	back := toToolJSON(tl)
	want, _ := json.Marshal(req)
	got, _ := json.Marshal(wire.PutToolRequest{Name: back.Name, Description: back.Description, InputSchema: back.InputSchema,
		OutputSchema: back.OutputSchema, Upstream: back.Upstream, Governance: back.Governance})
	if string(got) != string(want) {
		t.Errorf("round trip:\n%s\nwant\n%s", got, want)
	}
}
