package registry

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// nopImporter is an Importer for tests that only receive images.
type nopImporter struct{}

func (nopImporter) Import(context.Context, ImportRequest, func(Event)) (layers.Manifest, error) {
	return layers.Manifest{}, fmt.Errorf("no imports in this test: %w", errdefs.ErrNotSupported)
}

// layoutTar is a minimal OCI layout (oci-layout, an empty index.json,
// blobs/sha256/) as a tar, then extra.
func layoutTar(t *testing.T, extra ...testutil.Entry) []byte {
	t.Helper()
	return testutil.Tar(t, append([]testutil.Entry{
		{Name: "oci-layout", Body: `{"imageLayoutVersion":"1.0.0"}`, Mode: 0o755, UID: 1000},
		{Name: "index.json", Body: `{"schemaVersion":2,"manifests":[]}`, Mode: 0o4644},
		{Name: "blobs/", Type: tar.TypeDir, Mode: 0o777},
		{Name: "blobs/sha256/", Type: tar.TypeDir},
	}, extra...)...)
}

// TestReceiveImageLayout: an uploaded OCI layout is unpacked by the layer
// extractor's FilesOnly tree policy: directories 0700 and files 0600, the
// archive removed.
func TestReceiveImageLayout(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Importer = nopImporter{} })
	job, err := e.svc.Reserve("t1", "lay", false)
	if err != nil {
		t.Fatal(err)
	}
	defer job.Close()
	body := layoutTar(t, testutil.Entry{Name: "blobs/sha256/" + strings.Repeat("a", 64), Body: "blob", Mode: 0o777})
	img, err := job.ReceiveImage(context.Background(), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if img.Format != ImportOCILayout || img.Size != int64(len(body)) || job.image.Path != filepath.Join(job.dir, importLayoutDir) {
		t.Fatalf("image %+v at %s", img, job.image.Path)
	}
	if _, err := os.Lstat(filepath.Join(job.dir, importArchiveName)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the archive is left: %v", err)
	}
	want := map[string]fs.FileMode{
		".": fs.ModeDir | 0o700, "oci-layout": 0o600, "index.json": 0o600, "blobs": fs.ModeDir | 0o700,
		"blobs/sha256": fs.ModeDir | 0o700, "blobs/sha256/" + strings.Repeat("a", 64): 0o600,
	}
	got := map[string]fs.FileMode{}
	err = filepath.WalkDir(job.image.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(job.image.Path, p)
		got[rel] = fi.Mode()
		return nil
	})
	if err != nil || len(got) != len(want) {
		t.Fatalf("layout %v %v, want %v", got, err, want)
	}
	for name, mode := range want {
		if got[name] != mode {
			t.Errorf("%s: mode %v, want %v", name, got[name], mode)
		}
	}
}

// TestReceiveImageLayoutHostile: what an uploaded layout may not hold,
// each refused with its class and a message free of host paths, and
// nothing left once the job closes. (Names with .. or absolute names are
// refused earlier, by scanArchive: see internal/api's
// TestTemplateImportHostile.)
func TestReceiveImageLayoutHostile(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Importer = nopImporter{}; c.MaxImportBytes = 64 << 10 })
	blob := "blobs/sha256/" + strings.Repeat("b", 64)
	tests := []struct {
		name  string
		body  []byte
		class error
		msg   string
	}{
		{"symlink", layoutTar(t, testutil.Entry{Name: blob, Type: tar.TypeSymlink, Link: "/etc/shadow"}), errdefs.ErrInvalidArgument,
			`image layout entry "` + blob + `": only files and directories are allowed (type "2")`},
		{"relative symlink", layoutTar(t, testutil.Entry{Name: blob, Type: tar.TypeSymlink, Link: "../../index.json"}), errdefs.ErrInvalidArgument,
			"only files and directories are allowed"},
		{"hard link", layoutTar(t, testutil.Entry{Name: blob, Type: tar.TypeLink, Link: "index.json"}), errdefs.ErrInvalidArgument,
			`image layout entry "` + blob + `": only files and directories are allowed (type "1")`},
		{"fifo", layoutTar(t, testutil.Entry{Name: "blobs/p", Type: tar.TypeFifo}), errdefs.ErrInvalidArgument, "only files and directories are allowed"},
		{"index twice", layoutTar(t, testutil.Entry{Name: "./index.json", Body: `{"manifests":[{"mediaType":"x"}]}`}), errdefs.ErrInvalidArgument,
			`image layout entry "index.json" appears twice`},
		{"dir over file", layoutTar(t, testutil.Entry{Name: "oci-layout/", Type: tar.TypeDir}), errdefs.ErrInvalidArgument, `image layout entry "oci-layout" appears twice`},
		{"file over dir", layoutTar(t, testutil.Entry{Name: "blobs", Body: "x"}), errdefs.ErrInvalidArgument, `image layout entry "blobs" appears twice`},
		{"file under file", layoutTar(t, testutil.Entry{Name: "index.json/x", Body: "x"}), errdefs.ErrInvalidArgument, "not a directory"},
		{"file as root", layoutTar(t, testutil.Entry{Name: ".", Body: "x"}), errdefs.ErrInvalidArgument, "a file cannot be the image layout's root"},
		{"over the cap", layoutTar(t, testutil.Entry{Name: blob, Body: strings.Repeat("x", 70<<10)}), errdefs.ErrResourceExhausted,
			"the files of the image layout are larger than the limit of 65536 bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			job, err := e.svc.Reserve("", "lay", false)
			if err != nil {
				t.Fatal(err)
			}
			_, err = job.ReceiveImage(context.Background(), bytes.NewReader(tt.body))
			job.Close()
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v with %q", err, tt.class, tt.msg)
			}
			var le *LimitError
			if (tt.class == errdefs.ErrResourceExhausted) != errors.As(err, &le) {
				t.Errorf("err = %#v: a *LimitError only for a cap", err)
			}
			if strings.Contains(err.Error(), e.ctxDir) {
				t.Errorf("the message shows a host path: %v", err)
			}
			if ents, _ := os.ReadDir(e.ctxDir); len(ents) != 0 {
				t.Errorf("left %v", ents)
			}
		})
	}
}
