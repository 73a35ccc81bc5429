package api

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// egressRuntime gives the fake runtime's instances an egress socket in
// dir, so that allowlist sandboxes get a proxy.
type egressRuntime struct {
	runtime.Runtime
	dir string
}

func (r egressRuntime) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	inst, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return egressInstance{inst, r.dir}, nil
}

type egressInstance struct {
	runtime.Instance
	dir string
}

func (i egressInstance) ListenEgress() (net.Listener, error) {
	path := filepath.Join(i.dir, i.ID()+".sock")
	os.Remove(path)
	return net.Listen("unix", path)
}

// newNetAPIEnv is an API server whose manager runs egress proxies, with
// the daemon-wide egress limits lim.
func newNetAPIEnv(t *testing.T, lim egress.Limits) *testEnv {
	t.Helper()
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	dir, err := os.MkdirTemp("", "egress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	reg, err := template.NewRegistry(staticSource{"host"})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := sandbox.New(egressRuntime{rt, dir}, reg, sandbox.Config{StateDir: filepath.Join(t.TempDir(), "state"),
		HealthInterval: -1, Egress: sandbox.EgressConfig{Limits: lim}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	e := &testEnv{t: t, rt: rt, mgr: mgr, audit: &fakeAudit{},
		auth: &fakeAuth{keys: map[string]auth.Principal{keyA: {TenantID: tenantA, KeyID: "ka", Scopes: apiScopes}}}}
	e.h, err = New(Config{Sandboxes: mgr, Auth: e.auth, Audit: e.audit})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	return e
}

// TestNetworkLimitsAPI: limits in a create and a PATCH, capped by the
// daemon's (400 naming the field and the cap), refused outside allowlist
// mode, shown in force by GET network and recorded in the audit details.
func TestNetworkLimitsAPI(t *testing.T) {
	e := newNetAPIEnv(t, egress.Limits{MaxConns: 8, BandwidthBytesPerSec: 1 << 20, IdleTimeout: 2 * time.Minute})
	post := func(body string) (*http.Response, []byte) {
		return e.do("POST", "/v1/sandboxes", keyA, "application/json", []byte(body))
	}
	for _, tc := range []struct{ body, want string }{
		{`{"network":{"mode":"allowlist","allow":["a.test"],"limits":{"max_connections":9}}}`, "network.limits.max_connections 9 is above this server's limit of 8"},
		{`{"network":{"mode":"allowlist","allow":["a.test"],"limits":{"bandwidth_bytes_per_s":2000000}}}`, "network.limits.bandwidth_bytes_per_s 2000000 is above this server's limit of 1048576"},
		{`{"network":{"mode":"allowlist","allow":["a.test"],"limits":{"idle_timeout_s":121}}}`, "network.limits.idle_timeout_s 121 is above this server's limit of 120"},
		{`{"network":{"mode":"allowlist","allow":["a.test"],"limits":{"max_connections":-1}}}`, "network.limits.max_connections must not be negative"},
		{`{"network":{"mode":"none","limits":{"max_connections":1}}}`, "network.limits need network mode"},
	} {
		resp, b := post(tc.body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) || !strings.Contains(string(b), CodeInvalidArgument) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.body, resp.StatusCode, b, tc.want)
		}
	}
	resp, b := post(`{"network":{"mode":"allowlist","allow":["a.test"],"limits":{"max_connections":2}}}`)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var sb wire.Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatal(err)
	}
	view := func() wire.NetworkView {
		t.Helper()
		resp, b := e.do("GET", "/v1/sandboxes/"+sb.ID+"/network", keyA, "", nil)
		var v wire.NetworkView
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &v) != nil {
			t.Fatalf("GET network: %d %s", resp.StatusCode, b)
		}
		return v
	}
	if l := view().Limits; l == nil || *l != (wire.NetworkLimits{MaxConnections: 2, BandwidthBytesPerS: 1 << 20, IdleTimeoutS: 120}) {
		t.Errorf("limits in force %+v, want the sandbox's max over the daemon's", l)
	}

	patch := func(body string) (*http.Response, []byte) {
		return e.do("PATCH", "/v1/sandboxes/"+sb.ID+"/network", keyA, "application/json", []byte(body))
	}
	if resp, b := patch(`{"mode":"allowlist","allow":["a.test"],"limits":{"bandwidth_bytes_per_s":4096,"idle_timeout_s":60}}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH: %d %s", resp.StatusCode, b)
	}
	if l := view().Limits; l == nil || *l != (wire.NetworkLimits{MaxConnections: 8, BandwidthBytesPerS: 4096, IdleTimeoutS: 60}) {
		t.Errorf("limits in force after the PATCH %+v", l)
	}
	var details map[string]any
	for _, ev := range e.audit.take() {
		if ev.Action == ActionSandboxNetwork && ev.Outcome != audit.OutcomeIntent {
			details = ev.Details
		}
	}
	if l, ok := details["limits"].(*wire.NetworkLimits); !ok || *l != (wire.NetworkLimits{BandwidthBytesPerS: 4096, IdleTimeoutS: 60}) {
		t.Errorf("audit details %v, want the requested limits", details)
	}
	if resp, b := patch(`{"mode":"allowlist","allow":["a.test"],"limits":{"max_connections":100}}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "limits.max_connections 100 is above this server's limit of 8") {
		t.Errorf("PATCH above the cap: %d %s", resp.StatusCode, b)
	}
	if resp, b := patch(`{"mode":"none","limits":{"idle_timeout_s":5}}`); resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "need network mode") {
		t.Errorf("PATCH limits in mode none: %d %s", resp.StatusCode, b)
	}
	if resp, b := patch(`{"mode":"none"}`); resp.StatusCode != http.StatusOK {
		t.Fatalf("PATCH none: %d %s", resp.StatusCode, b)
	} else if v := view(); v.Limits != nil {
		t.Errorf("limits shown in mode none: %+v", v.Limits)
	}
}

// Network makes the fake stored template carry its manifest's default
// network, as template.Stored does.
func (f fakeStored) Network() *layers.Network {
	m, err := f.s.Get(f.name)
	if err != nil {
		return nil
	}
	return m.Config.Network
}

// TestTemplateNetworkAPI: a build's network is validated as a sandbox's
// (credentials refused), stored and shown by the template's GET, and a
// sandbox created from the template without a network gets it (here: the
// fake runtime has no egress, so an allowlist create fails 501, while
// one asking for none succeeds).
func TestTemplateNetworkAPI(t *testing.T) {
	e := newTplEnv(t)
	hdr := map[string]string{"Authorization": "Bearer " + tkAdminA, "Content-Type": "application/json"}
	for _, tc := range []struct{ network, want string }{
		{`{"mode":"allowlist","allow":["api.test"],"credentials":[{"host":"api.test","header":"X-Api-Key","secret":"k"}]}`, "cannot name credentials"},
		{`{"mode":"allowlist","allow":["bad entry!"]}`, "network.allow"},
		{`{"mode":"none","allow":["a.test"]}`, "need network mode"},
		{`{"mode":"allowlist","allow":["a.test"],"limits":{"max_connections":100000}}`, "network.limits.max_connections 100000 is above this server's limit of 256"},
	} {
		resp, b := e.raw("POST", "/v1/templates", hdr, strings.NewReader(`{"name":"bad","from":"template:x","network":`+tc.network+`}`))
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("network %s: %d %s, want 400 with %q", tc.network, resp.StatusCode, b, tc.want)
		}
	}
	resp, b := e.raw("POST", "/v1/templates", hdr, strings.NewReader(`{"name":"web","from":"template:x","network":{"mode":"allowlist","allow":["PyPI.org:443"],"limits":{"max_connections":4}}}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("build: %d %s", resp.StatusCode, b)
	}
	want := wire.Network{Mode: "allowlist", Allow: []string{"pypi.org:443"}, Limits: &wire.NetworkLimits{MaxConnections: 4}}
	check := func(what string, b []byte) {
		t.Helper()
		var d wire.TemplateDetail
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatal(err)
		}
		n := d.Config.Network
		if n == nil || n.Mode != want.Mode || strings.Join(n.Allow, ",") != "pypi.org:443" || n.Limits == nil || *n.Limits != *want.Limits || n.Credentials != nil {
			t.Errorf("%s: network %+v, want %+v", what, n, want)
		}
	}
	check("build response", b)
	resp, b = e.raw("GET", "/v1/templates/web", map[string]string{"Authorization": "Bearer " + tkAdminA}, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET template: %d %s", resp.StatusCode, b)
	}
	check("GET", b)

	create := func(body string) (*http.Response, []byte) {
		return e.raw("POST", "/v1/sandboxes", map[string]string{"Authorization": "Bearer " + tkWriteA, "Content-Type": "application/json"}, strings.NewReader(body))
	}
	if resp, b := create(`{"template":"web"}`); resp.StatusCode != http.StatusNotImplemented || !strings.Contains(string(b), "egress proxy") {
		t.Errorf("create with the template's allowlist on a runtime without egress: %d %s, want 501", resp.StatusCode, b)
	}
	if resp, b := create(`{"template":"web","network":{"mode":"none"}}`); resp.StatusCode != http.StatusCreated {
		t.Errorf("create with the request's network none: %d %s", resp.StatusCode, b)
	}
}
