//go:build linux

package cgroups

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The agent side is exercised by a re-exec of the test binary as an
// unprivileged uid (agentUID, like the host uid that a sandbox's root maps
// to) holding only the delegated descriptors: helperEnv carries the spec,
// and the helper obeys tab-separated commands on stdin, one reply line each.

const (
	helperEnv  = "AIRLOCK_CGROUPS_TEST_AGENT"
	agentUID   = 100000
	testParent = "airlock-cgtest"
)

var testOwner = Owner{UID: agentUID, GID: agentUID}

func TestMain(m *testing.M) {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(agentMain(spec))
	}
	if role := os.Getenv(containerEnv); role != "" {
		os.Exit(containerMain(role))
	}
	code := m.Run()
	if helperDir != "" {
		os.RemoveAll(helperDir)
	}
	// Remove the test parent where it is empty (another run may be using it).
	if os.Geteuid() == 0 {
		dirs, _ := filepath.Glob("/sys/fs/cgroup/*/" + testParent)
		for _, d := range append(dirs, "/sys/fs/cgroup/"+testParent) {
			syscall.Rmdir(d)
		}
	}
	os.Exit(code)
}

func classWord(err error) string {
	return strings.ReplaceAll(errdefs.Class(err).Error(), " ", "_")
}

// agentMain is the emulated agent.
func agentMain(spec string) int {
	out := bufio.NewWriter(os.Stdout)
	reply := func(format string, args ...any) {
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	d, err := OpenSpec(spec)
	if err != nil {
		reply("err %s %v", classWord(err), err)
		return 1
	}
	defer d.Close()
	execs := map[string]*Exec{}
	cmds := map[string]*exec.Cmd{}
	// Like the real agent, the helper reaps its children as they exit
	// (Exec.Kill waits for that); "wait" collects the result.
	waited := map[string]chan error{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Split(sc.Text(), "\t")
		var err error
		var res string
		switch {
		case f[0] == "new" && len(f) == 2:
			var e *Exec
			if e, err = d.New(f[1]); err == nil {
				execs[f[1]] = e
			}
		case f[0] == "start" && len(f) >= 3:
			cmd := exec.Command(f[2], f[3:]...)
			cmd.SysProcAttr = &syscall.SysProcAttr{}
			var pid int
			pid, err = execs[f[1]].Start(cmd.SysProcAttr, func() (int, error) {
				if err := cmd.Start(); err != nil {
					return 0, err
				}
				return cmd.Process.Pid, nil
			})
			cmds[f[1]] = cmd
			if pid > 0 {
				ch := make(chan error, 1)
				waited[f[1]] = ch
				go func() { ch <- cmd.Wait() }()
			}
			res = fmt.Sprint(pid)
		case f[0] == "wait" && len(f) == 2:
			werr := <-waited[f[1]]
			res = cmds[f[1]].ProcessState.String()
			var ee *exec.ExitError
			if werr != nil && !errors.As(werr, &ee) {
				err = werr
			}
		case f[0] == "kill" && len(f) == 2:
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err = execs[f[1]].Kill(ctx)
			cancel()
		case f[0] == "usage" && len(f) == 2:
			var u Usage
			u, err = execs[f[1]].Usage()
			res = fmt.Sprintf("%d %d %d", u.CPUTime, u.PeakMemoryBytes, u.OOMKills)
		case f[0] == "close" && len(f) == 2:
			err = execs[f[1]].Close()
		case f[0] == "sweep":
			err = d.Sweep()
		case f[0] == "writelimit":
			// The agent must not be able to raise its limits.
			err = d.work.write(d.tab.memLimit, "1099511627776")
		case f[0] == "enterhome":
			err = EnterHome(spec)
		case f[0] == "mkdirhome":
			err = d.home.mkdir("escape")
		default:
			err = fmt.Errorf("bad command %q", sc.Text())
		}
		if err != nil {
			reply("err %s %v", classWord(err), err)
		} else {
			reply("ok %s", res)
		}
	}
	return 0
}

var (
	helperOnce sync.Once
	helperDir  string
	helperPath string
	helperErr  error
)

// helperBinary copies the test binary where agentUID can execute it (go
// test's build directory is private).
func helperBinary(t testing.TB) string {
	helperOnce.Do(func() {
		src, err := os.Executable()
		if err != nil {
			helperErr = err
			return
		}
		if helperDir, err = os.MkdirTemp("", "airlock-cgtest-"); err != nil {
			helperErr = err
			return
		}
		if err = os.Chmod(helperDir, 0o755); err != nil {
			helperErr = err
			return
		}
		b, err := os.ReadFile(src)
		if err != nil {
			helperErr = err
			return
		}
		helperPath = filepath.Join(helperDir, "agent")
		helperErr = os.WriteFile(helperPath, b, 0o755)
	})
	if helperErr != nil {
		t.Fatalf("helper binary: %v", helperErr)
	}
	return helperPath
}

// agentProc is a running emulated agent.
type agentProc struct {
	t   testing.TB
	cmd *exec.Cmd
	in  *os.File
	out *os.File
	rd  *bufio.Reader
}

// startAgent starts the emulated agent as agentUID with s's delegation and
// moves it into <id>/agent the way the daemon does.
func startAgent(t testing.TB, s *Sandbox) *agentProc {
	t.Helper()
	return startAgentIn(t, s, true)
}

// startAgentIn is startAgent that leaves the agent in <id> unless
// toAgent.
func startAgentIn(t testing.TB, s *Sandbox, toAgent bool) *agentProc {
	t.Helper()
	del, err := s.Delegate()
	if err != nil {
		t.Fatalf("Delegate: %v", err)
	}
	files, spec := del.ExtraFiles(3)
	inR, inW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(helperBinary(t))
	cmd.Env = []string{helperEnv + "=" + spec, "PATH=/usr/bin:/bin"}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, os.Stderr
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: agentUID, Gid: agentUID, Groups: []uint32{}},
		Pdeathsig:  syscall.SIGKILL,
	}
	err = cmd.Start()
	inR.Close()
	outW.Close()
	del.Close()
	if err != nil {
		t.Fatalf("start agent: %v", err)
	}
	a := &agentProc{t: t, cmd: cmd, in: inW, out: outR, rd: bufio.NewReader(outR)}
	t.Cleanup(func() {
		a.in.Close()
		// Kill the sandbox first: it also thaws, so the agent can die even
		// if a failed test left it frozen.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Kill(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("cleanup Kill: %v", err)
		}
		a.cmd.Process.Kill()
		a.cmd.Wait()
		a.out.Close()
	})
	if err := s.Enter(cmd.Process.Pid); err != nil {
		t.Fatalf("Enter: %v", err)
	}
	if !toAgent {
		return a
	}
	if err := s.MoveToAgent(cmd.Process.Pid); err != nil {
		t.Fatalf("MoveToAgent: %v", err)
	}
	return a
}

// do sends one command and returns the reply: "ok ..." or "err <class> ...".
func (a *agentProc) do(args ...string) string {
	a.t.Helper()
	if _, err := fmt.Fprintln(a.in, strings.Join(args, "\t")); err != nil {
		a.t.Fatalf("agent %v: %v", args, err)
	}
	a.out.SetReadDeadline(time.Now().Add(20 * time.Second))
	line, err := a.rd.ReadString('\n')
	if err != nil {
		a.t.Fatalf("agent %v: no reply: %v", args, err)
	}
	return strings.TrimSuffix(line, "\n")
}

// ok runs a command that must succeed and returns what follows "ok ".
func (a *agentProc) ok(args ...string) string {
	a.t.Helper()
	r := a.do(args...)
	if !strings.HasPrefix(r, "ok") {
		a.t.Fatalf("agent %v: %s", args, r)
	}
	return strings.TrimPrefix(strings.TrimPrefix(r, "ok"), " ")
}

var idSeq atomic.Int64

func newID() string { return fmt.Sprintf("test-%d-%d", os.Getpid(), idSeq.Add(1)) }

func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "needs root: creates cgroups and chowns them")
}

// managers returns a Manager per cgroup version this host can exercise: the
// detected one, and v2 on the unified mount of a v1 host too (it has no
// controllers there, but freezing, killing, CPU time, delegation and
// CLONE_INTO_CGROUP are core v2 features and work).
func managers(t testing.TB) map[Version]*Manager {
	requireRoot(t)
	out := map[Version]*Manager{}
	l, err := hostLayout()
	if err != nil {
		t.Logf("no detected cgroup version: %v", err)
	} else {
		m, err := newManager(l, testParent, nil)
		if err != nil {
			t.Fatalf("newManager(%v): %v", l.v, err)
		}
		out[l.v] = m
	}
	if out[V2] == nil {
		f, err := os.Open("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		ms, err := parseMountinfo(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		for _, mi := range ms {
			if mi.fstype == "cgroup2" && mi.root == "/" {
				m, err := newManager(layout{v: V2, hiers: []mountedHier{{hier{name: v2Name}, mi.point}}}, testParent, nil)
				if err != nil {
					t.Fatalf("newManager(v2 at %s): %v", mi.point, err)
				}
				out[V2] = m
				break
			}
		}
	}
	if len(out) == 0 {
		t.Skip("no cgroup hierarchy to test")
	}
	return out
}

// forEach runs f as a subtest for every version this host can exercise.
func forEach(t *testing.T, f func(t *testing.T, m *Manager)) {
	ms := managers(t)
	for _, v := range []Version{V1, V2} {
		if m := ms[v]; m != nil {
			t.Run(v.String(), func(t *testing.T) { f(t, m) })
		}
	}
}

// hasController reports whether sandboxes of m get ctrl.
func hasController(t testing.TB, m *Manager, ctrl string) bool {
	if m.l.v == V1 {
		return true
	}
	b, err := os.ReadFile(filepath.Join(m.l.hiers[0].mount, m.parent, "cgroup.subtree_control"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(" "+strings.TrimSpace(string(b))+" ", " "+ctrl+" ")
}

// create makes a sandbox that is killed, removed and checked gone at the end.
func create(t testing.TB, m *Manager, l Limits) *Sandbox {
	t.Helper()
	s, err := m.Create(newID(), l, testOwner)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := s.Kill(ctx); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("cleanup Kill: %v", err)
		}
		if err := s.Remove(ctx); err != nil {
			t.Errorf("cleanup Remove: %v", err)
		}
		assertGone(t, m, s.ID())
	})
	return s
}

// assertGone checks that no hierarchy has the sandbox any more.
func assertGone(t testing.TB, m *Manager, id string) {
	t.Helper()
	for _, h := range m.l.hiers {
		p := filepath.Join(h.mount, m.parent, id)
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists (%v)", p, err)
		}
	}
}

// path is the host path of rel below s in hierarchy h.
func (s *Sandbox) testPath(h mountedHier, rel ...string) string {
	return filepath.Join(append([]string{h.mount, s.m.parent, s.id}, rel...)...)
}

// readTrim reads a file and trims it.
func readTrim(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// procCgroups returns /proc/<pid>/cgroup (or a task's) as hierarchy → path:
// v1 lines by controller, the v2 line under v2Name.
func procCgroups(t testing.TB, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, line := range strings.Split(readTrim(t, path), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			t.Fatalf("bad %s line %q", path, line)
		}
		if parts[1] == "" {
			out[v2Name] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out
}

// assertIn checks that the process or task at /proc path is in the cgroup
// <parent>/<id>/<rel> in every hierarchy of s.
func assertIn(t testing.TB, s *Sandbox, procPath, rel string) {
	t.Helper()
	got := procCgroups(t, procPath)
	want := "/" + s.rel()
	if rel != "" {
		want += "/" + rel
	}
	for _, h := range s.m.l.hiers {
		keys := h.ctrls
		if s.m.l.v == V2 {
			keys = []string{v2Name}
		}
		for _, k := range keys {
			if got[k] != want {
				t.Errorf("%s: %s cgroup = %q, want %q", procPath, k, got[k], want)
			}
		}
	}
}

// startGated starts sh -c script as root, held until it is in the sandbox,
// and kills it at the end.
func startGated(t testing.TB, s *Sandbox, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", "-c", "read _; "+script)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if err := s.Enter(cmd.Process.Pid); err != nil {
		t.Fatalf("Enter: %v", err)
	}
	if _, err := io.WriteString(in, "\n"); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// waitFor polls cond for up to 10 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
