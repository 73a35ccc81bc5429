package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

// TestPutSecret: the value goes as base64 (any bytes), with the
// description, to PUT /v1/secrets/{name}; 201 and 200 both answer the
// metadata.
func TestPutSecret(t *testing.T) {
	value := []byte{0, 0xff, '"', '\\', 'x', 0xc3}
	status := http.StatusCreated
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		dec := json.NewDecoder(r.Body)
		dec.UseNumber()
		if err := dec.Decode(&in); err != nil || r.Method != "PUT" || r.URL.Path != "/prefix/v1/secrets/api.token-1" ||
			r.Header.Get("Content-Type") != "application/json" || len(in) != 2 ||
			in["value_b64"] != base64.StdEncoding.EncodeToString(value) || in["description"] != `the "CI" token` {
			t.Errorf("request %s %s %v %v", r.Method, r.URL, in, err)
		}
		w.WriteHeader(status)
		io.WriteString(w, `{"name":"api.token-1","description":"the \"CI\" token","version":1,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-02T03:04:05Z"}`)
	})
	ctx := context.Background()
	s, err := c.PutSecret(ctx, "api.token-1", PutSecretRequest{Value: value, Description: `the "CI" token`})
	if err != nil || s.Name != "api.token-1" || s.Version != 1 || s.Description != `the "CI" token` || s.CreatedAt.IsZero() {
		t.Fatalf("PutSecret = %+v, %v", s, err)
	}
	status = http.StatusOK
	if _, err := c.PutSecret(ctx, "api.token-1", PutSecretRequest{Value: value, Description: `the "CI" token`}); err != nil {
		t.Errorf("PutSecret answered 200: %v", err)
	}
	if !bytes.Equal(value, []byte{0, 0xff, '"', '\\', 'x', 0xc3}) {
		t.Errorf("PutSecret changed the caller's value: %v", value)
	}
}

// TestSecretRequestsRefused: values and names the server would refuse
// are refused before any request; the server's errors map onto the
// sentinels.
func TestSecretRequestsRefused(t *testing.T) {
	var calls atomic.Int32
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		switch r.URL.Path {
		case "/prefix/v1/secrets/full":
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, `{"error":{"code":"resource_exhausted","message":"tenant t already has 200 of its 200 secrets"}}`)
		case "/prefix/v1/secrets/bad":
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":"invalid_argument","message":"description must be at most 1024 bytes of printable text"}}`)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"secret x: not found"}}`)
		}
	})
	ctx := context.Background()
	for _, v := range [][]byte{nil, {}, make([]byte, MaxSecretBytes+1)} {
		if _, err := c.PutSecret(ctx, "x", PutSecretRequest{Value: v}); !errors.Is(err, ErrInvalid) {
			t.Errorf("PutSecret of %d bytes: %v", len(v), err)
		}
	}
	for _, name := range []string{"", ".", "..", strings.Repeat("n", 129)} {
		if _, err := c.PutSecret(ctx, name, PutSecretRequest{Value: []byte("v")}); !errors.Is(err, ErrInvalid) {
			t.Errorf("PutSecret(%q): %v", name, err)
		}
		if _, err := c.GetSecret(ctx, name); !errors.Is(err, ErrInvalid) {
			t.Errorf("GetSecret(%q): %v", name, err)
		}
		if err := c.DeleteSecret(ctx, name); !errors.Is(err, ErrInvalid) {
			t.Errorf("DeleteSecret(%q): %v", name, err)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("%d requests sent for refused calls", n)
	}
	if _, err := c.PutSecret(ctx, "full", PutSecretRequest{Value: []byte("v")}); !errors.Is(err, ErrQuotaExceeded) {
		t.Errorf("PutSecret past the cap: %v", err)
	}
	if _, err := c.PutSecret(ctx, "bad", PutSecretRequest{Value: []byte("v")}); !errors.Is(err, ErrInvalid) ||
		!strings.Contains(err.Error(), "description") {
		t.Errorf("PutSecret refused: %v", err)
	}
	if _, err := c.GetSecret(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetSecret missing: %v", err)
	}
	if err := c.DeleteSecret(ctx, "x"); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeleteSecret missing: %v", err)
	}
}

// TestGetListDeleteSecrets: the routes and the decoded metadata; an
// empty list is empty, not nil.
func TestGetListDeleteSecrets(t *testing.T) {
	list := `{"secrets":[{"name":"a","description":"","version":3,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-03T03:04:05Z"}]}`
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/prefix/v1/secrets":
			io.WriteString(w, list)
		case r.Method == "GET" && r.URL.Path == "/prefix/v1/secrets/a":
			io.WriteString(w, `{"name":"a","description":"d","version":3,"created_at":"2026-01-02T03:04:05Z","updated_at":"2026-01-03T03:04:05Z"}`)
		case r.Method == "DELETE" && r.URL.Path == "/prefix/v1/secrets/a":
			w.WriteHeader(http.StatusNoContent)
		default:
			t.Errorf("unexpected %s %s", r.Method, r.URL)
			w.WriteHeader(http.StatusTeapot)
		}
	})
	ctx := context.Background()
	ss, err := c.ListSecrets(ctx)
	if err != nil || len(ss) != 1 || ss[0].Name != "a" || ss[0].Version != 3 || !ss[0].UpdatedAt.After(ss[0].CreatedAt) {
		t.Errorf("ListSecrets = %+v, %v", ss, err)
	}
	list = `{"secrets":[]}`
	if ss, err := c.ListSecrets(ctx); err != nil || ss == nil || len(ss) != 0 {
		t.Errorf("ListSecrets (none) = %#v, %v", ss, err)
	}
	if s, err := c.GetSecret(ctx, "a"); err != nil || s.Description != "d" {
		t.Errorf("GetSecret = %+v, %v", s, err)
	}
	if err := c.DeleteSecret(ctx, "a"); err != nil {
		t.Errorf("DeleteSecret: %v", err)
	}
}
