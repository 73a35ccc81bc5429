package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// memStore is an in-memory Store; every layer is 1000 bytes.
type memStore struct {
	mu        sync.Mutex
	templates map[string]layers.Manifest
	inUse     map[string]bool
}

func newMemStore() *memStore {
	return &memStore{templates: map[string]layers.Manifest{}, inUse: map[string]bool{}}
}

func (s *memStore) put(name string, diffIDs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.templates[name] = layers.Manifest{Name: name, Layers: diffIDs, Size: int64(1000 * len(diffIDs)), Source: "test", Created: time.Now()}
}

func (s *memStore) List() []layers.Manifest {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []layers.Manifest
	for _, m := range s.templates {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b layers.Manifest) int { return strings.Compare(a.Name, b.Name) })
	return out
}

func (s *memStore) Get(name string) (layers.Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return m, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	return m, nil
}

func (s *memStore) Layer(d string) (layers.LayerInfo, error) {
	return layers.LayerInfo{DiffID: d, Size: 1000, Files: 1}, nil
}

func (s *memStore) Usage() layers.Usage { return layers.Usage{Layers: 99} }

func (s *memStore) Remove(_ context.Context, name string) (layers.Freed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return layers.Freed{}, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
	}
	if s.inUse[name] {
		return layers.Freed{}, fmt.Errorf("template %q is in use: %w", name, errdefs.ErrFailedPrecondition)
	}
	delete(s.templates, name)
	return layers.Freed{Layers: len(m.Layers), Bytes: int64(1000 * len(m.Layers))}, nil
}

// memStored is a registry source backed by memStore.
type memStored struct {
	s    *memStore
	name string
}

func (f memStored) Name() string                       { return f.name }
func (f memStored) Manifest() (layers.Manifest, error) { return f.s.Get(f.name) }
func (f memStored) Resolve(context.Context) (runtime.Rootfs, error) {
	return runtime.Rootfs{}, nil
}

// builtinSource is a built-in template; with what set it says what it is
// made of.
type builtinSource struct {
	name, what string
	built      time.Time
}

func (b builtinSource) Name() string                                    { return b.name }
func (b builtinSource) Resolve(context.Context) (runtime.Rootfs, error) { return runtime.Rootfs{}, nil }

type provSource struct{ builtinSource }

func (p provSource) Provenance() (string, time.Time) { return p.what, p.built }

// memBuilder stores a one-layer template per build; block, if set, holds
// builds until it is closed.
type memBuilder struct {
	store *memStore
	block chan struct{}
	reqs  []BuildRequest
}

func (b *memBuilder) Build(ctx context.Context, req BuildRequest, events func(Event)) (layers.Manifest, error) {
	b.reqs = append(b.reqs, req)
	if b.block != nil {
		select {
		case <-b.block:
		case <-ctx.Done():
			return layers.Manifest{}, fmt.Errorf("build: %w", errdefs.ErrCanceled)
		}
	}
	name := template.StoreName(req.Owner, req.Name)
	b.store.put(name, "sha256:"+req.Name)
	return b.store.Get(name)
}

type testEnv struct {
	svc     *Service
	store   *memStore
	reg     *template.Registry
	builder *memBuilder
	ctxDir  string
}

func newEnv(t *testing.T, tune ...func(*Config)) *testEnv {
	t.Helper()
	reg, err := template.NewRegistry(builtinSource{name: "host"})
	if err != nil {
		t.Fatal(err)
	}
	e := &testEnv{store: newMemStore(), reg: reg, ctxDir: t.TempDir()}
	e.builder = &memBuilder{store: e.store}
	cfg := Config{Registry: reg, Store: e.store, Builder: e.builder, ContextDir: e.ctxDir,
		Source: func(name string) (template.Source, error) { return memStored{e.store, name}, nil }}
	for _, f := range tune {
		f(&cfg)
	}
	if e.svc, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestNewNeedsParts(t *testing.T) {
	if _, err := New(Config{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("empty config: %v", err)
	}
}

// TestReserve: the naming rules and the build slots.
func TestReserve(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxBuilds = 2 })
	e.store.put("taken", "sha256:a")
	for _, tt := range []struct {
		owner, name string
		replace     bool
		class       error
		msg         string
	}{
		{"", "host", false, errdefs.ErrAlreadyExists, "template host is built in and cannot be replaced or hidden"},
		{"t1", "host", true, errdefs.ErrAlreadyExists, "built in"},
		{"", "taken", false, errdefs.ErrAlreadyExists, "template taken already exists; remove it first or replace it"},
	} {
		if _, err := e.svc.Reserve(tt.owner, tt.name, tt.replace); !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("reserve %s/%s: %v, want %v with %q", tt.owner, tt.name, err, tt.class, tt.msg)
		}
	}
	// A tenant's name is its own; replace takes a stored name.
	a, err := e.svc.Reserve("t1", "taken", false)
	if err != nil {
		t.Fatal(err)
	}
	b, err := e.svc.Reserve("", "taken", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.Reserve("t2", "other", false); !errors.Is(err, errdefs.ErrResourceExhausted) ||
		!strings.Contains(err.Error(), "2 template builds are running") {
		t.Errorf("third job: %v", err)
	}
	b.Close()
	b.Close() // twice is fine
	if _, err := e.svc.Reserve("t1", "taken", false); !errors.Is(err, errdefs.ErrAlreadyExists) || !strings.Contains(err.Error(), "being built") {
		t.Errorf("a name in flight: %v", err)
	}
	c, err := e.svc.Reserve("t2", "other", false)
	if err != nil {
		t.Errorf("a closed job's slot: %v", err)
	}
	a.Close()
	c.Close()
}

// TestBuildRegisters: a build runs with the job's name, owner and
// context, is registered for its owner, and gives its slot and directory
// back before it returns.
func TestBuildRegisters(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxBuilds = 1 })
	job, err := e.svc.Reserve("t1", "app", false)
	if err != nil {
		t.Fatal(err)
	}
	bc, err := job.ReceiveContext(context.Background(), bytes.NewReader(testutil.Tar(t,
		testutil.Entry{Name: "Airfile", Body: "FROM template:host\n"}, testutil.Entry{Name: "a/b", Body: "x"})))
	if err != nil {
		t.Fatal(err)
	}
	if string(bc.Airfile) != "FROM template:host\n" || bc.Entries != 2 || bc.Bytes != 20 {
		t.Errorf("context %+v", bc)
	}
	d, err := job.Build(context.Background(), BuildRequest{Name: "ignored", Owner: "ignored", NoCache: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "app" || d.Shared || len(d.LayerList) != 1 || d.LayerList[0].Digest != "sha256:app" || d.Size != 1000 {
		t.Errorf("detail %+v", d)
	}
	r := e.builder.reqs[0]
	if r.Name != "app" || r.Owner != "t1" || r.ContextDir == "" || !r.NoCache {
		t.Errorf("builder request %+v", r)
	}
	if _, err := e.reg.Lookup("t1", "app"); err != nil {
		t.Errorf("not registered for its owner: %v", err)
	}
	if ents, _ := os.ReadDir(e.ctxDir); len(ents) != 0 {
		t.Errorf("the job's directory is left: %v", ents)
	}
	if j, err := e.svc.Reserve("t1", "next", false); err != nil {
		t.Errorf("the build kept its slot: %v", err)
	} else {
		j.Close()
	}
}

// TestBuildTimeout: a build is bounded by Config.BuildTimeout.
func TestBuildTimeout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.BuildTimeout = 50 * time.Millisecond })
	e.builder.block = make(chan struct{})
	job, err := e.svc.Reserve("", "slow", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Build(context.Background(), BuildRequest{}, nil); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("a build past its timeout: %v", err)
	}
}

// TestRegisterOwnerGone: a build that finishes after its tenant was
// deleted is removed instead of registered.
func TestRegisterOwnerGone(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.OwnerGone = func(_ context.Context, owner string) (bool, error) { return owner == "gone", nil }
	})
	job, err := e.svc.Reserve("gone", "app", false)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := job.Build(context.Background(), BuildRequest{}, nil); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "tenant was deleted") {
		t.Errorf("build of a deleted tenant: %v", err)
	}
	if _, err := e.store.Get(template.StoreName("gone", "app")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the template stays in the store: %v", err)
	}
	if _, err := e.reg.Get(template.StoreName("gone", "app")); err == nil {
		t.Error("the template was registered")
	}
	job, _ = e.svc.Reserve("here", "app", false)
	if _, err := job.Build(context.Background(), BuildRequest{}, nil); err != nil {
		t.Errorf("build of a live tenant: %v", err)
	}
}

// TestDelete: approve runs before anything is removed and can stop it;
// built-in templates stay; a registered template whose manifest is gone
// is dropped.
func TestDelete(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{"shared", template.StoreName("t1", "own"), "stale"} {
		e.store.put(n, "sha256:"+n)
		if err := e.reg.Add(memStored{e.store, n}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	no := errors.New("refused")
	var seen Removal
	if _, err := e.svc.Delete(ctx, "t1", "shared", false, func(r Removal) error { seen = r; return no }); err != no {
		t.Errorf("refused delete: %v", err)
	}
	if !seen.Shared || seen.Source != "test" || len(seen.Layers) != 1 {
		t.Errorf("removal %+v", seen)
	}
	if _, err := e.store.Get("shared"); err != nil {
		t.Errorf("a refused delete removed the template: %v", err)
	}
	ok := func(Removal) error { return nil }
	if _, err := e.svc.Delete(ctx, "t1", "host", false, ok); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "built in") {
		t.Errorf("delete host: %v", err)
	}
	freed, err := e.svc.Delete(ctx, "t1", "own", false, func(r Removal) error { seen = r; return nil })
	if err != nil || freed.Layers != 1 || seen.Shared {
		t.Errorf("delete own: %+v %v (%+v)", freed, err, seen)
	}
	if _, err := e.reg.Lookup("t1", "own"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("own still registered: %v", err)
	}
	e.store.inUse["shared"] = true
	if _, err := e.svc.Delete(ctx, "", "shared", true, ok); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("delete in use: %v", err)
	}
	if _, err := e.reg.Get("shared"); err != nil {
		t.Errorf("a refused delete unregistered the template: %v", err)
	}
	e.store.Remove(ctx, "stale")
	if _, err := e.svc.Delete(ctx, "", "stale", false, ok); !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "template stale: not found" {
		t.Errorf("delete stale: %v", err)
	}
	if _, err := e.reg.Get("stale"); err == nil {
		t.Error("a stale registration stays")
	}
}

// TestRemoveOwner: a deleted tenant's templates go, others stay.
func TestRemoveOwner(t *testing.T) {
	e := newEnv(t)
	for _, n := range []string{template.StoreName("t1", "a"), template.StoreName("t1", "b"), template.StoreName("t2", "a"), "a"} {
		e.store.put(n, "sha256:"+n)
		_ = e.reg.Add(memStored{e.store, n})
	}
	if !e.svc.HasOwner("t1") || e.svc.HasOwner("t3") {
		t.Error("HasOwner")
	}
	n, freed, err := e.svc.RemoveOwner(context.Background(), "t1")
	if err != nil || n != 2 || freed.Bytes != 2000 {
		t.Errorf("removed %d %+v %v", n, freed, err)
	}
	if e.svc.HasOwner("t1") || !e.svc.HasOwner("t2") {
		t.Error("HasOwner after removal")
	}
	if l := e.store.List(); len(l) != 2 {
		t.Errorf("store %v", l)
	}
}

// TestListAndGet: a tenant sees the built-in, shared and own templates,
// an own one before the shared one it hides; never another tenant's.
func TestListAndGet(t *testing.T) {
	reg, err := template.NewRegistry(provSource{builtinSource{"host", "this host's /usr and a copy of /etc", time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)}},
		builtinSource{name: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, func(c *Config) { c.Registry = reg })
	e.store.put("py", "sha256:base", "sha256:py")
	e.store.put(template.StoreName("t1", "py"), "sha256:base", "sha256:mine")
	e.store.put(template.StoreName("t2", "secret"), "sha256:secret")
	list, usage := e.svc.List("t1")
	var names []string
	for _, tp := range list {
		names = append(names, fmt.Sprintf("%s:%v:%d", tp.Name, tp.Shared, tp.SharedBytes))
	}
	if want := []string{"host:true:0", "plain:true:0", "py:false:1000", "py:true:1000"}; !slices.Equal(names, want) {
		t.Errorf("list %v, want %v", names, want)
	}
	if usage.Layers != 3 || usage.SharedLayers != 1 || usage.Bytes != 3000 {
		t.Errorf("usage %+v", usage)
	}
	if e.svc.StoreUsage().Layers != 99 {
		t.Error("StoreUsage is not the store's")
	}
	if list[0].Source != "built-in: this host's /usr and a copy of /etc" || !list[0].Created.Equal(time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)) {
		t.Errorf("host %+v", list[0])
	}
	if list[1].Source != "built-in" || !list[1].Created.IsZero() {
		t.Errorf("plain %+v", list[1])
	}
	if d, err := e.svc.Get("t1", "py", false); err != nil || d.Shared || d.LayerList[1].Digest != "sha256:mine" {
		t.Errorf("own py: %+v %v", d, err)
	}
	if d, err := e.svc.Get("t1", "py", true); err != nil || !d.Shared {
		t.Errorf("shared py: %+v %v", d, err)
	}
	_, err1 := e.svc.Get("t1", "secret", false)
	_, err2 := e.svc.Get("t1", "missing", false)
	if !errors.Is(err1, errdefs.ErrNotFound) || strings.ReplaceAll(err1.Error(), "secret", "X") != strings.ReplaceAll(err2.Error(), "missing", "X") {
		t.Errorf("another tenant's template: %v; a missing one: %v", err1, err2)
	}
}

// TestReceiveContext: the upload is unpacked by the layer extractor's
// tree policy within the configured caps; the Airfile must be a regular
// file at its root; without a contexts directory uploads are refused.
func TestReceiveContext(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxContextFiles = 3; c.MaxContextBytes = 4 << 10 })
	ctx := context.Background()
	tests := []struct {
		name  string
		body  []byte
		class error
		msg   string
	}{
		{"no airfile", testutil.Tar(t, testutil.Entry{Name: "x", Body: "y"}), errdefs.ErrInvalidArgument, "the build context has no Airfile at its root"},
		{"airfile link", testutil.Tar(t, testutil.Entry{Name: "Airfile", Type: tar.TypeSymlink, Link: "x"}), errdefs.ErrInvalidArgument, "the build context's Airfile is not a regular file"},
		{"too many", testutil.Tar(t, []testutil.Entry{{Name: "Airfile"}, {Name: "a"}, {Name: "b"}, {Name: "c"}}...), errdefs.ErrResourceExhausted, "the build context has more than 3 entries"},
		{"too big", testutil.Tar(t, testutil.Entry{Name: "Airfile", Body: strings.Repeat("x", 8<<10)}), errdefs.ErrResourceExhausted, "larger than the limit of 4096 bytes"},
		{"escape", testutil.Tar(t, testutil.Entry{Name: "../x"}), errdefs.ErrInvalidArgument, "names with .. are not allowed"},
	}
	for _, tt := range tests {
		job, err := e.svc.Reserve("", "ctx", false)
		if err != nil {
			t.Fatal(err)
		}
		_, err = job.ReceiveContext(ctx, bytes.NewReader(tt.body))
		if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s: %v, want %v with %q", tt.name, err, tt.class, tt.msg)
		}
		var le *LimitError
		if tt.class == errdefs.ErrResourceExhausted && !errors.As(err, &le) {
			t.Errorf("%s: %v is no *LimitError", tt.name, err)
		}
		job.Close()
		if ents, _ := os.ReadDir(e.ctxDir); len(ents) != 0 {
			t.Errorf("%s: left %v", tt.name, ents)
		}
	}
	off := newEnv(t, func(c *Config) { c.ContextDir = "" })
	job, _ := off.svc.Reserve("", "ctx", false)
	defer job.Close()
	if _, err := job.ReceiveContext(ctx, bytes.NewReader(nil)); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("without a contexts directory: %v", err)
	}
	if _, err := off.svc.MaxImportBytes(); !errors.Is(err, errdefs.ErrNotSupported) || err.Error() != "this server does not import image archives: not supported" {
		t.Errorf("without an importer: %v", err)
	}
	if _, err := job.ReceiveImage(ctx, bytes.NewReader(nil)); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("import without an importer: %v", err)
	}
}
