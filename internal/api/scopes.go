package api

import (
	"slices"

	"github.com/airlock-sandbox/airlock/internal/auth"
)

// CheckedScopes returns the scopes some route checks, in the order of
// auth.AllScopes: those a key can usefully carry. It is derived from the
// route table, so a scope no route checks (one reserved for a later
// feature) is never offered as if it granted something.
func CheckedScopes() []auth.Scope {
	seen := map[auth.Scope]bool{}
	for _, rt := range (&Handler{}).routes() {
		if rt.scope != "" {
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
