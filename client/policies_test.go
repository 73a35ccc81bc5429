package client

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"
)

// TestPolicyRequests: each policy method sends its method, path and
// body, decodes the answer and maps the server's errors.
func TestPolicyRequests(t *testing.T) {
	const pol = `{"cedar":"permit(principal, action, resource);","updated_at":"2026-01-02T03:04:05Z"}`
	var got []string
	missing := false
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, r.Method+" "+r.URL.Path+" "+string(b))
		switch {
		case missing:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"policy: not found"}}`)
		case r.Method == "PUT" && string(b) == `{"cedar":"nope"}`:
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"error":{"code":"invalid_argument","message":"policies: policies:1:1: parse error"}}`)
		case r.Method+" "+r.URL.Path == "PUT /prefix/v1/policies", r.Method+" "+r.URL.Path == "GET /prefix/v1/policies":
			io.WriteString(w, pol)
		case r.Method+" "+r.URL.Path == "DELETE /prefix/v1/policies":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"no such route"}}`)
		}
	})
	ctx := context.Background()
	p, err := c.PutPolicy(ctx, "permit(principal, action, resource);")
	if err != nil || p.Cedar != "permit(principal, action, resource);" || p.UpdatedAt.IsZero() {
		t.Fatalf("PutPolicy = %+v, %v", p, err)
	}
	if p, err := c.GetPolicy(ctx); err != nil || p.Cedar != "permit(principal, action, resource);" {
		t.Errorf("GetPolicy = %+v, %v", p, err)
	}
	if err := c.DeletePolicy(ctx); err != nil {
		t.Errorf("DeletePolicy: %v", err)
	}
	if _, err := c.PutPolicy(ctx, "nope"); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutPolicy of a bad text: %v, want ErrInvalid", err)
	}
	want := []string{
		`PUT /prefix/v1/policies {"cedar":"permit(principal, action, resource);"}`,
		"GET /prefix/v1/policies ",
		"DELETE /prefix/v1/policies ",
		`PUT /prefix/v1/policies {"cedar":"nope"}`,
	}
	if len(got) != len(want) {
		t.Fatalf("requests = %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("request %d = %q, want %q", i, got[i], want[i])
		}
	}
	if _, err := c.PutPolicy(ctx, ""); !errors.Is(err, ErrInvalid) || len(got) != len(want) {
		t.Errorf("PutPolicy of an empty text: %v after %d requests, want ErrInvalid before any", err, len(got))
	}
	missing = true
	if _, err := c.GetPolicy(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetPolicy with none: %v, want ErrNotFound", err)
	}
	if err := c.DeletePolicy(ctx); !errors.Is(err, ErrNotFound) {
		t.Errorf("DeletePolicy with none: %v, want ErrNotFound", err)
	}
}
