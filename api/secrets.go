package api

import "time"

// PutSecretRequest is the body of PUT /v1/secrets/{name}: exactly one of
// Value and ValueB64 gives the secret's value (1 B-64 KiB). The server
// never sends a value back, and never writes it to a log, an audit
// record or an error message.
type PutSecretRequest struct {
	// Value is the value as text (valid UTF-8).
	Value string `json:"value,omitempty"`
	// ValueB64 is the value as standard base64 (with padding), for
	// values that are not text.
	ValueB64 []byte `json:"value_b64,omitempty"`
	// Description says what the secret is for (at most 1 KiB of text).
	// It replaces the old one when a secret is put again.
	Description string `json:"description,omitempty"`
}

// Secret is what may be shown of a secret: everything but its value. It
// is the body of PUT and GET /v1/secrets/{name} and an entry of GET
// /v1/secrets.
type Secret struct {
	// Name names the secret within its tenant.
	Name string `json:"name"`
	// Description says what it is for.
	Description string `json:"description"`
	// Version is 1 when the secret is created and grows by one each
	// time it is put again.
	Version int64 `json:"version"`
	// CreatedAt is when it was first put, UpdatedAt when it was last.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	// Secrets are the tenant's secrets, ordered by name.
	Secrets []Secret `json:"secrets"`
}
