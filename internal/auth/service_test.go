package auth

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

func openStore(t testing.TB) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "airlock.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newService(t testing.TB, st Store, opts Options) *Service {
	t.Helper()
	s, err := NewService(st, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// withTenant returns a service over a fresh store with tenant "t1".
func withTenant(t testing.TB, opts Options) (*Service, *sqlitestore.Store) {
	st := openStore(t)
	s := newService(t, st, opts)
	if _, err := s.CreateTenant(context.Background(), store.Tenant{ID: "t1", Name: "One"}); err != nil {
		t.Fatal(err)
	}
	return s, st
}

func TestKeyRoundTrip(t *testing.T) {
	ctx := context.Background()
	s, _ := withTenant(t, Options{})
	token, key, err := s.CreateKey(ctx, "t1", "ci", []Scope{ScopeExec, ScopeSandboxesRead, ScopeExec}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if id, _, ok := ParseToken(token); !ok || id != key.ID {
		t.Fatalf("token %q does not carry key id %q", token, key.ID)
	}
	if key.TenantID != "t1" || key.Name != "ci" || !slices.Equal(key.Scopes, []Scope{ScopeExec, ScopeSandboxesRead}) ||
		key.CreatedAt.IsZero() || !key.ExpiresAt.IsZero() {
		t.Errorf("key = %+v", key)
	}
	p, err := s.Authenticate(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	if p.TenantID != "t1" || p.KeyID != key.ID || !p.Has(ScopeExec) || p.Has(ScopeAdmin) || p.Has(ScopeFiles) {
		t.Errorf("principal = %+v", p)
	}
	keys, err := s.ListKeys(ctx, "t1")
	if err != nil || len(keys) != 1 || keys[0].ID != key.ID || keys[0].LastUsedAt.IsZero() {
		t.Errorf("ListKeys = %+v, %v (want one key with its last use recorded)", keys, err)
	}
}

func TestCreateKeyValidation(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, _ := withTenant(t, Options{Now: clk.Now})
	tests := []struct {
		tenant  string
		name    string
		scopes  []Scope
		expires time.Time
		class   error
	}{
		{"t1", "x", nil, time.Time{}, errdefs.ErrInvalidArgument},
		{"t1", "x", []Scope{"root"}, time.Time{}, errdefs.ErrInvalidArgument},
		{"t1", "bad\nname", []Scope{ScopeExec}, time.Time{}, errdefs.ErrInvalidArgument},
		{"t1", "x", []Scope{ScopeExec}, clk.Now(), errdefs.ErrInvalidArgument},
		{"t1", "x", []Scope{ScopeExec}, clk.Now().Add(-time.Hour), errdefs.ErrInvalidArgument},
		{"nope", "x", []Scope{ScopeExec}, time.Time{}, errdefs.ErrNotFound},
		{"bad tenant", "x", []Scope{ScopeExec}, time.Time{}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		if _, _, err := s.CreateKey(ctx, tt.tenant, tt.name, tt.scopes, tt.expires); !errors.Is(err, tt.class) {
			t.Errorf("CreateKey(%q, %q, %v, %v) = %v, want %v", tt.tenant, tt.name, tt.scopes, tt.expires, err, tt.class)
		}
	}
}

// TestAuthenticateRefusals checks that every kind of bad key is refused
// with the same error.
func TestAuthenticateRefusals(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, _ := withTenant(t, Options{Now: clk.Now})
	good, _, err := s.CreateKey(ctx, "t1", "good", []Scope{ScopeExec}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	revoked, rk, _ := s.CreateKey(ctx, "t1", "revoked", []Scope{ScopeExec}, time.Time{})
	if _, err := s.Authenticate(ctx, revoked); err != nil { // cached before revocation
		t.Fatal(err)
	}
	if err := s.RevokeKey(ctx, "t1", rk.ID); err != nil {
		t.Fatal(err)
	}
	expiring, _, _ := s.CreateKey(ctx, "t1", "expiring", []Scope{ScopeExec}, clk.Now().Add(time.Minute))
	if _, err := s.Authenticate(ctx, expiring); err != nil {
		t.Fatalf("key before expiry: %v", err)
	}
	clk.Add(time.Minute)
	id, _, _ := ParseToken(good)
	_, unknown, _ := newToken()
	cases := map[string]string{
		"malformed":    "al_nope",
		"empty":        "",
		"unknown":      unknown,
		"wrong secret": "al_" + id + "_" + "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
		"revoked":      revoked,
		"expired":      expiring,
	}
	for name, tok := range cases {
		_, err := s.Authenticate(ctx, tok)
		if !errors.Is(err, errdefs.ErrUnauthenticated) || err.Error() != ErrInvalidKey.Error() {
			t.Errorf("%s: err = %v, want %q", name, err, ErrInvalidKey)
		}
	}
	if _, err := s.Authenticate(ctx, good); err != nil {
		t.Errorf("good key after refusals: %v", err)
	}
}

func TestRevocationVisibleWithinTTL(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	st := openStore(t)
	a := newService(t, st, Options{Now: clk.Now})
	b := newService(t, st, Options{Now: clk.Now}) // another daemon on the same store
	if _, err := a.CreateTenant(ctx, store.Tenant{ID: "t1"}); err != nil {
		t.Fatal(err)
	}
	tok, key, _ := a.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
	if _, err := b.Authenticate(ctx, tok); err != nil {
		t.Fatal(err)
	}
	if err := a.RevokeKey(ctx, "t1", key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("revoking service still accepts the key: %v", err)
	}
	clk.Add(MaxCacheTTL - time.Millisecond)
	if _, err := b.Authenticate(ctx, tok); err != nil {
		t.Logf("other service refused before its TTL ran out: %v", err) // allowed, not required
	}
	clk.Add(time.Millisecond)
	if _, err := b.Authenticate(ctx, tok); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("other service accepts a revoked key after %v: %v", MaxCacheTTL, err)
	}
}

func TestRevokeScoping(t *testing.T) {
	ctx := context.Background()
	s, _ := withTenant(t, Options{})
	if _, err := s.CreateTenant(ctx, store.Tenant{ID: "t2"}); err != nil {
		t.Fatal(err)
	}
	tok, key, _ := s.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
	for _, c := range [][2]string{{"t2", key.ID}, {"t1", "nosuchkeyid2"}, {"t1", "../etc"}} {
		if err := s.RevokeKey(ctx, c[0], c[1]); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("RevokeKey(%q, %q) = %v, want not found", c[0], c[1], err)
		}
	}
	if _, err := s.Authenticate(ctx, tok); err != nil {
		t.Errorf("key revoked through another tenant: %v", err)
	}
	t2keys, _ := s.ListKeys(ctx, "t2")
	if len(t2keys) != 0 {
		t.Errorf("tenant t2 lists t1's keys: %+v", t2keys)
	}
}

// failingStore fails reads of keys, to tell store failures from bad keys.
type failingStore struct{ Store }

func (failingStore) GetAPIKey(context.Context, string) (store.APIKey, error) {
	return store.APIKey{}, fmt.Errorf("disk gone: %w", errdefs.ErrUnavailable)
}

func TestAuthenticateStoreFailure(t *testing.T) {
	ctx := context.Background()
	s, st := withTenant(t, Options{CacheTTL: -1})
	tok, _, _ := s.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
	f := newService(t, failingStore{st}, Options{})
	_, err := f.Authenticate(ctx, tok)
	if !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("store failure = %v, want unavailable", err)
	}
}

func TestTouchThrottled(t *testing.T) {
	ctx := context.Background()
	clk := newClock()
	s, st := withTenant(t, Options{Now: clk.Now, TouchInterval: time.Minute})
	tok, key, _ := s.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
	lastUsed := func() time.Time {
		k, _ := st.GetAPIKey(ctx, key.ID)
		return k.LastUsedAt
	}
	s.Authenticate(ctx, tok)
	first := lastUsed()
	if !first.Equal(clk.Now()) {
		t.Fatalf("last use %v, want %v", first, clk.Now())
	}
	clk.Add(30 * time.Second)
	s.Authenticate(ctx, tok)
	if !lastUsed().Equal(first) {
		t.Error("last use written again within the interval")
	}
	clk.Add(31 * time.Second)
	s.Authenticate(ctx, tok)
	if !lastUsed().Equal(clk.Now()) {
		t.Error("last use not written after the interval")
	}
}

func TestCacheBounded(t *testing.T) {
	ctx := context.Background()
	s, _ := withTenant(t, Options{CacheSize: 4})
	for range 10 {
		tok, _, _ := s.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
		if _, err := s.Authenticate(ctx, tok); err != nil {
			t.Fatal(err)
		}
		s.mu.Lock()
		n := len(s.cache)
		s.mu.Unlock()
		if n > 4 {
			t.Fatalf("cache holds %d entries, cap 4", n)
		}
	}
}

func TestAuthenticateConcurrent(t *testing.T) {
	ctx := context.Background()
	s, _ := withTenant(t, Options{})
	var toks []string
	for range 4 {
		tok, _, _ := s.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
		toks = append(toks, tok)
	}
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			for j := range 100 {
				tok := toks[(i+j)%len(toks)]
				if _, err := s.Authenticate(ctx, tok); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func TestOptions(t *testing.T) {
	st := openStore(t)
	for _, o := range []Options{{CacheTTL: 2 * time.Second}, {CacheSize: -1}, {TouchInterval: -1}} {
		if _, err := NewService(st, o); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewService(%+v) = %v", o, err)
		}
	}
}

func TestCreateTenantGeneratesID(t *testing.T) {
	s := newService(t, openStore(t), Options{})
	a, err := s.CreateTenant(context.Background(), store.Tenant{Name: "A", MaxSandboxes: 3})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := s.CreateTenant(context.Background(), store.Tenant{Name: "B"})
	if a.ID == "" || a.ID == b.ID || a.MaxSandboxes != 3 || a.CreatedAt.IsZero() {
		t.Errorf("tenants %+v, %+v", a, b)
	}
	if _, err := s.CreateTenant(context.Background(), store.Tenant{ID: a.ID}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate tenant: %v", err)
	}
	if q, err := s.SandboxQuota(context.Background(), a.ID); q != 3 || err != nil {
		t.Errorf("SandboxQuota = %d, %v; want 3", q, err)
	}
	if q, err := s.SandboxQuota(context.Background(), b.ID); q != 0 || err != nil {
		t.Errorf("SandboxQuota without a cap = %d, %v; want 0", q, err)
	}
	if _, err := s.SandboxQuota(context.Background(), "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SandboxQuota of an unknown tenant: %v", err)
	}
}

func TestScopeImplication(t *testing.T) {
	admin := Principal{Scopes: []Scope{ScopeAdmin}}
	op := Principal{Scopes: []Scope{ScopeOperator}}
	plain := Principal{Scopes: []Scope{ScopeTemplatesRead}}
	for _, sc := range AllScopes {
		if !op.Has(sc) {
			t.Errorf("operator lacks %s", sc)
		}
		if got, want := admin.Has(sc), sc != ScopeOperator; got != want {
			t.Errorf("admin.Has(%s) = %v, want %v", sc, got, want)
		}
	}
	if admin.IsOperator() || !op.IsOperator() || plain.IsOperator() {
		t.Error("IsOperator wrong")
	}
	if !plain.Has(ScopeTemplatesRead) || plain.Has(ScopeTemplatesWrite) {
		t.Error("a plain key's scopes are wrong")
	}
}

func TestDeleteTenant(t *testing.T) {
	ctx := context.Background()
	s, _ := withTenant(t, Options{})
	if _, err := s.CreateTenant(ctx, store.Tenant{ID: "t2"}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := s.CreateKey(ctx, "t1", "k", []Scope{ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	tok2, _, _ := s.CreateKey(ctx, "t2", "k", []Scope{ScopeAdmin}, time.Time{})
	if _, err := s.Authenticate(ctx, tok); err != nil { // cached now
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "t1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Authenticate(ctx, tok); !errors.Is(err, ErrInvalidKey) {
		t.Errorf("a deleted tenant's key still works: %v", err)
	}
	if _, err := s.Authenticate(ctx, tok2); err != nil {
		t.Errorf("another tenant's key: %v", err)
	}
	if tn, err := s.GetTenant(ctx, "t1"); err != nil || tn.DeletedAt.IsZero() {
		t.Errorf("deleted tenant = %+v, %v", tn, err)
	}
	if err := s.DeleteTenant(ctx, "t1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, _, err := s.CreateKey(ctx, "t1", "k", []Scope{ScopeExec}, time.Time{}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("key in a deleted tenant: %v", err)
	}
	list, err := s.ListTenants(ctx)
	if err != nil || len(list) != 2 {
		t.Errorf("ListTenants = %+v, %v", list, err)
	}
}
