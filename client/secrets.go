package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"

	"github.com/airlock-sandbox/airlock/api"
)

// Secret is what the server shows of a secret: its metadata, never its
// value (no route returns one).
type Secret = api.Secret

// MaxSecretBytes is the largest secret value the server takes.
const MaxSecretBytes = 64 << 10

// PutSecretRequest is a secret's value and description.
type PutSecretRequest struct {
	// Value is the secret (1 B-MaxSecretBytes, any bytes). PutSecret
	// does not keep it: the caller may clear it once PutSecret returns.
	Value []byte
	// Description says what the secret is for (at most 1 KiB of
	// printable text); it replaces the old one.
	Description string
}

// PutSecret stores req.Value encrypted in the caller's tenant under name,
// creating the secret or replacing its value and description (its
// Version grows by one), and returns its metadata. It needs the admin
// scope. The request body it builds is zeroed once sent.
func (c *Client) PutSecret(ctx context.Context, name string, req PutSecretRequest) (*Secret, error) {
	if err := checkSecretName(name); err != nil {
		return nil, err
	}
	if n := len(req.Value); n == 0 || n > MaxSecretBytes {
		return nil, fmt.Errorf("airlock: a secret value must be 1-%d bytes, not %d: %w", MaxSecretBytes, n, ErrInvalid)
	}
	desc, err := json.Marshal(req.Description)
	if err != nil {
		return nil, fmt.Errorf("airlock: encode request: %w", err)
	}
	// The body is built by hand, base64 (which any value can take) into
	// one buffer, so that no copy of the value is left in a string.
	enc := base64.StdEncoding
	body := make([]byte, 0, len(`{"value_b64":"","description":}`)+enc.EncodedLen(len(req.Value))+len(desc))
	body = append(body, `{"value_b64":"`...)
	body = enc.AppendEncode(body, req.Value)
	body = append(body, `","description":`...)
	body = append(body, desc...)
	body = append(body, '}')
	defer clear(body)
	hr, err := c.newRequest(ctx, http.MethodPut, "/v1/secrets/"+url.PathEscape(name), nil, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hr.Header.Set("Content-Type", "application/json")
	hr.Header.Set("Accept", "application/json")
	resp, err := c.send(hr, http.StatusOK, http.StatusCreated)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out Secret
	if err := c.decodeBody(resp, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetSecret returns the metadata of the caller's tenant's secret name;
// ErrNotFound if there is none (another tenant's included). It needs the
// admin scope.
func (c *Client) GetSecret(ctx context.Context, name string) (*Secret, error) {
	if err := checkSecretName(name); err != nil {
		return nil, err
	}
	var out Secret
	if err := c.doJSON(ctx, http.MethodGet, "/v1/secrets/"+url.PathEscape(name), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListSecrets returns the metadata of the caller's tenant's secrets,
// ordered by name. It needs the admin scope.
func (c *Client) ListSecrets(ctx context.Context) ([]Secret, error) {
	var out api.SecretList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/secrets", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	if out.Secrets == nil {
		out.Secrets = []Secret{}
	}
	return out.Secrets, nil
}

// DeleteSecret deletes the caller's tenant's secret name; ErrNotFound if
// there is none. It needs the admin scope.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	if err := checkSecretName(name); err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodDelete, "/v1/secrets/"+url.PathEscape(name), nil, nil, nil, http.StatusNoContent)
}

// checkSecretName refuses a name that cannot be a path segment; the
// server checks the rest (a letter or '_', then letters, digits, '_',
// '.' or '-', at most 128 bytes).
func checkSecretName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 128 {
		return fmt.Errorf("airlock: secret name %q is not valid: %w", name, ErrInvalid)
	}
	return nil
}
