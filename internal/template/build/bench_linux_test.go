package build

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// benchTemplate is a built template: the Debian base, a RUN layer and
// an ENV.
const benchTemplate = "bench"

func buildBenchTemplate(t testing.TB, e *testEnv) layers.Manifest {
	t.Helper()
	af := "FROM template:base\nRUN head -c 1048576 /dev/urandom > /opt/blob && echo bench > /opt/bench\nENV BENCH=1\n"
	m, _ := e.mustBuild(t, Request{Name: benchTemplate, Airfile: []byte(af)})
	return m
}

// BenchmarkCreateFromStoredTemplate measures a new sandbox from nothing
// to the result of its first command (as the runtime's
// BenchmarkColdCreateToFirstExec), resolving the template each time as
// the sandbox manager does, for a built template and for the host
// template in the same run:
//
//	go test ./internal/template/build -run '^$' -bench CreateFrom -benchtime 100x
func BenchmarkCreateFromStoredTemplate(b *testing.B) {
	requireSandboxes(b)
	e := withBase(b)
	buildBenchTemplate(b, e)
	for _, name := range []string{benchTemplate, template.HostName} {
		b.Run(name, func(b *testing.B) {
			src, err := e.reg.Get(name)
			if err != nil {
				b.Fatal(err)
			}
			coldCreate(b, e.rt.Runtime, src)
		})
	}
}

func coldCreate(b *testing.B, rt runtime.Runtime, src template.Source) {
	ctx := context.Background()
	var insts []runtime.Instance
	destroyAll := func() {
		for _, i := range insts {
			_ = i.Destroy(ctx)
		}
		insts = insts[:0]
	}
	defer destroyAll()
	for b.Loop() {
		rootfs, err := src.Resolve(ctx)
		if err != nil {
			b.Fatal(err)
		}
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("bench"), Rootfs: rootfs})
		if err != nil {
			b.Fatal(err)
		}
		c := agentclient.New(inst.Dial)
		res, err := c.Exec(ctx, agentclient.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || res.Status != agentclient.StatusSuccess {
			b.Fatalf("exec: %v %+v", err, res)
		}
		c.Close()
		b.StopTimer()
		insts = append(insts, inst)
		if len(insts) >= 20 {
			destroyAll()
		}
		b.StartTimer()
	}
}

// TestSandboxesShareLayers starts 20 sandboxes of one built template and
// measures the template store's disk use before and after: sandboxes
// mount the stored layers and add nothing to them (their writable layers
// are in memory, capped by the disk limit).
func TestSandboxesShareLayers(t *testing.T) {
	requireSandboxes(t)
	e := withBase(t)
	m := buildBenchTemplate(t, e)
	const n = 20
	storeBefore := diskUsage(t, e.store.Root())
	stateBefore := diskUsage(t, e.stateDir)
	start := time.Now()
	var sbs []*runtimetest.Sandbox
	for range n {
		sbs = append(sbs, e.sandbox(t, benchTemplate))
	}
	created := time.Since(start)
	for i, sb := range sbs {
		// Every sandbox sees the template and writes a little of its own.
		out := sh(t, sb, "", "cat /opt/bench; echo $BENCH; head -c 65536 /dev/urandom > /tmp/mine; stat -c %s /opt/blob")
		if out != "bench\n1\n1048576\n" {
			t.Fatalf("sandbox %d sees %q", i, out)
		}
	}
	storeAfter := diskUsage(t, e.store.Root())
	stateAfter := diskUsage(t, e.stateDir)
	var layerBytes int64
	for _, d := range m.Layers {
		info, err := e.store.Layer(d)
		if err != nil {
			t.Fatal(err)
		}
		layerBytes += info.Size
	}
	t.Logf("template %q: %d layers, %.1f MiB of files; store on disk %.1f MiB", benchTemplate, len(m.Layers), mib(layerBytes), mib(storeBefore))
	t.Logf("%d sandboxes created in %s: store %+d bytes, runtime state %+d bytes (%.1f KiB per sandbox)",
		n, created.Round(time.Millisecond), storeAfter-storeBefore, stateAfter-stateBefore, float64(stateAfter-stateBefore)/n/1024)
	if d := storeAfter - storeBefore; d != 0 {
		t.Errorf("the store grew by %d bytes with %d sandboxes, want 0", d, n)
	}
	// Nothing of a sandbox is a copy of the template: its state is small.
	if per := (stateAfter - stateBefore) / n; per > 1<<20 {
		t.Errorf("each sandbox uses %d bytes of runtime state on disk", per)
	}
}

func mib(n int64) float64 { return float64(n) / (1 << 20) }

// The python-data recipe builds from Debian and a sandbox from it runs
// pandas and saves a Matplotlib PNG. It downloads about 150 MB of
// packages and takes about a minute and a half on a 2-core machine;
// -short or AIRLOCK_TEST_RECIPES=0 skips it.
func TestRecipePythonData(t *testing.T) {
	requireSandboxes(t)
	if testing.Short() || os.Getenv("AIRLOCK_TEST_RECIPES") == "0" {
		t.Skip("downloads and installs Debian's Python stack (skipped with -short or AIRLOCK_TEST_RECIPES=0)")
	}
	e := setup(t)
	if skip := debianSkip(); skip != "" {
		t.Skip(skip)
	}
	af, err := os.ReadFile(filepath.Join("..", "..", "..", "recipes", "python-data.Airfile"))
	if err != nil {
		t.Fatal(err)
	}
	// The builder the daemon uses: default Debian variant, in a store of
	// its own.
	dir := filepath.Join(e.dir, "recipe")
	store, err := layers.Open(filepath.Join(dir, "store"), layers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := template.NewRegistry()
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(Config{Store: store, Runtime: e.rt, Templates: reg, WorkDir: filepath.Join(dir, "work")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	m, err := b.Build(ctx, Request{Name: "python-data", Airfile: af}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("python-data built in %s: %d layers, %.0f MiB", time.Since(start).Round(time.Second), len(m.Layers), mib(m.Size))
	src, err := reg.Get("python-data")
	if err != nil {
		t.Fatal(err)
	}
	rootfs, err := src.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sb := runtimetest.Create(t, ctx, e.rt.Runtime, rootfs, runtime.Spec{ID: runtimetest.NewID("py")})
	script := `
import pandas as pd, matplotlib.pyplot as plt
df = pd.DataFrame({"x": range(10), "y": [v * v for v in range(10)]})
print(int(df["y"].sum()))
df.plot(x="x", y="y")
plt.savefig("/tmp/chart.png")
`
	res, out, errOut := sb.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"python3", "-c", script}, Timeout: 2 * time.Minute})
	if res.Status != agentclient.StatusSuccess || out != "285\n" {
		t.Fatalf("python: %+v %q %s", res, out, errOut)
	}
	var png bytes.Buffer
	if _, err := sb.Client.ReadFile(ctx, "/tmp/chart.png", &png); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(png.String(), "\x89PNG\r\n\x1a\n") || png.Len() < 1000 {
		t.Errorf("chart.png is not a PNG (%d bytes: %q)", png.Len(), png.String()[:min(png.Len(), 16)])
	}
}
