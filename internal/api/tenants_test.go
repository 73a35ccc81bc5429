package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
)

// tenantEnv is the real API with tenant management and templates (over
// the fake store and builder), an operator key in tenant "ops" and admin
// keys of tenants A and B.
type tenantEnv struct {
	*realEnv
	op    string
	store *fakeTemplateStore
	reg   *template.Registry
}

func newTenantEnv(t *testing.T) *tenantEnv {
	t.Helper()
	store := newFakeTemplateStore()
	reg, err := template.NewRegistry(staticSource{"host"})
	if err != nil {
		t.Fatal(err)
	}
	e := &tenantEnv{store: store, reg: reg}
	e.realEnv = newRealEnv(t, func(c *Config) {
		tenants := c.Keys.(TenantManager)
		c.Tenants = tenants
		tpl, err := registry.New(registry.Config{Registry: reg, Store: store, Builder: &fakeBuilder{store: store},
			Source: func(name string) (template.Source, error) { return fakeStored{store, name}, nil },
			// As the daemon wires it: a deleted tenant's build is not
			// registered.
			OwnerGone: func(ctx context.Context, owner string) (bool, error) {
				tn, err := tenants.GetTenant(ctx, owner)
				if errors.Is(err, errdefs.ErrNotFound) {
					return true, nil
				}
				return err == nil && !tn.DeletedAt.IsZero(), err
			}})
		if err != nil {
			t.Fatal(err)
		}
		c.Templates = tpl
	})
	if _, err := e.auth.CreateTenant(context.Background(), storeTenant("ops")); err != nil {
		t.Fatal(err)
	}
	e.op = e.key("ops", auth.ScopeAdmin, auth.ScopeOperator)
	return e
}

func storeTenant(id string) store.Tenant { return store.Tenant{ID: id, Name: id} }

// auditOf returns the outcome records of action, oldest first.
func (e *tenantEnv) auditOf(action string) []audit.Record {
	e.t.Helper()
	recs, err := e.log.List(context.Background(), audit.Query{Action: action})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []audit.Record
	for _, r := range recs {
		if r.Outcome != audit.OutcomeIntent {
			out = append(out, r)
		}
	}
	return out
}

func TestTenants(t *testing.T) {
	ctx := context.Background()
	e := newTenantEnv(t)
	op := e.client(e.op)

	ct, err := op.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme", Name: "Acme Corp", MaxSandboxes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if ct.ID != "acme" || ct.Name != "Acme Corp" || ct.MaxSandboxes != 2 || ct.CreatedAt.IsZero() ||
		!strings.HasPrefix(ct.AdminKey.Secret, "al_"+ct.AdminKey.ID+"_") || strings.Join(ct.AdminKey.Scopes, ",") != "admin" {
		t.Fatalf("created %+v", ct)
	}
	gen, err := op.CreateTenant(ctx, client.CreateTenantRequest{Name: "Generated"})
	if err != nil || !strings.HasPrefix(gen.ID, "t-") {
		t.Fatalf("tenant with a generated ID: %+v, %v", gen, err)
	}
	list, err := op.ListTenants(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tn := range list {
		ids = append(ids, tn.ID)
	}
	want := []string{"acme", "ops", tenantA, tenantB, gen.ID}
	if !slices.Equal(slices.Sorted(slices.Values(ids)), slices.Sorted(slices.Values(want))) {
		t.Errorf("tenants %v, want %v", ids, want)
	}

	// The new tenant's admin key works in its tenant only, and is no
	// operator.
	acme := e.client(ct.AdminKey.Secret)
	sb, err := acme.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("the new tenant creates a sandbox: %v", err)
	}
	if _, err := acme.ListTenants(ctx); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "operator") {
		t.Errorf("a tenant admin lists tenants: %v", err)
	}
	if _, err := acme.CreateKey(ctx, client.CreateKeyRequest{Name: "op", Scopes: []string{"operator"}}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("a tenant admin mints an operator key: %v", err)
	}
	if _, err := op.CreateKey(ctx, client.CreateKeyRequest{Name: "op2", Scopes: []string{"operator"}}); err != nil {
		t.Errorf("the operator mints an operator key: %v", err)
	}

	// Refusals.
	for _, tt := range []struct {
		req  client.CreateTenantRequest
		want error
	}{
		{client.CreateTenantRequest{ID: "acme", Name: "again"}, client.ErrConflict},
		{client.CreateTenantRequest{ID: "bad id", Name: "x"}, client.ErrInvalid},
		{client.CreateTenantRequest{ID: "x~y", Name: "x"}, client.ErrInvalid},
		{client.CreateTenantRequest{ID: "ok"}, client.ErrInvalid},
		{client.CreateTenantRequest{ID: "ok", Name: "x", MaxSandboxes: -1}, client.ErrInvalid},
		{client.CreateTenantRequest{ID: "ok", Name: "a\x00b"}, client.ErrInvalid},
	} {
		if _, err := op.CreateTenant(ctx, tt.req); !errors.Is(err, tt.want) {
			t.Errorf("create %+v: %v, want %v", tt.req, err, tt.want)
		}
	}
	if status, body := e.doBody("POST", "/v1/tenants", e.op, `{"name":"x","quota":3}`); status != 400 || !strings.Contains(body, "unknown field") {
		t.Errorf("unknown field: %d %s", status, body)
	}

	// Deletion: not while a sandbox lives, not the caller's own tenant.
	if err := op.DeleteTenant(ctx, "acme"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "sandboxes") {
		t.Errorf("delete with a live sandbox: %v", err)
	}
	if _, err := acme.ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Errorf("a refused delete touched the tenant's key: %v", err)
	}
	if err := op.DeleteTenant(ctx, "ops"); !errors.Is(err, client.ErrConflict) {
		t.Errorf("delete own tenant: %v", err)
	}
	if _, err := e.auth.CreateTenant(ctx, storeTenant(auth.DefaultTenantID)); err != nil {
		t.Fatal(err)
	}
	if err := op.DeleteTenant(ctx, auth.DefaultTenantID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("delete the operator's default tenant: %v", err)
	}
	if err := acme.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// Its templates go with it; the shared ones and others' stay.
	for _, n := range []string{template.StoreName("acme", "mine"), template.StoreName(tenantA, "mine"), "shared"} {
		e.store.put(layers.Manifest{Name: n, Layers: []string{fakeDigest(n)}})
		if err := e.reg.Add(fakeStored{e.store, n}); err != nil {
			t.Fatal(err)
		}
	}
	if err := op.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := acme.ListSandboxes(ctx, client.ListOptions{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("the deleted tenant's key: %v, want unauthorized at once", err)
	}
	if _, err := e.store.Get("acme~mine"); err == nil {
		t.Error("the deleted tenant's template is still stored")
	}
	if _, err := e.reg.Get("acme~mine"); err == nil {
		t.Error("the deleted tenant's template is still registered")
	}
	for _, n := range []string{template.StoreName(tenantA, "mine"), "shared"} {
		if _, err := e.store.Get(n); err != nil {
			t.Errorf("template %s went with another tenant: %v", n, err)
		}
	}
	list, _ = op.ListTenants(ctx)
	for _, tn := range list {
		if tn.ID == "acme" {
			t.Error("a deleted tenant is listed")
		}
	}
	if err := op.DeleteTenant(ctx, "acme"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("delete again: %v", err)
	}
	if err := op.DeleteTenant(ctx, "nope"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("delete missing: %v", err)
	}
	if _, err := op.CreateTenant(ctx, client.CreateTenantRequest{ID: "acme", Name: "reuse"}); !errors.Is(err, client.ErrConflict) {
		t.Errorf("reuse a deleted tenant's ID: %v", err)
	}
	if status, _ := e.do("DELETE", "/v1/tenants/bad~id", e.op); status != 400 {
		t.Errorf("malformed tenant id: %d", status)
	}

	// Audited: intent and outcome, the key ID but never its secret.
	creates := e.auditOf(ActionTenantCreate)
	if len(creates) < 2 || creates[0].Target != "acme" || creates[0].Outcome != audit.OutcomeOK || creates[0].TenantID != "ops" ||
		!strings.Contains(string(creates[0].Details), ct.AdminKey.ID) {
		t.Errorf("tenant.create records %+v", creates)
	}
	_, secret, _ := auth.ParseToken(ct.AdminKey.Secret)
	for _, r := range creates {
		if strings.Contains(string(r.Details), secret) {
			t.Errorf("an audit record holds the admin key's secret: %+v", r)
		}
	}
	deletes := e.auditOf(ActionTenantDelete)
	var oks int
	for _, r := range deletes {
		if r.Outcome == audit.OutcomeOK {
			oks++
			if r.Target != "acme" || !strings.Contains(string(r.Details), `"templates_removed":1`) {
				t.Errorf("tenant.delete record %+v", r)
			}
		}
	}
	if oks != 1 || len(deletes) < 4 {
		t.Errorf("tenant.delete records %+v", deletes)
	}
}

// TestTenantRoutesNeedOperator: a tenant's admin (not the operator) is
// refused every tenant route, and nothing changes.
func TestTenantRoutesNeedOperator(t *testing.T) {
	e := newTenantEnv(t)
	h := e.h
	for _, rt := range h.routes() {
		if rt.scope != auth.ScopeOperator {
			continue
		}
		path := strings.Replace(rt.path, "{id}", tenantB, 1)
		body := routeRequests[rt.method+" "+rt.path].body
		status, resp := e.doBody(rt.method, path, e.adminA, body)
		if status != 403 || !strings.Contains(resp, `\"operator\"`) {
			t.Errorf("%s %s with a tenant admin: %d %s", rt.method, path, status, resp)
		}
	}
	if tn, err := e.auth.GetTenant(context.Background(), tenantB); err != nil || !tn.DeletedAt.IsZero() {
		t.Errorf("tenant B after the refused requests: %+v, %v", tn, err)
	}
	list, _ := e.auth.ListTenants(context.Background())
	if len(list) != 3 {
		t.Errorf("%d tenants after the refused requests, want 3", len(list))
	}
}

// TestTenantsNotServed: without Config.Tenants the routes answer 501.
func TestTenantsNotServed(t *testing.T) {
	e := newRealEnv(t)
	if _, err := e.auth.CreateTenant(context.Background(), storeTenant("ops")); err != nil {
		t.Fatal(err)
	}
	op := e.key("ops", auth.ScopeOperator)
	if status, body := e.do("GET", "/v1/tenants", op); status != 501 || !strings.Contains(body, "not_supported") {
		t.Errorf("GET /v1/tenants without Tenants: %d %s", status, body)
	}
	if _, err := New(Config{Sandboxes: e.mgr, Auth: e.auth, Audit: e.log, Tenants: e.auth}); err == nil {
		t.Error("New accepted Tenants without Keys")
	}
}

// doBody sends a raw request with a JSON body (none if empty) and returns
// the status and body.
func (e *realEnv) doBody(method, path, token, body string) (int, string) {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
