package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"
)

func TestCreateKeyRequest(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		var in map[string]any
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || r.Method != "POST" || r.URL.Path != "/prefix/v1/keys" ||
			in["name"] != "ci" || in["expires_in_s"] != float64(61) {
			t.Errorf("request %s %s %v %v", r.Method, r.URL, in, err)
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":"k1","key":"al_k1_s","name":"ci","scopes":["exec"],"created_at":"2026-01-02T03:04:05Z","expires_at":"2026-01-02T03:05:06Z","last_used_at":null,"revoked_at":null}`)
	})
	k, err := c.CreateKey(context.Background(), CreateKeyRequest{Name: "ci", Scopes: []string{"exec"}, ExpiresIn: 60*time.Second + time.Millisecond})
	if err != nil || k.ID != "k1" || k.Secret != "al_k1_s" || k.ExpiresAt.IsZero() || !k.LastUsedAt.IsZero() || !k.RevokedAt.IsZero() {
		t.Errorf("CreateKey = %+v, %v", k, err)
	}
}

func TestListAndRevokeKeys(t *testing.T) {
	c := serve(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && r.URL.Path == "/prefix/v1/keys":
			io.WriteString(w, `{"keys":[{"id":"k1","name":"a","scopes":["admin"],"created_at":"2026-01-02T03:04:05Z","expires_at":null,"last_used_at":"2026-01-02T03:04:06Z","revoked_at":"2026-01-02T03:04:07Z"}]}`)
		case r.Method == "DELETE" && r.URL.Path == "/prefix/v1/keys/k1":
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"key k2: not found"}}`)
		}
	})
	ctx := context.Background()
	keys, err := c.ListKeys(ctx)
	if err != nil || len(keys) != 1 || !keys[0].ExpiresAt.IsZero() || keys[0].LastUsedAt.IsZero() || keys[0].RevokedAt.IsZero() {
		t.Errorf("ListKeys = %+v, %v", keys, err)
	}
	if err := c.RevokeKey(ctx, "k1"); err != nil {
		t.Errorf("RevokeKey: %v", err)
	}
	if err := c.RevokeKey(ctx, "k2"); !errors.Is(err, ErrNotFound) {
		t.Errorf("RevokeKey missing: %v", err)
	}
	for _, id := range []string{"", "a/b", "a?b"} {
		if err := c.RevokeKey(ctx, id); !errors.Is(err, ErrInvalid) {
			t.Errorf("RevokeKey(%q): %v", id, err)
		}
	}
}
