package api

import (
	"encoding/json"
	"time"
)

// The kinds of a tool's upstream (ToolUpstream.Kind).
const (
	// UpstreamHTTP calls an HTTP endpoint (ToolUpstream.HTTP).
	UpstreamHTTP = "http"
	// UpstreamCaller hands each call to the program's caller, who
	// answers it.
	UpstreamCaller = "caller"
	// UpstreamMCP calls a tool of an upstream MCP server
	// (ToolUpstream.MCP).
	UpstreamMCP = "mcp"
)

// PutToolRequest is the body of POST /v1/tools (create) and of PUT
// /v1/tools/{name} (replace; Name, if given, must be the path's).
type PutToolRequest struct {
	// Name is how code calls the tool: a lower-case identifier (a
	// letter, then letters, digits or '_', at most 64 bytes) that is not
	// a Python or JavaScript keyword, unique in the tenant.
	Name string `json:"name,omitempty"`
	// Description says what the tool does (at most 4 KiB).
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema of the arguments (a JSON object,
	// "type": "object"; draft 2020-12 unless $schema names another; at
	// most 64 KiB); OutputSchema, optional, that of the result. Only
	// references within the schema are allowed: nothing is fetched.
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Upstream     ToolUpstream    `json:"upstream"`
	Governance   ToolGovernance  `json:"governance,omitzero"`
}

// ToolUpstream is what runs a tool.
type ToolUpstream struct {
	// Kind is UpstreamHTTP, UpstreamCaller or UpstreamMCP.
	Kind string `json:"kind"`
	// HTTP is the endpoint of an UpstreamHTTP tool.
	HTTP *ToolHTTP `json:"http,omitempty"`
	// MCP is the upstream MCP server's tool of an UpstreamMCP tool.
	MCP *ToolMCP `json:"mcp,omitempty"`
}

// ToolMCP is a tool of an upstream MCP server: a command run on the host
// that speaks MCP on stdin and stdout (Command, Args, Env; registering
// one needs the operator scope, since it runs as the daemon's user), or
// a Streamable HTTP endpoint (URL, Headers) reached like an HTTP tool's.
// Env and header values may use {secret.NAME}, replaced by the tenant's
// secret NAME; the call's arguments go to the upstream tool as its
// arguments. Registration asks the upstream for its tool and pins what
// it says (Pinned); a call finding it changed is refused until the tool
// is registered again.
type ToolMCP struct {
	// Command is the absolute path of a stdio server (no PATH lookup);
	// Args (at most 64, no placeholders) and Env (at most 64 variables;
	// the process gets only these and a default PATH) go with it.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// URL is the endpoint of a Streamable HTTP server (an absolute http
	// or https URL); Headers (at most 32) go with every request.
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Tool is the upstream tool's name; without it, the tool's own.
	Tool string `json:"tool,omitempty"`
	// Pinned is what the upstream said of its tool at registration (set
	// by the server; ignored in a request).
	Pinned *ToolMCPPin `json:"pinned,omitempty"`
}

// ToolMCPPin is what an upstream MCP server said of its tool when the
// tool was registered: untrusted hints, kept to detect a change.
type ToolMCPPin struct {
	Title       string          `json:"title,omitempty"`
	Description string          `json:"description"`
	Annotations json.RawMessage `json:"annotations,omitempty"`
	// InputSchemaSHA256 and OutputSchemaSHA256 are the sha256 (hex) of
	// the upstream's schemas, as JSON with sorted keys.
	InputSchemaSHA256  string    `json:"input_schema_sha256"`
	OutputSchemaSHA256 string    `json:"output_schema_sha256,omitempty"`
	PinnedAt           time.Time `json:"pinned_at"`
}

// ToolHTTP is the HTTP endpoint that runs a tool. URL, each header value
// and Body are templates: {args.NAME} is replaced by the argument NAME
// (URL-escaped in the URL, as JSON in Body, as text in a header), and
// {secret.NAME}, in header values only, by the tenant's secret NAME,
// which the sandbox never sees. The URL's scheme and host are fixed
// (no placeholder in them).
type ToolHTTP struct {
	// Method is GET, POST, PUT, PATCH or DELETE.
	Method string `json:"method"`
	// URL is an absolute http or https URL (at most 2 KiB).
	URL string `json:"url"`
	// Headers are at most 32 headers to send.
	Headers map[string]string `json:"headers,omitempty"`
	// Body is the body's template; without it, a POST or PUT sends the
	// arguments as JSON.
	Body string `json:"body,omitempty"`
}

// ToolGovernance is how the gateway governs a tool's calls. Zero values
// take the defaults.
type ToolGovernance struct {
	// ReadOnly and Destructive describe the tool to policies and people.
	ReadOnly    bool `json:"read_only,omitempty"`
	Destructive bool `json:"destructive,omitempty"`
	// Approval makes every call wait for a person's decision.
	Approval bool `json:"approval,omitempty"`
	// TimeoutS bounds one call, in seconds (1-300; default 30).
	TimeoutS int `json:"timeout_s,omitempty"`
	// RatePerMinute caps the calls per minute per sandbox,
	// MaxCallsPerSandbox the calls over a sandbox's life, MaxConcurrent
	// the calls in flight per sandbox (0: no cap, or the gateway's
	// default for MaxConcurrent).
	RatePerMinute      int `json:"rate_per_minute,omitempty"`
	MaxCallsPerSandbox int `json:"max_calls_per_sandbox,omitempty"`
	MaxConcurrent      int `json:"max_concurrent,omitempty"`
	// Redact names top-level argument fields (at most 32) that records
	// show as "[redacted]".
	Redact []string `json:"redact,omitempty"`
	// DryRun records what policy and budgets decided but lets a call
	// they refuse go ahead.
	DryRun bool `json:"dry_run,omitempty"`
}

// Tool is a registered tool: the body of POST, PUT and GET
// /v1/tools/{name} and an entry of GET /v1/tools.
type Tool struct {
	Name         string          `json:"name"`
	Description  string          `json:"description"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Upstream     ToolUpstream    `json:"upstream"`
	Governance   ToolGovernance  `json:"governance"`
	// CreatedAt is when the tool was registered, UpdatedAt when it was
	// last replaced.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ToolList is the body of GET /v1/tools.
type ToolList struct {
	// Tools are the tenant's tools, ordered by name.
	Tools []Tool `json:"tools"`
}

// PutToolsetRequest is the body of POST /v1/toolsets (create) and of PUT
// /v1/toolsets/{name} (replace; Name, if given, must be the path's).
type PutToolsetRequest struct {
	// Name names the toolset, with the rules of a tool's name.
	Name string `json:"name,omitempty"`
	// Tools are the names of the tenant's registered tools it groups (at
	// most 256, none twice).
	Tools []string `json:"tools"`
}

// Toolset is a named group of a tenant's tools, granted to sandboxes
// together: the body of POST, PUT and GET /v1/toolsets/{name} and an
// entry of GET /v1/toolsets.
type Toolset struct {
	Name      string    `json:"name"`
	Tools     []string  `json:"tools"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ToolsetList is the body of GET /v1/toolsets.
type ToolsetList struct {
	// Toolsets are the tenant's toolsets, ordered by name.
	Toolsets []Toolset `json:"toolsets"`
}

// CallToolRequest is the body of POST /v1/tools/{name}/call.
type CallToolRequest struct {
	// Args are the call's arguments: a JSON object matching the tool's
	// input schema (at most 256 KiB); absent means {}.
	Args json.RawMessage `json:"args,omitempty"`
}

// CallToolResult is the answer of POST /v1/tools/{name}/call.
type CallToolResult struct {
	// Result is the tool's output, a JSON value.
	Result json.RawMessage `json:"result"`
}
