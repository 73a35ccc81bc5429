package gateway

import (
	"context"
	"encoding/json"
	"time"
)

// Tool is one registered tool of a tenant.
type Tool struct {
	// Owner is the tenant that registered it; a tool is never visible
	// to another tenant.
	Owner string `json:"owner"`
	// Name is how code calls it: a lower-case identifier valid in
	// Python and JavaScript (ValidName), unique per tenant.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// InputSchema is the JSON Schema (draft 2020-12 unless it says
	// otherwise) the arguments, a JSON object, must match; OutputSchema,
	// if set, the result. Remote $refs are never fetched.
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
	Upstream     Upstream        `json:"upstream"`
	Governance   Governance      `json:"governance"`
	CreatedAt    time.Time       `json:"created_at"`
	UpdatedAt    time.Time       `json:"updated_at"`
}

// The kinds of upstream.
const (
	// UpstreamHTTP calls an HTTP endpoint (HTTPUpstream).
	UpstreamHTTP = "http"
	// UpstreamCaller hands the call to the program's caller, who
	// answers it (Anthropic's programmatic tool calling semantics).
	UpstreamCaller = "caller"
	// UpstreamMCP calls a tool of an upstream MCP server (MCPUpstream).
	UpstreamMCP = "mcp"
)

// Upstream is what runs a tool.
type Upstream struct {
	// Kind is UpstreamHTTP, UpstreamCaller or UpstreamMCP.
	Kind string        `json:"kind"`
	HTTP *HTTPUpstream `json:"http,omitempty"`
	MCP  *MCPUpstream  `json:"mcp,omitempty"`
}

// HTTPUpstream is an HTTP endpoint that runs a tool. URL, each header
// value and Body are templates: "{args.NAME}" is replaced by the
// argument NAME (URL-escaped in the URL, as JSON in Body, as text in a
// header), "{secret.NAME}" by the value of the tenant's secret NAME
// (headers only). Without Body, a POST or PUT sends the arguments as
// the JSON body. The answer's body is the result: JSON when it parses,
// else a JSON string.
type HTTPUpstream struct {
	Method  string            `json:"method"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	Body    string            `json:"body,omitempty"`
}

// Governance is how the gateway governs a tool's calls.
type Governance struct {
	// ReadOnly and Destructive describe the tool to policies (Cedar
	// context) and people; they restrict nothing by themselves.
	ReadOnly    bool `json:"read_only,omitempty"`
	Destructive bool `json:"destructive,omitempty"`
	// Approval makes every call wait for a person's decision.
	Approval bool `json:"approval,omitempty"`
	// TimeoutS bounds one call's upstream, in seconds (default 30, at
	// most 300).
	TimeoutS int `json:"timeout_s,omitempty"`
	// RatePerMinute caps the calls per minute per sandbox (0: no cap);
	// MaxCallsPerSandbox the calls over a sandbox's life (0: no cap);
	// MaxConcurrent the calls in flight per sandbox (0: the gateway's
	// default).
	RatePerMinute      int `json:"rate_per_minute,omitempty"`
	MaxCallsPerSandbox int `json:"max_calls_per_sandbox,omitempty"`
	MaxConcurrent      int `json:"max_concurrent,omitempty"`
	// Redact names top-level argument fields whose values records show
	// as "[redacted]".
	Redact []string `json:"redact,omitempty"`
	// DryRun (log only) records what the policy and budgets decided but
	// lets a call they refuse go ahead.
	DryRun bool `json:"dry_run,omitempty"`
}

// Toolset is a named group of a tenant's tools, granted to sandboxes
// together.
type Toolset struct {
	Owner     string    `json:"owner"`
	Name      string    `json:"name"`
	Tools     []string  `json:"tools"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Registry keeps tenants' tools and toolsets. Lookups of another
// tenant's, or of a name not registered, are errdefs.ErrNotFound.
type Registry interface {
	Tool(ctx context.Context, tenant, name string) (Tool, error)
	Toolset(ctx context.Context, tenant, name string) (Toolset, error)
}

// Caller is who makes a call: built by the daemon from the channel the
// call arrived on, never from anything the sandbox says.
type Caller struct {
	Tenant  string
	Sandbox string
	// KeyID is the API key that created the sandbox (or runs the
	// program), for policies and records.
	KeyID string
	// Tools are the names of the tools granted to the sandbox (its
	// toolsets' and tools', resolved at create).
	Tools []string
}
