//go:build linux

package agent

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestParseStat(t *testing.T) {
	rest := " 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"
	tests := []struct {
		name, in string
		want     procStat
		bad      bool
	}{
		{"plain", "42 (sleep) S 1 42 42" + rest, procStat{pid: 42, ppid: 1, session: 42, state: 'S', comm: "sleep", startTicks: 12345}, false},
		{"comm with parentheses and spaces", "7 (a) b) (c d) R 3 7 5" + rest, procStat{pid: 7, ppid: 3, session: 5, state: 'R', comm: "a) b) (c d", startTicks: 12345}, false},
		{"zombie", "9 (sh) Z 1 9 9" + rest, procStat{pid: 9, ppid: 1, session: 9, state: 'Z', comm: "sh", startTicks: 12345}, false},
		{"no parentheses", "9 sh Z 1 9 9" + rest, procStat{}, true},
		{"too few fields", "9 (sh) S 1 9 9 0", procStat{}, true},
		{"bad pid", "x (sh) S 1 9 9" + rest, procStat{}, true},
		{"bad state", "9 (sh) SS 1 9 9" + rest, procStat{}, true},
		{"bad session", "9 (sh) S 1 9 x" + rest, procStat{}, true},
		{"empty", "", procStat{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.in))
			if tt.bad {
				if err == nil {
					t.Fatalf("parseStat = %+v, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseStat = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
	// The agent's own stat parses.
	if st, err := readStat(os.Getpid()); err != nil || st.pid != os.Getpid() || st.startTicks == 0 {
		t.Errorf("own stat: %+v, %v", st, err)
	}
}

// FuzzParseStat: a sandboxed process names itself (comm), so the stat line
// is partly chosen by the sandbox.
func FuzzParseStat(f *testing.F) {
	f.Add([]byte("42 (sleep) S 1 42 42 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 12345 0 0"))
	f.Add([]byte("7 (a) b) (c d) R 3 7 5 0 0 0 0 0 0 0 0 0 0 0 20 0 1 0 1 0 0"))
	f.Add([]byte("1 ()) Z"))
	f.Fuzz(func(t *testing.T, b []byte) {
		st, err := parseStat(b)
		if err == nil && (st.pid <= 0 || st.state == 0) {
			t.Fatalf("parseStat(%q) = %+v without an error", b, st)
		}
	})
}

func TestParseCgroup(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"v1 in a sandbox", "12:pids:/../work/c3\n11:memory:/../work/c3\n1:name=systemd:/user.slice\n", "/work/c3"},
		{"v1 pids with others", "4:cpu,cpuacct:/a\n3:freezer,pids:/b/c\n", "/b/c"},
		{"v2", "0::/../work/c1\n", "/work/c1"},
		{"v1 without pids", "3:memory:/m\n0::/u\n", "/u"},
		{"first", "3:memory:/m\n", "/m"},
		{"none", "", ""},
		{"malformed", "garbage\n", ""},
	}
	for _, tt := range tests {
		if got := parseCgroup([]byte(tt.in)); got != tt.want {
			t.Errorf("%s: parseCgroup = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		max       int
		cut       bool
		want      []string
		truncated bool
	}{
		{"args", "sleep\x00100\x00", 64, false, []string{"sleep", "100"}, false},
		{"empty arg", "a\x00\x00b\x00", 64, false, []string{"a", "", "b"}, false},
		{"zombie", "", 64, false, nil, false},
		{"too many", "a\x00b\x00c\x00", 2, false, []string{"a", "b"}, true},
		{"cut bytes", "a\x00bb", 64, true, []string{"a", "bb"}, true},
		{"invalid utf-8", "\xff\x00", 64, false, []string{"\uFFFD"}, false},
	}
	for _, tt := range tests {
		got, tr := parseCmdline([]byte(tt.in), tt.max, tt.cut)
		if !slices.Equal(got, tt.want) || tr != tt.truncated {
			t.Errorf("%s: parseCmdline = %q, %v; want %q, %v", tt.name, got, tr, tt.want, tt.truncated)
		}
	}
}

// findProc returns the listed process with pid.
func findProc(l *agentclient.ProcessList, pid int) *agentclient.SandboxProcess {
	for i := range l.Processes {
		if l.Processes[i].PID == pid {
			return &l.Processes[i]
		}
	}
	return nil
}

// startOutsider starts a process the agent did not start (out of its
// scope outside a PID namespace), killed at the end of the test.
func startOutsider(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestListAllAndSignalAny: outside a PID namespace the sandbox's processes
// are those in the sessions of the processes the agent started, children
// included; others are neither listed nor signalled.
func TestListAllAndSignalAny(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	outsider := startOutsider(t)
	var out syncBuffer
	p, err := h.c.Start(ctx, agentclient.ExecRequest{
		Shell: "sleep 301 & echo $!; exec sleep 302", Background: true, Tag: "srv", Stdout: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "\n")
	child, err := strconv.Atoi(strings.TrimSpace(out.String()))
	if err != nil {
		t.Fatalf("child pid %q: %v", out.String(), err)
	}
	l, err := h.c.ListAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if l.Total != len(l.Processes) || l.Truncated || l.Total != 2 {
		t.Errorf("ListAll: total %d, truncated %v, %d processes; want 2: %+v", l.Total, l.Truncated, len(l.Processes), l.Processes)
	}
	main, kid := findProc(l, p.PID), findProc(l, child)
	if main == nil || kid == nil {
		t.Fatalf("ListAll = %+v; want %d and its child %d", l.Processes, p.PID, child)
	}
	if !main.Tracked || main.Tag != "srv" || !main.Background || main.Session != p.PID ||
		!slices.Equal(main.Argv, []string{"sleep", "302"}) || main.Name != "sleep" {
		t.Errorf("started process: %+v", *main)
	}
	if kid.Tracked || kid.Tag != "" || kid.Session != p.PID || kid.PPID != p.PID ||
		!slices.Equal(kid.Argv, []string{"sleep", "301"}) {
		t.Errorf("child: %+v", *kid)
	}
	for _, sp := range []*agentclient.SandboxProcess{main, kid} {
		if sp.User != "user" || sp.UID != os.Getuid() || (sp.State != "S" && sp.State != "R") {
			t.Errorf("pid %d: user %q uid %d state %q", sp.PID, sp.User, sp.UID, sp.State)
		}
		if d := time.Since(sp.StartedAt); d < -2*time.Second || d > time.Minute {
			t.Errorf("pid %d started at %v", sp.PID, sp.StartedAt)
		}
	}
	if findProc(l, outsider.Process.Pid) != nil || findProc(l, os.Getpid()) != nil {
		t.Errorf("ListAll shows a process outside the sandbox: %+v", l.Processes)
	}

	// Signals: validation, scope, then the untracked child.
	for _, tc := range []struct {
		pid, sig int
		want     error
	}{
		{child, 0, errdefs.ErrInvalidArgument},
		{child, 65, errdefs.ErrInvalidArgument},
		{os.Getpid(), 15, errdefs.ErrPermissionDenied},
		{outsider.Process.Pid, 9, errdefs.ErrNotFound},
		{999999999, 15, errdefs.ErrNotFound},
	} {
		_, err := h.raw.SignalAny(ctx, connect.NewRequest(&agentv1.SignalAnyRequest{Pid: uint32(tc.pid), Signal: int32(tc.sig)}))
		if !errors.Is(agentwire.FromConnect(err), tc.want) {
			t.Errorf("SignalAny(%d, %d) = %v, want %v", tc.pid, tc.sig, err, tc.want)
		}
	}
	if gone(outsider.Process.Pid) {
		t.Fatal("the process outside the sandbox was killed")
	}
	if err := h.c.SignalAny(ctx, child, int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	waitGone(t, child, 5*time.Second)
	// A tracked process is signalled as SendSignal does.
	if err := h.c.SignalAny(ctx, p.PID, int(syscall.SIGTERM)); err != nil {
		t.Fatal(err)
	}
	res, err := h.c.Connect(ctx, p.PID, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := res.Wait(); err != nil || r.Status != agentclient.StatusKilled || r.Signal != int(syscall.SIGTERM) {
		t.Errorf("tracked process after SIGTERM: %+v, %v", r, err)
	}
}

// TestKillAllSessions: outside a PID namespace KillAll kills the trees
// the agent started, the orphans of a process that has exited included,
// and nothing else.
func TestKillAllSessions(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	outsider := startOutsider(t)
	// The command returns at once and leaves two background sleepers.
	res, _, _ := h.exec(t, agentclient.ExecRequest{Shell: "sleep 303 & sleep 304 & exit 0"})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("exec: %+v", res)
	}
	bg, err := h.c.Start(ctx, agentclient.ExecRequest{Shell: "sleep 305 & exec sleep 306", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	var l *agentclient.ProcessList
	deadline := time.Now().Add(5 * time.Second)
	for {
		if l, err = h.c.ListAll(ctx); err != nil {
			t.Fatal(err)
		}
		if len(l.Processes) == 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if len(l.Processes) != 4 {
		t.Fatalf("before KillAll: %+v; want 4 sleepers", l.Processes)
	}
	if _, err := h.raw.KillAll(ctx, connect.NewRequest(&agentv1.KillAllRequest{TimeoutMs: 61000})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("KillAll with a 61 s wait: %v, want invalid argument", err)
	}
	n, err := h.c.KillAll(ctx, 0)
	if err != nil || n != 4 {
		t.Fatalf("KillAll = %d, %v; want 4", n, err)
	}
	for _, sp := range l.Processes {
		if !gone(sp.PID) {
			t.Errorf("pid %d (%q) survived KillAll", sp.PID, sp.Argv)
		}
	}
	if r, err := bg.Wait(); err != nil || r.Status != agentclient.StatusKilled {
		t.Errorf("background process after KillAll: %+v, %v", r, err)
	}
	if gone(outsider.Process.Pid) {
		t.Fatal("KillAll killed a process outside the sandbox")
	}
	// Orphans are reparented outside the sandbox here, whose init may be
	// slow to reap their zombies.
	l, err = h.c.ListAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, sp := range l.Processes {
		if sp.State != "Z" {
			t.Errorf("after KillAll: %+v", sp)
		}
	}
	// Nothing left: a second KillAll kills nothing.
	if n, err := h.c.KillAll(ctx, 0); err != nil || n != 0 {
		t.Errorf("second KillAll = %d, %v", n, err)
	}
}

func TestListAllCaps(t *testing.T) {
	t.Parallel()
	h := newHarness(t, nil)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		n     int // arguments after "sh"
		size  int // bytes each
		check func(sp *agentclient.SandboxProcess) bool
	}{
		{"many arguments", 100, 10, func(sp *agentclient.SandboxProcess) bool { return len(sp.Argv) == maxArgvListed }},
		{"long arguments", 50, 200, func(sp *agentclient.SandboxProcess) bool {
			n := 0
			for _, a := range sp.Argv {
				n += len(a) + 1
			}
			return len(sp.Argv) < 50 && n >= maxArgvBytes-200 && n <= maxArgvBytes+1
		}},
	} {
		args := []string{"/bin/sh", "-c", "sleep 300", "sh"}
		for i := range tc.n {
			args = append(args, strings.Repeat(strconv.Itoa(i%10), tc.size))
		}
		p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: args, Background: true})
		if err != nil {
			t.Fatal(err)
		}
		l, err := h.c.ListAll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		sp := findProc(l, p.PID)
		if sp == nil {
			t.Fatalf("%s: %d is not listed", tc.name, p.PID)
		}
		if !sp.ArgvTruncated || sp.Argv[0] != "/bin/sh" || !tc.check(sp) {
			t.Errorf("%s: %d arguments, truncated %v", tc.name, len(sp.Argv), sp.ArgvTruncated)
		}
		if err := h.c.SignalAny(ctx, p.PID, int(syscall.SIGKILL)); err != nil {
			t.Fatal(err)
		}
	}
}

const killAllNSHelperEnv = "AIRLOCK_AGENT_KILLALL_NS_HELPER"

// TestKillAllNamespace runs TestKillAllNamespaceHelper as PID 1 of a new
// PID namespace, where the agent's view is the whole namespace.
func TestKillAllNamespace(t *testing.T) {
	testutil.RequireRoot(t, "needs root for a PID namespace")
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestKillAllNamespaceHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), killAllNSHelperEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID | syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestKillAllNamespaceHelper") {
		t.Fatalf("helper failed: %v\n%s", err, out)
	}
}

// TestKillAllNamespaceHelper plays a sandbox's agent: PID 1 with its own
// /proc. A command leaves a process that forks without end and an orphan;
// KillAll leaves nothing but the agent, and the agent runs commands again.
func TestKillAllNamespaceHelper(t *testing.T) {
	if os.Getenv(killAllNSHelperEnv) == "" {
		t.Skip("runs only as the child of TestKillAllNamespace")
	}
	if os.Getpid() != 1 {
		t.Fatalf("pid %d, want 1", os.Getpid())
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, func(o *Options) { o.ReapAll = true })
	ctx := context.Background()
	res, _, _ := h.exec(t, agentclient.ExecRequest{
		Shell: "(while :; do sleep 100 & sleep 0.01; done) >/dev/null 2>&1 & (setsid sleep 200 &) ; exit 0",
	})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("exec: %+v", res)
	}
	var l *agentclient.ProcessList
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, err = h.c.ListAll(ctx); err != nil {
			t.Fatal(err)
		}
		if len(l.Processes) >= 10 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	setsid := false
	for _, sp := range l.Processes {
		if sp.PID == 1 || sp.Tracked {
			t.Errorf("listed %+v", sp)
		}
		setsid = setsid || slices.Equal(sp.Argv, []string{"sleep", "200"}) && sp.Session == sp.PID
	}
	if len(l.Processes) < 10 || !setsid {
		t.Fatalf("before KillAll: %d processes, the setsid one listed: %v: %+v", len(l.Processes), setsid, l.Processes)
	}
	n, err := h.c.KillAll(ctx, 0)
	if err != nil || n < len(l.Processes) {
		t.Fatalf("KillAll = %d, %v; want at least %d", n, err, len(l.Processes))
	}
	pids, err := procPids()
	if err != nil || !slices.Equal(pids, []int{1}) {
		t.Fatalf("after KillAll /proc holds %v, %v; want only the agent", pids, err)
	}
	if res, out, _ := h.exec(t, agentclient.ExecRequest{Shell: "echo ok"}); res.Status != agentclient.StatusSuccess || out != "ok\n" {
		t.Errorf("exec after KillAll: %+v %q", res, out)
	}
}
