//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// harness is an agent serving on a unix socket and a client for it.
type harness struct {
	a    *Agent
	c    *agentclient.Client
	raw  agentv1connect.ProcessServiceClient
	srv  *testServer
	root string
	home string // host path of the user's home
}

// newHarness starts an agent whose root is a temporary directory and whose
// only user is the current one, with home /home/user.
func newHarness(tb testing.TB, mod func(*Options)) *harness {
	tb.Helper()
	root := tb.TempDir()
	home := filepath.Join(root, "home", "user")
	if err := os.MkdirAll(home, 0o755); err != nil {
		tb.Fatal(err)
	}
	opts := Options{
		Root: root,
		Users: map[string]User{"user": {
			Name: "user", UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Home: "/home/user",
		}},
		BaseEnv:    map[string]string{"LANG": "C.UTF-8"},
		SwitchUser: os.Geteuid() == 0,
	}
	if mod != nil {
		mod(&opts)
	}
	a, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	srv := serveAgent(tb, a)
	c := srv.client
	h := &harness{a: a, c: c, srv: srv, root: root, home: home,
		raw: agentv1connect.NewProcessServiceClient(srv.http, "http://agent")}
	tb.Cleanup(func() {
		h.killAll()
		serveErr, closeErr := srv.stop()
		if serveErr != nil {
			tb.Errorf("Serve: %v", serveErr)
		}
		if closeErr != nil {
			tb.Errorf("Close: %v", closeErr)
		}
	})
	return h
}

// killAll kills every process the agent still runs, so that a failing test
// leaves nothing behind.
func (h *harness) killAll() {
	t := h.a.procs
	t.mu.Lock()
	var ps []*process
	for _, p := range t.byPID {
		ps = append(ps, p)
	}
	t.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, p := range ps {
		select {
		case <-p.done:
			continue
		default:
		}
		t.killTree(ctx, p)
		select {
		case <-p.done:
		case <-ctx.Done():
		}
	}
}

func (h *harness) exec(tb testing.TB, req agentclient.ExecRequest) (res *agentclient.ExecResult, stdout, stderr string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var o, e bytes.Buffer
	req.Stdout, req.Stderr = &o, &e
	res, err := h.c.Exec(ctx, req)
	if err != nil {
		tb.Fatalf("Exec(%q %q): %v", req.Argv, req.Shell, err)
	}
	return res, o.String(), e.String()
}

func pidSel(pid int) *agentv1.ProcessSelector {
	return &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Pid{Pid: uint32(pid)}}
}

// syncBuffer is a concurrency-safe buffer that can wait for content.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) waitFor(tb testing.TB, sub string) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.String(), sub) {
		if time.Now().After(deadline) {
			tb.Fatalf("output %q never contained %q", s.String(), sub)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// gone reports whether pid no longer runs (missing, or a zombie that
// nobody reaped yet).
func gone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func waitGone(tb testing.TB, pid int, within time.Duration) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !gone(pid) {
		if time.Now().After(deadline) {
			tb.Fatalf("process %d still runs after %v", pid, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestExecResults(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		name           string
		req            agentclient.ExecRequest
		status         agentclient.Status
		code           int
		stdout, stderr string
	}{
		{"echo argv", agentclient.ExecRequest{Argv: []string{"echo", "hello", "world"}},
			agentclient.StatusSuccess, 0, "hello world\n", ""},
		{"absolute argv", agentclient.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo abs"}},
			agentclient.StatusSuccess, 0, "abs\n", ""},
		{"streams keep their order", agentclient.ExecRequest{
			Shell: "echo a; echo b >&2; echo c; echo d >&2"},
			agentclient.StatusSuccess, 0, "a\nc\n", "b\nd\n"},
		{"exit code", agentclient.ExecRequest{Shell: "echo partial; exit 3"},
			agentclient.StatusError, 3, "partial\n", ""},
		{"false", agentclient.ExecRequest{Argv: []string{"false"}},
			agentclient.StatusError, 1, "", ""},
		{"request env", agentclient.ExecRequest{Shell: `printf %s "$FOO"`, Env: map[string]string{"FOO": "bar baz"}},
			agentclient.StatusSuccess, 0, "bar baz", ""},
		{"stdin is /dev/null", agentclient.ExecRequest{Argv: []string{"cat"}},
			agentclient.StatusSuccess, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res, stdout, stderr := h.exec(t, tt.req)
			if res.Status != tt.status || res.ExitCode != tt.code {
				t.Errorf("status %q code %d, want %q %d (error %q)", res.Status, res.ExitCode, tt.status, tt.code, res.Error)
			}
			if stdout != tt.stdout || stderr != tt.stderr {
				t.Errorf("stdout %q stderr %q, want %q %q", stdout, stderr, tt.stdout, tt.stderr)
			}
			if res.PID <= 0 || res.Duration <= 0 {
				t.Errorf("pid %d duration %v, want both > 0", res.PID, res.Duration)
			}
		})
	}
}

func TestExecCannotStart(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	noexec := filepath.Join(h.home, "noexec")
	if err := os.WriteFile(noexec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		argv []string
		code int
		msg  string
	}{
		{"not in PATH", []string{"airlock-no-such-command"}, 127, "executable file not found"},
		{"missing path", []string{"/nonexistent/bin/x"}, 127, "executable file not found"},
		{"not executable", []string{noexec}, 126, "permission denied"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, _, _ := h.exec(t, agentclient.ExecRequest{Argv: tt.argv})
			if res.Status != agentclient.StatusError || res.ExitCode != tt.code || res.Error != tt.msg || res.PID != 0 {
				t.Errorf("got %+v, want status error, code %d, error %q, pid 0", res, tt.code, tt.msg)
			}
		})
	}
	// A PATH without the command: lookup uses the child's PATH.
	res, _, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"ls"}, Env: map[string]string{"PATH": "/nonexistent"}})
	if res.ExitCode != 127 {
		t.Errorf("ls with an empty PATH: code %d, want 127", res.ExitCode)
	}
	if n := h.a.procs.count(); n != 0 {
		t.Errorf("count = %d after failed starts, want 0", n)
	}
}

func TestExecInvalid(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	tests := []struct {
		name string
		req  agentclient.ExecRequest
	}{
		{"nothing to run", agentclient.ExecRequest{}},
		{"argv and shell", agentclient.ExecRequest{Argv: []string{"true"}, Shell: "true"}},
		{"empty argv0", agentclient.ExecRequest{Argv: []string{""}}},
		{"NUL in arg", agentclient.ExecRequest{Argv: []string{"echo", "a\x00b"}}},
		{"env key with =", agentclient.ExecRequest{Argv: []string{"true"}, Env: map[string]string{"A=B": "c"}}},
		{"long tag", agentclient.ExecRequest{Argv: []string{"true"}, Tag: strings.Repeat("t", 129)}},
		{"unknown user", agentclient.ExecRequest{Argv: []string{"true"}, User: "mallory"}},
		{"missing cwd", agentclient.ExecRequest{Argv: []string{"true"}, Cwd: "/does/not/exist"}},
		{"huge arg", agentclient.ExecRequest{Argv: []string{"echo", strings.Repeat("x", 129<<10)}}},
		{"too many args", agentclient.ExecRequest{Argv: make([]string, 4097)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.c.Exec(context.Background(), tt.req)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Exec: %v, want invalid argument", err)
			}
		})
	}
}

func TestEnvironmentIsolation(t *testing.T) {
	// Not parallel: t.Setenv.
	t.Setenv("AIRLOCK_TEST_CANARY", "leaked")
	h := newHarness(t, nil)
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"env"}, Env: map[string]string{"EXTRA": "1", "LANG": "C"}})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("env: %+v", res)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		k, v, _ := strings.Cut(line, "=")
		got[k] = v
	}
	if _, ok := got["AIRLOCK_TEST_CANARY"]; ok {
		t.Error("the agent's environment leaked into the child")
	}
	want := map[string]string{
		"PATH": defaultPath, "HOME": h.home, "USER": "user", "LOGNAME": "user",
		"LANG":  "C", // request env overrides BaseEnv
		"EXTRA": "1",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s=%q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("child environment %v has extra variables, want exactly %v", got, want)
	}
}

func TestWorkingDirectory(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	if err := os.Mkdir(filepath.Join(h.home, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ cwd, want string }{
		{"", h.home},
		{"sub", filepath.Join(h.home, "sub")},
		{"/home", filepath.Join(h.root, "home")},
		{"/../../..", h.root},
	}
	for _, tt := range tests {
		_, stdout, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"pwd"}, Cwd: tt.cwd})
		if got := strings.TrimSpace(stdout); got != tt.want {
			t.Errorf("cwd %q: pwd %q, want %q", tt.cwd, got, tt.want)
		}
	}
}

func TestOnlyStdioInherited(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	_, stdout, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"ls", "/proc/self/fd"}})
	// 3 is the directory ls reads.
	if got := strings.Fields(stdout); strings.Join(got, " ") != "0 1 2 3" {
		t.Errorf("child's open descriptors: %v, want 0 1 2 3", got)
	}
	// Own session and process group.
	_, stdout, _ = h.exec(t, agentclient.ExecRequest{Shell: `echo $$; ps -o sid= -o pgid= -p $$`})
	f := strings.Fields(stdout)
	if len(f) != 3 || f[0] != f[1] || f[0] != f[2] {
		t.Errorf("pid, sid, pgid = %v, want all equal", f)
	}
}

func TestTimeoutKillsTree(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	start := time.Now()
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{
		Shell: "sleep 100 & echo $!; sleep 100", Timeout: 300 * time.Millisecond,
	})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("timeout of 300ms took %v", d)
	}
	if res.Status != agentclient.StatusTimeout || res.ExitCode != -1 || res.Signal != int(syscall.SIGKILL) {
		t.Errorf("result %+v, want timeout by SIGKILL", res)
	}
	bg, err := strconv.Atoi(strings.TrimSpace(stdout))
	if err != nil {
		t.Fatalf("background pid %q: %v", stdout, err)
	}
	waitGone(t, bg, 2*time.Second)
}

func TestExitNotDelayedByBackgroundChild(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	start := time.Now()
	// The background sleep holds stdout open.
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{Shell: "sleep 30 & echo $!; echo done"})
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("exit took %v with a background child holding stdout", d)
	}
	if res.Status != agentclient.StatusSuccess || !strings.HasSuffix(stdout, "done\n") {
		t.Errorf("result %+v stdout %q", res, stdout)
	}
	if pid, err := strconv.Atoi(strings.Fields(stdout)[0]); err == nil {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestCancelKillsForegroundProcess(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := p.Wait(); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("Wait after cancel: %v, want canceled", err)
	}
	waitGone(t, p.PID, 3*time.Second)
}

func TestBackgroundConnectList(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	startCtx, detach := context.WithCancel(ctx)
	p, err := h.c.Start(startCtx, agentclient.ExecRequest{
		Shell:      `while read l; do echo "got $l"; done; echo bye; exit 7`,
		Background: true, Tag: "echoer", OpenStdin: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	detach()
	if _, err := p.Wait(); err == nil {
		t.Error("Wait on a detached stream returned no error")
	}

	list, err := h.c.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].PID != p.PID || list[0].Tag != "echoer" || !list[0].Background {
		t.Fatalf("List = %+v, want the background process", list)
	}
	// A running tag cannot be taken twice.
	if _, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"true"}, Tag: "echoer"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second start with a running tag: %v, want already exists", err)
	}

	var out1, out2 syncBuffer
	c1, err := h.c.Connect(ctx, p.PID, &out1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.SendInput(ctx, p.PID, []byte("one\n")); err != nil {
		t.Fatal(err)
	}
	out1.waitFor(t, "got one\n")
	c2, err := h.c.Connect(ctx, p.PID, &out2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.StreamInput(ctx, p.PID, strings.NewReader("two\n")); err != nil {
		t.Fatal(err)
	}
	out2.waitFor(t, "got two\n")
	if err := h.c.CloseStdin(ctx, p.PID); err != nil {
		t.Fatal(err)
	}
	for i, c := range []*agentclient.Process{c1, c2} {
		res, err := c.Wait()
		if err != nil || res.Status != agentclient.StatusError || res.ExitCode != 7 {
			t.Errorf("connection %d: %+v, %v; want exit 7", i, res, err)
		}
	}
	if got := out1.String(); got != "got one\ngot two\nbye\n" {
		t.Errorf("first connection saw %q", got)
	}
	if got := out2.String(); got != "got two\nbye\n" {
		t.Errorf("second connection saw %q", got)
	}
	// A late Connect still gets the exit.
	late, err := h.c.Connect(ctx, p.PID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res, err := late.Wait(); err != nil || res.ExitCode != 7 {
		t.Errorf("late connect: %+v, %v", res, err)
	}
	if list, _ := h.c.List(ctx); len(list) != 0 {
		t.Errorf("List after exit = %+v", list)
	}
	if err := h.c.SendInput(ctx, p.PID, []byte("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("input after exit: %v, want failed precondition", err)
	}
	// Once forgotten it is not found.
	h.a.procs.forgetExpired(time.Now().Add(time.Hour))
	if _, err := h.c.Connect(ctx, p.PID, nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("connect after retention: %v, want not found", err)
	}
	// The tag is free again.
	if res, _, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"true"}, Tag: "echoer"}); res.Status != agentclient.StatusSuccess {
		t.Errorf("reusing the tag: %+v", res)
	}
}

func TestSignals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "100"}})
		if err != nil {
			t.Fatal(err)
		}
		if err := h.c.Signal(ctx, p.PID, int(sig)); err != nil {
			t.Fatal(err)
		}
		res, err := p.Wait()
		if err != nil || res.Status != agentclient.StatusKilled || res.Signal != int(sig) || res.ExitCode != -1 {
			t.Errorf("after %v: %+v, %v", sig, res, err)
		}
	}
	p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = h.raw.SendSignal(ctx, connect.NewRequest(&agentv1.SendSignalRequest{Process: pidSel(p.PID), Signal: 65}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("signal 65: %v, want invalid argument", err)
	}
	if err := h.c.Signal(ctx, 999999999, 15); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown pid: %v, want not found", err)
	}
	if err := h.c.SendInput(ctx, p.PID, []byte("x")); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("input without stdin: %v, want failed precondition", err)
	}
	if err := h.c.Resize(ctx, p.PID, agentclient.PtySize{Cols: 10, Rows: 10}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("resize without terminal: %v, want failed precondition", err)
	}
}

func TestConcurrentExecs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out bytes.Buffer
			res, err := h.c.Exec(context.Background(), agentclient.ExecRequest{
				Shell: fmt.Sprintf("echo %d; echo e%d >&2", i, i), Stdout: &out,
			})
			if err != nil || res.Status != agentclient.StatusSuccess || out.String() != fmt.Sprintf("%d\n", i) {
				t.Errorf("exec %d: %+v %v %q", i, res, err, out.String())
			}
		}()
	}
	wg.Wait()
	if n := h.a.procs.count(); n != 0 {
		t.Errorf("count = %d after all exited", n)
	}
}

func TestMaxProcesses(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(o *Options) { o.MaxProcesses = 2 })
	ctx := context.Background()
	var ps []*agentclient.Process
	for range 2 {
		p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "100"}})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if _, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("third process: %v, want resource exhausted", err)
	}
	if err := h.c.Signal(ctx, ps[0].PID, int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	if _, err := ps[0].Wait(); err != nil {
		t.Fatal(err)
	}
	if res, _, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"true"}}); res.Status != agentclient.StatusSuccess {
		t.Errorf("after one exited: %+v", res)
	}
}

func TestUsageReported(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	// Burn a little CPU and touch ~64 MiB.
	res, _, _ := h.exec(t, agentclient.ExecRequest{Shell: "head -c 67108864 /dev/zero | tail -c 1 >/dev/null; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"})
	if res.CPUTime <= 0 || res.PeakMemoryBytes < 1<<20 {
		t.Errorf("cpu %v peak %d, want both reported", res.CPUTime, res.PeakMemoryBytes)
	}
}

func TestSwitchUser(t *testing.T) {
	testutil.RequireRoot(t, "switching users needs root")
	t.Parallel()
	h := newHarness(t, func(o *Options) {
		o.Users["nobody"] = User{Name: "nobody", UID: 65534, GID: 65534, Home: "/"}
	})
	// t.TempDir directories are 0700; nobody must be able to enter the root.
	for _, d := range []string{h.root, filepath.Dir(h.root)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{Shell: "id -u; id -g; id -G", User: "nobody"})
	if got := strings.Fields(stdout); strings.Join(got, " ") != "65534 65534 65534" {
		t.Errorf("id as nobody: %q (%+v), want uid, gid and groups 65534 only", stdout, res)
	}
}

func BenchmarkExecTrue(b *testing.B) {
	h := newHarness(b, nil)
	ctx := context.Background()
	req := agentclient.ExecRequest{Argv: []string{"/bin/true"}}
	for b.Loop() {
		res, err := h.c.Exec(ctx, req)
		if err != nil || res.Status != agentclient.StatusSuccess {
			b.Fatalf("exec: %+v %v", res, err)
		}
	}
}

// The agent never compresses (it talks over a local socket), even to a
// client that offers gzip, and refuses oversized request messages.
func TestNoCompressionAndMessageCap(t *testing.T) {
	h := newHarness(t, nil)
	ctx := context.Background()
	gz := agentv1connect.NewProcessServiceClient(h.srv.http, "http://agent") // accepts gzip by default
	stream, err := gz.Start(ctx, connect.NewRequest(&agentv1.StartRequest{
		Config: &agentv1.ProcessConfig{Shell: "head -c 100000 /dev/zero"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	for stream.Receive() {
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if enc := stream.ResponseHeader().Get("Connect-Content-Encoding"); enc != "" {
		t.Fatalf("response compressed with %q", enc)
	}
	stream.Close()

	_, err = h.raw.SendInput(ctx, connect.NewRequest(&agentv1.SendInputRequest{
		Process: &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Pid{Pid: 1}},
		Data:    make([]byte, MaxMessageBytes+1),
	}))
	if connect.CodeOf(err) != connect.CodeResourceExhausted {
		t.Fatalf("oversized message: %v", err)
	}
}
