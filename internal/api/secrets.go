package api

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net/http"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// SecretStore manages a tenant's secrets for /v1/secrets: put, inspect,
// list and delete, never a value back (the routes are write-only; only
// the daemon's own users of values hold a way to reveal one).
// *secrets.Store satisfies it.
type SecretStore interface {
	// Put creates the tenant's secret name or replaces its value and
	// description, and returns its metadata. It does not keep value.
	Put(ctx context.Context, tenantID, name, description string, value secrets.Value) (secrets.Metadata, error)
	// Get returns the metadata of the tenant's secret name, or
	// ErrNotFound.
	Get(ctx context.Context, tenantID, name string) (secrets.Metadata, error)
	// List returns the metadata of the tenant's secrets, by name.
	List(ctx context.Context, tenantID string) ([]secrets.Metadata, error)
	// Delete removes the tenant's secret name; ErrNotFound if none.
	Delete(ctx context.Context, tenantID, name string) error
}

var _ SecretStore = (*secrets.Store)(nil)

// The audit actions of secrets. Their records name the secret (Target)
// and nothing else: never its value or description.
const (
	ActionSecretPut    = "secret.put"
	ActionSecretDelete = "secret.delete"
)

// maxSecretBodyBytes caps the body of PUT /v1/secrets/{name}: the
// largest value and description written as JSON text with every byte
// escaped (\u00XX, 6 bytes each), and room for the rest.
const maxSecretBodyBytes = 6*(secrets.MaxValueBytes+secrets.MaxDescriptionBytes) + 1024

// secretsNotServed is the answer of the secret routes without
// Config.Secrets.
func secretsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not store secrets"}
}

// toSecretJSON is the wire form of m: its metadata, which is all there
// is to show.
func toSecretJSON(m secrets.Metadata) wire.Secret {
	return wire.Secret{Name: m.Name, Description: m.Description, Version: m.Version,
		CreatedAt: m.CreatedAt.UTC(), UpdatedAt: m.UpdatedAt.UTC()}
}

// secretName returns the {name} of the request's path, checked.
func (c *call) secretName() (string, error) {
	if c.r.URL.RawQuery != "" {
		return "", invalidf("this route takes no query parameters")
	}
	name := c.r.PathValue("name")
	if err := secrets.ValidateName(name); err != nil {
		return "", err
	}
	return name, nil
}

// putSecret serves PUT /v1/secrets/{name}: it creates (201) or replaces
// (200) the caller's tenant's secret and answers its metadata. The value
// is read into bytes this handler owns and zeroes once the store has
// sealed it, whatever happens; it never reaches a log line, the audit
// record (the secret's name only) or an error message. Copies that
// net/http's and encoding/json's own buffers made are out of its reach.
func (h *Handler) putSecret(c *call) error {
	if h.secrets == nil {
		return secretsNotServed()
	}
	name, err := c.secretName()
	if err != nil {
		return err
	}
	c.ev.Target = name
	data, err := c.readSecretBody()
	defer clear(data)
	if err != nil {
		return err
	}
	var body putSecretBody
	defer body.wipe()
	if err := decodeSecretBody(data, &body); err != nil {
		return err
	}
	value, err := body.takeValue()
	if err != nil {
		return err
	}
	defer value.Wipe()
	desc := ""
	if body.Description != nil {
		desc = *body.Description
	}
	if err := checkDescription(desc); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	md, err := h.secrets.Put(c.r.Context(), c.p.TenantID, name, desc, value)
	value.Wipe()
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	status := http.StatusOK
	if md.Version == 1 {
		status = http.StatusCreated
	}
	return c.json(status, toSecretJSON(md))
}

// getSecret serves GET /v1/secrets/{name}: the metadata of the caller's
// tenant's secret. Another tenant's is a 404, like a missing one.
func (h *Handler) getSecret(c *call) error {
	if h.secrets == nil {
		return secretsNotServed()
	}
	name, err := c.secretName()
	if err != nil {
		return err
	}
	md, err := h.secrets.Get(c.r.Context(), c.p.TenantID, name)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toSecretJSON(md))
}

// listSecrets serves GET /v1/secrets: the metadata of the caller's
// tenant's secrets, by name.
func (h *Handler) listSecrets(c *call) error {
	if h.secrets == nil {
		return secretsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	mds, err := h.secrets.List(c.r.Context(), c.p.TenantID)
	if err != nil {
		return err
	}
	out := wire.SecretList{Secrets: make([]wire.Secret, 0, len(mds))}
	for _, m := range mds {
		out.Secrets = append(out.Secrets, toSecretJSON(m))
	}
	return c.json(http.StatusOK, out)
}

// deleteSecret serves DELETE /v1/secrets/{name}. Another tenant's secret
// is a 404, like a missing one, and stays.
func (h *Handler) deleteSecret(c *call) error {
	if h.secrets == nil {
		return secretsNotServed()
	}
	name, err := c.secretName()
	if err != nil {
		return err
	}
	c.ev.Target = name
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.secrets.Delete(c.r.Context(), c.p.TenantID, name); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// checkDescription reports a description the store would refuse, in the
// request's words.
func checkDescription(d string) error {
	if len(d) > secrets.MaxDescriptionBytes || !utf8.ValidString(d) ||
		strings.ContainsFunc(d, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
		return invalidf("description must be at most %d bytes of printable text", secrets.MaxDescriptionBytes)
	}
	return nil
}

// readSecretBody reads the JSON body of a put, at most
// maxSecretBodyBytes (and Limits.MaxJSONBytes), into a buffer that the
// caller clears: each buffer outgrown on the way is cleared here.
func (c *call) readSecretBody() ([]byte, error) {
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return nil, &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
				msg: "request body must be application/json"}
		}
	}
	limit := min(c.h.lim.MaxJSONBytes, maxSecretBodyBytes)
	if c.r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	body := c.idleBody(http.MaxBytesReader(c.w, c.r.Body, limit))
	defer body.done()
	size := int64(4 << 10)
	if c.r.ContentLength > 0 {
		size = c.r.ContentLength + 1 // +1: the read that sees EOF
	}
	b, err := readAllClearing(body, int(size))
	if err != nil {
		return nil, bodyErr(err)
	}
	return b, nil
}

// readAllClearing is io.ReadAll starting with a buffer of size bytes,
// clearing each buffer it outgrows; on an error it clears what it read.
func readAllClearing(r io.Reader, size int) ([]byte, error) {
	b := make([]byte, 0, max(size, 512))
	for {
		if len(b) == cap(b) {
			nb := make([]byte, len(b), 2*cap(b))
			copy(nb, b)
			clear(b)
			b = nb
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			clear(b)
			return nil, err
		}
	}
}

// putSecretBody is the body of PUT /v1/secrets/{name}
// (api.PutSecretRequest) as the handler decodes it: the value into bytes
// it owns, never a string, so that they can be zeroed.
// TestPutSecretBodyMatchesWire keeps its fields equal to the wire type's.
type putSecretBody struct {
	Value       secretField `json:"value"`
	ValueB64    secretField `json:"value_b64"`
	Description *string     `json:"description"`
}

// wipe zeroes the value bytes the body still holds.
func (b *putSecretBody) wipe() {
	b.Value.wipe()
	b.ValueB64.wipe()
}

// takeValue returns the value the body gives, in exactly one of its two
// fields, checked against the store's caps; the body no longer holds it.
func (b *putSecretBody) takeValue() (secrets.Value, error) {
	if b.Value.set == b.ValueB64.set {
		return secrets.Value{}, invalidf("give the value in exactly one of value (text) and value_b64 (base64)")
	}
	var v []byte
	if b.Value.set {
		v, b.Value.b = b.Value.b, nil
	} else {
		enc := b.ValueB64.b
		if len(enc) > base64.StdEncoding.EncodedLen(secrets.MaxValueBytes)+8 {
			return secrets.Value{}, invalidf("the value must be 1-%d bytes", secrets.MaxValueBytes)
		}
		v = make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		n, err := base64.StdEncoding.Decode(v, enc)
		if err != nil {
			clear(v)
			return secrets.Value{}, invalidf("value_b64 is not valid base64 (the standard alphabet, with padding)")
		}
		v = v[:n]
	}
	if len(v) == 0 || len(v) > secrets.MaxValueBytes {
		clear(v)
		return secrets.Value{}, invalidf("the value must be 1-%d bytes, not %d", secrets.MaxValueBytes, len(v))
	}
	return secrets.NewValue(v), nil
}

// secretField is a JSON string decoded into bytes its holder zeroes
// (wipe); null leaves it unset.
type secretField struct {
	set bool
	b   []byte
}

// errSecretNotText is secretField's decoding error: it says nothing of
// the bytes it was given.
var errSecretNotText = errors.New("value and value_b64 must be JSON strings of valid UTF-8 text (send a value that is not text as value_b64)")

// UnmarshalJSON implements json.Unmarshaler.
func (f *secretField) UnmarshalJSON(raw []byte) error {
	f.wipe() // a field given twice: the last one counts
	if string(raw) == "null" {
		return nil
	}
	b, ok := unquoteJSON(raw)
	if !ok {
		return errSecretNotText
	}
	f.set, f.b = true, b
	return nil
}

func (f *secretField) wipe() {
	clear(f.b)
	f.set, f.b = false, nil
}

// unquoteJSON decodes raw, a JSON string literal, into a new slice: the
// only copy of its content. Unlike encoding/json, which would replace
// them with U+FFFD, it refuses invalid UTF-8 and unpaired surrogate
// escapes (a value is not silently changed). FuzzUnquoteJSON checks it
// against encoding/json.
func unquoteJSON(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	s := raw[1 : len(raw)-1]
	// Escapes only shrink: the result fits, and is never reallocated
	// (which would leave a copy behind).
	out := make([]byte, 0, len(s))
	fail := func() ([]byte, bool) {
		clear(out[:cap(out)])
		return nil, false
	}
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return fail()
			}
			esc := s[i+1]
			i += 2
			switch esc {
			case '"', '\\', '/':
				out = append(out, esc)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := hex4(s[i:])
				if !ok {
					return fail()
				}
				i += 4
				if utf16.IsSurrogate(r) {
					if i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
						return fail()
					}
					r2, ok := hex4(s[i+2:])
					if !ok {
						return fail()
					}
					if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
						return fail()
					}
					i += 6
				}
				out = utf8.AppendRune(out, r)
			default:
				return fail()
			}
		case c == '"' || c < 0x20:
			return fail()
		case c < utf8.RuneSelf:
			out = append(out, c)
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			if r == utf8.RuneError && n == 1 {
				return fail()
			}
			out = append(out, s[i:i+n]...)
			i += n
		}
	}
	return out, true
}

// hex4 decodes the 4 hex digits at the start of s.
func hex4(s []byte) (rune, bool) {
	if len(s) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range s[:4] {
		switch {
		case '0' <= c && c <= '9':
			c -= '0'
		case 'a' <= c && c <= 'f':
			c = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}

// decodeSecretBody decodes data into b like decodeJSONBytes (one object,
// no unknown fields, nothing after it), with error messages that never
// quote the body: not a character of it, nor a field name.
func decodeSecretBody(data []byte, b *putSecretBody) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return invalidf("request body is empty; a JSON object with value or value_b64 is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(b); err != nil {
		b.wipe()
		return secretBodyError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		b.wipe()
		return invalidf("malformed JSON body: unexpected data after the JSON object")
	}
	return nil
}

// secretBodyError describes a decoding error of a secret's body without
// any of the body's text.
func secretBodyError(err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.Is(err, errSecretNotText):
		return invalidf("%s", errSecretNotText)
	case errors.As(err, &se):
		return invalidf("malformed JSON body (at byte %d)", se.Offset)
	case errors.As(err, &te) && te.Field == "":
		return invalidf("the body must be a JSON object with value or value_b64, and description")
	case errors.As(err, &te):
		return invalidf("field %q must be a string", te.Field)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return invalidf("malformed JSON body: unexpected end of input")
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalidf("unknown field in the body; it takes value or value_b64, and description")
	}
	return invalidf("malformed JSON body")
}
