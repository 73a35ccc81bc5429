package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
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

// keyBody is the wire form of a key: unset times are null.
type keyBody struct {
	ID         string     `json:"id"`
	Key        string     `json:"key"`
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

func (b *keyBody) key() Key {
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

// CreateKey creates an API key in the caller's tenant. It needs the admin
// scope.
func (c *Client) CreateKey(ctx context.Context, req CreateKeyRequest) (*CreatedKey, error) {
	in := struct {
		Name       string   `json:"name"`
		Scopes     []string `json:"scopes"`
		ExpiresInS int64    `json:"expires_in_s,omitempty"`
	}{req.Name, req.Scopes, seconds(req.ExpiresIn)}
	var out keyBody
	if err := c.doJSON(ctx, http.MethodPost, "/v1/keys", nil, in, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	if out.Key == "" {
		return nil, fmt.Errorf("airlock: the server returned no key string: %w", ErrInternal)
	}
	return &CreatedKey{Key: out.key(), Secret: out.Key}, nil
}

// ListKeys returns the keys of the caller's tenant, revoked and expired
// ones included, oldest first. It needs the admin scope.
func (c *Client) ListKeys(ctx context.Context) ([]Key, error) {
	var out struct {
		Keys []keyBody `json:"keys"`
	}
	if err := c.doJSON(ctx, http.MethodGet, "/v1/keys", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	keys := make([]Key, 0, len(out.Keys))
	for i := range out.Keys {
		keys = append(keys, out.Keys[i].key())
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
