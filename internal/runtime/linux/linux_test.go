package linux

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestMain lets the test binary serve as the sandbox agent: Runtime
// re-executes /proc/self/exe with AgentCommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case AgentCommand:
			os.Exit(RunAgent())
		case attackCommand:
			os.Exit(runAttack(os.Args[2]))
		case daemonCommand:
			n, _ := strconv.Atoi(os.Args[4])
			os.Exit(runTestDaemon(os.Args[2], os.Args[3], n))
		}
	}
	code := m.Run()
	if testBase != "" {
		os.RemoveAll(testBase)
	}
	os.Exit(code)
}

var (
	hostOnce   sync.Once
	hostRootfs runtime.Rootfs
	hostErr    error
	testBase   string
)

// baseDir is a world-traversable scratch directory: sandbox agents run as
// unprivileged host uids and must reach their layers and mount points,
// which t.TempDir (mode 0700) would not allow.
func baseDir(t testing.TB) string {
	t.Helper()
	if testBase == "" {
		t.Fatal("baseDir used before setup")
	}
	return testBase
}

func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "the native runtime needs root")
}

func setupBase(t testing.TB) {
	t.Helper()
	requireRoot(t)
	if testBase != "" {
		return
	}
	dir, err := os.MkdirTemp("", "airlock-linux-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	testBase = dir
}

func hostRootfsFor(t testing.TB) runtime.Rootfs {
	t.Helper()
	setupBase(t)
	hostOnce.Do(func() {
		h, err := template.NewHost(template.HostOptions{CacheDir: filepath.Join(testBase, "templates", "host")})
		if err != nil {
			hostErr = err
			return
		}
		hostRootfs, hostErr = h.Resolve(context.Background())
	})
	if hostErr != nil {
		t.Fatalf("host template: %v", hostErr)
	}
	return hostRootfs
}

// newRuntime returns a runtime with its own state dir and cgroup parent,
// and makes sure every sandbox it made is gone at test end.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	setupBase(t)
	dir, err := os.MkdirTemp(testBase, "state-")
	if err != nil {
		t.Fatal(err)
	}
	return openRuntime(t, dir)
}

func openRuntime(t testing.TB, stateDir string) *Runtime {
	t.Helper()
	rt, err := New(Config{
		StateDir:     stateDir,
		CgroupParent: "airlock-test",
		AgentArgs:    []string{"airlock-test-agent", AgentCommand},
	})
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

func TestConformance(t *testing.T) {
	requireRoot(t)
	runtimetest.Run(t, runtimetest.Harness{
		New: func(t *testing.T) runtime.Runtime { return newRuntime(t) },
		Reopen: func(t *testing.T, prev runtime.Runtime) runtime.Runtime {
			return openRuntime(t, prev.(*Runtime).cfg.StateDir)
		},
		Rootfs:   func(t *testing.T) runtime.Rootfs { return hostRootfsFor(t) },
		Isolated: true,
		KillAgent: func(t *testing.T, inst runtime.Instance) {
			// From the host, as an OOM kill or an operator would.
			if err := syscall.Kill(inst.(*Instance).Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		},
	})
}

func init() { debugAgent = true }
