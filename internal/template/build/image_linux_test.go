package build

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template/oci"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// testImage is a one-layer image without a shell: /app and /data owned
// by the sandbox user, /etc/os-release.
func testImage(t *testing.T) v1.Image {
	t.Helper()
	b := testutil.Tar(t,
		testutil.Entry{Name: "app/", Type: tar.TypeDir, UID: account.SandboxUID, GID: account.SandboxGID},
		testutil.Entry{Name: "data/", Type: tar.TypeDir, UID: account.SandboxUID, GID: account.SandboxGID},
		testutil.Entry{Name: "etc/", Type: tar.TypeDir},
		testutil.Entry{Name: "etc/os-release", Body: "image"},
	)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	cf.Config = v1.Config{Env: []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"}, WorkingDir: "app", User: "1000:1000"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

func TestBuildFromImage(t *testing.T) {
	requireSandboxes(t)
	e := setup(t)
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img := testImage(t)
	ref, err := name.ParseReference(host+"/test/img:v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
	diffIDs, _ := img.ConfigFile()
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "c.txt"), []byte("copied"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The image's user (1000:1000) runs the step, in its workdir (/app).
	af := fmt.Sprintf("FROM %s/test/img:v1\nCOPY c.txt /data/\nENV EXTRA=1\nRUN [%q, %q, \"/data/out\", \"from-run\"]\n",
		host, "/"+runtimeDir+"/bin/airlock", writeCommand)
	req := Request{Name: "image-test", Airfile: []byte(af), ContextDir: ctxDir, Pull: oci.Options{Insecure: true},
		Limits: runtime.Limits{MemoryBytes: 300 << 20}}
	m, events := e.mustBuild(t, req)
	if got, want := eventTypes(events), []string{"1:step", "2:step", "3:step", "4:step", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	progress := 0
	for _, ev := range events {
		if ev.Type == EventProgress && ev.Step == 1 && ev.Layers == 1 {
			progress++
		}
	}
	if progress == 0 {
		t.Error("no pull progress events")
	}
	if len(m.Layers) != 3 || m.Layers[0] != diffIDs.RootFS.DiffIDs[0].String() {
		t.Fatalf("layers %v, want the image's %v and two more", m.Layers, diffIDs.RootFS.DiffIDs)
	}
	digest, _ := img.Digest()
	if want := "airfile (3 steps) on image " + host + "/test/img:v1@" + digest.String(); m.Source != want {
		t.Errorf("source %q, want %q", m.Source, want)
	}
	if m.Config.Workdir != "/app" || m.Config.User != "1000:1000" || !slices.Contains(m.Config.Env, "LANG=C.UTF-8") || !slices.Contains(m.Config.Env, "EXTRA=1") {
		t.Errorf("config %+v lost the image's defaults or the ENV", m.Config)
	}
	dir, err := e.store.LayerDir(m.Layers[2])
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "data/out")
	b, err := os.ReadFile(out)
	fi, _ := os.Lstat(out)
	if err != nil || string(b) != "from-run" || fi.Sys().(*syscall.Stat_t).Uid != account.SandboxUID {
		t.Errorf("RUN layer's data/out: %q %v %+v", b, err, fi)
	}
	copied, _ := e.store.LayerDir(m.Layers[1])
	if b, err := os.ReadFile(filepath.Join(copied, "data/c.txt")); err != nil || string(b) != "copied" {
		t.Errorf("COPY layer's data/c.txt: %q %v", b, err)
	}

	if m.Config.Limits != (runtime.Limits{MemoryBytes: 300 << 20}) {
		t.Errorf("limits %+v, want the request's", m.Config.Limits)
	}
	// A template built on it keeps its limits under its own.
	derived, _ := e.mustBuild(t, Request{Name: "image-derived", Airfile: []byte("FROM template:image-test\n"), Limits: runtime.Limits{CPUs: 0.5}})
	if derived.Config.Limits != (runtime.Limits{CPUs: 0.5, MemoryBytes: 300 << 20}) {
		t.Errorf("derived limits %+v, want the base's memory and its own CPUs", derived.Config.Limits)
	}
	if _, _, err := e.build(t, Request{Name: "image-bad", Airfile: []byte("FROM template:image-test\n"), Limits: runtime.Limits{MemoryBytes: -1}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("negative limits: %v", err)
	}

	// A sandbox of the result starts as the image's user in its workdir:
	// a relative path lands in /app, owned by 1000.
	sb := e.sandbox(t, "image-test")
	res, _, errOut := sb.Run(t, context.Background(), agentclient.ExecRequest{
		Argv: []string{"/" + runtimeDir + "/bin/airlock", writeCommand, "rel", "here"}, Timeout: 30 * time.Second})
	if res.ExitCode != 0 {
		t.Fatalf("write in the default cwd: %+v %q", res, errOut)
	}
	if st, err := sb.Client.Stat(context.Background(), "/app/rel"); err != nil || st.UID != account.SandboxUID || st.GID != account.SandboxGID {
		t.Errorf("file written in the default cwd: %+v %v; want /app/rel owned by 1000:1000", st, err)
	}

	// A second build downloads nothing and runs nothing.
	creates := e.rt.creates.Load()
	again, events := e.mustBuild(t, req)
	if got, want := eventTypes(events), []string{"1:cached", "2:cached", "3:cached", "4:cached", "4:done"}; !slices.Equal(got, want) {
		t.Errorf("second build: events %v, want %v", got, want)
	}
	if !slices.Equal(again.Layers, m.Layers) || e.rt.creates.Load() != creates {
		t.Errorf("second build: layers %v (want %v), %d sandboxes", again.Layers, m.Layers, e.rt.creates.Load()-creates)
	}
	e.noBuildSandboxes(t)
}
