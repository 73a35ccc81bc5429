package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/airlock-sandbox/airlock/api"
)

// Tool is a registered tool of the tool gateway: its name, description,
// JSON Schemas, upstream and governance settings.
type Tool = api.Tool

// PutToolRequest is a tool to register or replace (see api.PutToolRequest
// for each field's rules).
type PutToolRequest = api.PutToolRequest

// ToolUpstream is what runs a tool; ToolHTTP an HTTP endpoint that does;
// ToolGovernance how the gateway governs its calls.
type (
	ToolUpstream   = api.ToolUpstream
	ToolHTTP       = api.ToolHTTP
	ToolGovernance = api.ToolGovernance
)

// ToolMCP is a tool of an upstream MCP server that runs a tool;
// ToolMCPPin what the server said of it at registration.
type (
	ToolMCP    = api.ToolMCP
	ToolMCPPin = api.ToolMCPPin
)

// Toolset is a named group of the tenant's tools.
type Toolset = api.Toolset

// PutToolsetRequest is a toolset to register or replace.
type PutToolsetRequest = api.PutToolsetRequest

// CreateTool registers req as a tool of the caller's tenant and returns
// it as stored. The server checks everything and names the field at
// fault (ErrInvalid); a name in use is ErrConflict. It needs the
// tools:write scope.
func (c *Client) CreateTool(ctx context.Context, req PutToolRequest) (*Tool, error) {
	if err := checkToolName(req.Name); err != nil {
		return nil, err
	}
	var out Tool
	if err := c.doJSON(ctx, http.MethodPost, "/v1/tools", nil, req, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplaceTool replaces the caller's tenant's tool name with req (whose
// Name may be empty) and returns it as stored; ErrNotFound if there is
// none. It needs the tools:write scope.
func (c *Client) ReplaceTool(ctx context.Context, name string, req PutToolRequest) (*Tool, error) {
	if err := checkToolName(name); err != nil {
		return nil, err
	}
	var out Tool
	if err := c.doJSON(ctx, http.MethodPut, "/v1/tools/"+url.PathEscape(name), nil, req, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTool returns the caller's tenant's tool name; ErrNotFound if there
// is none (another tenant's included). It needs the tools:read scope.
func (c *Client) GetTool(ctx context.Context, name string) (*Tool, error) {
	if err := checkToolName(name); err != nil {
		return nil, err
	}
	var out Tool
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tools/"+url.PathEscape(name), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTools returns the caller's tenant's tools, ordered by name. It
// needs the tools:read scope.
func (c *Client) ListTools(ctx context.Context) ([]Tool, error) {
	var out api.ToolList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tools", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	if out.Tools == nil {
		out.Tools = []Tool{}
	}
	return out.Tools, nil
}

// DeleteTool removes the caller's tenant's tool name; ErrNotFound if
// there is none. It needs the tools:write scope.
func (c *Client) DeleteTool(ctx context.Context, name string) error {
	if err := checkToolName(name); err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodDelete, "/v1/tools/"+url.PathEscape(name), nil, nil, nil, http.StatusNoContent)
}

// CreateToolset registers req as a toolset of the caller's tenant; each
// of its tools must be registered (ErrInvalid naming the first that is
// not), and a name in use is ErrConflict. It needs the tools:write scope.
func (c *Client) CreateToolset(ctx context.Context, req PutToolsetRequest) (*Toolset, error) {
	if err := checkToolName(req.Name); err != nil {
		return nil, err
	}
	if req.Tools == nil {
		req.Tools = []string{}
	}
	var out Toolset
	if err := c.doJSON(ctx, http.MethodPost, "/v1/toolsets", nil, req, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return &out, nil
}

// ReplaceToolset replaces the tools of the caller's tenant's toolset
// name; ErrNotFound if there is none. It needs the tools:write scope.
func (c *Client) ReplaceToolset(ctx context.Context, name string, req PutToolsetRequest) (*Toolset, error) {
	if err := checkToolName(name); err != nil {
		return nil, err
	}
	if req.Tools == nil {
		req.Tools = []string{}
	}
	var out Toolset
	if err := c.doJSON(ctx, http.MethodPut, "/v1/toolsets/"+url.PathEscape(name), nil, req, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetToolset returns the caller's tenant's toolset name; ErrNotFound if
// there is none. It needs the tools:read scope.
func (c *Client) GetToolset(ctx context.Context, name string) (*Toolset, error) {
	if err := checkToolName(name); err != nil {
		return nil, err
	}
	var out Toolset
	if err := c.doJSON(ctx, http.MethodGet, "/v1/toolsets/"+url.PathEscape(name), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListToolsets returns the caller's tenant's toolsets, ordered by name.
// It needs the tools:read scope.
func (c *Client) ListToolsets(ctx context.Context) ([]Toolset, error) {
	var out api.ToolsetList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/toolsets", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	if out.Toolsets == nil {
		out.Toolsets = []Toolset{}
	}
	return out.Toolsets, nil
}

// DeleteToolset removes the caller's tenant's toolset name; ErrNotFound
// if there is none. It needs the tools:write scope.
func (c *Client) DeleteToolset(ctx context.Context, name string) error {
	if err := checkToolName(name); err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodDelete, "/v1/toolsets/"+url.PathEscape(name), nil, nil, nil, http.StatusNoContent)
}

// checkToolName refuses a name that cannot be a path segment or is
// missing; the server checks the rest (a lower-case identifier of at
// most 64 bytes that is not a keyword).
func checkToolName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 64 {
		return fmt.Errorf("airlock: tool or toolset name %q is not valid: %w", name, ErrInvalid)
	}
	return nil
}

// CallTool calls the caller's tenant's tool name with args (anything
// that encodes as a JSON object; nil is {}) as the calling key, governed
// as a sandbox's call is, and returns the tool's result, a JSON value.
// A refusal is an error of its class (ErrForbidden for a policy, an
// approval denied or a grant; ErrInvalid for arguments that do not match
// the schema); a call that needs approval waits for it, up to the
// server's approval timeout or ctx's end. It needs the tools:call scope.
func (c *Client) CallTool(ctx context.Context, name string, args any) (json.RawMessage, error) {
	if err := checkToolName(name); err != nil {
		return nil, err
	}
	var req api.CallToolRequest
	if args != nil {
		raw, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("encode the arguments of tool %s: %w", name, err)
		}
		req.Args = raw
	}
	var out api.CallToolResult
	if err := c.doJSON(ctx, http.MethodPost, "/v1/tools/"+url.PathEscape(name)+"/call", nil, req, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.Result, nil
}
