package auth

import (
	"context"
	"slices"
)

// Scope is a permission an API key carries.
type Scope string

// The scopes. Admin implies every other scope within the key's tenant and
// allows managing tenants and keys.
const (
	ScopeSandboxesRead  Scope = "sandboxes:read"
	ScopeSandboxesWrite Scope = "sandboxes:write"
	ScopeExec           Scope = "exec"
	ScopeFiles          Scope = "files"
	ScopeAuditRead      Scope = "audit:read"
	ScopeTemplatesRead  Scope = "templates:read"
	ScopeTemplatesWrite Scope = "templates:write"
	ScopeToolsCall      Scope = "tools:call"
	ScopeApprovals      Scope = "approvals"
	ScopeAdmin          Scope = "admin"
)

// AllScopes lists every scope, in a stable order.
var AllScopes = []Scope{
	ScopeSandboxesRead, ScopeSandboxesWrite, ScopeExec, ScopeFiles, ScopeAuditRead,
	ScopeTemplatesRead, ScopeTemplatesWrite, ScopeToolsCall, ScopeApprovals, ScopeAdmin,
}

// Valid reports whether s is a known scope.
func (s Scope) Valid() bool { return slices.Contains(AllScopes, s) }

// Principal is the authenticated caller of one request.
type Principal struct {
	TenantID string
	KeyID    string
	Scopes   []Scope
}

// Has reports whether p may act with scope s. Admin implies every scope.
func (p Principal) Has(s Scope) bool {
	return slices.Contains(p.Scopes, s) || slices.Contains(p.Scopes, ScopeAdmin)
}

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
