package api

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// staticSource is a template that resolves to a fixed rootfs (the fake
// runtime does not mount it).
type staticSource struct{ name string }

func (s staticSource) Name() string { return s.name }
func (s staticSource) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Rootfs{}, err
	}
	return runtime.Rootfs{Layers: []string{"/nonexistent/" + s.name}}, nil
}

// fakeAuth maps tokens to principals.
type fakeAuth struct {
	keys    map[string]auth.Principal
	err     error           // returned for every token when set
	revoked map[string]bool // key IDs that KeyPrincipal refuses
}

// KeyPrincipal finds the principal of a key by its ID (for PTY tokens).
func (f *fakeAuth) KeyPrincipal(ctx context.Context, id string) (auth.Principal, error) {
	if f.err != nil {
		return auth.Principal{}, f.err
	}
	for _, p := range f.keys {
		if p.KeyID == id && !f.revoked[id] {
			return p, nil
		}
	}
	return auth.Principal{}, fmt.Errorf("unknown key: %w", errdefs.ErrUnauthenticated)
}

func (f *fakeAuth) Authenticate(ctx context.Context, token string) (auth.Principal, error) {
	if f.err != nil {
		return auth.Principal{}, f.err
	}
	p, ok := f.keys[token]
	if !ok {
		return auth.Principal{}, fmt.Errorf("unknown key: %w", errdefs.ErrUnauthenticated)
	}
	return p, nil
}

// fakeAudit records events; fail makes AppendRecord fail, failOutcomes
// only for outcomes (intents are recorded).
type fakeAudit struct {
	mu           sync.Mutex
	all          []audit.Event // every event; the Seq of all[i] is i+1
	taken        int           // events before this one were returned by take
	fail         error
	failOutcomes error
}

func (f *fakeAudit) AppendRecord(ctx context.Context, ev audit.Event) (audit.Record, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return audit.Record{}, f.fail
	}
	if f.failOutcomes != nil && ev.Outcome != audit.OutcomeIntent {
		return audit.Record{}, f.failOutcomes
	}
	if ctx.Err() != nil {
		return audit.Record{}, ctx.Err()
	}
	ev.Details = maps.Clone(ev.Details) // as the real log, which encodes them at once
	f.all = append(f.all, ev)
	return audit.Record{Seq: uint64(len(f.all)), Action: ev.Action, Outcome: ev.Outcome}, nil
}

func (f *fakeAudit) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *fakeAudit) setFailOutcomes(err error) {
	f.mu.Lock()
	f.failOutcomes = err
	f.mu.Unlock()
}

// take returns the events recorded since the last call.
func (f *fakeAudit) take() []audit.Event {
	f.mu.Lock()
	defer f.mu.Unlock()
	ev := slices.Clone(f.all[f.taken:])
	f.taken = len(f.all)
	return ev
}

// event returns the event with Seq seq, if any.
func (f *fakeAudit) event(seq uint64) (audit.Event, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq == 0 || seq > uint64(len(f.all)) {
		return audit.Event{}, false
	}
	return f.all[seq-1], true
}

// outcomes returns the outcome events among evs (intents dropped).
func outcomes(evs []audit.Event) []audit.Event {
	var out []audit.Event
	for _, ev := range evs {
		if ev.Outcome != audit.OutcomeIntent {
			out = append(out, ev)
		}
	}
	return out
}

// fakeLimiter denies the keys in deny.
type fakeLimiter struct {
	mu   sync.Mutex
	deny map[string]bool
}

func (f *fakeLimiter) Allow(keyID string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.deny[keyID]
}

func (f *fakeLimiter) set(keyID string, deny bool) {
	f.mu.Lock()
	f.deny[keyID] = deny
	f.mu.Unlock()
}

// fakeQuota gives per-tenant quotas.
type fakeQuota struct {
	mu sync.Mutex
	n  map[string]int
}

func (f *fakeQuota) SandboxQuota(ctx context.Context, tenant string) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[tenant], nil
}

func (f *fakeQuota) set(tenant string, n int) {
	f.mu.Lock()
	f.n[tenant] = n
	f.mu.Unlock()
}

// The test tenants and keys.
const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
	keyA    = "secret-key-a" // tenant A, the four sandbox scopes
	keyB    = "secret-key-b" // tenant B, admin (admin must not cross tenants)
	keyNone = "secret-key-none"
)

// apiScopes are the scopes the routes of this package need.
var apiScopes = []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeExec, auth.ScopeFiles, auth.ScopeToolsCall}

// keyWithout is the token of a tenant-A key that has every API scope but s.
func keyWithout(s auth.Scope) string { return "secret-key-a-without-" + string(s) }

// testEnv is a real API server over a real Manager on the fake runtime.
type testEnv struct {
	t       testing.TB
	rt      *runtimefake.Runtime
	mgr     *sandbox.Manager
	h       *Handler
	srv     *httptest.Server
	audit   *fakeAudit
	limiter *fakeLimiter
	quota   *fakeQuota
	auth    *fakeAuth
	ready   func(context.Context) error

	stateDir string             // the manager's
	reg      *template.Registry // the manager's templates
	cfg      Config             // the handler's
}

func newTestEnv(t testing.TB, tune ...func(*Config)) *testEnv {
	t.Helper()
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(context.Background()); err != nil {
			t.Errorf("runtime close: %v", err)
		}
	})
	reg, err := template.NewRegistry(staticSource{"host"}, staticSource{"other"})
	if err != nil {
		t.Fatal(err)
	}
	stateDir := filepath.Join(t.TempDir(), "state")
	mgr, err := sandbox.New(rt, reg, sandbox.Config{
		StateDir:       stateDir,
		HealthInterval: -1,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })

	keys := map[string]auth.Principal{
		keyA:    {TenantID: tenantA, KeyID: "ka", Scopes: apiScopes},
		keyB:    {TenantID: tenantB, KeyID: "kb", Scopes: []auth.Scope{auth.ScopeAdmin}},
		keyNone: {TenantID: tenantA, KeyID: "knone"},
	}
	// keyWithout(s) has every scope the routes need but s (and never
	// admin, which implies them all).
	routeScopes := append(slices.Clone(apiScopes), auth.ScopeAuditRead, auth.ScopeTemplatesRead, auth.ScopeTemplatesWrite,
		auth.ScopeToolsRead, auth.ScopeToolsWrite, auth.ScopeApprovals)
	for _, s := range append(slices.Clone(routeScopes), auth.ScopeAdmin, auth.ScopeOperator) {
		keys[keyWithout(s)] = auth.Principal{TenantID: tenantA, KeyID: "k-no-" + string(s),
			Scopes: slices.DeleteFunc(slices.Clone(routeScopes), func(x auth.Scope) bool { return x == s })}
	}
	e := &testEnv{
		t:       t,
		rt:      rt,
		mgr:     mgr,
		audit:   &fakeAudit{},
		limiter: &fakeLimiter{deny: map[string]bool{}},
		quota:   &fakeQuota{n: map[string]int{}},
		auth:    &fakeAuth{keys: keys},

		stateDir: stateDir,
		reg:      reg,
	}
	cfg := Config{
		Sandboxes: mgr,
		Auth:      e.auth,
		Audit:     e.audit,
		Limiter:   e.limiter,
		Quota:     e.quota,
		Ready:     func(ctx context.Context) error { return e.readyErr(ctx) },
	}
	for _, f := range tune {
		f(&cfg)
	}
	e.cfg = cfg
	e.h, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	return e
}

func (e *testEnv) readyErr(ctx context.Context) error {
	if e.ready != nil {
		return e.ready(ctx)
	}
	return nil
}

// client returns an API client with key.
func (e *testEnv) client(key string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.srv.URL, key, client.WithHTTPClient(e.srv.Client()))
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// sandbox creates a sandbox for tenant A through the API.
func (e *testEnv) sandbox(ctx context.Context) *client.Sandbox {
	e.t.Helper()
	sb, err := e.client(keyA).CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		e.t.Fatal(err)
	}
	return sb
}

// do sends a raw request with token (none if empty).
func (e *testEnv) do(method, path, token, contentType string, body []byte) (*http.Response, []byte) {
	e.t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp, b
}
