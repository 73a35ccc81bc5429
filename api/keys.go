package api

import "time"

// CreateKeyRequest is the body of POST /v1/keys.
type CreateKeyRequest struct {
	// Name says what the key is for (required).
	Name string `json:"name"`
	// Scopes are what the key may do, e.g. "sandboxes:read", "exec",
	// "admin". A key cannot grant a scope it lacks.
	Scopes []string `json:"scopes"`
	// ExpiresInS makes the key expire this many seconds after creation;
	// 0 means never.
	ExpiresInS int64 `json:"expires_in_s,omitempty"`
}

// Key is an API key without its secret: an entry of GET /v1/keys.
// Hashes are never sent.
type Key struct {
	// ID names the key; it is not secret.
	ID string `json:"id"`
	// Name says what the key is for.
	Name string `json:"name"`
	// Scopes are what the key may do.
	Scopes []string `json:"scopes"`
	// CreatedAt is when it was created.
	CreatedAt time.Time `json:"created_at"`
	// ExpiresAt, LastUsedAt and RevokedAt are null when unset (never
	// expires, never used, not revoked). LastUsedAt is updated at most
	// once a minute.
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// CreatedKey is a new key with its secret: the body of POST /v1/keys and
// a new tenant's admin key. Its fields are Key's with Key (the secret)
// after ID, in the order the server sends them.
type CreatedKey struct {
	// ID names the key; it is not secret.
	ID string `json:"id"`
	// Key is the API key string to authenticate with
	// (al_<id>_<secret>). The server does not keep it: it is shown only
	// here.
	Key string `json:"key"`
	// Name, Scopes and the times are as in Key.
	Name       string     `json:"name"`
	Scopes     []string   `json:"scopes"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  *time.Time `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
	RevokedAt  *time.Time `json:"revoked_at"`
}

// KeyList is the body of GET /v1/keys.
type KeyList struct {
	// Keys are the tenant's keys, revoked and expired ones included,
	// oldest first.
	Keys []Key `json:"keys"`
}

// WhoAmI is the answer of GET /v1/whoami: the calling key's tenant, ID
// and scopes (admin and operator imply others; see the scopes' help).
type WhoAmI struct {
	TenantID string   `json:"tenant_id"`
	KeyID    string   `json:"key_id"`
	Scopes   []string `json:"scopes"`
}
