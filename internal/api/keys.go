package api

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// KeyManager creates, lists and revokes the API keys of a tenant for
// /v1/keys. *auth.Service satisfies it.
type KeyManager interface {
	// CreateKey creates a key and returns its secret string (shown
	// once) and its record.
	CreateKey(ctx context.Context, tenantID, name string, scopes []auth.Scope, expiresAt time.Time) (string, auth.Key, error)
	// ListKeys returns the tenant's keys, revoked ones included.
	ListKeys(ctx context.Context, tenantID string) ([]auth.Key, error)
	// RevokeKey revokes a key of the tenant; ErrNotFound if the tenant
	// has no such key.
	RevokeKey(ctx context.Context, tenantID, keyID string) error
}

// The audit actions of key management.
const (
	ActionKeyCreate = "key.create"
	ActionKeyRevoke = "key.revoke"
)

// keyIDPattern is what a key ID in a path may look like; anything else is
// a 400 before any lookup.
var keyIDPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// createKeyRequest is the body of POST /v1/keys (api.CreateKeyRequest),
// with its validation.
type createKeyRequest wire.CreateKeyRequest

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// toKeyJSON is the wire form of k: never its hash.
func toKeyJSON(k auth.Key) wire.Key {
	scopes := make([]string, len(k.Scopes))
	for i, s := range k.Scopes {
		scopes[i] = string(s)
	}
	return wire.Key{
		ID:         k.ID,
		Name:       k.Name,
		Scopes:     scopes,
		CreatedAt:  k.CreatedAt.UTC(),
		ExpiresAt:  optTime(k.ExpiresAt),
		LastUsedAt: optTime(k.LastUsedAt),
		RevokedAt:  optTime(k.RevokedAt),
	}
}

// toCreatedKeyJSON is the wire form of the new key k with its secret
// token, which only the answer to its creation carries.
func toCreatedKeyJSON(k auth.Key, token string) wire.CreatedKey {
	j := toKeyJSON(k)
	return wire.CreatedKey{ID: j.ID, Key: token, Name: j.Name, Scopes: j.Scopes, CreatedAt: j.CreatedAt,
		ExpiresAt: j.ExpiresAt, LastUsedAt: j.LastUsedAt, RevokedAt: j.RevokedAt}
}

// keysNotServed is the answer of the key routes without Config.Keys.
func keysNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not manage API keys"}
}

// validate checks req for the creator p and returns the scopes to grant.
// A key cannot grant a scope its creator lacks (admin has them all).
func (req *createKeyRequest) validate(p auth.Principal) ([]auth.Scope, error) {
	switch {
	case strings.TrimSpace(req.Name) == "":
		return nil, invalidf("name is required")
	case len(req.Name) > store.MaxNameBytes || !utf8.ValidString(req.Name) ||
		strings.ContainsFunc(req.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return nil, invalidf("name must be at most %d bytes of printable text", store.MaxNameBytes)
	case len(req.Scopes) == 0:
		return nil, invalidf("scopes must name at least one scope")
	case len(req.Scopes) > 2*len(auth.AllScopes):
		return nil, invalidf("too many scopes")
	case req.ExpiresInS < 0 || req.ExpiresInS > maxTimeoutS:
		return nil, invalidf("expires_in_s must be between 0 (never) and %d", maxTimeoutS)
	}
	var out []auth.Scope
	for _, s := range req.Scopes {
		sc := auth.Scope(s)
		if !sc.Valid() {
			return nil, invalidf("unknown scope %q; want one of %s", clean(truncate(s, 64)), scopeList())
		}
		if !p.Has(sc) {
			return nil, &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
				msg: fmt.Sprintf("this API key cannot grant the %q scope, which it does not have", sc)}
		}
		if !slices.Contains(out, sc) {
			out = append(out, sc)
		}
	}
	return out, nil
}

// scopeList names every scope, for error messages.
func scopeList() string {
	s := make([]string, len(auth.AllScopes))
	for i, sc := range auth.AllScopes {
		s[i] = string(sc)
	}
	return strings.Join(s, ", ")
}

// createKey serves POST /v1/keys: the key is created in the caller's
// tenant. The secret is in the response only; the audit event records
// the key's ID, name and scopes.
func (h *Handler) createKey(c *call) error {
	if h.keys == nil {
		return keysNotServed()
	}
	var req createKeyRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	scopes, err := req.validate(c.p)
	if err != nil {
		return err
	}
	var expires time.Time
	if req.ExpiresInS > 0 {
		expires = time.Now().Add(time.Duration(req.ExpiresInS) * time.Second)
	}
	c.ev.Details = map[string]any{"name": req.Name, "scopes": req.Scopes}
	if req.ExpiresInS > 0 {
		c.ev.Details["expires_in_s"] = req.ExpiresInS
	}
	if err := c.begin(); err != nil {
		return err
	}
	token, key, err := h.keys.CreateKey(c.r.Context(), c.p.TenantID, req.Name, scopes, expires)
	if err != nil {
		return err
	}
	c.ev.Target = key.ID
	if err := c.commit(); err != nil {
		// An unrecorded key must not work.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), h.lim.AuditTimeout)
		defer cancel()
		if rerr := h.keys.RevokeKey(rctx, c.p.TenantID, key.ID); rerr != nil {
			h.log.Error("revoking a key that could not be recorded", "key", key.ID, "err", rerr)
			return err
		}
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			msg: "the audit log is unavailable; the key was revoked"}
	}
	return c.json(http.StatusCreated, toCreatedKeyJSON(key, token))
}

// listKeys serves GET /v1/keys: the caller's tenant's keys, revoked and
// expired ones included, without secrets or hashes.
func (h *Handler) listKeys(c *call) error {
	if h.keys == nil {
		return keysNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	keys, err := h.keys.ListKeys(c.r.Context(), c.p.TenantID)
	if err != nil {
		return err
	}
	out := wire.KeyList{Keys: make([]wire.Key, 0, len(keys))}
	for _, k := range keys {
		out.Keys = append(out.Keys, toKeyJSON(k))
	}
	return c.json(http.StatusOK, out)
}

// revokeKey serves DELETE /v1/keys/{id}. A key of another tenant is
// reported like a missing one.
func (h *Handler) revokeKey(c *call) error {
	if h.keys == nil {
		return keysNotServed()
	}
	id := c.r.PathValue("id")
	if !keyIDPattern.MatchString(id) {
		return invalidf("malformed key id")
	}
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.keys.RevokeKey(c.r.Context(), c.p.TenantID, id); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}
