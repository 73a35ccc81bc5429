package layers

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// storeLayer extracts a one-file layer and returns its diff ID.
func storeLayer(t *testing.T, l *Lease, name, body string) string {
	t.Helper()
	b := testutil.Tar(t, testutil.Entry{Name: name, Body: body})
	info, err := l.Extract(context.Background(), bytes.NewReader(b), ExtractOptions{DiffID: digestOf(b)})
	if err != nil {
		t.Fatal(err)
	}
	return info.DiffID
}

func layerExists(t *testing.T, s *Store, d string) bool {
	t.Helper()
	_, err := os.Stat(s.layerDir(d))
	_, lerr := s.Layer(d)
	if (err == nil) != (lerr == nil) {
		t.Fatalf("layer %s: on disk %v, indexed %v", d, err == nil, lerr == nil)
	}
	return err == nil
}

func TestRefcount(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	inUse := map[string]bool{}
	var mu sync.Mutex
	s := openStore(t, func(name string) bool { mu.Lock(); defer mu.Unlock(); return inUse[name] })

	l := s.NewLease()
	base := storeLayer(t, l, "base", "shared base")
	onlyA := storeLayer(t, l, "a", "only in a")
	onlyB := storeLayer(t, l, "b", "only in b!")
	if _, err := s.Put(ctx, Manifest{Name: "a", Layers: []string{base, onlyA}}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, Manifest{Name: "b", Layers: []string{base, onlyB}}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l.Release()

	u := s.Usage()
	if u.Layers != 3 || u.SharedLayers != 1 || u.SharedBytes != int64(len("shared base")) || u.UnusedLayers != 0 {
		t.Errorf("usage = %+v", u)
	}
	if len(u.Templates) != 2 || u.Templates[0].Name != "a" || u.Templates[0].Bytes != int64(len("shared base")+len("only in a")) || u.Templates[0].SharedBytes != int64(len("shared base")) {
		t.Errorf("template usage = %+v", u.Templates)
	}

	mu.Lock()
	inUse["a"] = true
	mu.Unlock()
	if _, err := s.Remove(ctx, "a"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("removing an in-use template: err = %v, want ErrFailedPrecondition", err)
	}
	if _, err := s.Put(ctx, Manifest{Name: "a", Layers: []string{base}}, PutOptions{Replace: true}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("replacing an in-use template: err = %v, want ErrFailedPrecondition", err)
	}
	if _, err := s.Get("a"); err != nil || !layerExists(t, s, onlyA) {
		t.Fatal("a failed removal changed the store")
	}
	mu.Lock()
	inUse["a"] = false
	mu.Unlock()

	freed, err := s.Remove(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if freed.Layers != 1 || freed.Bytes != int64(len("only in a")) {
		t.Errorf("freed = %+v, want only a's own layer", freed)
	}
	if !layerExists(t, s, base) || layerExists(t, s, onlyA) || !layerExists(t, s, onlyB) {
		t.Error("removing a must keep the shared layer and b's layer and free a's")
	}
	if _, err := s.Get("a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(a) after removal: %v", err)
	}
	if _, err := s.Remove(ctx, "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second Remove: %v, want ErrNotFound", err)
	}
	if _, err := s.Remove(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if layerExists(t, s, base) || layerExists(t, s, onlyB) {
		t.Error("removing both templates must free every layer")
	}
	assertTmpEmpty(t, s)
	if u := s.Usage(); u.Layers != 0 || u.Bytes != 0 {
		t.Errorf("usage after removing everything = %+v", u)
	}
}

func TestLeaseProtectsLayers(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t, nil)
	l1 := s.NewLease()
	shared := storeLayer(t, l1, "s", "shared")
	if _, err := s.Put(ctx, Manifest{Name: "old", Layers: []string{shared}}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l1.Release()

	// An import finds the layer present and pins it; the old template
	// is removed meanwhile; the layer must survive for the new one.
	l2 := s.NewLease()
	if ok, err := l2.Has(shared); err != nil || !ok {
		t.Fatalf("Has = %v, %v", ok, err)
	}
	orphan := storeLayer(t, l2, "o", "orphan")
	if _, err := s.Remove(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Prune(ctx); err != nil {
		t.Fatal(err)
	}
	if !layerExists(t, s, shared) || !layerExists(t, s, orphan) {
		t.Fatal("a pinned layer was deleted")
	}
	if _, err := s.Put(ctx, Manifest{Name: "new", Layers: []string{shared}}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l2.Release()
	l2.Release() // idempotent
	if _, err := l2.Has(shared); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Has on a released lease: %v", err)
	}
	// The orphan stays (a retried import could reuse it) until Prune.
	if !layerExists(t, s, orphan) {
		t.Fatal("Release deleted an unreferenced layer; only Prune should")
	}
	freed, err := s.Prune(ctx)
	if err != nil || freed.Layers != 1 {
		t.Fatalf("Prune = %+v, %v; want the orphan freed", freed, err)
	}
	if layerExists(t, s, orphan) || !layerExists(t, s, shared) {
		t.Error("Prune freed the wrong layers")
	}
}

func TestPutValidation(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t, nil)
	l := s.NewLease()
	defer l.Release()
	d := storeLayer(t, l, "f", "x")
	missing := digestOf([]byte("missing"))
	tests := []struct {
		name string
		m    Manifest
		want error
	}{
		{"bad name", Manifest{Name: "Bad/Name", Layers: []string{d}}, errdefs.ErrInvalidArgument},
		{"dot name", Manifest{Name: ".hidden", Layers: []string{d}}, errdefs.ErrInvalidArgument},
		{"no layers", Manifest{Name: "x"}, errdefs.ErrInvalidArgument},
		{"bad digest", Manifest{Name: "x", Layers: []string{"sha256:abc"}}, errdefs.ErrInvalidArgument},
		{"unknown layer", Manifest{Name: "x", Layers: []string{missing}}, errdefs.ErrNotFound},
		{"bad env", Manifest{Name: "x", Layers: []string{d}, Config: Config{Env: []string{"NOEQUALS"}}}, errdefs.ErrInvalidArgument},
		{"relative workdir", Manifest{Name: "x", Layers: []string{d}, Config: Config{Workdir: "app"}}, errdefs.ErrInvalidArgument},
		{"too many layers", Manifest{Name: "x", Layers: repeat(d, MaxLayers+1)}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		if _, err := s.Put(ctx, tt.m, PutOptions{}); !errors.Is(err, tt.want) {
			t.Errorf("%s: err = %v, want %v", tt.name, err, tt.want)
		}
	}
	if got := s.List(); len(got) != 0 {
		t.Errorf("invalid manifests were stored: %v", got)
	}
	m, err := s.Put(ctx, Manifest{Name: "ok", Layers: []string{d}, Config: Config{Env: []string{"A=1"}, Workdir: "/app"}}, PutOptions{})
	if err != nil || m.Size != 1 || m.Created.IsZero() {
		t.Fatalf("Put = %+v, %v", m, err)
	}
	if _, err := s.Put(ctx, Manifest{Name: "ok", Layers: []string{d}}, PutOptions{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Put without Replace: %v", err)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func TestReplaceFreesOldLayers(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t, nil)
	l := s.NewLease()
	v1 := storeLayer(t, l, "v", "1")
	if _, err := s.Put(ctx, Manifest{Name: "t", Layers: []string{v1}}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l.Release()
	l = s.NewLease()
	v2 := storeLayer(t, l, "v", "2")
	if _, err := s.Put(ctx, Manifest{Name: "t", Layers: []string{v2}}, PutOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	l.Release()
	if layerExists(t, s, v1) || !layerExists(t, s, v2) {
		t.Error("replacing a template must free its old layers and keep the new ones")
	}
}

func TestReopen(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	root := filepath.Join(t.TempDir(), "store")
	s, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l := s.NewLease()
	d1 := storeLayer(t, l, "one", "1")
	d2 := storeLayer(t, l, "two", "22")
	orphan := storeLayer(t, l, "orphan", "o")
	want, err := s.Put(ctx, Manifest{Name: "t", Layers: []string{d1, d2, d1}, Source: "test", Config: Config{Cmd: []string{"sh"}}}, PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Release()
	// Debris of a crash: a half-extracted layer, a half-written
	// manifest, a damaged layer directory.
	os.MkdirAll(filepath.Join(root, tmpDir, "layer-123", "fs", "usr"), 0o755)
	os.WriteFile(filepath.Join(root, templatesDir, ".t.json.tmp-1"), []byte("{"), 0o600)
	damaged := filepath.Join(root, layersDir, strings.Repeat("ab", 32))
	os.MkdirAll(filepath.Join(damaged, "fs"), 0o755)

	s2, err := Open(root, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get("t")
	if err != nil {
		t.Fatal(err)
	}
	if got.Size != want.Size || got.Source != "test" || len(got.Layers) != 3 || got.Config.Cmd[0] != "sh" {
		t.Errorf("reloaded %+v, want %+v", got, want)
	}
	dirs, _, err := s2.Rootfs(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	d1dir, _ := s2.LayerDir(d1)
	d2dir, _ := s2.LayerDir(d2)
	if len(dirs) != 2 || dirs[0] != d2dir || dirs[1] != d1dir {
		t.Errorf("Rootfs = %v, want [%s %s] (duplicate layer kept at its top position)", dirs, d2dir, d1dir)
	}
	assertTmpEmpty(t, s2)
	if _, err := os.Stat(damaged); !errors.Is(err, os.ErrNotExist) {
		t.Error("damaged layer directory was kept")
	}
	if _, err := os.Stat(filepath.Join(root, templatesDir, ".t.json.tmp-1")); !errors.Is(err, os.ErrNotExist) {
		t.Error("half-written manifest was kept")
	}
	if !layerExists(t, s2, orphan) {
		t.Error("Open must not prune by itself")
	}
	// A manifest that does not parse is an error, not silently dropped.
	os.WriteFile(filepath.Join(root, templatesDir, "bad.json"), []byte(`{"name":"bad","layers":[],"bogus":1}`), 0o600)
	if _, err := Open(root, Options{}); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("Open with a broken manifest: %v", err)
	}
	// Relative store paths are refused.
	if _, err := Open("relative/store", Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Open(relative): %v", err)
	}
}

func TestRootfsMissingLayer(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	s := openStore(t, nil)
	l := s.NewLease()
	d := storeLayer(t, l, "f", "x")
	if _, err := s.Put(ctx, Manifest{Name: "t", Layers: []string{d}}, PutOptions{}); err != nil {
		t.Fatal(err)
	}
	l.Release()
	dir, _ := s.LayerDir(d)
	os.RemoveAll(dir)
	if _, _, err := s.Rootfs(ctx, "t"); !errors.Is(err, errdefs.ErrFailedPrecondition) || strings.Contains(err.Error(), s.Root()) {
		t.Errorf("Rootfs with a layer gone: %v", err)
	}
	if _, _, err := s.Rootfs(ctx, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Rootfs of unknown template: %v", err)
	}
}

func TestExtractReuse(t *testing.T) {
	requireRoot(t)
	s := openStore(t, nil)
	b := testutil.Tar(t, testutil.Entry{Name: "f", Body: "x"})
	first, err := extract(t, s, b, ExtractOptions{DiffID: digestOf(b)})
	if err != nil {
		t.Fatal(err)
	}
	// Known diff ID: the stream is not even read.
	l := s.NewLease()
	again, err := l.Extract(context.Background(), errReader{}, ExtractOptions{DiffID: digestOf(b)})
	l.Release()
	if err != nil || again != first {
		t.Fatalf("reuse: %+v, %v", again, err)
	}
	// Unknown diff ID: extracted again, then the stored copy wins.
	again, err = extract(t, s, b, ExtractOptions{})
	if err != nil || again != first {
		t.Fatalf("re-extract: %+v, %v", again, err)
	}
	assertTmpEmpty(t, s)
}

func TestConcurrentExtractSameLayer(t *testing.T) {
	requireRoot(t)
	s := openStore(t, nil)
	b := testutil.Tar(t, manyFiles(200)...)
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			opts := ExtractOptions{DiffID: digestOf(b)}
			if i%2 == 1 {
				opts.DiffID = "" // races through the digest-less path
			}
			_, errs[i] = extract(t, s, b, opts)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if u := s.Usage(); u.Layers != 1 {
		t.Errorf("%d layers stored, want 1", u.Layers)
	}
	assertTmpEmpty(t, s)
}

func TestConfigEnvMap(t *testing.T) {
	tests := []struct {
		env  []string
		want map[string]string
	}{
		{nil, map[string]string{}},
		{[]string{"A=1", "B="}, map[string]string{"A": "1", "B": ""}},
		{[]string{"A=1", "A=2"}, map[string]string{"A": "2"}}, // a later duplicate wins
		{[]string{"URL=a=b"}, map[string]string{"URL": "a=b"}},
	}
	for _, tt := range tests {
		got := Config{Env: tt.env}.EnvMap()
		if len(got) != len(tt.want) {
			t.Errorf("EnvMap(%q) = %v, want %v", tt.env, got, tt.want)
			continue
		}
		for k, v := range tt.want {
			if g, ok := got[k]; !ok || g != v {
				t.Errorf("EnvMap(%q)[%q] = %q, %v; want %q", tt.env, k, g, ok, v)
			}
		}
	}
}
