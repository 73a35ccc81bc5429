package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// routeRequest is a request that would succeed on route for the
// sandbox's owner.
type routeRequest struct {
	query string
	body  string
}

// routeRequests has one well-formed request per route; a route missing
// here fails the tests, so that new routes get covered.
var routeRequests = map[string]routeRequest{
	"GET /healthz":                                      {},
	"GET /readyz":                                       {},
	"GET /metrics":                                      {},
	"GET /v1/info":                                      {},
	"GET /v1/whoami":                                    {},
	"POST /v1/sandboxes":                                {body: `{}`},
	"GET /v1/sandboxes":                                 {},
	"GET /v1/sandboxes/{id}":                            {},
	"DELETE /v1/sandboxes/{id}":                         {},
	"POST /v1/sandboxes/{id}/timeout":                   {body: `{"timeout_s":3600}`},
	"GET /v1/sandboxes/{id}/network":                    {},
	"PATCH /v1/sandboxes/{id}/network":                  {body: `{"mode":"none"}`},
	"GET /v1/sandboxes/{id}/network/log":                {},
	"GET /v1/sandboxes/{id}/stats":                      {query: "interval_ms=100"},
	"POST /v1/sandboxes/{id}/exec":                      {body: `{"command":"echo pwned > pwned.txt"}`},
	"PUT /v1/sandboxes/{id}/files":                      {query: "path=f.txt", body: "overwritten"},
	"GET /v1/sandboxes/{id}/files":                      {query: "path=f.txt"},
	"DELETE /v1/sandboxes/{id}/files":                   {query: "path=f.txt"},
	"GET /v1/sandboxes/{id}/files/list":                 {query: "path=."},
	"POST /v1/sandboxes/{id}/files/mkdir":               {query: "path=pwned-dir"},
	"GET /v1/sandboxes/{id}/files/stat":                 {query: "path=f.txt"},
	"GET /v1/sandboxes/{id}/files/watch":                {query: "path=."},
	"POST /v1/sandboxes/{id}/files/move":                {query: "path=f.txt&to=moved.txt"},
	"GET /v1/sandboxes/{id}/pty":                        {query: "cmd=true"},
	"POST /v1/sandboxes/{id}/pty/token":                 {},
	"POST /v1/sandboxes/{id}/ports/{port}":              {body: `{"ttl_s":60}`},
	"GET /v1/sandboxes/{id}/ports/{port}/{path...}":     {},
	"POST /v1/sandboxes/{id}/ports/{port}/{path...}":    {},
	"PUT /v1/sandboxes/{id}/ports/{port}/{path...}":     {},
	"PATCH /v1/sandboxes/{id}/ports/{port}/{path...}":   {},
	"DELETE /v1/sandboxes/{id}/ports/{port}/{path...}":  {},
	"OPTIONS /v1/sandboxes/{id}/ports/{port}/{path...}": {},
	"GET /v1/openapi.json":                              {},
	"POST /v1/sandboxes/{id}/code":                      {body: `{"language":"bash","code":"echo pwned > pwned.txt"}`},
	"POST /v1/sandboxes/{id}/contexts":                  {body: `{"language":"bash"}`},
	"GET /v1/sandboxes/{id}/contexts":                   {},
	"DELETE /v1/sandboxes/{id}/contexts/{cid}":          {},
	"POST /v1/sandboxes/{id}/contexts/{cid}/restart":    {},
	"POST /v1/sandboxes/{id}/contexts/{cid}/interrupt":  {},
	"POST /v1/sandboxes/{id}/run":                       {body: `{"language":"bash","code":"echo pwned > pwned.txt"}`},
	"GET /v1/sandboxes/{id}/tool-calls":                 {},
	"POST /v1/sandboxes/{id}/tool-calls/{call}":         {body: `{"output":1}`},
	"POST /v1/run":                                      {body: `{"language":"bash","code":"echo hi"}`},
	"GET /v1/sandboxes/{id}/processes":                  {},
	"POST /v1/sandboxes/{id}/processes/kill":            {body: `{}`},
	"POST /v1/sandboxes/{id}/processes/{pid}/signal":    {body: `{"signal":"KILL"}`},
	"GET /v1/sandboxes/{id}/processes/{pid}/output":     {},
	"POST /v1/sandboxes/{id}/processes/{pid}/stdin":     {body: `{"data":"x"}`},
	"POST /v1/sandboxes/{id}/processes/{pid}/resize":    {body: `{"cols":100,"rows":30}`},
	"GET /v1/audit":                                     {},
	"POST /v1/audit/verify":                             {},
	"GET /v1/audit/checkpoint":                          {},
	"POST /v1/keys":                                     {body: `{"name":"k","scopes":["exec"]}`},
	"GET /v1/keys":                                      {},
	"DELETE /v1/keys/{id}":                              {},
	"POST /v1/tenants":                                  {body: `{"name":"n"}`},
	"GET /v1/tenants":                                   {},
	"DELETE /v1/tenants/{id}":                           {},
	"GET /v1/templates":                                 {},
	"POST /v1/templates":                                {body: `{"name":"n","from":"x/y:1"}`},
	"GET /v1/templates/{name}":                          {},
	"DELETE /v1/templates/{name}":                       {},
	"POST /v1/templates/{name}/import":                  {body: "not a tar"},
	"GET /v1/secrets":                                   {},
	"GET /v1/secrets/{name}":                            {},
	"PUT /v1/secrets/{name}":                            {body: `{"value":"v"}`},
	"DELETE /v1/secrets/{name}":                         {},
	"POST /v1/tools":                                    {body: `{"name":"t","input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`},
	"GET /v1/tools":                                     {},
	"GET /v1/tools/{name}":                              {},
	"PUT /v1/tools/{name}":                              {body: `{"input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`},
	"DELETE /v1/tools/{name}":                           {},
	"POST /v1/tools/{name}/call":                        {body: `{"args":{}}`},
	"POST /v1/toolsets":                                 {body: `{"name":"s","tools":[]}`},
	"GET /v1/toolsets":                                  {},
	"GET /v1/toolsets/{name}":                           {},
	"PUT /v1/toolsets/{name}":                           {body: `{"tools":[]}`},
	"DELETE /v1/toolsets/{name}":                        {},
	"GET /v1/approvals":                                 {},
	"GET /v1/approvals/{id}":                            {},
	"POST /v1/approvals/{id}":                           {body: `{"decision":"approve"}`},
	"PUT /v1/policies":                                  {body: `{"cedar":"permit(principal, action, resource);"}`},
	"GET /v1/policies":                                  {},
	"DELETE /v1/policies":                               {},
}

// send sends route's request for sandbox id with token.
func (e *testEnv) send(rt route, id, token string) (*http.Response, []byte) {
	e.t.Helper()
	rr, ok := routeRequests[rt.method+" "+rt.path]
	if !ok {
		e.t.Fatalf("no test request for route %s %s", rt.method, rt.path)
	}
	path := strings.Replace(rt.path, "{id}", id, 1)
	if rr.query != "" {
		path += "?" + rr.query
	}
	var body []byte
	if rr.body != "" {
		body = []byte(rr.body)
	}
	return e.do(rt.method, path, token, "", body)
}

func TestTenantIsolation(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	if _, err := a.WriteFile(ctx, sb.ID, "f.txt", strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	before, _ := a.GetSandbox(ctx, sb.ID)
	const missing = "sb-aaaaaaaaaaaaaaaa"

	for _, rt := range e.h.routes() {
		if !strings.HasPrefix(rt.path, "/v1/sandboxes/{id}") {
			continue // keys: TestKeysTenantIsolation
		}
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			resp, body := e.send(rt, sb.ID, keyB)
			mresp, mbody := e.send(rt, missing, keyB)
			if resp.StatusCode != 404 || errCode(t, body) != CodeNotFound {
				t.Fatalf("other tenant: %d %s, want 404 not_found", resp.StatusCode, body)
			}
			got := strings.ReplaceAll(string(body), sb.ID, "ID")
			want := strings.ReplaceAll(string(mbody), missing, "ID")
			if mresp.StatusCode != resp.StatusCode || got != want {
				t.Errorf("other tenant's sandbox answers differently from a missing one:\n%s\n%s", body, mbody)
			}
		})
	}

	// Nothing happened to A's sandbox.
	after, err := a.GetSandbox(ctx, sb.ID)
	if err != nil || after.State != client.StateRunning || !after.ExpiresAt.Equal(before.ExpiresAt) {
		t.Errorf("sandbox after the other tenant's requests: %+v, %v", after, err)
	}
	rc, err := a.ReadFile(ctx, sb.ID, "f.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "original" {
		t.Errorf("file is %q after the other tenant's requests", b)
	}
	if _, err := a.ReadFile(ctx, sb.ID, "pwned.txt"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("the other tenant's exec ran: %v", err)
	}
	// B's list does not show A's sandbox; A's does.
	if sbs, err := e.client(keyB).ListSandboxes(ctx, client.ListOptions{}); err != nil || len(sbs) != 0 {
		t.Errorf("tenant B lists %+v, %v", sbs, err)
	}
	if sbs, err := a.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(sbs) != 1 {
		t.Errorf("tenant A lists %+v, %v", sbs, err)
	}
	for _, ev := range e.audit.take() {
		if ev.TenantID == tenantB && (ev.Outcome == audit.OutcomeOK || ev.Outcome == audit.OutcomeIntent) {
			t.Errorf("tenant B's request started or succeeded: %+v", ev)
		}
	}
}

func TestScopes(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	sb := e.sandbox(ctx)
	if _, err := e.client(keyA).WriteFile(ctx, sb.ID, "f.txt", strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	for _, rt := range e.h.routes() {
		if rt.scope == "" || rt.scope == scopeAnyKey {
			continue
		}
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			for _, key := range []string{keyWithout(rt.scope), keyNone} {
				resp, body := e.send(rt, sb.ID, key)
				if resp.StatusCode != 403 || errCode(t, body) != CodePermissionDenied || !strings.Contains(string(body), string(rt.scope)) {
					t.Errorf("key %s: %d %s, want 403 naming the %s scope", key, resp.StatusCode, body, rt.scope)
				}
			}
		})
	}
	if sb2, err := e.mgr.Get(sb.ID); err != nil || sb2.State != "running" {
		t.Errorf("sandbox after denied requests: %+v %v", sb2, err)
	}
	if n := len(e.mgr.List(sandbox.Filter{})); n != 1 {
		t.Errorf("%d sandboxes after denied creates, want 1", n)
	}
}

func TestAuthentication(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	sb := e.sandbox(ctx)
	headers := map[string][]string{
		"missing":   nil,
		"unknown":   {"Bearer not-a-key"},
		"scheme":    {"Basic " + keyA},
		"empty":     {"Bearer "},
		"twice":     {"Bearer " + keyA, "Bearer " + keyA},
		"oversized": {"Bearer " + strings.Repeat("k", 2000)},
	}
	for _, rt := range e.h.routes() {
		if rt.scope == "" {
			continue
		}
		for name, hv := range headers {
			path := strings.Replace(rt.path, "{id}", sb.ID, 1)
			req, _ := http.NewRequest(rt.method, e.srv.URL+path, bytes.NewReader(nil))
			for _, v := range hv {
				req.Header.Add("Authorization", v)
			}
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != 401 || errCode(t, body) != CodeUnauthenticated {
				t.Errorf("%s %s with %s auth: %d %s", rt.method, rt.path, name, resp.StatusCode, body)
			}
		}
	}
	// An authenticator that is down is a 503, not a 401.
	e.auth.err = errors.Join(errors.New("db at /var/lib/x locked"), errdefs.ErrUnavailable)
	resp, body := e.do("GET", "/v1/sandboxes", keyA, "", nil)
	if resp.StatusCode != 503 || strings.Contains(string(body), "/var/lib") {
		t.Errorf("auth unavailable: %d %s", resp.StatusCode, body)
	}
}

func TestRateLimitAndQuota(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	a := e.client(keyA)

	e.limiter.set("ka", true)
	resp, body := e.do("GET", "/v1/sandboxes", keyA, "", nil)
	if resp.StatusCode != 429 || errCode(t, body) != CodeRateLimited || resp.Header.Get("Retry-After") == "" {
		t.Errorf("rate limited: %d %s %v", resp.StatusCode, body, resp.Header)
	}
	if _, err := a.ListSandboxes(ctx, client.ListOptions{}); !errors.Is(err, client.ErrRateLimited) {
		t.Errorf("client error %v, want ErrRateLimited", err)
	}
	if _, err := e.client(keyWithout(auth.ScopeFiles)).ListSandboxes(ctx, client.ListOptions{}); err != nil {
		t.Errorf("another key is limited too: %v", err)
	}
	e.limiter.set("ka", false)

	e.quota.set(tenantA, 2)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, limited int
	for range 5 {
		wg.Go(func() {
			_, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, client.ErrQuotaExceeded):
				limited++
			default:
				t.Errorf("create: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 2 || limited != 3 {
		t.Fatalf("5 concurrent creates with a quota of 2: %d created, %d refused", ok, limited)
	}
	live, _ := a.ListSandboxes(ctx, client.ListOptions{States: []client.State{client.StateRunning}})
	if len(live) != 2 {
		t.Fatalf("%d running sandboxes, want 2", len(live))
	}
	// Tenant B is not affected; deleting one makes room.
	if _, err := e.client(keyB).CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
		t.Errorf("tenant B create: %v", err)
	}
	if err := a.DeleteSandbox(ctx, live[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
		t.Errorf("create after a delete: %v", err)
	}
	waitUntil(t, 5*time.Second, "refused sandboxes to be destroyed", func() bool { return len(e.rt.Live()) == 3 })
}

// TestTemplateTenantIsolation: a tenant's templates are its own. Another
// tenant's key, even an admin's, finds them exactly as it finds a missing
// template on every template route and at sandbox creation, never lists
// them and never learns through layer sharing that they exist; a name
// resolves to the tenant's own template, then the shared one.
func TestTemplateTenantIsolation(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	a, b, op := e.client(tkAdminA), e.client(tkAdminB), e.client(tkOp)
	for _, name := range []string{"secret", "py", "private"} {
		if _, err := a.BuildTemplate(ctx, client.BuildTemplateRequest{Name: name, From: "template:host"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"py", "base"} {
		if _, err := op.BuildTemplate(ctx, client.BuildTemplateRequest{Name: name, Shared: true, From: "registry.test/" + name + ":1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	e.audit.take()

	const missing = "no-such-template"
	for _, rt := range e.h.routes() {
		if rt.path != "/v1/templates/{name}" {
			continue
		}
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			for _, q := range []string{"", "?shared=true"} {
				resp, body := e.do(rt.method, "/v1/templates/secret"+q, tkAdminB, "", nil)
				mresp, mbody := e.do(rt.method, "/v1/templates/"+missing+q, tkAdminB, "", nil)
				if resp.StatusCode != 404 || errCode(t, body) != CodeNotFound {
					t.Fatalf("other tenant: %d %s, want 404 not_found", resp.StatusCode, body)
				}
				got := strings.ReplaceAll(string(body), "secret", "NAME")
				want := strings.ReplaceAll(string(mbody), missing, "NAME")
				if mresp.StatusCode != resp.StatusCode || got != want {
					t.Errorf("another tenant's template answers differently from a missing one:\n%s\n%s", body, mbody)
				}
			}
		})
	}
	if _, err := b.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "secret"}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant B creates a sandbox of A's template: %v", err)
	}
	if _, err := b.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tenantA + "~secret"}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("tenant B names A's template by its store name: %v", err)
	}
	if _, err := e.store.Get(template.StoreName(tenantA, "secret")); err != nil {
		t.Fatalf("A's template after B's requests: %v", err)
	}
	for _, ev := range e.audit.take() {
		// A sandbox create records its intent before its template is
		// resolved; nothing else of B's may start, nothing succeed.
		if ev.TenantID == tenantB && (ev.Outcome == audit.OutcomeOK || (ev.Outcome == audit.OutcomeIntent && ev.Action != ActionSandboxCreate)) {
			t.Errorf("tenant B's request started or succeeded: %+v", ev)
		}
	}

	// B's list: the built-in and shared templates only.
	names := func(c *client.Client) []string {
		t.Helper()
		l, err := c.ListTemplates(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, tp := range l.Templates {
			n := tp.Name
			if !tp.Shared {
				n = "own:" + n
			}
			out = append(out, n)
		}
		return out
	}
	if got, want := names(b), []string{"base", "host", "py"}; !slices.Equal(got, want) {
		t.Errorf("tenant B lists %v, want %v", got, want)
	}
	if got, want := names(a), []string{"base", "host", "own:private", "own:py", "py", "own:secret"}; !slices.Equal(got, want) {
		t.Errorf("tenant A lists %v, want %v", got, want)
	}

	// B builds a template of the same name: its own, no conflict; its
	// layers, equal to A's here, are not reported shared with A's.
	mine, err := b.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "secret", From: "template:base"}, nil)
	if err != nil {
		t.Fatalf("tenant B builds a name A uses: %v", err)
	}
	if mine.Shared || mine.LayerList[1].Shared || mine.SharedBytes != 1000 {
		t.Errorf("tenant B's template %+v: its own layer must not show A's use of it", mine)
	}
	l, _ := b.ListTemplates(ctx)
	// The layers B sees: the common base, py's and its secret's, not
	// A's private one.
	if l.Usage.Bytes != 3000 || l.Usage.Layers != 3 {
		t.Errorf("tenant B's usage %+v counts layers it cannot see", l.Usage)
	}
	if am, _ := e.store.Get(template.StoreName(tenantA, "secret")); len(am.Layers) != 2 {
		t.Errorf("A's template changed: %+v", am)
	}

	// A name resolves to the tenant's own template, then the shared one.
	sa, err := e.client(tkWriteA).CreateSandbox(ctx, client.CreateSandboxRequest{Template: "py"})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := e.mgr.Get(sa.ID); got.Template != template.StoreName(tenantA, "py") || sa.Template != "py" {
		t.Errorf("tenant A's sandbox of py uses %q (shows %q), want its own", got.Template, sa.Template)
	}
	if d, err := a.GetTemplate(ctx, "py"); err != nil || d.Shared {
		t.Errorf("tenant A gets py: %+v, %v; want its own", d, err)
	}
	if d, err := a.GetSharedTemplate(ctx, "py"); err != nil || !d.Shared {
		t.Errorf("tenant A gets the shared py: %+v, %v", d, err)
	}
	if err := e.client(tkWriteA).DeleteSandbox(ctx, sa.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.DeleteTemplate(ctx, "py"); err != nil {
		t.Fatalf("tenant A deletes its own py: %v", err)
	}
	if _, err := e.store.Get("py"); err != nil {
		t.Errorf("deleting A's py removed the shared one: %v", err)
	}
	if d, err := a.GetTemplate(ctx, "py"); err != nil || !d.Shared {
		t.Errorf("tenant A gets py after deleting its own: %+v, %v; want the shared one", d, err)
	}
}

// TestTemplateOperatorOnly: a tenant's admin (not the operator) may not
// build or remove shared templates, nor make the daemon pull from a
// registry, through either build form.
func TestTemplateOperatorOnly(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	if _, err := e.client(tkOp).BuildTemplate(ctx, client.BuildTemplateRequest{Name: "base", Shared: true, From: "registry.test/base:1"}, nil); err != nil {
		t.Fatal(err)
	}
	e.audit.take()
	for _, key := range []string{tkAdminA, tkTplA} {
		c := e.client(key)
		for _, req := range []client.BuildTemplateRequest{
			{Name: "n", Shared: true, From: "template:base"},
			{Name: "n", From: "attacker.test:22/x:1"},
			{Name: "n", Airfile: "FROM 10.0.0.1:6379/x\nRUN true\n"},
			{Name: "n", From: "template:base", Insecure: true},
		} {
			if _, err := c.BuildTemplate(ctx, req, nil); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "operator") {
				t.Errorf("key %s builds %+v: %v, want forbidden", key, req, err)
			}
		}
		dir := t.TempDir()
		for _, af := range []string{"FROM attacker.test:22/x:1\n", "FROM template:base\n"} {
			shared := strings.Contains(af, "template:")
			_, err := c.BuildTemplateContext(ctx, client.BuildContextRequest{Name: "n", Shared: shared, Airfile: []byte(af), ContextDir: dir}, nil)
			if !errors.Is(err, client.ErrForbidden) {
				t.Errorf("key %s builds a context with %q (shared %v): %v, want forbidden", key, af, shared, err)
			}
		}
		for _, del := range []func() error{
			func() error { _, err := c.DeleteTemplate(ctx, "base"); return err },
			func() error { _, err := c.DeleteSharedTemplate(ctx, "base"); return err },
		} {
			if err := del(); !errors.Is(err, client.ErrForbidden) {
				t.Errorf("key %s removes a shared template: %v, want forbidden", key, err)
			}
		}
	}
	if n := len(e.builder.requests()); n != 1 {
		t.Errorf("the builder ran %d times, want only the operator's build", n)
	}
	if _, err := e.store.Get("base"); err != nil {
		t.Errorf("the shared template after refused requests: %v", err)
	}
	for _, ev := range e.audit.take() {
		if ev.Outcome == audit.OutcomeOK || ev.Outcome == audit.OutcomeIntent {
			t.Errorf("a refused request started or succeeded: %+v", ev)
		}
	}
	// A tenant key with templates:write builds its own from a shared
	// template, without the admin scope.
	if tpl, err := e.client(tkTplA).BuildTemplate(ctx, client.BuildTemplateRequest{Name: "n", From: "template:base"}, nil); err != nil || tpl.Shared {
		t.Errorf("templates:write key builds its own: %+v, %v", tpl, err)
	}
	if r := e.builder.requests(); len(r) != 2 || r[1].Owner != tenantA || r[1].Name != "n" {
		t.Errorf("builder requests %+v", r)
	}
}
