package api

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/auth"
)

func TestKeys(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	a := e.client(e.adminA)

	ck, err := a.CreateKey(ctx, client.CreateKeyRequest{Name: "ci", Scopes: []string{"sandboxes:read", "exec", "exec"}})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ck.Secret, "al_"+ck.ID+"_") || ck.Name != "ci" || strings.Join(ck.Scopes, ",") != "exec,sandboxes:read" ||
		ck.CreatedAt.IsZero() || !ck.ExpiresAt.IsZero() || !ck.RevokedAt.IsZero() {
		t.Fatalf("created key %+v", ck)
	}
	// The new key works within its scopes only.
	k := e.client(ck.Secret)
	if _, err := k.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Errorf("new key lists: %v", err)
	}
	if _, err := k.CreateSandbox(ctx, client.CreateSandboxRequest{}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("new key creates a sandbox without sandboxes:write: %v", err)
	}

	// Listing shows it, without secrets or hashes.
	keys, err := a.ListKeys(ctx)
	if err != nil || len(keys) != 2 || keys[1].ID != ck.ID || keys[1].Name != "ci" {
		t.Fatalf("keys %+v, %v", keys, err)
	}
	status, body := e.do("GET", "/v1/keys", e.adminA)
	_, secret, _ := auth.ParseToken(ck.Secret)
	if status != 200 || strings.Contains(body, secret) || strings.Contains(body, "hash") || strings.Contains(body, `"key"`) {
		t.Errorf("GET /v1/keys = %d %s", status, body)
	}

	// Revoke: the key stops working at once, and shows as revoked.
	if err := a.RevokeKey(ctx, ck.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := k.ListSandboxes(ctx, client.ListOptions{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("revoked key: %v", err)
	}
	if err := a.RevokeKey(ctx, ck.ID); err != nil {
		t.Errorf("revoking again: %v", err)
	}
	keys, _ = a.ListKeys(ctx)
	if len(keys) != 2 || keys[1].RevokedAt.IsZero() {
		t.Errorf("keys after revoke: %+v", keys)
	}
	if err := a.RevokeKey(ctx, "nosuchkey123"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("revoking a missing key: %v", err)
	}

	// Both are audited, without the secret.
	recs, _, err := a.AuditList(ctx, client.AuditQuery{Target: ck.ID, Phase: client.PhaseOutcome})
	if err != nil || len(recs) != 3 || recs[0].Action != ActionKeyCreate || recs[1].Action != ActionKeyRevoke {
		t.Fatalf("key records %+v, %v", recs, err)
	}
	if !strings.Contains(string(recs[0].Details), `"name":"ci"`) || !strings.Contains(string(recs[0].Details), "sandboxes:read") {
		t.Errorf("key.create details %s", recs[0].Details)
	}
	all, _, _ := a.AuditList(ctx, client.AuditQuery{Limit: 1000})
	for _, r := range all {
		if strings.Contains(string(r.Details), secret) || strings.Contains(r.Target, secret) {
			t.Errorf("the secret is in the audit log: %+v", r)
		}
	}

	// Expiry.
	ek, err := a.CreateKey(ctx, client.CreateKeyRequest{Name: "tmp", Scopes: []string{"files"}, ExpiresIn: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(ek.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("expires at %v, want in an hour", ek.ExpiresAt)
	}
}

func TestKeysTenantIsolation(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	a, b := e.client(e.adminA), e.client(e.adminB)
	ck, err := a.CreateKey(ctx, client.CreateKeyRequest{Name: "a", Scopes: []string{"sandboxes:read"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.RevokeKey(ctx, ck.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant B revokes A's key: %v", err)
	}
	if _, err := e.client(ck.Secret).ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Errorf("A's key after B's attempt: %v", err)
	}
	keys, err := b.ListKeys(ctx)
	if err != nil || len(keys) != 1 {
		t.Errorf("tenant B lists %+v, %v", keys, err)
	}
	for _, k := range keys {
		if k.ID == ck.ID {
			t.Errorf("tenant B sees A's key")
		}
	}
	// A key made by B's admin belongs to B.
	kb, err := b.CreateKey(ctx, client.CreateKeyRequest{Name: "b", Scopes: []string{"admin"}})
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := e.client(kb.Secret).ListKeys(ctx); len(keys) != 2 {
		t.Errorf("B's new admin key lists %d keys, want B's 2", len(keys))
	}
}

func TestCreateKeyValidation(t *testing.T) {
	e := newRealEnv(t)
	for _, body := range []string{
		`{}`, `{"name":"x"}`, `{"name":"x","scopes":[]}`, `{"name":"","scopes":["exec"]}`,
		`{"name":"x","scopes":["root"]}`, `{"name":"x","scopes":["exec"],"expires_in_s":-1}`,
		`{"name":"x\u0001","scopes":["exec"]}`, `{"name":"` + strings.Repeat("n", 200) + `","scopes":["exec"]}`,
		`{"name":"x","scopes":["exec"],"extra":1}`, `{"name":"x","scopes":"exec"}`,
	} {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/keys", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+e.adminA)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("POST /v1/keys %s = %d, want 400", body, resp.StatusCode)
		}
	}
	if status, _ := e.do("DELETE", "/v1/keys/bad%20id", e.adminA); status != 400 {
		t.Errorf("malformed key id: %d", status)
	}
	if status, _ := e.do("GET", "/v1/keys?x=1", e.adminA); status != 400 {
		t.Errorf("list with a query: %d", status)
	}
	keys, _ := e.auth.ListKeys(context.Background(), tenantA)
	if len(keys) != 1 {
		t.Errorf("%d keys after refused creates, want 1", len(keys))
	}
}

// A key cannot grant what it lacks. The routes need admin, which has every
// scope, so this checks the rule itself.
func TestCreateKeyNoEscalation(t *testing.T) {
	p := auth.Principal{TenantID: tenantA, KeyID: "k", Scopes: []auth.Scope{auth.ScopeExec, auth.ScopeFiles}}
	tests := []struct {
		scopes []string
		code   string
	}{
		{[]string{"exec"}, ""},
		{[]string{"exec", "files"}, ""},
		{[]string{"exec", "sandboxes:read"}, CodePermissionDenied},
		{[]string{"admin"}, CodePermissionDenied},
		{[]string{"nope"}, CodeInvalidArgument},
	}
	for _, tt := range tests {
		req := createKeyRequest{Name: "n", Scopes: tt.scopes}
		_, err := req.validate(p)
		code := ""
		if err != nil {
			_, code, _ = publicError(err)
		}
		if code != tt.code {
			t.Errorf("%v: %v (code %q), want %q", tt.scopes, err, code, tt.code)
		}
	}
	admin := auth.Principal{TenantID: tenantA, KeyID: "k", Scopes: []auth.Scope{auth.ScopeAdmin}}
	if _, err := (&createKeyRequest{Name: "n", Scopes: []string{"admin", "exec"}}).validate(admin); err != nil {
		t.Errorf("admin grants admin: %v", err)
	}
}

func TestCreateKeyAuditFailure(t *testing.T) {
	ctx := context.Background()
	fa := &fakeAudit{}
	e := newRealEnv(t, func(c *Config) { c.Audit = fa })
	fa.setFailOutcomes(errors.New("audit down"))
	_, err := e.client(e.adminA).CreateKey(ctx, client.CreateKeyRequest{Name: "x", Scopes: []string{"exec"}})
	if !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("create with the audit log down: %v", err)
	}
	keys, err := e.auth.ListKeys(ctx, tenantA)
	if err != nil || len(keys) != 2 || keys[1].RevokedAt.IsZero() {
		t.Errorf("the unrecorded key is not revoked: %+v, %v", keys, err)
	}
}

// FuzzCreateKeyRequest checks the decoder and validation of POST /v1/keys:
// what it accepts has a printable name and known, granted scopes.
func FuzzCreateKeyRequest(f *testing.F) {
	for _, s := range []string{
		`{"name":"ci","scopes":["exec"]}`, `{"name":"x","scopes":["admin","exec","exec"],"expires_in_s":60}`,
		`{"name":"","scopes":[]}`, `{"name":"\u0000","scopes":["exec"]}`, `{"scopes":["files"],"name":"n","expires_in_s":1e20}`,
	} {
		f.Add([]byte(s))
	}
	p := auth.Principal{TenantID: tenantA, KeyID: "k", Scopes: []auth.Scope{auth.ScopeExec, auth.ScopeFiles}}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req createKeyRequest
		if err := decodeJSONBytes(data, &req, false); err != nil {
			return
		}
		scopes, err := req.validate(p)
		if err != nil {
			return
		}
		if strings.TrimSpace(req.Name) == "" || len(req.Name) > 128 || len(scopes) == 0 || req.ExpiresInS < 0 {
			t.Fatalf("accepted %s", data)
		}
		for _, s := range scopes {
			if !s.Valid() || !p.Has(s) {
				t.Fatalf("accepted scope %q", s)
			}
		}
	})
}
