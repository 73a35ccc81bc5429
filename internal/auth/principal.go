package auth

import (
	"context"
	"slices"
)

// Scope is a permission an API key carries.
type Scope string

// The scopes. Admin implies every other scope within the key's tenant,
// but not Operator. Operator implies every scope, admin included: it is
// the host operator's, and also allows what crosses tenants (managing
// tenants, shared templates, pulling images from registries). Only a key
// with Operator can create another.
//
// ToolsRead lists and inspects the tenant's tools and toolsets of the tool
// gateway; ToolsWrite registers, replaces and removes them. Approvals
// lists, inspects and decides the tool calls that wait for a person's
// decision (/v1/approvals). ToolsCall runs one-shot programs that call
// tools (POST /v1/run), each in a sandbox created and destroyed for it,
// and answers the calls of caller-executed tools: a key with only it
// can run programs with the tenant's tools but not keep or reach a
// sandbox.
const (
	ScopeSandboxesRead  Scope = "sandboxes:read"
	ScopeSandboxesWrite Scope = "sandboxes:write"
	ScopeExec           Scope = "exec"
	ScopeFiles          Scope = "files"
	ScopeAuditRead      Scope = "audit:read"
	ScopeTemplatesRead  Scope = "templates:read"
	ScopeTemplatesWrite Scope = "templates:write"
	ScopeToolsRead      Scope = "tools:read"
	ScopeToolsWrite     Scope = "tools:write"
	ScopeToolsCall      Scope = "tools:call"
	ScopeApprovals      Scope = "approvals"
	ScopeAdmin          Scope = "admin"
	ScopeOperator       Scope = "operator"
)

// AllScopes lists every scope, in a stable order.
var AllScopes = []Scope{
	ScopeSandboxesRead, ScopeSandboxesWrite, ScopeExec, ScopeFiles, ScopeAuditRead,
	ScopeTemplatesRead, ScopeTemplatesWrite, ScopeToolsRead, ScopeToolsWrite, ScopeToolsCall, ScopeApprovals, ScopeAdmin, ScopeOperator,
}

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return slices.Contains(AllScopes, s) }

// Principal is the authenticated caller of one request.
type Principal struct {
	TenantID string
	KeyID    string
	Scopes   []Scope
}

// Has reports whether p may act with scope s. Operator implies every
// scope; admin every scope but operator.
func (p Principal) Has(s Scope) bool {
	if slices.Contains(p.Scopes, s) || slices.Contains(p.Scopes, ScopeOperator) {
		return true
	}
	return s != ScopeOperator && slices.Contains(p.Scopes, ScopeAdmin)
}

// IsOperator reports whether p is the host operator's (see ScopeOperator).
func (p Principal) IsOperator() bool { return p.Has(ScopeOperator) }

type principalKey struct{}

// WithPrincipal returns ctx carrying p.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// FromContext returns the Principal ctx carries, if any.
func FromContext(ctx context.Context) (Principal, bool) {
	p, ok := ctx.Value(principalKey{}).(Principal)
	return p, ok
}
