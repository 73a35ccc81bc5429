package mcp

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
)

// Bounds of gateway tool calls.
const (
	// pendingAfter is how long a tools/call of a gateway tool waits for
	// its answer before it answers "pending" (a call waiting for a
	// person's approval, say) with an ID to poll with get_tool_result.
	pendingAfter = 10 * time.Second
	// maxPending caps the calls kept for polling, all keys together;
	// pendingKept is how long a finished one is kept.
	maxPending  = 1024
	pendingKept = time.Hour
	// maxGatewayTools caps the gateway tools one session is offered.
	maxGatewayTools = 512
)

// pendingCall is a gateway tool call that outlived pendingAfter.
type pendingCall struct {
	owner string // tenant/key
	tool  string
	done  chan struct{}
	res   json.RawMessage
	err   error
	ended time.Time
}

// pendingCalls are the calls clients poll, by ID.
type pendingCalls struct {
	mu sync.Mutex
	m  map[string]*pendingCall
}

var pending = &pendingCalls{m: map[string]*pendingCall{}}

// add keeps p, dropping finished calls past pendingKept; it fails when
// maxPending calls are kept.
func (pc *pendingCalls) add(p *pendingCall) (string, error) {
	var b [12]byte
	_, _ = rand.Read(b[:])
	id := "pc-" + hex.EncodeToString(b[:])
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for k, o := range pc.m {
		select {
		case <-o.done:
			if time.Since(o.ended) > pendingKept {
				delete(pc.m, k)
			}
		default:
		}
	}
	if len(pc.m) >= maxPending {
		return "", fmt.Errorf("too many tool calls are pending (at most %d); poll or wait for some", maxPending)
	}
	pc.m[id] = p
	return id, nil
}

func (pc *pendingCalls) get(owner, id string) (*pendingCall, bool) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	p, ok := pc.m[id]
	if !ok || p.owner != owner {
		return nil, false
	}
	return p, true
}

func (pc *pendingCalls) drop(id string) {
	pc.mu.Lock()
	delete(pc.m, id)
	pc.mu.Unlock()
}

// builtin are the names of the sandbox tools, which gateway tools do not
// shadow.
var builtin = []string{"create_sandbox", "destroy_sandbox", "list_sandboxes", "run_command", "run_code", "read_file",
	"write_file", "edit_file", "list_files", "execute_program", "get_tool_result"}

// registerGateway offers the tenant's gateway tools as MCP tools, when
// the key may list (tools:read) and call (tools:call) them. Each call
// goes through the gateway's whole pipeline as the key
// (POST /v1/tools/{name}/call): grant, schema, Cedar, budgets, approval,
// circuit, upstream, audit.
func (t *tools) registerGateway(ctx context.Context, s *sdk.Server) error {
	if !t.k.has("tools:call") || !t.k.has("tools:read") {
		return nil
	}
	list, err := t.k.c.ListTools(ctx)
	if err != nil {
		return err
	}
	if len(list) > maxGatewayTools {
		list = list[:maxGatewayTools]
	}
	for _, tool := range list {
		name := tool.Name
		if slices.Contains(builtin, name) {
			name = "tool_" + name
		}
		ann := &sdk.ToolAnnotations{ReadOnlyHint: tool.Governance.ReadOnly, OpenWorldHint: yes()}
		if !tool.Governance.ReadOnly {
			d := tool.Governance.Destructive
			ann.DestructiveHint = &d
		}
		mt := &sdk.Tool{Name: name, Description: tool.Description, InputSchema: json.RawMessage(tool.InputSchema), Annotations: ann}
		if len(tool.OutputSchema) > 0 {
			mt.OutputSchema = json.RawMessage(tool.OutputSchema)
		}
		s.AddTool(mt, t.gatewayCall(tool.Name))
	}
	sdk.AddTool(s, &sdk.Tool{Name: "get_tool_result", Title: "Get a pending tool call's result",
		Description: "A gateway tool call that waits (for a person's approval, say) answers with a pending_id; this returns its result once it has one, waiting up to wait_s seconds (default 10, at most 60).",
		Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no()}}, t.getToolResult)
	return nil
}

// pendingOut is the structured answer of a call still waiting.
type pendingOut struct {
	Status    string `json:"status"`
	PendingID string `json:"pending_id"`
	Tool      string `json:"tool"`
}

// gatewayCall is the handler of gateway tool name.
func (t *tools) gatewayCall(name string) sdk.ToolHandler {
	return func(ctx context.Context, req *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
		args := req.Params.Arguments
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		p := &pendingCall{owner: t.owner(), tool: name, done: make(chan struct{})}
		// The call outlives this request if it has to: its context is
		// the server's, bounded by the gateway's own timeouts.
		go func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Hour)
			defer cancel()
			p.res, p.err = t.k.c.CallTool(cctx, name, args)
			p.ended = time.Now()
			close(p.done)
		}()
		timer := time.NewTimer(pendingAfter)
		defer timer.Stop()
		select {
		case <-p.done:
			return toolResult(p), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-timer.C:
		}
		id, err := pending.add(p)
		if err != nil {
			return nil, err
		}
		return pendingResult(pendingOut{Status: "pending", PendingID: id, Tool: name}), nil
	}
}

// owner names the key, for pending calls.
func (t *tools) owner() string { return t.k.who.TenantID + "/" + t.k.who.KeyID }

// toolResult is the MCP result of a finished gateway call: its result as
// structured content (when an object) and text, or its refusal or
// failure as an error result.
func toolResult(p *pendingCall) *sdk.CallToolResult {
	if p.err != nil {
		msg := p.err.Error()
		var ae *client.APIError
		if errors.As(p.err, &ae) {
			msg = ae.Code + ": " + ae.Message
		}
		return &sdk.CallToolResult{IsError: true, Content: []sdk.Content{&sdk.TextContent{Text: msg}}}
	}
	res := &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: string(p.res)}}}
	var obj map[string]any
	if json.Unmarshal(p.res, &obj) == nil && obj != nil {
		res.StructuredContent = obj
	}
	return res
}

func pendingResult(out pendingOut) *sdk.CallToolResult {
	b, _ := json.Marshal(out)
	return &sdk.CallToolResult{StructuredContent: out, Content: []sdk.Content{&sdk.TextContent{
		Text: fmt.Sprintf("The call of %s is still running (it may wait for a person's approval). Poll it with get_tool_result {\"pending_id\": %q}. %s", out.Tool, out.PendingID, b)}}}
}

type resultIn struct {
	PendingID string `json:"pending_id" jsonschema:"the pending_id a gateway tool call answered with"`
	WaitS     int    `json:"wait_s,omitempty" jsonschema:"how long to wait for the result, in seconds (default 10, at most 60)"`
}

func (t *tools) getToolResult(ctx context.Context, _ *sdk.CallToolRequest, in resultIn) (*sdk.CallToolResult, any, error) {
	p, ok := pending.get(t.owner(), in.PendingID)
	if !ok {
		return nil, nil, fmt.Errorf("no pending tool call %q of this key (finished ones are kept an hour)", textOf(in.PendingID, 40))
	}
	wait := time.Duration(min(max(in.WaitS, 0), 60)) * time.Second
	if in.WaitS == 0 {
		wait = pendingAfter
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-p.done:
		pending.drop(in.PendingID)
		return toolResult(p), nil, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case <-timer.C:
		return pendingResult(pendingOut{Status: "pending", PendingID: in.PendingID, Tool: p.tool}), nil, nil
	}
}
