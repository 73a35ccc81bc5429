package oci

import (
	"archive/tar"
	"bytes"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// layerOf turns a tar into a gzip-compressed image layer.
func layerOf(t testing.TB, tarBytes []byte) v1.Layer {
	t.Helper()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(tarBytes)), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testConfig is the config every test image carries.
var testConfig = v1.Config{
	Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"},
	WorkingDir: "app", // relative on purpose: imported as /app
	User:       "1000:1000",
	Cmd:        []string{"python3"},
	Entrypoint: []string{"/bin/sh", "-c"},
}

// makeImage builds an image from layer tars, lowest first.
func makeImage(t testing.TB, arch string, tars ...[]byte) v1.Image {
	t.Helper()
	img := empty.Image
	for _, b := range tars {
		var err error
		img, err = mutate.AppendLayers(img, layerOf(t, b))
		if err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", arch
	cf.Config = testConfig
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// Layers of the multi-layer test image: the second and third hide
// entries of the layers below with whiteouts and an opaque directory.
func baseLayers(t testing.TB) [][]byte {
	l1 := testutil.Tar(t,
		testutil.Entry{Name: "etc/", Type: tar.TypeDir},
		testutil.Entry{Name: "etc/os-release", Body: "base"},
		testutil.Entry{Name: "bin/", Type: tar.TypeDir},
		testutil.Entry{Name: "bin/sh", Body: "#!sh", Mode: 0o755},
		testutil.Entry{Name: "data/", Type: tar.TypeDir},
		testutil.Entry{Name: "data/keep", Body: "keep"},
		testutil.Entry{Name: "data/remove-me", Body: "x"},
		testutil.Entry{Name: "opq/", Type: tar.TypeDir},
		testutil.Entry{Name: "opq/old", Body: "old"},
		testutil.Entry{Name: "opq/sub/", Type: tar.TypeDir},
		testutil.Entry{Name: "opq/sub/deep", Body: "deep"},
		testutil.Entry{Name: "lib", Type: tar.TypeSymlink, Link: "usr/lib"},
	)
	l2 := testutil.Tar(t,
		testutil.Entry{Name: "etc/", Type: tar.TypeDir},
		testutil.Entry{Name: "etc/os-release", Body: "v2"},
		testutil.Entry{Name: "data/", Type: tar.TypeDir},
		testutil.Entry{Name: "data/.wh.remove-me"},
		testutil.Entry{Name: "opq/", Type: tar.TypeDir},
		testutil.Entry{Name: "opq/.wh..wh..opq"},
		testutil.Entry{Name: "opq/new", Body: "new"},
		testutil.Entry{Name: "l2file", Body: "from layer 2"},
	)
	l3 := testutil.Tar(t,
		testutil.Entry{Name: ".wh.l2file"},
		testutil.Entry{Name: ".wh.lib"},
		testutil.Entry{Name: "data/", Type: tar.TypeDir},
		testutil.Entry{Name: "data/added", Body: "added"},
	)
	return [][]byte{l1, l2, l3}
}

// wantView is the merged view of baseLayers: path -> "dir", "file:<body>"
// or "link:<target>".
var wantView = map[string]string{
	"etc":            "dir",
	"etc/os-release": "file:v2",
	"bin":            "dir",
	"bin/sh":         "file:#!sh",
	"data":           "dir",
	"data/keep":      "file:keep",
	"data/added":     "file:added",
	"opq":            "dir",
	"opq/new":        "file:new",
}

// testRegistry is an in-process registry on loopback that counts blob
// downloads.
type testRegistry struct {
	srv  *httptest.Server
	host string
	mu   sync.Mutex
	gets map[string]int // blob digest -> GET count
}

// newRegistry serves a fresh registry; wrap, if set, wraps its handler
// (for authentication). push is an unwrapped server sharing its storage.
func newRegistry(t testing.TB, wrap func(http.Handler) http.Handler) (reg *testRegistry, push string) {
	t.Helper()
	h := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	reg = &testRegistry{gets: map[string]int{}}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if i := strings.Index(r.URL.Path, "/blobs/"); i >= 0 {
				reg.mu.Lock()
				reg.gets[r.URL.Path[i+len("/blobs/"):]]++
				reg.mu.Unlock()
			}
		}
		h.ServeHTTP(w, r)
	})
	var served http.Handler = counted
	if wrap != nil {
		served = wrap(counted)
	}
	reg.srv = httptest.NewServer(served)
	t.Cleanup(reg.srv.Close)
	reg.host = strings.TrimPrefix(reg.srv.URL, "http://")
	pushSrv := httptest.NewServer(h)
	t.Cleanup(pushSrv.Close)
	return reg, strings.TrimPrefix(pushSrv.URL, "http://")
}

// blobGets counts GETs of the given layers' blobs.
func (r *testRegistry) blobGets(t testing.TB, img v1.Image) int {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, l := range ls {
		d, _ := l.Digest()
		n += r.gets[d.String()]
	}
	return n
}

func pushImage(t testing.TB, host, repo string, img v1.Image) {
	t.Helper()
	ref, err := name.ParseReference(host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
}

func pushIndex(t testing.TB, host, repo string, idx v1.ImageIndex) {
	t.Helper()
	ref, err := name.ParseReference(host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.WriteIndex(ref, idx); err != nil {
		t.Fatal(err)
	}
}

func openStore(t testing.TB) *layers.Store {
	t.Helper()
	s, err := layers.Open(filepath.Join(t.TempDir(), "store"), layers.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "needs root: layers keep file owners and create whiteout devices")
}

// readFile reads rel in the template's layer holding it, top first.
func layerFile(t testing.TB, s *layers.Store, m layers.Manifest, rel string) (string, bool) {
	t.Helper()
	for i := len(m.Layers) - 1; i >= 0; i-- {
		dir, err := s.LayerDir(m.Layers[i])
		if err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, rel)); err == nil {
			return string(b), true
		}
	}
	return "", false
}
