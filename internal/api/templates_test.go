package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
)

// fakeTemplateStore is an in-memory TemplateStore with reference-counted
// layers.
type fakeTemplateStore struct {
	mu        sync.Mutex
	templates map[string]layers.Manifest
	layers    map[string]layers.LayerInfo
	inUse     func(string) bool // called with mu held, as the real store does
}

func newFakeTemplateStore() *fakeTemplateStore {
	return &fakeTemplateStore{templates: map[string]layers.Manifest{}, layers: map[string]layers.LayerInfo{}}
}

func fakeDigest(s string) string {
	sum := sha256.Sum256([]byte(s))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// put stores m with layers of 1000 bytes each.
func (s *fakeTemplateStore) put(m layers.Manifest) layers.Manifest {
	s.mu.Lock()
	defer s.mu.Unlock()
	m.Size = 0
	for _, d := range m.Layers {
		if _, ok := s.layers[d]; !ok {
			s.layers[d] = layers.LayerInfo{DiffID: d, Size: 1000, Files: 3}
		}
		m.Size += 1000
	}
	if m.Created.IsZero() {
		m.Created = time.Now()
	}
	s.templates[m.Name] = m
	return m
}

func (s *fakeTemplateStore) List() []layers.Manifest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []layers.Manifest
	for _, m := range s.templates {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b layers.Manifest) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *fakeTemplateStore) Get(name string) (layers.Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return m, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return m, nil
}

func (s *fakeTemplateStore) Layer(d string) (layers.LayerInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, ok := s.layers[d]
	if !ok {
		return info, errdefs.ErrNotFound
	}
	return info, nil
}

func (s *fakeTemplateStore) refsLocked() map[string]int {
	refs := map[string]int{}
	for _, m := range s.templates {
		for _, d := range m.Layers {
			refs[d]++
		}
	}
	return refs
}

func (s *fakeTemplateStore) Usage() layers.Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := s.refsLocked()
	var u layers.Usage
	for d, info := range s.layers {
		u.Layers++
		u.Bytes += info.Size
		if refs[d] >= 2 {
			u.SharedLayers++
			u.SharedBytes += info.Size
		}
	}
	for name, m := range s.templates {
		tu := layers.TemplateUsage{Name: name, Layers: len(m.Layers)}
		for _, d := range m.Layers {
			tu.Bytes += s.layers[d].Size
			if refs[d] >= 2 {
				tu.SharedBytes += s.layers[d].Size
			}
		}
		u.Templates = append(u.Templates, tu)
	}
	return u
}

func (s *fakeTemplateStore) Remove(ctx context.Context, name string) (layers.Freed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return layers.Freed{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	if s.inUse != nil && s.inUse(name) {
		return layers.Freed{}, fmt.Errorf("template %q is in use by a running sandbox: %w", name, errdefs.ErrFailedPrecondition)
	}
	delete(s.templates, name)
	refs := s.refsLocked()
	var f layers.Freed
	for _, d := range m.Layers {
		if info, ok := s.layers[d]; ok && refs[d] == 0 {
			delete(s.layers, d)
			f.Layers++
			f.Bytes += info.Size
		}
	}
	return f, nil
}

// fakeStored is a registry source backed by the fake store.
type fakeStored struct {
	s    *fakeTemplateStore
	name string
}

func (f fakeStored) Name() string                       { return f.name }
func (f fakeStored) Manifest() (layers.Manifest, error) { return f.s.Get(f.name) }
func (f fakeStored) Resolve(context.Context) (runtime.Rootfs, error) {
	if _, err := f.s.Get(f.name); err != nil {
		return runtime.Rootfs{}, err
	}
	return runtime.Rootfs{Layers: []string{"/nonexistent/" + f.name}}, nil
}

// fakeBuilder records requests and stores a two-layer template (its base
// layer shared by every build) after sending events.
type fakeBuilder struct {
	store *fakeTemplateStore

	mu       sync.Mutex
	reqs     []registry.BuildRequest
	contexts []map[string]string // the build context as the builder saw it
	events   []registry.Event
	err      error
	started  chan string   // if set, receives the name of each build that starts
	block    chan struct{} // if set, builds wait for it (or their context)
}

func (b *fakeBuilder) Build(ctx context.Context, req registry.BuildRequest, events func(registry.Event)) (layers.Manifest, error) {
	b.mu.Lock()
	b.reqs = append(b.reqs, req)
	if req.ContextDir != "" {
		b.contexts = append(b.contexts, snapshot(req.ContextDir))
	}
	evs, berr, block, started := slices.Clone(b.events), b.err, b.block, b.started
	b.mu.Unlock()
	if started != nil {
		started <- req.Name
	}
	for _, ev := range evs {
		if events != nil {
			events(ev)
		}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return layers.Manifest{}, fmt.Errorf("build canceled: %w", errdefs.ErrCanceled)
		}
	}
	if berr != nil {
		return layers.Manifest{}, berr
	}
	m := b.store.put(layers.Manifest{Name: template.StoreName(req.Owner, req.Name), Layers: []string{fakeDigest("base"), fakeDigest(req.Name)},
		Source: "build", Config: layers.Config{Env: []string{"A=1"}, Workdir: "/app", Limits: req.Limits, Network: req.Network,
			Toolsets: req.Toolsets, CommandPolicy: req.CommandPolicy}})
	return m, nil
}

func (b *fakeBuilder) requests() []registry.BuildRequest {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.reqs)
}

func (b *fakeBuilder) set(f func(b *fakeBuilder)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	f(b)
}

// snapshot describes the files under dir: "dir", "link:TARGET" or
// "MODE:content".
func snapshot(dir string) map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link:" + l
		default:
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("%o:%s", fi.Mode().Perm(), b)
		}
		return nil
	})
	return out
}

// The keys of the template tests.
const (
	tkOp       = "tk-op" // the operator (tenant ops, admin and operator)
	tkAdminA   = "tk-admin-a"
	tkAdminB   = "tk-admin-b"
	tkReadB    = "tk-read-b"     // tenant B, templates:read only
	tkWriteA   = "tk-write-a"    // tenant A, the sandbox scopes but not admin
	tkExecA    = "tk-exec-a"     // tenant A, exec only
	tkTplA     = "tk-tpl-a"      // tenant A, templates:read and templates:write only
	tenantOps  = "ops"           // the operator's tenant
	opKeyID    = "kop"           // tkOp's key ID
	tkSbReadB  = "tk-sb-read-b"  // tenant B, sandboxes:read only (no templates:read)
	tkTplReadA = "tk-tpl-read-a" // tenant A, templates:read only
)

type tplEnv struct {
	*testEnv
	store   *fakeTemplateStore
	builder *fakeBuilder
	reg     *template.Registry
	ctxDir  string
}

// newTplEnv is an API server whose manager and template routes share one
// registry (holding the built-in host), over a fake store and builder.
func newTplEnv(t *testing.T, tune ...func(*registry.Config)) *tplEnv {
	t.Helper()
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	reg, err := template.NewRegistry(staticSource{"host"})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := sandbox.New(rt, reg, sandbox.Config{StateDir: filepath.Join(t.TempDir(), "state"), HealthInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	store := newFakeTemplateStore()
	store.inUse = mgr.TemplateInUse
	e := &tplEnv{store: store, builder: &fakeBuilder{store: store}, reg: reg,
		ctxDir: filepath.Join(t.TempDir(), "contexts")}
	if err := os.Mkdir(e.ctxDir, 0o700); err != nil {
		t.Fatal(err)
	}
	tcfg := &registry.Config{
		Registry: reg, Store: store, Builder: e.builder, ContextDir: e.ctxDir,
		Source: func(name string) (template.Source, error) { return fakeStored{store, name}, nil },
	}
	for _, f := range tune {
		f(tcfg)
	}
	tpl, err := registry.New(*tcfg)
	if err != nil {
		t.Fatal(err)
	}
	sbScopes := []auth.Scope{auth.ScopeSandboxesRead, auth.ScopeSandboxesWrite, auth.ScopeExec, auth.ScopeFiles}
	fa := &fakeAuth{keys: map[string]auth.Principal{
		tkOp:       {TenantID: tenantOps, KeyID: opKeyID, Scopes: []auth.Scope{auth.ScopeAdmin, auth.ScopeOperator}},
		tkAdminA:   {TenantID: tenantA, KeyID: "kadmina", Scopes: []auth.Scope{auth.ScopeAdmin}},
		tkAdminB:   {TenantID: tenantB, KeyID: "kadminb", Scopes: []auth.Scope{auth.ScopeAdmin}},
		tkReadB:    {TenantID: tenantB, KeyID: "kreadb", Scopes: []auth.Scope{auth.ScopeTemplatesRead}},
		tkSbReadB:  {TenantID: tenantB, KeyID: "ksbreadb", Scopes: []auth.Scope{auth.ScopeSandboxesRead}},
		tkWriteA:   {TenantID: tenantA, KeyID: "kwritea", Scopes: sbScopes},
		tkExecA:    {TenantID: tenantA, KeyID: "kexeca", Scopes: []auth.Scope{auth.ScopeExec}},
		tkTplA:     {TenantID: tenantA, KeyID: "ktpla", Scopes: []auth.Scope{auth.ScopeTemplatesRead, auth.ScopeTemplatesWrite}},
		tkTplReadA: {TenantID: tenantA, KeyID: "ktplreada", Scopes: []auth.Scope{auth.ScopeTemplatesRead}},
	}}
	te := &testEnv{t: t, rt: rt, mgr: mgr, audit: &fakeAudit{}, auth: fa}
	te.h, err = New(Config{Sandboxes: mgr, Auth: fa, Audit: te.audit, Templates: tpl})
	if err != nil {
		t.Fatal(err)
	}
	te.srv = httptest.NewServer(te.h)
	t.Cleanup(te.srv.Close)
	e.testEnv = te
	return e
}

// raw sends a request with headers and returns the status and body.
func (e *tplEnv) raw(method, path string, hdr map[string]string, body io.Reader) (*http.Response, []byte) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func tplErrCode(b []byte) string {
	var eb wire.Error
	_ = json.Unmarshal(b, &eb)
	return eb.Error.Code
}

func TestTemplateBuildStream(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	e.builder.set(func(b *fakeBuilder) {
		b.events = []registry.Event{
			{Type: "step", Step: 1, Steps: 2, Instruction: "FROM registry.test/img:1"},
			{Type: "progress", Step: 1, Steps: 2, Layer: 1, Layers: 1, Done: 10, Total: 100},
			{Type: "progress", Step: 1, Steps: 2, Layer: 1, Layers: 1, Done: 50, Total: 100}, // throttled
			{Type: "progress", Step: 1, Steps: 2, Layer: 1, Layers: 1, Done: 100, Total: 100},
			{Type: "step", Step: 2, Steps: 2, Instruction: "RUN echo hi"},
			{Type: "log", Step: 2, Steps: 2, Text: "hi\n"},
			{Type: "done"},
		}
	})
	c := e.client(tkOp)
	var got []client.BuildEvent
	tpl, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{
		Name: "img", Shared: true, From: "registry.test/img:1", Airfile: "RUN echo hi\n", Insecure: true,
		RegistryAuth: &client.RegistryAuth{Username: "bob", Password: "s3cret-pass"},
	}, func(ev client.BuildEvent) error { got = append(got, ev); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if tpl.Name != "img" || tpl.Layers != 2 || len(tpl.LayerList) != 2 || tpl.Config.Workdir != "/app" || tpl.Source != "build" {
		t.Errorf("template = %+v", tpl)
	}
	if tpl.LayerList[0].Digest != fakeDigest("base") || tpl.LayerList[0].Shared || tpl.LayerList[0].Size != 1000 {
		t.Errorf("layers = %+v", tpl.LayerList)
	}
	var types []string
	for _, ev := range got {
		types = append(types, ev.Type)
	}
	if want := []string{"step", "progress", "progress", "step", "log"}; !slices.Equal(types, want) {
		t.Errorf("events %v, want %v (a throttled progress line and the builder's done dropped)", types, want)
	}
	if got[2].Done != 100 || got[2].Total != 100 || got[4].Text != "hi" || got[3].Instruction != "RUN echo hi" {
		t.Errorf("events = %+v", got)
	}
	reqs := e.builder.requests()
	if len(reqs) != 1 {
		t.Fatalf("builder requests %d", len(reqs))
	}
	r := reqs[0]
	if string(r.Airfile) != "FROM registry.test/img:1\nRUN echo hi\n" || r.Name != "img" || r.Owner != "" || !r.Insecure || r.AllowSetuid ||
		r.NoCache || r.ContextDir != "" || r.Registry != (registry.Credentials{Username: "bob", Password: "s3cret-pass"}) {
		t.Errorf("builder request = %+v (airfile %q)", r, r.Airfile)
	}

	evs := e.audit.take()
	if !tpl.Shared {
		t.Errorf("a shared build answers %+v", tpl)
	}
	// Usable at once, by any tenant.
	sb, err := e.client(tkWriteA).CreateSandbox(ctx, client.CreateSandboxRequest{Template: "img"})
	if err != nil {
		t.Fatalf("create from the new template: %v", err)
	}
	if sb.Template != "img" {
		t.Errorf("sandbox template %q", sb.Template)
	}
	list, err := e.client(tkReadB).ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Templates) != 2 || list.Templates[0].Name != "host" || !list.Templates[0].Builtin ||
		list.Templates[1].Name != "img" || list.Templates[1].Size != 2000 || list.Usage.Layers != 2 || list.Usage.Bytes != 2000 {
		t.Errorf("list (another tenant) = %+v", list)
	}

	if len(evs) != 2 || evs[0].Outcome != audit.OutcomeIntent || evs[1].Outcome != "ok" {
		t.Fatalf("audit = %+v", evs)
	}
	out := evs[1]
	if out.Action != ActionTemplateBuild || out.Target != "img" || out.KeyID != opKeyID ||
		out.Details["source"] != "registry.test/img:1" || out.Details["registry_auth"] != true || out.Details["shared"] != true {
		t.Errorf("audit outcome = %+v", out)
	}
	if ls, _ := out.Details["layers"].([]string); len(ls) != 2 {
		t.Errorf("audit layers = %v", out.Details["layers"])
	}
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if bytes.Contains(b, []byte("s3cret-pass")) || bytes.Contains(b, []byte("bob")) {
			t.Errorf("audit event holds a credential: %s", b)
		}
	}
}

func TestTemplateBuildJSONResponse(t *testing.T) {
	e := newTplEnv(t)
	resp, b := e.raw("POST", "/v1/templates", map[string]string{"Authorization": "Bearer " + tkAdminA, "Content-Type": "application/json"},
		strings.NewReader(`{"name":"deb","debian":{"suite":"bookworm","packages":["python3","curl=7.88.1-10"]},"airfile":"ENV A=1","allow_setuid":true,"no_cache":true,"limits":{"cpus":0.5,"memory_mb":300}}`))
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("Location") != "/v1/templates/deb" {
		t.Fatalf("status %d location %q: %s", resp.StatusCode, resp.Header.Get("Location"), b)
	}
	var d wire.TemplateDetail
	if err := json.Unmarshal(b, &d); err != nil || d.Name != "deb" || len(d.LayerList) != 2 || d.Created == nil {
		t.Errorf("body %s (%v)", b, err)
	}
	r := e.builder.requests()[0]
	if string(r.Airfile) != "DEBIAN bookworm python3 curl=7.88.1-10\nENV A=1" || !r.AllowSetuid || !r.NoCache || r.Owner != tenantA {
		t.Errorf("request %+v airfile %q", r, r.Airfile)
	}
	if r.Limits != (runtime.Limits{CPUs: 0.5, MemoryBytes: 300 << 20}) {
		t.Errorf("request limits %+v", r.Limits)
	}
	if l := d.Config.Limits; l == nil || *l != (wire.Limits{CPUs: 0.5, MemoryMB: 300}) {
		t.Errorf("template config limits %+v", l)
	}
	// Taken now: a second build of the name, and one of host, are
	// conflicts.
	for _, name := range []string{"deb", "host"} {
		resp, b = e.raw("POST", "/v1/templates", map[string]string{"Authorization": "Bearer " + tkAdminA},
			strings.NewReader(`{"name":"`+name+`","from":"template:x"}`))
		if resp.StatusCode != http.StatusConflict || tplErrCode(b) != CodeAlreadyExists {
			t.Errorf("build %s again: %d %s", name, resp.StatusCode, b)
		}
	}
	if n := len(e.builder.requests()); n != 1 {
		t.Errorf("builder ran %d times", n)
	}
	// Replacing works for a stored template, never for a built-in one.
	resp, b = e.raw("POST", "/v1/templates", map[string]string{"Authorization": "Bearer " + tkAdminA},
		strings.NewReader(`{"name":"host","from":"template:x","replace":true}`))
	if resp.StatusCode != http.StatusConflict || !strings.Contains(string(b), "built in") {
		t.Errorf("replace host: %d %s", resp.StatusCode, b)
	}
	resp, b = e.raw("POST", "/v1/templates", map[string]string{"Authorization": "Bearer " + tkAdminA},
		strings.NewReader(`{"name":"deb","from":"template:y","replace":true}`))
	if resp.StatusCode != http.StatusCreated {
		t.Errorf("replace deb: %d %s", resp.StatusCode, b)
	}
	if r := e.builder.requests(); len(r) != 2 || !r[1].Replace || string(r[1].Airfile) != "FROM template:y\n" {
		t.Errorf("replace request %+v", r)
	}
}

func TestTemplateBuildValidation(t *testing.T) {
	e := newTplEnv(t)
	tests := []struct {
		name, ctype, body string
		status            int
		msg               string
	}{
		{"no name", "", `{"from":"x/y:1"}`, 400, "name is required"},
		{"bad name", "", `{"name":"Bad Name","from":"x/y:1"}`, 400, "name must match"},
		{"no base", "", `{"name":"a"}`, 400, "give from"},
		{"from and debian", "", `{"name":"a","from":"x/y:1","debian":{"suite":"bookworm"}}`, 400, "not both"},
		{"from with newline", "", `{"name":"a","from":"x/y:1\nRUN evil"}`, 400, "one image reference"},
		{"bad image", "", `{"name":"a","from":"UPPER/Case::x"}`, 400, "airfile: "},
		{"bad suite", "", `{"name":"a","debian":{"suite":"Bookworm!"}}`, 400, "debian.suite"},
		{"bad package", "", `{"name":"a","debian":{"suite":"bookworm","packages":["ok","rm -rf"]}}`, 400, "not a Debian package"},
		{"copy without context", "", `{"name":"a","from":"x/y:1","airfile":"RUN true\nCOPY a /a"}`, 400, "airfile line 2: COPY needs a build context"},
		{"second base", "", `{"name":"a","from":"x/y:1","airfile":"ENV A=1\nFROM z/w:2"}`, 400, "airfile line 2: only one FROM"},
		{"bad step", "", `{"name":"a","airfile":"FROM x/y:1\nVOLUME /data"}`, 400, "airfile line 2: VOLUME"},
		{"token and password", "", `{"name":"a","from":"x/y:1","registry_auth":{"username":"u","password":"p","token":"t"}}`, 400, "not both"},
		{"user without password", "", `{"name":"a","from":"x/y:1","registry_auth":{"username":"u"}}`, 400, "both a username and a password"},
		{"unknown field", "", `{"name":"a","from":"x/y:1","platform":"linux/arm64"}`, 400, "unknown field"},
		{"negative memory", "", `{"name":"a","from":"x/y:1","limits":{"memory_mb":-1}}`, 400, "limits.memory_mb must be between"},
		{"huge cpus", "", `{"name":"a","from":"x/y:1","limits":{"cpus":1e9}}`, 400, "limits.cpus must be between"},
		{"empty body", "", ``, 400, "empty"},
		{"text body", "text/plain", `hello`, 415, "application/x-tar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hdr := map[string]string{"Authorization": "Bearer " + tkAdminA}
			if tt.ctype != "" {
				hdr["Content-Type"] = tt.ctype
			}
			resp, b := e.raw("POST", "/v1/templates", hdr, strings.NewReader(tt.body))
			var eb wire.Error
			_ = json.Unmarshal(b, &eb)
			if resp.StatusCode != tt.status || !strings.Contains(eb.Error.Message, tt.msg) {
				t.Errorf("got %d %s, want %d with %q", resp.StatusCode, b, tt.status, tt.msg)
			}
		})
	}
	if n := len(e.builder.requests()); n != 0 {
		t.Errorf("the builder ran %d times on bad requests", n)
	}
	if evs := outcomes(e.audit.take()); len(evs) != len(tests) {
		t.Errorf("%d outcome records for %d refused builds", len(evs), len(tests))
	}
}

func TestTemplateScopes(t *testing.T) {
	e := newTplEnv(t)
	e.store.put(layers.Manifest{Name: "img", Layers: []string{fakeDigest("x")}})
	if err := e.reg.Add(fakeStored{e.store, "img"}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		method, path, key, body string
		status                  int
	}{
		{"GET", "/v1/templates", tkExecA, "", 403},
		{"GET", "/v1/templates/img", tkExecA, "", 403},
		{"GET", "/v1/templates", tkReadB, "", 200},
		{"GET", "/v1/templates/img", tkReadB, "", 200},
		{"GET", "/v1/templates/host", tkReadB, "", 200},
		{"GET", "/v1/templates", tkSbReadB, "", 403},
		{"GET", "/v1/templates/img", tkSbReadB, "", 403},
		{"POST", "/v1/templates", tkWriteA, `{"name":"n","from":"template:img"}`, 403},
		{"POST", "/v1/templates", tkTplReadA, `{"name":"n","from":"template:img"}`, 403},
		{"DELETE", "/v1/templates/img", tkTplReadA, "", 403},
		{"DELETE", "/v1/templates/img", tkWriteA, "", 403},
		{"DELETE", "/v1/templates/img", tkReadB, "", 403},
		{"GET", "/v1/templates", "", "", 401},
		{"GET", "/v1/templates/nope", tkReadB, "", 404},
		{"GET", "/v1/templates/Bad..Name", tkReadB, "", 400},
		{"GET", "/v1/templates?x=1", tkReadB, "", 400},
	}
	for _, tt := range tests {
		hdr := map[string]string{}
		if tt.key != "" {
			hdr["Authorization"] = "Bearer " + tt.key
		}
		var body io.Reader
		if tt.body != "" {
			body = strings.NewReader(tt.body)
		}
		resp, b := e.raw(tt.method, tt.path, hdr, body)
		if resp.StatusCode != tt.status {
			t.Errorf("%s %s with %s: %d %s, want %d", tt.method, tt.path, tt.key, resp.StatusCode, b, tt.status)
		}
	}
	if _, err := e.store.Get("img"); err != nil || len(e.builder.requests()) != 0 {
		t.Errorf("a refused request changed something: %v", err)
	}
	d, err := e.client(tkReadB).GetTemplate(context.Background(), "host")
	if err != nil || !d.Builtin || d.Source != "built-in" || len(d.LayerList) != 0 || d.Config.Env == nil {
		t.Errorf("host = %+v, %v", d, err)
	}
}

func TestTemplateNotServed(t *testing.T) {
	e := newTestEnv(t)
	resp, b := e.do("GET", "/v1/templates", keyB, "", nil)
	if resp.StatusCode != http.StatusNotImplemented || tplErrCode(b) != CodeNotSupported {
		t.Errorf("without Templates: %d %s", resp.StatusCode, b)
	}
}

func TestTemplateBuildErrors(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	c := e.client(tkOp)
	e.builder.set(func(b *fakeBuilder) {
		b.err = fmt.Errorf("image registry.test/nope:1: %w", errdefs.ErrNotFound)
		b.events = []registry.Event{{Type: "step", Step: 1, Steps: 1, Instruction: "FROM registry.test/nope:1"}}
	})
	_, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "a", Shared: true, From: "registry.test/nope:1"}, nil)
	var ae *client.APIError
	if !errors.As(err, &ae) || !errors.Is(err, client.ErrNotFound) || !strings.Contains(ae.Message, "registry.test/nope:1") {
		t.Errorf("stream with a missing image: %v", err)
	}
	resp, b := e.raw("POST", "/v1/templates", map[string]string{"Authorization": "Bearer " + tkOp},
		strings.NewReader(`{"name":"a","shared":true,"from":"registry.test/nope:1"}`))
	if resp.StatusCode != 404 || tplErrCode(b) != CodeNotFound {
		t.Errorf("JSON with a missing image: %d %s", resp.StatusCode, b)
	}

	// Internal errors do not leak their text.
	e.builder.set(func(b *fakeBuilder) { b.err = fmt.Errorf("mkdir /var/lib/airlock/secret: %w", errdefs.ErrInternal) })
	_, err = c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "a", Shared: true, From: "x/y:1"}, nil)
	if !errors.Is(err, client.ErrInternal) || strings.Contains(err.Error(), "/var/lib") {
		t.Errorf("internal failure: %v", err)
	}
	if _, err := e.store.Get("a"); err == nil {
		t.Error("a failed build left a template")
	}
	if _, err := e.reg.Get("a"); err == nil {
		t.Error("a failed build registered a template")
	}
	evs := outcomes(e.audit.take())
	if len(evs) != 3 || evs[0].Outcome != CodeNotFound || evs[2].Outcome != CodeInternal {
		t.Errorf("outcomes = %+v", evs)
	}

	// Builds in flight: the name is taken, and at most MaxBuilds run.
	e.builder.set(func(b *fakeBuilder) { b.err = nil; b.block = make(chan struct{}); b.started = make(chan string, 4) })
	var wg sync.WaitGroup
	for _, name := range []string{"one", "two"} {
		wg.Go(func() {
			if _, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: name, Shared: true, From: "x/y:1"}, nil); err != nil {
				t.Errorf("build %s: %v", name, err)
			}
		})
	}
	<-e.builder.started
	<-e.builder.started
	if _, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "one", Shared: true, From: "x/y:1"}, nil); !errors.Is(err, client.ErrConflict) {
		t.Errorf("same name while building: %v", err)
	}
	if _, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "three", Shared: true, From: "x/y:1"}, nil); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("third concurrent build: %v", err)
	}
	close(e.builder.block)
	wg.Wait()

	// A client that goes away cancels its build.
	e.builder.set(func(b *fakeBuilder) { b.block = make(chan struct{}) })
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := c.BuildTemplate(cctx, client.BuildTemplateRequest{Name: "gone", Shared: true, From: "x/y:1"}, nil)
		done <- err
	}()
	<-e.builder.started
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("canceled client: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		e.audit.mu.Lock()
		last := e.audit.all[len(e.audit.all)-1]
		e.audit.mu.Unlock()
		if last.Target == "gone" && last.Outcome == CodeCanceled {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the canceled build was not recorded as canceled: %+v", last)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestTemplateDelete(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	admin := e.client(tkOp)
	for _, n := range []string{"a", "b"} {
		if _, err := admin.BuildTemplate(ctx, client.BuildTemplateRequest{Name: n, Shared: true, From: "x/y:1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := e.client(tkWriteA).CreateSandbox(ctx, client.CreateSandboxRequest{Template: "a"})
	if err != nil {
		t.Fatal(err)
	}
	e.audit.take()
	// A tenant's admin may not remove a shared template; the operator
	// may not while a sandbox uses it.
	if _, err := e.client(tkAdminB).DeleteTemplate(ctx, "a"); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "operator") {
		t.Errorf("a tenant admin deletes a shared template: %v", err)
	}
	if _, err := admin.DeleteTemplate(ctx, "a"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "in use") {
		t.Errorf("delete in use: %v", err)
	}
	if _, err := e.reg.Get("a"); err != nil {
		t.Errorf("a refused delete unregistered the template: %v", err)
	}
	if err := e.client(tkWriteA).DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	freed, err := admin.DeleteTemplate(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if freed.Layers != 1 || freed.Bytes != 1000 {
		t.Errorf("freed %+v, want the one layer b does not share", freed)
	}
	if _, err := admin.GetTemplate(ctx, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("get after delete: %v", err)
	}
	if _, err := e.client(tkWriteA).CreateSandbox(ctx, client.CreateSandboxRequest{Template: "a"}); err == nil {
		t.Error("a sandbox was created from a removed template")
	}
	list, _ := admin.ListTemplates(ctx)
	if len(list.Templates) != 2 || list.Usage.Layers != 2 {
		t.Errorf("list after delete = %+v", list)
	}
	if _, err := admin.DeleteTemplate(ctx, "a"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("second delete: %v", err)
	}
	if _, err := admin.DeleteTemplate(ctx, "host"); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "built in") {
		t.Errorf("delete host: %v", err)
	}
	if _, err := e.reg.Get("host"); err != nil {
		t.Error("host was unregistered")
	}
	evs := outcomes(e.audit.take())
	var oks []audit.Event
	for _, ev := range evs {
		if ev.Action == ActionTemplateDelete && ev.Outcome == "ok" {
			oks = append(oks, ev)
		}
	}
	if len(oks) != 1 || oks[0].Target != "a" || oks[0].Details["freed_layers"] != 1 || oks[0].KeyID != opKeyID || oks[0].Details["shared"] != true {
		t.Errorf("delete audit = %+v", oks)
	}
	if ls, _ := oks[0].Details["layers"].([]string); len(ls) != 2 {
		t.Errorf("delete audit layers = %v", oks[0].Details["layers"])
	}
}

func TestBuildSink(t *testing.T) {
	now := time.Unix(1000, 0)
	var lines []wire.BuildStreamLine
	s := &buildSink{write: func(l wire.BuildStreamLine) { lines = append(lines, l) }, now: func() time.Time { return now }}
	p := func(layer int, done, total int64) registry.Event {
		return registry.Event{Type: "progress", Step: 1, Steps: 1, Layer: layer, Layers: 2, Done: done, Total: total}
	}
	s.emit(p(1, 1, 100))
	s.emit(p(1, 2, 100))   // throttled
	s.emit(p(2, 1, 0))     // another layer: first line
	s.emit(p(1, 100, 100)) // final
	now = now.Add(progressEvery)
	s.emit(p(2, 5, 0)) // time passed
	s.emit(registry.Event{Type: "done"})
	s.emit(registry.Event{Type: "bogus"})
	s.emit(registry.Event{Type: "log", Text: "bad \xff utf8 " + strings.Repeat("x", maxLogText) + "\n"})
	s.close()
	s.emit(registry.Event{Type: "log", Text: "late"})
	var got []string
	for _, l := range lines {
		got = append(got, fmt.Sprintf("%s:%d:%d", l.Type, l.Layer, l.Done))
	}
	want := []string{"progress:1:1", "progress:2:1", "progress:1:100", "progress:2:5", "log:0:0"}
	if !slices.Equal(got, want) {
		t.Errorf("lines %v, want %v", got, want)
	}
	last := lines[len(lines)-1].Text
	if len(last) > maxLogText+3 || !strings.HasPrefix(last, "bad \uFFFD utf8") || strings.HasSuffix(last, "\n") {
		t.Errorf("log text not capped or cleaned: %d bytes", len(last))
	}
}

func TestParseRegistryAuthHeader(t *testing.T) {
	js := `{"username":"u","password":"p+/?"}`
	tests := []struct {
		vals []string
		want registry.Credentials
		ok   bool
	}{
		{nil, registry.Credentials{}, true},
		{[]string{base64.StdEncoding.EncodeToString([]byte(js))}, registry.Credentials{Username: "u", Password: "p+/?"}, true},
		{[]string{base64.RawURLEncoding.EncodeToString([]byte(js))}, registry.Credentials{Username: "u", Password: "p+/?"}, true},
		{[]string{base64.URLEncoding.EncodeToString([]byte(`{"token":"t"}`))}, registry.Credentials{Token: "t"}, true},
		{[]string{"not base64!"}, registry.Credentials{}, false},
		{[]string{base64.StdEncoding.EncodeToString([]byte(`{"user":"u"}`))}, registry.Credentials{}, false},
		{[]string{base64.StdEncoding.EncodeToString([]byte(`{"username":"u"}`))}, registry.Credentials{}, false},
		{[]string{"a", "b"}, registry.Credentials{}, false},
	}
	for _, tt := range tests {
		got, err := parseRegistryAuthHeader(tt.vals)
		if (err == nil) != tt.ok || (tt.ok && got != tt.want) {
			t.Errorf("parseRegistryAuthHeader(%v) = %+v, %v", tt.vals, got, err)
		}
	}
}

// provSource is a built-in template that says what it is made of.
type provSource struct{ staticSource }

func (provSource) Provenance() (string, time.Time) {
	return "this host's /usr and a copy of /etc", time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
}

// TestBuiltinProvenance: a built-in template that can say what it is made
// of and when it was built shows it in list and inspect.
func TestBuiltinProvenance(t *testing.T) {
	reg, err := template.NewRegistry(provSource{staticSource{"host"}}, staticSource{"plain"})
	if err != nil {
		t.Fatal(err)
	}
	store := newFakeTemplateStore()
	ts, err := registry.New(registry.Config{Registry: reg, Store: store, Builder: &fakeBuilder{store: store},
		Source: func(name string) (template.Source, error) { return fakeStored{store, name}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	builtin := map[string]wire.Template{}
	list, _ := ts.List(tenantA)
	for _, tp := range list {
		builtin[tp.Name] = toTemplateJSON(tp)
	}
	got := builtin["host"]
	if got.Source != "built-in: this host's /usr and a copy of /etc" || got.Created == nil || !got.Created.Equal(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("host = %+v", got)
	}
	if plain := builtin["plain"]; plain.Source != "built-in" || plain.Created != nil {
		t.Errorf("plain = %+v", plain)
	}
}

// TestTemplateBuildWarnings: the Dockerfile instructions an Airfile
// ignores are reported first, as warning lines naming the client's own
// line numbers, and counted in the audit record.
func TestTemplateBuildWarnings(t *testing.T) {
	ctx := context.Background()
	e := newTplEnv(t)
	c := e.client(tkOp)
	var got []client.BuildEvent
	onEvent := func(ev client.BuildEvent) error { got = append(got, ev); return nil }
	// With from, the API puts the FROM line before the client's airfile.
	if _, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "w1", From: "template:host2", Airfile: "EXPOSE 80\nRUN true\nLABEL a=b\n"}, onEvent); err != nil {
		t.Fatal(err)
	}
	want := []string{"airfile line 1: EXPOSE is ignored: sandboxes have no network ports to publish",
		"airfile line 3: LABEL is ignored: templates keep no labels"}
	var warnings []string
	for _, ev := range got {
		if ev.Type == client.BuildWarning {
			warnings = append(warnings, ev.Text)
		}
	}
	if !slices.Equal(warnings, want) || got[0].Type != client.BuildWarning {
		t.Errorf("warnings %q (first event %+v), want %q first", warnings, got[0], want)
	}
	evs := outcomes(e.audit.take())
	if len(evs) != 1 || evs[0].Details["ignored_instructions"] != 2 {
		t.Errorf("audit = %+v", evs)
	}
	// A whole Airfile keeps its own numbering.
	got = nil
	if _, err := c.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "w2", Airfile: "FROM x/y:1\nCMD [\"python3\"]\n"}, onEvent); err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 || got[0].Text != "airfile line 2: CMD is ignored: sandboxes start no default command; run it with exec" {
		t.Errorf("events %+v", got)
	}
}
