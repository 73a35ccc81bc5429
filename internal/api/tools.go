package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// ToolRegistry manages a tenant's tools and toolsets for /v1/tools and
// /v1/toolsets. It validates what it is given (errors naming the
// field, class ErrInvalidArgument) and sets the owner and times.
// *gateway.StoreRegistry satisfies it.
type ToolRegistry interface {
	gateway.Registry
	CreateTool(ctx context.Context, tenant string, t gateway.Tool) (gateway.Tool, error)
	ReplaceTool(ctx context.Context, tenant string, t gateway.Tool) (gateway.Tool, error)
	ListTools(ctx context.Context, tenant string) ([]gateway.Tool, error)
	DeleteTool(ctx context.Context, tenant, name string) error
	CreateToolset(ctx context.Context, tenant string, s gateway.Toolset) (gateway.Toolset, error)
	ReplaceToolset(ctx context.Context, tenant string, s gateway.Toolset) (gateway.Toolset, error)
	ListToolsets(ctx context.Context, tenant string) ([]gateway.Toolset, error)
	DeleteToolset(ctx context.Context, tenant, name string) error
}

var _ ToolRegistry = (*gateway.StoreRegistry)(nil)

// ToolCaller runs a call of a tool through the gateway's pipeline, for
// POST /v1/tools/{name}/call. *gateway.Gateway satisfies it.
type ToolCaller interface {
	Call(ctx context.Context, c gateway.Caller, name string, args json.RawMessage) (gateway.Result, error)
}

var _ ToolCaller = (*gateway.Gateway)(nil)

// The audit actions of tools and toolsets. Their records name the tool
// (Target) and say what runs it: its upstream's kind and, for HTTP, its
// method and URL template (never a header, which may hold a literal
// credential).
const (
	ActionToolCreate    = "tool.create"
	ActionToolUpdate    = "tool.update"
	ActionToolDelete    = "tool.delete"
	ActionToolsetCreate = "toolset.create"
	ActionToolsetUpdate = "toolset.update"
	ActionToolsetDelete = "toolset.delete"
)

// toolsNotServed is the answer of the tool routes without Config.Tools.
func toolsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server has no tool gateway"}
}

// toolFromWire is the gateway's tool for a request's body.
func toolFromWire(req wire.PutToolRequest) gateway.Tool {
	t := gateway.Tool{
		Name:         req.Name,
		Description:  req.Description,
		InputSchema:  req.InputSchema,
		OutputSchema: req.OutputSchema,
		Upstream:     gateway.Upstream{Kind: req.Upstream.Kind},
		Governance: gateway.Governance{
			ReadOnly: req.Governance.ReadOnly, Destructive: req.Governance.Destructive, Approval: req.Governance.Approval,
			TimeoutS: req.Governance.TimeoutS, RatePerMinute: req.Governance.RatePerMinute,
			MaxCallsPerSandbox: req.Governance.MaxCallsPerSandbox, MaxConcurrent: req.Governance.MaxConcurrent,
			Redact: req.Governance.Redact, DryRun: req.Governance.DryRun,
		},
	}
	if h := req.Upstream.HTTP; h != nil {
		t.Upstream.HTTP = &gateway.HTTPUpstream{Method: h.Method, URL: h.URL, Headers: h.Headers, Body: h.Body}
	}
	if m := req.Upstream.MCP; m != nil {
		// Pinned is the server's: the registry asks the upstream.
		t.Upstream.MCP = &gateway.MCPUpstream{Command: m.Command, Args: m.Args, Env: m.Env, URL: m.URL, Headers: m.Headers, Tool: m.Tool}
	}
	return t
}

// toToolJSON is the wire form of t.
func toToolJSON(t gateway.Tool) wire.Tool {
	out := wire.Tool{
		Name:         t.Name,
		Description:  t.Description,
		InputSchema:  t.InputSchema,
		OutputSchema: t.OutputSchema,
		Upstream:     wire.ToolUpstream{Kind: t.Upstream.Kind},
		Governance: wire.ToolGovernance{
			ReadOnly: t.Governance.ReadOnly, Destructive: t.Governance.Destructive, Approval: t.Governance.Approval,
			TimeoutS: t.Governance.TimeoutS, RatePerMinute: t.Governance.RatePerMinute,
			MaxCallsPerSandbox: t.Governance.MaxCallsPerSandbox, MaxConcurrent: t.Governance.MaxConcurrent,
			Redact: t.Governance.Redact, DryRun: t.Governance.DryRun,
		},
		CreatedAt: t.CreatedAt.UTC(),
		UpdatedAt: t.UpdatedAt.UTC(),
	}
	if h := t.Upstream.HTTP; h != nil {
		out.Upstream.HTTP = &wire.ToolHTTP{Method: h.Method, URL: h.URL, Headers: h.Headers, Body: h.Body}
	}
	if m := t.Upstream.MCP; m != nil {
		out.Upstream.MCP = &wire.ToolMCP{Command: m.Command, Args: m.Args, Env: m.Env, URL: m.URL, Headers: m.Headers, Tool: m.Tool}
		if p := m.Pinned; p != nil {
			out.Upstream.MCP.Pinned = &wire.ToolMCPPin{Title: p.Title, Description: p.Description, Annotations: p.Annotations,
				InputSchemaSHA256: p.InputSchemaSHA256, OutputSchemaSHA256: p.OutputSchemaSHA256, PinnedAt: p.PinnedAt.UTC()}
		}
	}
	return out
}

// toToolsetJSON is the wire form of s.
func toToolsetJSON(s gateway.Toolset) wire.Toolset {
	tools := s.Tools
	if tools == nil {
		tools = []string{}
	}
	return wire.Toolset{Name: s.Name, Tools: tools, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}

// toolPathName returns the {name} of the request's path, checked.
func (c *call) toolPathName() (string, error) {
	if c.r.URL.RawQuery != "" {
		return "", invalidf("this route takes no query parameters")
	}
	name := c.r.PathValue("name")
	if err := gateway.ValidName(name); err != nil {
		return "", err
	}
	return name, nil
}

// bodyName checks the name a body gives against the path's: a PUT's
// body may leave it out; a POST's must give it, and it must be valid.
func bodyName(body, path string) (string, error) {
	switch {
	case path == "" && body == "":
		return "", invalidf("name is required")
	case path == "":
		return body, gateway.ValidName(body)
	case body != "" && body != path:
		return "", invalidf("name %q in the body is not the path's %q", auditTarget(body), path)
	}
	return path, gateway.ValidName(path)
}

// toolAuditDetails says what runs t, for its audit records: for MCP,
// the command (and its args) or the URL, and the upstream tool's name
// (never env or header values, which may hold literal credentials).
func toolAuditDetails(t gateway.Tool) map[string]any {
	d := map[string]any{"upstream": t.Upstream.Kind}
	if h := t.Upstream.HTTP; h != nil {
		d["method"] = h.Method
		d["url"] = h.URL
	}
	if m := t.Upstream.MCP; m != nil {
		if m.Stdio() {
			d["command"] = m.Command
			d["args"] = m.Args
		} else {
			d["url"] = m.URL
		}
		d["mcp_tool"] = m.ToolName(t.Name)
	}
	return d
}

// checkToolPower refuses a tool the caller may not register: one whose
// upstream is a command run on the host (a stdio MCP server runs as the
// daemon's user, which is a host-level power) needs the operator scope.
func (c *call) checkToolPower(t gateway.Tool) error {
	if m := t.Upstream.MCP; m != nil && m.Stdio() && !c.p.IsOperator() {
		return fmt.Errorf("upstream.mcp.command: a tool whose upstream is a command run on the host needs the operator scope (a url upstream does not): %w", errdefs.ErrPermissionDenied)
	}
	return nil
}

// putTool serves POST /v1/tools (path "": create, 201; 409 if the name is
// taken) and PUT /v1/tools/{name} (replace, 200; 404 if there is none).
func (h *Handler) putTool(c *call, path string) error {
	var req wire.PutToolRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	name, err := bodyName(req.Name, path)
	if err != nil {
		return err
	}
	req.Name = name
	c.ev.Target = name
	t := toolFromWire(req)
	if err := t.Validate(); err != nil {
		return err
	}
	c.ev.Details = toolAuditDetails(t)
	if err := c.checkToolPower(t); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	status := http.StatusCreated
	if path == "" {
		t, err = h.tools.CreateTool(c.r.Context(), c.p.TenantID, t)
	} else {
		t, err = h.tools.ReplaceTool(c.r.Context(), c.p.TenantID, t)
		status = http.StatusOK
	}
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(status, toToolJSON(t))
}

// createTool serves POST /v1/tools.
func (h *Handler) createTool(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	return h.putTool(c, "")
}

// replaceTool serves PUT /v1/tools/{name}.
func (h *Handler) replaceTool(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	return h.putTool(c, name)
}

// getTool serves GET /v1/tools/{name}: the caller's tenant's tool.
// Another tenant's is a 404, like a missing one.
func (h *Handler) getTool(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	t, err := h.tools.Tool(c.r.Context(), c.p.TenantID, name)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toToolJSON(t))
}

// listTools serves GET /v1/tools: the caller's tenant's tools, by name.
func (h *Handler) listTools(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	ts, err := h.tools.ListTools(c.r.Context(), c.p.TenantID)
	if err != nil {
		return err
	}
	out := wire.ToolList{Tools: make([]wire.Tool, 0, len(ts))}
	for _, t := range ts {
		out.Tools = append(out.Tools, toToolJSON(t))
	}
	return c.json(http.StatusOK, out)
}

// deleteTool serves DELETE /v1/tools/{name}. Another tenant's tool is a
// 404, like a missing one, and stays.
func (h *Handler) deleteTool(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	c.ev.Target = name
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.tools.DeleteTool(c.r.Context(), c.p.TenantID, name); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// putToolset serves POST /v1/toolsets (path "") and PUT
// /v1/toolsets/{name}, like putTool.
func (h *Handler) putToolset(c *call, path string) error {
	var req wire.PutToolsetRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	name, err := bodyName(req.Name, path)
	if err != nil {
		return err
	}
	c.ev.Target = name
	s := gateway.Toolset{Name: name, Tools: req.Tools}
	if err := s.Validate(); err != nil {
		return err
	}
	c.ev.Details = map[string]any{"tools": slices.Clone(s.Tools)}
	if err := c.begin(); err != nil {
		return err
	}
	status := http.StatusCreated
	if path == "" {
		s, err = h.tools.CreateToolset(c.r.Context(), c.p.TenantID, s)
	} else {
		s, err = h.tools.ReplaceToolset(c.r.Context(), c.p.TenantID, s)
		status = http.StatusOK
	}
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(status, toToolsetJSON(s))
}

// createToolset serves POST /v1/toolsets.
func (h *Handler) createToolset(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	return h.putToolset(c, "")
}

// replaceToolset serves PUT /v1/toolsets/{name}.
func (h *Handler) replaceToolset(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	return h.putToolset(c, name)
}

// getToolset serves GET /v1/toolsets/{name}.
func (h *Handler) getToolset(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	s, err := h.tools.Toolset(c.r.Context(), c.p.TenantID, name)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toToolsetJSON(s))
}

// listToolsets serves GET /v1/toolsets: the caller's tenant's toolsets,
// by name.
func (h *Handler) listToolsets(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	ss, err := h.tools.ListToolsets(c.r.Context(), c.p.TenantID)
	if err != nil {
		return err
	}
	out := wire.ToolsetList{Toolsets: make([]wire.Toolset, 0, len(ss))}
	for _, s := range ss {
		out.Toolsets = append(out.Toolsets, toToolsetJSON(s))
	}
	return c.json(http.StatusOK, out)
}

// deleteToolset serves DELETE /v1/toolsets/{name}.
func (h *Handler) deleteToolset(c *call) error {
	if h.tools == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	c.ev.Target = name
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.tools.DeleteToolset(c.r.Context(), c.p.TenantID, name); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// ActionToolInvoke is the audit action of a key's direct call of a tool
// (POST /v1/tools/{name}/call): its records name the tool (Target) and
// hold the sha256 and size of the arguments. The call has its own
// tool.call record too, written by the gateway as for a sandbox's
// call, whose caller is DirectCaller(key).
const ActionToolInvoke = "tool.invoke"

// DirectCaller is what stands for the sandbox in a key's direct calls
// of tools: the Cedar principal (Airlock::Sandbox::"key:<key id>"), the
// owner of the per-sandbox budgets and the target of the tool.call
// records. No sandbox id has a colon.
func DirectCaller(keyID string) string { return "key:" + keyID }

// callTool serves POST /v1/tools/{name}/call: the key calls a tool of
// its tenant, governed as a sandbox's call is (schema, policy, budgets,
// approval, circuit, secrets, output checks, audit). A call that needs
// approval waits for it, up to the approval timeout.
func (h *Handler) callTool(c *call) error {
	if h.tools == nil || h.toolGateway == nil {
		return toolsNotServed()
	}
	name, err := c.toolPathName()
	if err != nil {
		return err
	}
	c.ev.Target = name
	var req wire.CallToolRequest
	if err := c.decodeJSON(&req, true); err != nil {
		return err
	}
	sum := sha256.Sum256(req.Args)
	c.ev.Details = map[string]any{"args_sha256": hex.EncodeToString(sum[:]), "args_bytes": len(req.Args)}
	if _, err := h.tools.Tool(c.r.Context(), c.p.TenantID, name); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	// The key may call any tool of its tenant: the tool is its grant.
	caller := gateway.Caller{Tenant: c.p.TenantID, KeyID: c.p.KeyID, Sandbox: DirectCaller(c.p.KeyID), Tools: []string{name}}
	res, err := h.toolGateway.Call(c.r.Context(), caller, name, req.Args)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.CallToolResult{Result: res.Output})
}
