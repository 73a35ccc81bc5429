package api

import (
	"context"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// The real implementations satisfy the interfaces of Config.
var (
	_ Authenticator = (*auth.Service)(nil)
	_ Quota         = (*auth.Service)(nil)
	_ KeyManager    = (*auth.Service)(nil)
	_ RateLimiter   = (*auth.Limiter)(nil)
	_ Auditor       = (*audit.Log)(nil)
	_ AuditLog      = (*audit.Log)(nil)
)

// realEnv is the API over the real store, auth service and audit log (in
// a temporary directory) and a real Manager on the fake runtime, as the
// daemon wires them.
type realEnv struct {
	t      testing.TB
	st     *sqlitestore.Store
	auth   *auth.Service
	log    *audit.Log
	rt     *runtimefake.Runtime
	mgr    *sandbox.Manager
	h      *Handler
	srv    *httptest.Server
	adminA string // admin key of tenant A
	adminB string // admin key of tenant B
}

func newRealEnv(t testing.TB, tune ...func(*Config)) *realEnv {
	t.Helper()
	ctx := context.Background()
	e := &realEnv{t: t}
	var err error
	e.rt, err = runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.rt.Close(context.Background()) })
	reg, err := template.NewRegistry(staticSource{"host"})
	if err != nil {
		t.Fatal(err)
	}
	e.st, err = sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.st.Close() })
	e.mgr, err = sandbox.New(e.rt, reg, sandbox.Config{
		StateDir:       filepath.Join(t.TempDir(), "state"),
		HealthInterval: -1,
		ReapInterval:   50 * time.Millisecond,
		Records:        e.st,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.mgr.Close(context.Background()) })

	e.auth, err = auth.NewService(e.st, auth.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e.log, err = audit.New(ctx, e.st, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.log.Close(context.Background()) }) // before the store closes
	for _, id := range []string{tenantA, tenantB} {
		if _, err := e.auth.CreateTenant(ctx, store.Tenant{ID: id, Name: id}); err != nil {
			t.Fatal(err)
		}
	}
	e.adminA = e.key(tenantA, auth.ScopeAdmin)
	e.adminB = e.key(tenantB, auth.ScopeAdmin)

	cfg := Config{
		Sandboxes: e.mgr,
		Auth:      e.auth,
		Audit:     e.log,
		AuditLog:  e.log,
		Keys:      e.auth,
		Quota:     e.auth,
	}
	for _, f := range tune {
		f(&cfg)
	}
	e.h, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	return e
}

// key creates a key of tenant with scopes directly in the auth service.
func (e *realEnv) key(tenant string, scopes ...auth.Scope) string {
	e.t.Helper()
	tok, _, err := e.auth.CreateKey(context.Background(), tenant, "test", scopes, time.Time{})
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

// client returns an API client with key.
func (e *realEnv) client(key string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.srv.URL, key, client.WithHTTPClient(e.srv.Client()))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}
