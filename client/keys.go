package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// Key is an API key of the caller's tenant, without its secret.
type Key struct {
	// ID names the key; it is not secret.
	ID     string   `json:"id"`
	Name   string   `json:"name"`
	Scopes []string `json:"scopes"`
	// CreatedAt is when it was created; the other times are zero when
	// unset (never expires, never used, not revoked). LastUsedAt is
	// updated at most once a minute.
	CreatedAt  time.Time `json:"created_at"`
	ExpiresAt  time.Time `json:"expires_at,omitzero"`
	LastUsedAt time.Time `json:"last_used_at,omitzero"`
	RevokedAt  time.Time `json:"revoked_at,omitzero"`
}

// CreateKeyRequest describes a key to create.
type CreateKeyRequest struct {
	// Name says what the key is for (required).
	Name string
	// Scopes are what the key may do, e.g. "sandboxes:read", "exec",
	// "admin". A key cannot grant a scope it lacks.
	Scopes []string
	// ExpiresIn makes the key expire this long after creation (rounded
	// up to whole seconds); zero means never.
	ExpiresIn time.Duration
}

// CreatedKey is a new key with its secret.
type CreatedKey struct {
	Key
	// Secret is the API key string to authenticate with. The server does
	// not keep it: it cannot be shown again.
	Secret string `json:"key"`
}

// keyFrom is the Key that the wire form b describes: its unset times,
// null on the wire, are zero.
func keyFrom(b *api.Key) Key {
	k := Key{ID: b.ID, Name: b.Name, Scopes: b.Scopes, CreatedAt: b.CreatedAt}
	for _, t := range []struct {
		src *time.Time
		dst *time.Time
	}{{b.ExpiresAt, &k.ExpiresAt}, {b.LastUsedAt, &k.LastUsedAt}, {b.RevokedAt, &k.RevokedAt}} {
		if t.src != nil {
			*t.dst = *t.src
		}
	}
	return k
}

// createdKeyFrom is the CreatedKey that the wire form b describes; a
// server that sent no key string failed.
func createdKeyFrom(b *api.CreatedKey) (CreatedKey, error) {
	if b.Key == "" {
		return CreatedKey{}, fmt.Errorf("airlock: the server returned no key string: %w", ErrInternal)
	}
	k := api.Key{ID: b.ID, Name: b.Name, Scopes: b.Scopes, CreatedAt: b.CreatedAt, ExpiresAt: b.ExpiresAt,
		LastUsedAt: b.LastUsedAt, RevokedAt: b.RevokedAt}
	return CreatedKey{Key: keyFrom(&k), Secret: b.Key}, nil
}

// CreateKey creates an API key in the caller's tenant. It needs the admin
// scope.
func (c *Client) CreateKey(ctx context.Context, req CreateKeyRequest) (*CreatedKey, error) {
	in := api.CreateKeyRequest{Name: req.Name, Scopes: req.Scopes, ExpiresInS: seconds(req.ExpiresIn)}
	var out api.CreatedKey
	if err := c.doJSON(ctx, http.MethodPost, "/v1/keys", nil, in, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	k, err := createdKeyFrom(&out)
	if err != nil {
		return nil, err
	}
	return &k, nil
}

// ListKeys returns the keys of the caller's tenant, revoked and expired
// ones included, oldest first. It needs the admin scope.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out api.KeyList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/keys", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	keys := make([]Key, 0, len(out.Keys))
	for i := range out.Keys {
		keys = append(keys, keyFrom(&out.Keys[i]))
	}
	return keys, nil
}

// RevokeKey revokes the key called id at once. Revoking a revoked key
// succeeds; a key of another tenant is ErrNotFound. It needs the admin
// scope.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return fmt.Errorf("airlock: key id %q is not valid: %w", id, ErrInvalid)
	}
	return c.doJSON(ctx, http.MethodDelete, "/v1/keys/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
}

// WhoAmI is the calling key: its tenant, ID and scopes.
type WhoAmI = api.WhoAmI

// WhoAmI describes the client's own key. Any valid key may ask.
func (c *Client) WhoAmI(ctx context.Context) (*WhoAmI, error) {
	var out WhoAmI
	if err := c.doJSON(ctx, http.MethodGet, "/v1/whoami", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}
