package build

import (
	"context"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/linux"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/debian"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestMain lets the test binary serve as the sandbox agent: the runtime
// re-executes /proc/self/exe with linux.AgentCommand.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case linux.AgentCommand:
			os.Exit(linux.RunAgent())
		case writeCommand:
			// A RUN step in an image without a shell runs the test
			// binary (the sandbox's agent binary) to write a file.
			if len(os.Args) != 4 {
				os.Exit(2)
			}
			if err := os.WriteFile(os.Args[2], []byte(os.Args[3]), 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	code := m.Run()
	env.close()
	os.Exit(code)
}

// writeCommand makes the test binary write a file: write PATH CONTENT.
const writeCommand = "build-test-write"

// baseName is the shared Debian template every build test starts from.
const baseName = "base"

// baseAirfile builds it: the smallest Debian variant, no extra packages.
const baseAirfile = "DEBIAN bookworm\n"

// testEnv is the state the tests share: one store, runtime, registry and
// builder, and the Debian base built once per test binary.
type testEnv struct {
	once     sync.Once
	err      error
	dir      string
	store    *layers.Store
	rt       *countingRuntime
	reg      *template.Registry
	b        *Builder
	host     *template.Host
	stateDir string

	baseOnce sync.Once
	baseErr  error
	baseSkip string
}

var env testEnv

func (e *testEnv) close() {
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "building templates needs root")
}

// setup returns the shared environment (without the Debian base).
func setup(t testing.TB) *testEnv {
	t.Helper()
	requireRoot(t)
	env.once.Do(func() { env.err = env.init() })
	if env.err != nil {
		t.Fatalf("test environment: %v", env.err)
	}
	return &env
}

func (e *testEnv) init() error {
	// World-traversable: sandbox agents run as unprivileged host uids.
	dir, err := os.MkdirTemp("", "airlock-build-test-")
	if err != nil {
		return err
	}
	e.dir = dir
	if err := os.Chmod(dir, 0o755); err != nil {
		return err
	}
	if e.store, err = layers.Open(filepath.Join(dir, "store"), layers.Options{}); err != nil {
		return err
	}
	e.stateDir = filepath.Join(dir, "state")
	lrt, err := linux.New(linux.Config{
		StateDir:     e.stateDir,
		CgroupParent: "airlock-build-test",
		AgentArgs:    []string{"airlock-test-agent", linux.AgentCommand},
	})
	if err != nil {
		return err
	}
	e.rt = &countingRuntime{Runtime: lrt, live: make(map[string]bool)}
	if e.host, err = template.NewHost(template.HostOptions{CacheDir: filepath.Join(dir, "host")}); err != nil {
		return err
	}
	if e.reg, err = template.NewRegistry(e.host); err != nil {
		return err
	}
	e.b, err = New(Config{
		Store:     e.store,
		Runtime:   e.rt,
		Templates: e.reg,
		WorkDir:   filepath.Join(dir, "work"),
		Debian:    debian.Options{Variant: "essential"},
		Limits:    runtime.Limits{MemoryBytes: 1 << 30, DiskBytes: 2 << 30},
	})
	return err
}

// debianSkip says why a real Debian build cannot run here, or "".
func debianSkip() string {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		return "mmdebstrap is not installed (apt-get install mmdebstrap)"
	}
	conn, err := net.DialTimeout("tcp", "deb.debian.org:80", 5*time.Second)
	if err != nil {
		return fmt.Sprintf("the Debian mirror is unreachable: %v", err)
	}
	conn.Close()
	return ""
}

// requireSandboxes skips tests that start sandboxes when the test binary
// cannot serve as their agent.
func requireSandboxes(t testing.TB) {
	t.Helper()
	if raceEnabled {
		t.Skip("sandboxes need the agent built with CGO_ENABLED=0, which -race excludes")
	}
}

// withBase returns the environment with the Debian base template built.
func withBase(t testing.TB) *testEnv {
	t.Helper()
	e := setup(t)
	e.baseOnce.Do(func() {
		if e.baseSkip = debianSkip(); e.baseSkip != "" {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		start := time.Now()
		lines := 0
		_, e.baseErr = e.b.Build(ctx, Request{Name: baseName, Airfile: []byte(baseAirfile)}, func(ev Event) {
			if ev.Type == EventLog {
				lines++
			}
		})
		fmt.Fprintf(os.Stderr, "build_test: Debian base (bookworm, essential) built in %s (%d log lines)\n", time.Since(start).Round(time.Millisecond), lines)
	})
	if e.baseSkip != "" {
		t.Skip(e.baseSkip)
	}
	if e.baseErr != nil {
		t.Fatalf("building the Debian base: %v", e.baseErr)
	}
	return e
}

// countingRuntime counts the sandboxes a runtime creates and tracks the
// ones not yet destroyed.
type countingRuntime struct {
	runtime.Runtime
	creates atomic.Int64

	mu   sync.Mutex
	live map[string]bool
}

func (c *countingRuntime) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	c.creates.Add(1)
	inst, err := c.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.live[inst.ID()] = true
	c.mu.Unlock()
	return &trackedInstance{Instance: inst, c: c}, nil
}

func (c *countingRuntime) liveCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.live)
}

type trackedInstance struct {
	runtime.Instance
	c *countingRuntime
}

func (i *trackedInstance) Destroy(ctx context.Context) error {
	err := i.Instance.Destroy(ctx)
	if err == nil {
		i.c.mu.Lock()
		delete(i.c.live, i.ID())
		i.c.mu.Unlock()
	}
	return err
}

// noBuildSandboxes fails the test if a build sandbox is left: in the
// counting wrapper or in the runtime's state directory.
func (e *testEnv) noBuildSandboxes(t testing.TB) {
	t.Helper()
	if n := e.rt.liveCount(); n != 0 {
		t.Errorf("%d build sandboxes were not destroyed", n)
	}
	ents, err := os.ReadDir(e.stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), "build-") {
			t.Errorf("runtime state of build sandbox %s is left", ent.Name())
		}
	}
}

// build runs a build and collects its events.
func (e *testEnv) build(t testing.TB, req Request) (layers.Manifest, []Event, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var events []Event
	m, err := e.b.Build(ctx, req, func(ev Event) { events = append(events, ev) })
	return m, events, err
}

// mustBuild runs a build that must succeed.
func (e *testEnv) mustBuild(t testing.TB, req Request) (layers.Manifest, []Event) {
	t.Helper()
	m, events, err := e.build(t, req)
	if err != nil {
		t.Fatalf("build %s: %v", req.Name, err)
	}
	return m, events
}

// sandbox starts a sandbox of the registered template name, as the
// sandbox manager does (root filesystem and environment from the
// template), destroyed at test end.
func (e *testEnv) sandbox(t testing.TB, name string) *runtimetest.Sandbox {
	t.Helper()
	src, err := e.reg.Get(name)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rootfs, err := src.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return runtimetest.Create(t, ctx, e.rt.Runtime, rootfs, runtime.Spec{ID: runtimetest.NewID("t"), Rootfs: rootfs})
}

// sh runs a shell command in sb as user (default user) and returns its
// output, failing the test unless it succeeds.
func sh(t testing.TB, sb *runtimetest.Sandbox, user, cmd string) string {
	t.Helper()
	res, out, errOut := sb.Run(t, context.Background(), agentclient.ExecRequest{Shell: cmd, User: user, Timeout: 30 * time.Second})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("%q: %s exit %d: %s %s", cmd, res.Status, res.ExitCode, errOut, res.Error)
	}
	return out
}

// diskUsage returns the bytes of disk blocks used under dir, counting
// each hard-linked inode once.
func diskUsage(t testing.TB, dir string) int64 {
	t.Helper()
	var total int64
	seen := make(map[[2]uint64]bool)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		key := [2]uint64{st.Dev, st.Ino}
		if !seen[key] {
			seen[key] = true
			total += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// eventTypes returns the types of events, in order, without log and
// progress events.
func eventTypes(events []Event) []string {
	var out []string
	for _, ev := range events {
		if ev.Type != EventLog && ev.Type != EventProgress {
			out = append(out, fmt.Sprintf("%d:%s", ev.Step, ev.Type))
		}
	}
	return out
}

// execIn is a shell command run in dir as the default user.
// execAs returns a shell command run as user.
func execAs(user, cmd string) agentclient.ExecRequest {
	return agentclient.ExecRequest{Shell: cmd, User: user, Timeout: 30 * time.Second}
}

func execIn(dir, cmd string) agentclient.ExecRequest {
	return agentclient.ExecRequest{Shell: cmd, Cwd: dir, Timeout: 30 * time.Second}
}
