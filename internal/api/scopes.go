package api

import (
	"net/http"
	"slices"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
)

// CheckedScopes returns the scopes some route checks, in the order of
// auth.AllScopes: those a key can usefully carry. It is derived from the
// route table, so a scope no route checks (one reserved for a later
// feature) is never offered as if it granted something.
func CheckedScopes() []auth.Scope {
	seen := map[auth.Scope]bool{}
	for _, rt := range (&Handler{}).routes() {
		if rt.scope != "" && rt.scope != scopeAnyKey {
			seen[rt.scope] = true
		}
	}
	var out []auth.Scope
	for _, s := range auth.AllScopes {
		if seen[s] {
			out = append(out, s)
		}
	}
	// A scope a route checks but AllScopes lacks would be a bug of the
	// table; keep it visible rather than drop it.
	for s := range seen {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// scopeAnyKey is the route-table scope of the routes any valid key may
// use, whatever its scopes (GET /v1/whoami). It is not a scope keys
// carry.
const scopeAnyKey auth.Scope = "any"

// whoami serves GET /v1/whoami: the calling key's tenant, ID and scopes,
// so that a client (the MCP server) can offer what the key may do.
func (h *Handler) whoami(c *call) error {
	out := wire.WhoAmI{TenantID: c.p.TenantID, KeyID: c.p.KeyID, Scopes: []string{}}
	for _, s := range c.p.Scopes {
		out.Scopes = append(out.Scopes, string(s))
	}
	return c.json(http.StatusOK, out)
}
