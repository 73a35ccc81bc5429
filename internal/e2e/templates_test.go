package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log"
	"maps"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// shellFiles returns the host's /bin/sh with the shared libraries it
// loads (from ldd), as image paths (no leading slash) -> content: enough
// of a root filesystem to run shell commands in a sandbox.
func shellFiles(t *testing.T) map[string][]byte {
	t.Helper()
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skipf("no /bin/sh on the host: %v", err)
	}
	files := map[string][]byte{}
	add := func(imagePath, hostPath string) {
		b, err := os.ReadFile(hostPath)
		if err != nil {
			t.Fatalf("read %s: %v", hostPath, err)
		}
		files[strings.TrimPrefix(imagePath, "/")] = b
	}
	add("/bin/sh", sh)
	out, err := exec.Command("ldd", sh).Output()
	if err != nil {
		t.Skipf("ldd %s: %v (a dynamic /bin/sh and ldd are needed to build the test image)", sh, err)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			add(f[2], f[2]) // libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (...)
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			add(f[0], f[0]) // the dynamic loader, at the path the binary names
		}
	}
	return files
}

// layerTar makes an uncompressed layer tar of files (parent directories
// added), each with mode 0755.
func layerTar(t *testing.T, files map[string][]byte) []byte {
	t.Helper()
	dirs := map[string]bool{}
	for p := range files {
		for d := filepath.Dir(p); d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var entries []testutil.Entry
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		entries = append(entries, testutil.Entry{Name: d + "/", Type: tar.TypeDir})
	}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		entries = append(entries, testutil.Entry{Name: p, Body: string(files[p]), Mode: 0o755})
	}
	return testutil.Tar(t, entries...)
}

// pushTestImage pushes an image of the given layer tars, with env, to the
// registry at host as repo:tag.
func pushTestImage(t *testing.T, host, repo string, env []string, layerTars ...[]byte) {
	t.Helper()
	img := empty.Image
	for _, b := range layerTars {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil })
		if err != nil {
			t.Fatal(err)
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			t.Fatal(err)
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", goruntime.GOARCH
	cf.Config = v1.Config{Env: env, WorkingDir: "/work"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	ref, err := name.ParseReference(host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img); err != nil {
		t.Fatal(err)
	}
}

// TestTemplates imports images from a registry on loopback through the
// API (and the CLI), runs a sandbox from one, and removes the templates:
// refused while a sandbox uses one, then freeing the layers nothing else
// uses.
func TestTemplates(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 5*time.Minute)

	regSrv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer regSrv.Close()
	host := strings.TrimPrefix(regSrv.URL, "http://")
	base := layerTar(t, shellFiles(t))
	pushTestImage(t, host, "e2e/shell:1", []string{"PATH=/bin", "E2E_IMAGE_VAR=from the image"},
		base, layerTar(t, map[string][]byte{"etc/marker": []byte("marker one\n"), "work/.keep": nil}))
	pushTestImage(t, host, "e2e/shell:2", []string{"PATH=/bin"},
		base, layerTar(t, map[string][]byte{"etc/marker": []byte("marker two\n"), "work/.keep": nil}))

	// Import the first image with the CLI, as a person would.
	cliEnv := append(daemonEnv(), "AIRLOCK_URL="+d.URL, "AIRLOCK_API_KEY="+d.Key)
	cmd := exec.CommandContext(ctx, binPath, "template", "build", "e2e-one", "--from", host+"/e2e/shell:1", "--insecure", "--json", "--memory", "300")
	cmd.Env = cliEnv
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("airlock template build: %v\n%s", err, stderr.String())
	}
	var one client.TemplateDetail
	if err := json.Unmarshal(out, &one); err != nil {
		t.Fatalf("template build --json: %v: %s", err, out)
	}
	if one.Name != "e2e-one" || one.Layers != 2 || one.Config.Workdir != "/work" || one.Config.Limits == nil || one.Config.Limits.MemoryMB != 300 || !strings.Contains(strings.Join(one.Config.Env, " "), "E2E_IMAGE_VAR=from the image") {
		t.Errorf("built %+v", one)
	}
	if !strings.Contains(stderr.String(), "step 1/1:") {
		t.Errorf("the CLI showed no progress: %q", stderr.String())
	}
	t.Logf("template build (CLI) progress:\n%s", stderr.String())

	// The second through the Go client: it shares the base layer.
	var events []client.BuildEvent
	two, err := d.C.BuildTemplate(ctx, client.BuildTemplateRequest{Name: "e2e-two", From: host + "/e2e/shell:2", Insecure: true},
		func(ev client.BuildEvent) error { events = append(events, ev); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if len(events) == 0 || events[0].Type != client.BuildStep {
		t.Errorf("events %+v", events)
	}
	if two.SharedBytes == 0 || !two.LayerList[0].Shared || two.LayerList[0].Digest != one.LayerList[0].Digest {
		t.Errorf("the base layer is not shared: %+v", two)
	}
	list, err := d.C.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Templates) != 3 || list.Usage.Layers != 3 || list.Usage.SharedLayers != 1 {
		t.Errorf("list %+v", list)
	}
	usage := list.Usage

	// A sandbox from the image sees its files and environment, and runs
	// commands in its working directory.
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "e2e-one", Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatalf("create from the imported template: %v", err)
	}
	track(sb.ID)
	if sb.Limits.MemoryMB != 300 {
		t.Errorf("sandbox limits %+v, want the template's 300 MB memory", sb.Limits)
	}
	res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: `echo "$E2E_IMAGE_VAR"; read l < /etc/marker; echo "$l"; pwd`})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != client.StatusSuccess || string(res.Stdout) != "from the image\nmarker one\n/work\n" {
		t.Errorf("exec in the imported template: %+v stdout %q stderr %q", res, res.Stdout, res.Stderr)
	}

	// In use: refused, by the CLI and the client.
	cmd = exec.CommandContext(ctx, binPath, "template", "rm", "e2e-one")
	cmd.Env = cliEnv
	msg, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(msg), "in use") {
		t.Errorf("template rm while in use: %v: %s", err, msg)
	}
	if _, err := d.C.DeleteTemplate(ctx, "e2e-one"); !errors.Is(err, client.ErrConflict) {
		t.Errorf("DeleteTemplate while in use: %v", err)
	}
	if _, err := d.C.DeleteTemplate(ctx, "host"); !errors.Is(err, client.ErrConflict) {
		t.Errorf("DeleteTemplate(host): %v", err)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	// Free now: only the layer nobody else uses goes.
	freed, err := d.C.DeleteTemplate(ctx, "e2e-one")
	if err != nil {
		t.Fatal(err)
	}
	if freed.Layers != 1 {
		t.Errorf("freed %+v, want the one unshared layer", freed)
	}
	list, err = d.C.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if list.Usage.Layers != 2 || list.Usage.Bytes != usage.Bytes-freed.Bytes || list.Usage.SharedLayers != 0 {
		t.Errorf("usage after removing one: %+v (before %+v, freed %+v)", list.Usage, usage, freed)
	}
	if _, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "e2e-one"}); err == nil {
		t.Error("a sandbox was created from a removed template")
	}
	cmd = exec.CommandContext(ctx, binPath, "template", "rm", "e2e-two")
	cmd.Env = cliEnv
	if msg, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(msg), "e2e-two\tfreed 2 layers") {
		t.Errorf("template rm e2e-two: %v: %s", err, msg)
	}
	list, err = d.C.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Templates) != 1 || list.Usage.Layers != 0 || list.Usage.Bytes != 0 {
		t.Errorf("after removing both: %+v", list)
	}
	layerDirs, _ := filepath.Glob(filepath.Join(e.dir, "templates", "store", "layers", "sha256", "*"))
	if len(layerDirs) != 0 {
		t.Errorf("layers left on disk: %v", layerDirs)
	}

	// A build from an Airfile and a build context, through the CLI: the
	// context is uploaded, COPY reads it, RUN runs in a sandbox of the
	// layers below.
	ctxDir := t.TempDir()
	airfileText := "FROM " + host + "/e2e/shell:2\nCOPY app /app\nRUN read l < /app/hello.txt; echo \"$l, built\" > /app/out.txt\nENV E2E_BUILT=yes\n"
	for p, body := range map[string]string{"Airfile": airfileText, "app/hello.txt": "hello from the context\n"} {
		if err := os.MkdirAll(filepath.Join(ctxDir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ctxDir, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd = exec.CommandContext(ctx, binPath, "template", "build", "e2e-ctx", "-f", filepath.Join(ctxDir, "Airfile"), "--insecure")
	cmd.Env = cliEnv
	if msg, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(msg), "step 3/4: RUN") {
		t.Fatalf("template build -f: %v: %s", err, msg)
	} else {
		t.Logf("template build -f:\n%s", msg)
	}
	sb, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "e2e-ctx", Timeout: 3 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	res, err = d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: `read l < /app/out.txt; echo "$l $E2E_BUILT"`})
	if err != nil || string(res.Stdout) != "hello from the context, built yes\n" {
		t.Errorf("exec in the built template: %v %+v stdout %q stderr %q", err, res, res.Stdout, res.Stderr)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.DeleteTemplate(ctx, "e2e-ctx"); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(filepath.Join(e.dir, "templates", "contexts")); len(ents) != 0 {
		t.Errorf("build contexts left behind: %v", ents)
	}

	// The audit log has both builds and removals, with layer digests.
	recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "template.build"})
	if err != nil {
		t.Fatal(err)
	}
	oks := 0
	for _, r := range recs {
		if r.Outcome == "ok" && strings.Contains(string(r.Details), one.LayerList[0].Digest) {
			oks++
		}
	}
	if oks != 3 {
		t.Errorf("audit: %d successful builds with the base layer, want 3: %+v", oks, recs)
	}
}
