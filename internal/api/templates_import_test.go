package api

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/oci"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// ociImporter is the daemon's importer (internal/daemon.importer): the
// real oci import into a real layer store.
type ociImporter struct{ store *layers.Store }

func (i ociImporter) Import(ctx context.Context, req registry.ImportRequest, events func(registry.Event)) (layers.Manifest, error) {
	opts := oci.Options{Replace: req.Replace, AllowSetuid: req.AllowSetuid, StripSetuid: !req.AllowSetuid}
	if events != nil {
		opts.Progress = func(p oci.Progress) {
			events(registry.Event{Type: "progress", Step: 1, Steps: 1, Layer: p.Layer, Layers: p.Layers, Done: p.Done, Total: p.Total})
		}
	}
	n := template.StoreName(req.Owner, req.Name)
	var res oci.Result
	var err error
	switch req.Format {
	case registry.ImportDockerArchive:
		res, err = oci.ImportArchive(ctx, i.store, n, req.Path, req.Tag, opts)
	case registry.ImportOCILayout:
		res, err = oci.ImportLayout(ctx, i.store, n, req.Path, req.Tag, opts)
	default:
		err = fmt.Errorf("format %q: %w", req.Format, errdefs.ErrInvalidArgument)
	}
	return res.Manifest, err
}

// layerTar is a one-file layer tar.
func layerTar(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for n, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o755 | 0o4000, Size: int64(len(body)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(body))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testImage is an image with one layer holding files, and a config.
func testImage(t *testing.T, files map[string]string, env ...string) v1.Image {
	t.Helper()
	b := layerTar(t, files)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{Env: env, WorkingDir: "/srv", User: "1000"}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// dockerArchive is `docker save` of imgs by tag.
func dockerArchive(t *testing.T, imgs map[string]v1.Image) []byte {
	t.Helper()
	refs := map[name.Reference]v1.Image{}
	for tag, img := range imgs {
		r, err := name.NewTag(tag)
		if err != nil {
			t.Fatal(err)
		}
		refs[r] = img
	}
	var buf bytes.Buffer
	if err := tarball.MultiRefWrite(refs, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layoutDir writes an OCI layout of imgs (by reference name) to a new
// directory.
func layoutDir(t *testing.T, imgs map[string]v1.Image) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "layout")
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	for ref, img := range imgs {
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": ref})); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// tarDir is dir as a tar stream, plus extra entries at the end.
func tarDir(t *testing.T, dir string, extra ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Name: rel + "/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range extra {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// newImportEnv is a template API over a real layer store and the real
// oci import (root: the store unpacks layers with their owners).
func newImportEnv(t *testing.T, tune ...func(*registry.Config)) (*tplEnv, *layers.Store) {
	t.Helper()
	testutil.RequireRoot(t, "needs root: the layer store unpacks files with their owners")
	store, err := layers.Open(filepath.Join(t.TempDir(), "store"), layers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	e := newTplEnv(t, append([]func(*registry.Config){func(c *registry.Config) {
		c.Store = store
		c.Importer = ociImporter{store}
		c.Source = func(n string) (template.Source, error) { return template.NewStored(store, n) }
	}}, tune...)...)
	return e, store
}

// importRaw posts body to the import route with key and query.
func (e *tplEnv) importRaw(key, nameQuery string, ct string, body []byte) (int, []byte) {
	e.t.Helper()
	hdr := map[string]string{"Authorization": "Bearer " + key}
	if ct != "" {
		hdr["Content-Type"] = ct
	}
	resp, b := e.raw("POST", "/v1/templates/"+nameQuery, hdr, bytes.NewReader(body))
	return resp.StatusCode, b
}

// noImportLeft fails unless every upload was cleaned up.
func (e *tplEnv) noImportLeft() {
	e.t.Helper()
	ents, err := os.ReadDir(e.ctxDir)
	if err != nil || len(ents) != 0 {
		e.t.Errorf("import directories left behind: %v %v", ents, err)
	}
}

// TestTemplateImport imports a real `docker save` archive and a real OCI
// layout through the API and the client, as a tenant's template, and
// checks what the store holds: the files, the image's config, set-id
// bits stripped, the provenance, the audit record, nothing left behind.
func TestTemplateImport(t *testing.T) {
	e, store := newImportEnv(t)
	ctx := context.Background()
	app := testImage(t, map[string]string{"app/run": "v1"}, "A=1", "PATH=/usr/bin")
	other := testImage(t, map[string]string{"other": "o"})
	archive := filepath.Join(t.TempDir(), "app.tar")
	if err := os.WriteFile(archive, dockerArchive(t, map[string]v1.Image{"example.com/app:1": app, "example.com/other:2": other}), 0o644); err != nil {
		t.Fatal(err)
	}
	cl := e.client(tkTplA)
	var events []client.BuildEvent
	tpl, err := cl.ImportTemplate(ctx, client.ImportTemplateRequest{Name: "app", Path: archive, Tag: "example.com/app:1"},
		func(ev client.BuildEvent) error { events = append(events, ev); return nil })
	if err != nil {
		t.Fatal(err)
	}
	id, _ := app.ConfigName()
	if tpl.Name != "app" || tpl.Shared || tpl.Layers != 1 || !strings.HasPrefix(tpl.Source, "docker-archive:example.com/app:1") ||
		!strings.Contains(tpl.Source, id.String()) || tpl.Config.Workdir != "/srv" || tpl.Config.User != "1000" ||
		strings.Join(tpl.Config.Env, " ") != "A=1 PATH=/usr/bin" {
		t.Errorf("imported template = %+v", tpl)
	}
	if len(events) == 0 || events[0].Type != client.BuildStep || events[0].Instruction != "IMPORT docker-archive example.com/app:1" {
		t.Errorf("events = %+v, want the import step first", events)
	}
	m, err := store.Get(template.StoreName(tenantA, "app"))
	if err != nil {
		t.Fatal(err)
	}
	dir, err := store.LayerDir(m.Layers[0])
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, "app/run"))
	if b, _ := os.ReadFile(filepath.Join(dir, "app/run")); err != nil || string(b) != "v1" || fi.Mode()&fs.ModeSetuid != 0 {
		t.Errorf("app/run in the layer: %q %v %v (set-id bits must be stripped)", b, fi, err)
	}
	if _, err := e.reg.Lookup(tenantA, "app"); err != nil {
		t.Errorf("the imported template is not offered to its tenant: %v", err)
	}
	if _, err := e.reg.Lookup(tenantB, "app"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant finds the import: %v", err)
	}
	evs := outcomes(e.audit.take())
	if len(evs) != 1 || evs[0].Action != ActionTemplateImport || evs[0].Outcome != "ok" || evs[0].Target != "app" ||
		evs[0].Details["source"] != "docker-archive" || evs[0].Details["tag"] != "example.com/app:1" {
		t.Errorf("audit records = %+v", evs)
	}
	e.noImportLeft()

	// An archive with two images needs a tag; a name in use needs replace.
	if _, err := cl.ImportTemplate(ctx, client.ImportTemplateRequest{Name: "two", Path: archive}, nil); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("two images without a tag: %v", err)
	}
	if _, err := cl.ImportTemplate(ctx, client.ImportTemplateRequest{Name: "app", Path: archive, Tag: "example.com/other:2"}, nil); !errors.Is(err, client.ErrConflict) {
		t.Errorf("name in use: %v", err)
	}
	if _, err := cl.ImportTemplate(ctx, client.ImportTemplateRequest{Name: "app", Path: archive, Tag: "example.com/other:2", Replace: true}, nil); err != nil {
		t.Errorf("replace: %v", err)
	}

	// An OCI layout, as a directory (the client tars it) and as a tar on
	// a reader; the tag picks the image.
	lay := layoutDir(t, map[string]v1.Image{"v1": app, "example.com/other:v2": other})
	tpl, err = cl.ImportTemplate(ctx, client.ImportTemplateRequest{Name: "lay", Path: lay, Tag: "v1"}, nil)
	digest, _ := app.Digest()
	if err != nil || tpl.Source != "oci-layout:v1@"+digest.String() || tpl.Layers != 1 {
		t.Fatalf("layout import: %+v %v", tpl, err)
	}
	if tpl.LayerList[0].Digest != m.Layers[0] {
		t.Errorf("the layout's layer %+v is not the archive's %s", tpl.LayerList[0], m.Layers[0])
	}
	tpl, err = e.client(tkOp).ImportTemplate(ctx, client.ImportTemplateRequest{Name: "lay2", Archive: bytes.NewReader(tarDir(t, lay)),
		Tag: "v2", Shared: true, AllowSetuid: true}, nil)
	if err != nil || !tpl.Shared {
		t.Fatalf("shared layout import from a reader: %+v %v", tpl, err)
	}
	list, err := e.client(tkAdminB).ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var sources []string
	for _, tp := range list.Templates {
		sources = append(sources, tp.Name+"="+tp.Source)
	}
	if got := strings.Join(sources, " "); !strings.Contains(got, "lay2=oci-layout:v2@") || strings.Contains(got, "app=") {
		t.Errorf("tenant B's list: %s", got)
	}
	e.noImportLeft()
}

// TestTemplateImportHostile: what an upload may not do, each refused
// with a clear 4xx before anything is stored, and nothing left behind.
func TestTemplateImportHostile(t *testing.T) {
	e, store := newImportEnv(t, func(c *registry.Config) { c.MaxImportBytes = 8 << 20 })
	img := testImage(t, map[string]string{"f": "x"})
	lay := layoutDir(t, map[string]v1.Image{"v1": img})
	archive := dockerArchive(t, map[string]v1.Image{"example.com/a:1": img})
	big := make([]byte, 9<<20)
	notImage := tarDir(t, t.TempDir(), &tar.Header{Name: "hello.txt", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644})
	withLink := tarDir(t, lay, &tar.Header{Name: "blobs/sha256/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/shadow", Mode: 0o777})
	escape := tarDir(t, lay, &tar.Header{Name: "../../evil", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644})
	// index.json over its cap: a layout whose index is 5 MiB of blanks.
	hugeIndex := filepath.Join(t.TempDir(), "huge")
	if err := os.CopyFS(hugeIndex, os.DirFS(lay)); err != nil {
		t.Fatal(err)
	}
	idx, _ := os.ReadFile(filepath.Join(hugeIndex, "index.json"))
	if err := os.WriteFile(filepath.Join(hugeIndex, "index.json"), append(idx, bytes.Repeat([]byte(" "), 5<<20)...), 0o644); err != nil {
		t.Fatal(err)
	}
	// A descriptor that lies about its blob's size.
	lying := filepath.Join(t.TempDir(), "lying")
	if err := os.CopyFS(lying, os.DirFS(lay)); err != nil {
		t.Fatal(err)
	}
	idx, _ = os.ReadFile(filepath.Join(lying, "index.json"))
	rawMF, _ := img.RawManifest()
	sizeRe := regexp.MustCompile(fmt.Sprintf(`"size":\s*%d\b`, len(rawMF)))
	if !sizeRe.Match(idx) {
		t.Fatalf("index.json has no manifest size %d: %s", len(rawMF), idx)
	}
	idx = sizeRe.ReplaceAll(idx, []byte(`"size": 3`))
	if err := os.WriteFile(filepath.Join(lying, "index.json"), idx, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, query, key, ct string
		body                 []byte
		status               int
		msg                  string
	}{
		{"wrong type", "a/import", tkTplA, "application/json", archive, 415, "application/x-tar"},
		{"no type", "a/import", tkTplA, "", archive, 415, "application/x-tar"},
		{"too large", "a/import", tkTplA, tarType, big, 413, "larger than the limit of 8388608"},
		{"not an image", "a/import", tkTplA, tarType, notImage, 400, "neither a docker save archive"},
		{"not a tar", "a/import", tkTplA, tarType, []byte("hello, this is not a tar stream at all, but it is long enough to be read as a header block? no"), 400, "not"},
		{"symlink in a layout", "a/import", tkTplA, tarType, withLink, 400, "only files and directories"},
		{"escaping name", "a/import", tkTplA, tarType, escape, 400, "without .."},
		{"huge index", "a/import", tkTplA, tarType, tarDir(t, hugeIndex), 400, "index.json is larger than"},
		{"lying descriptor", "a/import", tkTplA, tarType, tarDir(t, lying), 400, "its descriptor says 3"},
		{"bad tag", "a/import?tag=a%20b", tkTplA, tarType, archive, 400, "tag must be"},
		{"unknown param", "a/import?from=x", tkTplA, tarType, archive, 400, "from"},
		{"bad name", "Bad..Name/import", tkTplA, tarType, archive, 400, "malformed template name"},
		{"built-in name", "host/import", tkTplA, tarType, archive, 409, "built in"},
		{"shared by a tenant", "a/import?shared=true", tkTplA, tarType, archive, 403, "only the operator"},
		{"read-only key", "a/import", tkTplReadA, tarType, archive, 403, "templates:write"},
		{"no key", "a/import", "", tarType, archive, 401, ""},
	}
	for _, tt := range tests {
		status, b := e.importRaw(tt.key, tt.query, tt.ct, tt.body)
		if status != tt.status || !strings.Contains(string(b), tt.msg) {
			t.Errorf("%s: %d %s, want %d with %q", tt.name, status, b, tt.status, tt.msg)
		}
	}
	if l := store.List(); len(l) != 0 {
		t.Errorf("refused imports stored %v", l)
	}
	e.noImportLeft()
}

// TestTemplateImportNotServed: without an importer the route says so.
func TestTemplateImportNotServed(t *testing.T) {
	e := newTplEnv(t)
	status, b := e.importRaw(tkTplA, "a/import", tarType, []byte("x"))
	if status != 501 || !strings.Contains(string(b), "does not import image archives") {
		t.Errorf("%d %s", status, b)
	}
}

// TestTemplateImportPartialIndex: a layout whose index lists platforms it
// holds no blobs for (as Docker's own archives do) imports the platform
// it holds.
func TestTemplateImportPartialIndex(t *testing.T) {
	e, _ := newImportEnv(t)
	here := testImage(t, map[string]string{"here": "1"})
	absent := testImage(t, map[string]string{"absent": "1"})
	idx := mutate.AppendManifests(empty.Index,
		mutate.IndexAddendum{Add: here, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}}},
		mutate.IndexAddendum{Add: absent, Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: "linux", Architecture: "s390x-none"}}})
	dir := filepath.Join(t.TempDir(), "layout")
	if _, err := layout.Write(dir, empty.Index); err != nil {
		t.Fatal(err)
	}
	p, _ := layout.FromPath(dir)
	if err := p.AppendIndex(idx); err != nil {
		t.Fatal(err)
	}
	d, _ := absent.Digest()
	if err := os.Remove(filepath.Join(dir, "blobs", "sha256", d.Hex)); err != nil {
		t.Fatal(err)
	}
	tpl, err := e.client(tkTplA).ImportTemplate(context.Background(), client.ImportTemplateRequest{Name: "partial", Path: dir}, nil)
	if err != nil || tpl.Layers != 1 {
		t.Fatalf("import: %+v %v", tpl, err)
	}
	e.noImportLeft()
}
