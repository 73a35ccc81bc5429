package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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
	"GET /healthz":                                     {},
	"GET /readyz":                                      {},
	"POST /v1/sandboxes":                               {body: `{}`},
	"GET /v1/sandboxes":                                {},
	"GET /v1/sandboxes/{id}":                           {},
	"DELETE /v1/sandboxes/{id}":                        {},
	"POST /v1/sandboxes/{id}/timeout":                  {body: `{"timeout_s":3600}`},
	"POST /v1/sandboxes/{id}/exec":                     {body: `{"command":"echo pwned > pwned.txt"}`},
	"PUT /v1/sandboxes/{id}/files":                     {query: "path=f.txt", body: "overwritten"},
	"GET /v1/sandboxes/{id}/files":                     {query: "path=f.txt"},
	"DELETE /v1/sandboxes/{id}/files":                  {query: "path=f.txt"},
	"GET /v1/sandboxes/{id}/files/list":                {query: "path=."},
	"POST /v1/sandboxes/{id}/files/mkdir":              {query: "path=pwned-dir"},
	"GET /v1/sandboxes/{id}/pty":                       {query: "cmd=true"},
	"POST /v1/sandboxes/{id}/code":                     {body: `{"language":"bash","code":"echo pwned > pwned.txt"}`},
	"POST /v1/sandboxes/{id}/contexts":                 {body: `{"language":"bash"}`},
	"GET /v1/sandboxes/{id}/contexts":                  {},
	"DELETE /v1/sandboxes/{id}/contexts/{cid}":         {},
	"POST /v1/sandboxes/{id}/contexts/{cid}/restart":   {},
	"POST /v1/sandboxes/{id}/contexts/{cid}/interrupt": {},
	"GET /v1/audit":                                    {},
	"POST /v1/audit/verify":                            {},
	"POST /v1/keys":                                    {body: `{"name":"k","scopes":["exec"]}`},
	"GET /v1/keys":                                     {},
	"DELETE /v1/keys/{id}":                             {},
	"GET /v1/templates":                                {},
	"POST /v1/templates":                               {body: `{"name":"n","from":"x/y:1"}`},
	"GET /v1/templates/{name}":                         {},
	"DELETE /v1/templates/{name}":                      {},
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
		if rt.scope == "" {
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
