package linux

import (
	"bytes"
	"context"
	"crypto/rand"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// The benchmarks below are the figures in docs/BENCHMARKS.md. Run them
// side by side in one run:
//
//	go test ./internal/runtime/linux -run '^$' -bench . -benchtime 200x
//
// BenchmarkBwrapOneShot is the reference: bubblewrap (Debian package)
// creating the same namespaces around /bin/true.

func BenchmarkBwrapOneShot(b *testing.B) {
	bwrap, err := exec.LookPath("bwrap")
	if err != nil {
		b.Skip("bwrap not installed (apt-get install bubblewrap)")
	}
	args := []string{"--unshare-all", "--die-with-parent", "--ro-bind", "/usr", "/usr",
		"--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
		"--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "/bin/true"}
	for b.Loop() {
		if out, err := exec.Command(bwrap, args...).CombinedOutput(); err != nil {
			b.Fatalf("bwrap: %v: %s", err, out)
		}
	}
}

// BenchmarkColdCreateToFirstExec is a new sandbox from nothing to the
// result of its first command, destroy excluded.
func BenchmarkColdCreateToFirstExec(b *testing.B) {
	requireRoot(b)
	ctx := context.Background()
	rt := newRuntime(b)
	rootfs := hostRootfsFor(b)
	var insts []runtime.Instance
	defer func() {
		for _, i := range insts {
			_ = i.Destroy(ctx)
		}
	}()
	for b.Loop() {
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
			for _, i := range insts {
				_ = i.Destroy(ctx)
			}
			insts = insts[:0]
		}
		b.StartTimer()
	}
}

func BenchmarkDestroy(b *testing.B) {
	requireRoot(b)
	ctx := context.Background()
	rt := newRuntime(b)
	rootfs := hostRootfsFor(b)
	for b.Loop() {
		b.StopTimer()
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("bench"), Rootfs: rootfs})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if err := inst.Destroy(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func benchSandbox(b *testing.B) *runtimetest.Sandbox {
	requireRoot(b)
	return runtimetest.Create(b, context.Background(), newRuntime(b), hostRootfsFor(b), runtime.Spec{})
}

// BenchmarkExecTrue is the round trip of `true` in a running sandbox.
func BenchmarkExecTrue(b *testing.B) {
	sb := benchSandbox(b)
	ctx := context.Background()
	for b.Loop() {
		res, err := sb.Client.Exec(ctx, agentclient.ExecRequest{Argv: []string{"/bin/true"}})
		if err != nil || res.Status != agentclient.StatusSuccess {
			b.Fatalf("exec: %v %+v", err, res)
		}
	}
}

// BenchmarkFileWriteRead1MiB writes 1 MiB into a sandbox and reads it back.
func BenchmarkFileWriteRead1MiB(b *testing.B) {
	sb := benchSandbox(b)
	ctx := context.Background()
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	var buf bytes.Buffer
	b.SetBytes(2 << 20)
	for b.Loop() {
		if _, err := sb.Client.WriteFile(ctx, "/tmp/bench.bin", bytes.NewReader(data), agentclient.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		buf.Reset()
		if _, err := sb.Client.ReadFile(ctx, "/tmp/bench.bin", &buf); err != nil || buf.Len() != len(data) {
			b.Fatalf("read: %v %d", err, buf.Len())
		}
	}
}

// BenchmarkIdleMemory reports the host memory an idle sandbox costs: the
// proportional set size of its agent plus the daemon's heap growth per
// sandbox.
func BenchmarkIdleMemory(b *testing.B) {
	requireRoot(b)
	const n = 50
	ctx := context.Background()
	rt := newRuntime(b)
	rootfs := hostRootfsFor(b)
	for b.Loop() {
		b.StopTimer()
		heapBefore := heapInuse()
		var insts []*Instance
		for i := 0; i < n; i++ {
			inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("idle"), Rootfs: rootfs})
			if err != nil {
				b.Fatal(err)
			}
			insts = append(insts, inst.(*Instance))
		}
		time.Sleep(500 * time.Millisecond) // let agents settle
		var pss uint64
		for _, inst := range insts {
			p, err := processPSS(inst.Pid())
			if err != nil {
				b.Fatal(err)
			}
			pss += p
		}
		heap := heapInuse() - heapBefore
		b.ReportMetric(float64(pss)/n/(1<<20), "agent-PSS-MiB/sandbox")
		b.ReportMetric(float64(heap)/n/(1<<20), "daemon-heap-MiB/sandbox")
		b.ReportMetric((float64(pss)+float64(heap))/n/(1<<20), "total-MiB/sandbox")
		for _, inst := range insts {
			_ = inst.Destroy(ctx)
		}
		b.StartTimer()
	}
}

// BenchmarkPoolClaim is a sandbox.Manager Create served by a warm pool of
// real sandboxes: a health ping of the pooled agent and its state file.
// The refill and the destroy are outside the timing.
func BenchmarkPoolClaim(b *testing.B) {
	requireRoot(b)
	ctx := context.Background()
	m := poolManager(b, 2)
	for b.Loop() {
		b.StopTimer()
		waitPoolFull(b, m)
		b.StartTimer()
		sb, err := m.Create(ctx, sandbox.Spec{})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Destroy(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// poolManager returns a started manager over a fresh runtime with a pool
// of size for the host template, stopped and emptied at test end.
func poolManager(tb testing.TB, size int) *sandbox.Manager {
	tb.Helper()
	rt := newRuntime(tb)
	host, err := template.NewHost(template.HostOptions{CacheDir: filepath.Join(testBase, "templates", "host")})
	if err != nil {
		tb.Fatal(err)
	}
	reg, err := template.NewRegistry(host)
	if err != nil {
		tb.Fatal(err)
	}
	m, err := sandbox.New(rt, reg, sandbox.Config{
		StateDir:      tb.TempDir(),
		PoolSize:      map[string]int{template.HostName: size},
		MaxConcurrent: 1000,
	}, nil)
	if err != nil {
		tb.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Start(ctx); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		for _, sb := range m.List(sandbox.Filter{}) {
			_ = m.Destroy(ctx, sb.ID)
		}
		_ = m.Close(ctx)
	})
	return m
}

// waitPoolFull waits until every pool of m is full and idle.
func waitPoolFull(tb testing.TB, m *sandbox.Manager) {
	tb.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		full := true
		for _, ps := range m.PoolStats() {
			full = full && ps.Ready == ps.Size && ps.Filling == 0
		}
		if full {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatal("pool did not fill in 30 s")
		}
		time.Sleep(200 * time.Microsecond)
	}
}
