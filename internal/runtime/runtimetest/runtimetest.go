// Package runtimetest is the conformance suite every sandbox backend must
// pass. A backend's tests call Run with a Harness that knows how to build
// the backend; the suite then checks the contract of runtime.Runtime and
// runtime.Instance together with the agent every backend runs: lifecycle,
// commands, files, limits, errors and recovery after a daemon restart.
package runtimetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Harness builds the backend under test.
type Harness struct {
	// New returns a fresh runtime. Sandboxes it creates are destroyed by
	// the suite.
	New func(t *testing.T) runtime.Runtime
	// Reopen returns a runtime value that stands for a restarted daemon
	// sharing prev's host state; the suite calls Recover on it.
	Reopen func(t *testing.T, prev runtime.Runtime) runtime.Runtime
	// Rootfs returns the root filesystem sandboxes are created from.
	Rootfs func(t *testing.T) runtime.Rootfs
	// Isolated is true for backends that really isolate: the suite then
	// also checks identities, namespaces and limits from inside.
	Isolated bool
	// KillAgent, if set, kills the agent of inst as a crash would (from
	// outside, leaving everything else in place); the suite then checks
	// that Exited reports it at once, for created and adopted instances.
	KillAgent func(t *testing.T, inst runtime.Instance)
}

var seq atomic.Int64

// NewID returns a sandbox id unique within the test process.
func NewID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano()%1e9, seq.Add(1))
}

// Run runs the conformance suite.
func Run(t *testing.T, h Harness) {
	t.Run("Lifecycle", func(t *testing.T) { testLifecycle(t, h) })
	t.Run("Exec", func(t *testing.T) { testExec(t, h) })
	t.Run("Files", func(t *testing.T) { testFiles(t, h) })
	t.Run("Errors", func(t *testing.T) { testErrors(t, h) })
	t.Run("Concurrent", func(t *testing.T) { testConcurrent(t, h) })
	t.Run("Recover", func(t *testing.T) { testRecover(t, h) })
	t.Run("Deadline", func(t *testing.T) { testDeadline(t, h) })
	if h.KillAgent != nil {
		t.Run("AgentExit", func(t *testing.T) { testAgentExit(t, h) })
	}
	if h.Isolated {
		t.Run("Isolation", func(t *testing.T) { testIsolation(t, h) })
		t.Run("Limits", func(t *testing.T) { testLimits(t, h) })
	}
}

// Sandbox is a created instance with a client, destroyed at test end.
type Sandbox struct {
	runtime.Instance
	Client *agentclient.Client
}

// Create makes a sandbox from spec (ID and Rootfs filled in when empty)
// and registers its destruction with t.Cleanup.
func Create(t testing.TB, ctx context.Context, rt runtime.Runtime, rootfs runtime.Rootfs, spec runtime.Spec) *Sandbox {
	t.Helper()
	if spec.ID == "" {
		spec.ID = NewID("rt")
	}
	if len(spec.Rootfs.Layers) == 0 {
		spec.Rootfs = rootfs
	}
	inst, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("create %s: %v", spec.ID, err)
	}
	c := agentclient.New(inst.Dial)
	t.Cleanup(func() {
		c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := inst.Destroy(ctx); err != nil {
			t.Errorf("destroy %s: %v", inst.ID(), err)
		}
	})
	return &Sandbox{Instance: inst, Client: c}
}

// Run executes a shell command and returns stdout, failing the test on a
// transport error.
func (s *Sandbox) Run(t testing.TB, ctx context.Context, req agentclient.ExecRequest) (*agentclient.ExecResult, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	req.Stdout, req.Stderr = &stdout, &stderr
	res, err := s.Client.Exec(ctx, req)
	if err != nil {
		t.Fatalf("exec %q %q: %v", req.Argv, req.Shell, err)
	}
	return res, stdout.String(), stderr.String()
}

// Sh runs a shell command as the default user and requires success.
func (s *Sandbox) Sh(t testing.TB, ctx context.Context, cmd string) string {
	t.Helper()
	res, out, errOut := s.Run(t, ctx, agentclient.ExecRequest{Shell: cmd, Timeout: 30 * time.Second})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("%q: status %s exit %d signal %d: %s %s", cmd, res.Status, res.ExitCode, res.Signal, errOut, res.Error)
	}
	return out
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func testLifecycle(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	spec := runtime.Spec{ID: NewID("life"), Rootfs: h.Rootfs(t), Labels: map[string]string{"k": "v"}}
	inst, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if inst.ID() != spec.ID || inst.Spec().Labels["k"] != "v" {
		t.Fatalf("instance %s spec labels %v", inst.ID(), inst.Spec().Labels)
	}
	if time.Since(inst.CreatedAt()) > time.Minute || inst.CreatedAt().After(time.Now()) {
		t.Fatalf("CreatedAt %v", inst.CreatedAt())
	}
	c := agentclient.New(inst.Dial)
	defer c.Close()
	if _, err := c.Info(ctx); err != nil {
		t.Fatalf("agent info: %v", err)
	}
	if _, err := inst.Stats(ctx); err != nil {
		t.Fatalf("stats: %v", err)
	}
	select {
	case <-inst.Exited():
		t.Fatal("Exited is closed while the agent runs")
	default:
	}
	if _, err := rt.Create(ctx, spec); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("duplicate create: got %v, want already exists", err)
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	select {
	case <-inst.Exited():
	case <-time.After(time.Second):
		t.Fatal("Exited is still open a second after Destroy")
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatalf("second destroy: %v", err)
	}
	if conn, err := inst.Dial(ctx); err == nil {
		conn.Close()
		t.Fatal("dial after destroy succeeded")
	}
	// The id is free again.
	inst2, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatalf("re-create after destroy: %v", err)
	}
	if err := inst2.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
}

func testExec(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	sb := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{Env: map[string]string{"BASE": "base", "OVER": "base"}})

	t.Run("stdout", func(t *testing.T) {
		res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"echo", "hello", "world"}})
		if res.Status != agentclient.StatusSuccess || res.ExitCode != 0 || out != "hello world\n" {
			t.Fatalf("got %+v %q", res, out)
		}
	})
	t.Run("stderr and exit code", func(t *testing.T) {
		res, out, errOut := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "echo out; echo err >&2; exit 3"})
		if res.Status != agentclient.StatusError || res.ExitCode != 3 || out != "out\n" || errOut != "err\n" {
			t.Fatalf("got %+v %q %q", res, out, errOut)
		}
	})
	t.Run("not found", func(t *testing.T) {
		res, _, _ := sb.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"no-such-command-xyz"}})
		if res.Status != agentclient.StatusError || res.ExitCode != 127 {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("stdin", func(t *testing.T) {
		res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"cat"}, Stdin: strings.NewReader("from stdin")})
		if res.Status != agentclient.StatusSuccess || out != "from stdin" {
			t.Fatalf("got %+v %q", res, out)
		}
	})
	t.Run("env", func(t *testing.T) {
		out := sb.Sh(t, ctx, "echo $BASE $OVER $REQ")
		if out != "base base\n" {
			t.Fatalf("env without request vars: %q", out)
		}
		res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "echo $BASE $OVER $REQ", Env: map[string]string{"OVER": "req", "REQ": "r"}})
		if res.Status != agentclient.StatusSuccess || out != "base req r\n" {
			t.Fatalf("got %q", out)
		}
	})
	t.Run("cwd", func(t *testing.T) {
		if !h.Isolated {
			t.Skip("unisolated backends run processes in host directories")
		}
		if out := sb.Sh(t, ctx, "pwd; echo $HOME"); out != "/home/user\n/home/user\n" {
			t.Fatalf("default cwd %q", out)
		}
		res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"pwd"}, Cwd: "/tmp"})
		if res.Status != agentclient.StatusSuccess || out != "/tmp\n" {
			t.Fatalf("cwd /tmp: %q", out)
		}
	})
	t.Run("timeout", func(t *testing.T) {
		start := time.Now()
		res, _, _ := sb.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"sleep", "30"}, Timeout: 300 * time.Millisecond})
		if res.Status != agentclient.StatusTimeout {
			t.Fatalf("got %+v", res)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("timeout took %v", d)
		}
	})
	t.Run("output limit", func(t *testing.T) {
		res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "head -c 1000000 /dev/zero", OutputLimit: 1000})
		if res.Status != agentclient.StatusSuccess || !res.StdoutTruncated || len(out) != 1000 {
			t.Fatalf("got %+v, %d bytes", res, len(out))
		}
	})
	t.Run("resources reported", func(t *testing.T) {
		res, _, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"})
		if res.Status != agentclient.StatusSuccess || res.Duration <= 0 || res.CPUTime <= 0 || res.PeakMemoryBytes == 0 {
			t.Fatalf("got %+v", res)
		}
	})
}

func testFiles(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	sb := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{})
	data := make([]byte, 1<<20+17)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Client.WriteFile(ctx, "/home/user/dir/blob.bin", bytes.NewReader(data), agentclient.WriteOptions{MakeParents: true}); err != nil {
		t.Fatalf("write: %v", err)
	}
	var got bytes.Buffer
	if _, err := sb.Client.ReadFile(ctx, "/home/user/dir/blob.bin", &got); err != nil {
		t.Fatalf("read: %v", err)
	}
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read back %d bytes, differ from the %d written", got.Len(), len(data))
	}
	// A process sees what the file API wrote, and the other way round.
	if out := sb.Sh(t, ctx, "wc -c < dir/blob.bin; echo made-by-exec > made.txt"); strings.TrimSpace(out) != fmt.Sprint(len(data)) {
		t.Fatalf("wc: %q", out)
	}
	got.Reset()
	if _, err := sb.Client.ReadFile(ctx, "made.txt", &got); err != nil || got.String() != "made-by-exec\n" {
		t.Fatalf("read made.txt: %q %v", got.String(), err)
	}
	entries, _, err := sb.Client.ListDir(ctx, "/home/user", 2)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Path)
	}
	want := []string{"/home/user/dir", "/home/user/dir/blob.bin", "/home/user/made.txt"}
	for _, w := range want {
		found := false
		for _, n := range names {
			found = found || n == w
		}
		if !found {
			t.Fatalf("list: %v lacks %s", names, w)
		}
	}
	if err := sb.Client.Remove(ctx, "/home/user/dir", true); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Client.Stat(ctx, "/home/user/dir/blob.bin"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("stat removed file: %v", err)
	}
}

func testErrors(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	bad := []runtime.Spec{
		{ID: "Bad_ID", Rootfs: h.Rootfs(t)},
		{ID: "", Rootfs: h.Rootfs(t)},
		{ID: strings.Repeat("a", 70), Rootfs: h.Rootfs(t)},
		{ID: NewID("nolayers")},
		{ID: "../escape", Rootfs: h.Rootfs(t)},
	}
	for _, spec := range bad {
		if inst, err := rt.Create(ctx, spec); !errors.Is(err, errdefs.ErrInvalidArgument) {
			if inst != nil {
				_ = inst.Destroy(ctx)
			}
			t.Errorf("create %q: got %v, want invalid argument", spec.ID, err)
		}
	}
}

func testConcurrent(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	rootfs := h.Rootfs(t)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			inst, err := rt.Create(ctx, runtime.Spec{ID: NewID("conc"), Rootfs: rootfs})
			if err != nil {
				errs <- err
				return
			}
			defer inst.Destroy(ctx)
			c := agentclient.New(inst.Dial)
			defer c.Close()
			var out bytes.Buffer
			res, err := c.Exec(ctx, agentclient.ExecRequest{Argv: []string{"echo", inst.ID()}, Stdout: &out})
			if err != nil || res.Status != agentclient.StatusSuccess || out.String() != inst.ID()+"\n" {
				errs <- fmt.Errorf("exec in %s: %v %+v %q", inst.ID(), err, res, out.String())
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func testRecover(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	sb := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{Labels: map[string]string{"owner": "test"}})
	sb.Sh(t, ctx, "echo kept > state.txt; sleep 1000 >/dev/null 2>&1 &")
	rt2 := h.Reopen(t, rt)
	adopted, err := rt2.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	var inst runtime.Instance
	for _, a := range adopted {
		if a.ID() == sb.ID() {
			inst = a
		}
	}
	if inst == nil {
		t.Fatalf("sandbox %s not adopted (got %d)", sb.ID(), len(adopted))
	}
	if inst.Spec().Labels["owner"] != "test" {
		t.Fatalf("adopted labels %v", inst.Spec().Labels)
	}
	c := agentclient.New(inst.Dial)
	defer c.Close()
	var out bytes.Buffer
	res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: "cat state.txt", Stdout: &out})
	if err != nil || res.Status != agentclient.StatusSuccess || out.String() != "kept\n" {
		t.Fatalf("exec in adopted sandbox: %v %+v %q", err, res, out.String())
	}
	if err := inst.Destroy(ctx); err != nil {
		t.Fatalf("destroy adopted: %v", err)
	}
}

// exitNotice is how soon Exited must report a killed agent.
const exitNotice = time.Second

// testAgentExit kills the agent of a created and of an adopted sandbox
// and checks that Exited reports each within exitNotice and that Destroy
// still removes what is left.
func testAgentExit(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	created := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{})
	kept := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{})
	waitExit := func(what string, inst runtime.Instance) {
		t.Helper()
		t0 := time.Now()
		h.KillAgent(t, inst)
		select {
		case <-inst.Exited():
			t.Logf("%s: exit seen after %v", what, time.Since(t0).Round(time.Microsecond))
		case <-time.After(exitNotice):
			t.Fatalf("%s: Exited still open %v after the agent was killed", what, exitNotice)
		}
		if err := inst.Destroy(ctx); err != nil {
			t.Fatalf("%s: destroy after the agent died: %v", what, err)
		}
	}
	waitExit("created", created.Instance)

	rt2 := h.Reopen(t, rt)
	adopted, err := rt2.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	for _, inst := range adopted {
		if inst.ID() == kept.ID() {
			select {
			case <-inst.Exited():
				t.Fatal("adopted: Exited is closed while the agent runs")
			default:
			}
			waitExit("adopted", inst)
			return
		}
	}
	t.Fatalf("sandbox %s not adopted", kept.ID())
}

// deadlineNotice bounds how long after its deadline a sandbox's agent
// has ended it.
const deadlineNotice = 10 * time.Second

// testDeadline: a sandbox ends by itself at its deadline, the one it was
// created with (Spec.Deadline) or one set later through its agent, with
// its processes; not before; and Destroy still removes what is left.
func testDeadline(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	created := time.Now()
	first := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{Deadline: created.Add(1500 * time.Millisecond)})
	later := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{})
	for _, sb := range []*Sandbox{first, later} {
		if _, err := sb.Client.Start(ctx, agentclient.ExecRequest{Shell: "sleep 300", Background: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := later.Client.SetDeadline(ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("SetDeadline: %v", err)
	}
	set := time.Now()
	if _, _, err := later.Client.SetDeadline(ctx, set.Add(time.Second)); err != nil {
		t.Fatalf("SetDeadline earlier: %v", err)
	}
	wait := func(what string, sb *Sandbox, from time.Time, after time.Duration) {
		t.Helper()
		select {
		case <-sb.Exited():
			if d := time.Since(from); d < after {
				t.Errorf("%s: ended %v after it was set, before its deadline (%v)", what, d, after)
			} else {
				t.Logf("%s: ended %v after it was set (deadline %v)", what, d.Round(time.Millisecond), after)
			}
		case <-time.After(after + deadlineNotice):
			t.Fatalf("%s: still running %v after its deadline", what, deadlineNotice)
		}
		if _, err := sb.Client.Info(ctx); err == nil {
			t.Errorf("%s: the agent answers after the deadline", what)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("%s: destroy after the deadline: %v", what, err)
		}
	}
	wait("created with a deadline", first, created, 1500*time.Millisecond)
	wait("deadline set later", later, set, time.Second)
}

func testIsolation(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	sb := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{})
	if out := sb.Sh(t, ctx, "id -u; id -g"); out != "1000\n1000\n" {
		t.Errorf("default user ids: %q", out)
	}
	res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "id -u", User: "root"})
	if res.Status != agentclient.StatusSuccess || out != "0\n" {
		t.Errorf("root user: %+v %q", res, out)
	}
	if out := sb.Sh(t, ctx, "hostname"); out != sb.ID()+"\n" {
		t.Errorf("hostname %q", out)
	}
	// PID 1 is the agent; the host's processes are invisible.
	if out := sb.Sh(t, ctx, "ls /proc | grep -c '^[0-9]'"); strings.TrimSpace(out) == "" || len(strings.TrimSpace(out)) > 2 {
		t.Errorf("processes visible: %q", out)
	}
	// Only the loopback interface exists.
	if out := sb.Sh(t, ctx, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"); out != "lo\n" {
		t.Errorf("interfaces: %q", out)
	}
	// Capabilities are empty even for root.
	res, out, _ = sb.Run(t, ctx, agentclient.ExecRequest{Shell: "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status", User: "root"})
	for _, want := range []string{"CapEff:\t0000000000000000", "CapBnd:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(out, want) {
			t.Errorf("root status lacks %q: %q (%+v)", want, out, res)
		}
	}
}

func testLimits(t *testing.T, h Harness) {
	ctx := testCtx(t)
	rt := h.New(t)
	sb := Create(t, ctx, rt, h.Rootfs(t), runtime.Spec{Limits: runtime.Limits{MemoryBytes: 64 << 20, Pids: 64, DiskBytes: 8 << 20}})
	// Disk: writing past the cap fails with ENOSPC and the sandbox goes on.
	res, _, errOut := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "head -c 20000000 /dev/zero > /tmp/fill"})
	if res.Status != agentclient.StatusError || !strings.Contains(errOut, "No space") {
		t.Errorf("disk fill: %+v %q", res, errOut)
	}
	sb.Sh(t, ctx, "rm /tmp/fill; echo ok > /tmp/after")
	// Memory: the hog is killed as resource_exceeded, the sandbox lives on.
	res, _, _ = sb.Run(t, ctx, agentclient.ExecRequest{Shell: "head -c 200000000 /dev/zero | tail > /dev/null", Timeout: 30 * time.Second})
	if res.Status != agentclient.StatusResourceExceeded {
		t.Errorf("memory hog: %+v", res)
	}
	if out := sb.Sh(t, ctx, "echo alive"); out != "alive\n" {
		t.Errorf("after OOM: %q", out)
	}
}
