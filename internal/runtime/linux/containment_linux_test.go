package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// The containment suite: the agent holds descriptors of directories outside
// the sandbox's root (its delegated cgroups, the writable layer) and every
// capability of the sandbox's user namespace. Nothing a command names or
// the sandbox plants — a working directory, an executable, a script's
// interpreter, a WORKDIR — may lead through those into a cgroup's task
// list or the host's file tree, as `user` or as root, in an ordinary or a
// build sandbox. Each test fails on the agent before the forking thread
// dropped its privileges and resolved the cwd itself (see
// internal/agent/forkthread_linux.go), or before the delegated cgroup
// directories were handed out on detached mounts.

// climb is enough ".." to leave any directory of the host.
var climb = strings.Repeat("../", 48)

// fdPrefixes name the agent's descriptors from inside a sandbox: its own
// (PID 1), through a thread, and the forked child's own copies before
// execve (self, thread-self).
var fdPrefixes = []string{"/proc/1/fd/", "/proc/1/task/1/fd/", "/proc/self/fd/", "/proc/thread-self/fd/"}

// agentFDs lists the descriptor numbers the sandbox's agent holds, read
// from the host.
func agentFDs(t *testing.T, sb *runtimetest.Sandbox) []int {
	t.Helper()
	pid := sb.Instance.(*Instance).Pid()
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	var fds []int
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			fds = append(fds, n)
		}
	}
	slices.Sort(fds)
	if len(fds) < 8 {
		t.Fatalf("agent holds only %d descriptors: %v", len(fds), fds)
	}
	return fds
}

// escapeMarker is a host directory the sandbox cannot see, holding an
// executable script that prints escapedText and a listening unix socket.
type escapeMarker struct {
	script, socket string
	accepted       chan struct{}
}

const escapedText = "ESCAPED-FROM-SANDBOX"

func newEscapeMarker(t *testing.T) *escapeMarker {
	t.Helper()
	setupBase(t)
	dir, err := os.MkdirTemp(testBase, "host-only-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	m := &escapeMarker{script: filepath.Join(dir, "escape.sh"), socket: filepath.Join(dir, "host.sock"), accepted: make(chan struct{}, 64)}
	if err := os.WriteFile(m.script, []byte("#!/bin/sh\necho "+escapedText+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", m.socket)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(m.socket, 0o777); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
			select {
			case m.accepted <- struct{}{}:
			default:
			}
		}
	}()
	return m
}

// exec runs req and returns its output and error, without failing.
func execOut(ctx context.Context, sb *runtimetest.Sandbox, req agentclient.ExecRequest) (*agentclient.ExecResult, string, error) {
	var out bytes.Buffer
	req.Stdout, req.Stderr = &out, &out
	if req.Timeout == 0 {
		req.Timeout = 20 * time.Second
	}
	res, err := sb.Client.Exec(ctx, req)
	return res, out.String(), err
}

// requireRefusedCwd runs a command in cwd and requires the agent to refuse
// the working directory before anything runs.
func requireRefusedCwd(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, user, cwd string) {
	t.Helper()
	res, out, err := execOut(ctx, sb, agentclient.ExecRequest{Shell: "pwd -P; ls -a", User: user, Cwd: cwd})
	if err == nil {
		t.Fatalf("%s with cwd %q ran: %+v, output %q", user, cwd, res, out)
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "cwd") {
		t.Fatalf("%s with cwd %q: want an invalid-argument error about the cwd, got %v", user, cwd, err)
	}
}

// containedSandboxes are an ordinary and a build sandbox (whose root keeps
// eight capabilities after execve) with limits to escape from. The caller
// destroys them; a cleanup destroys what it left.
func containedSandboxes(t *testing.T, ctx context.Context, rt *Runtime) map[string]*runtimetest.Sandbox {
	t.Helper()
	rootfs := hostRootfsFor(t)
	// A WORKDIR in a directory the sandbox's user may change.
	rootfs.Workdir = plantedWorkdir
	limits := runtime.Limits{MemoryBytes: 256 << 20, Pids: 128}
	sbs := map[string]*runtimetest.Sandbox{}
	for kind, build := range map[string]bool{"sandbox": false, "build": true} {
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("contain"), Rootfs: rootfs, Limits: limits, Build: build})
		if err != nil {
			t.Fatalf("create %s: %v", kind, err)
		}
		sb := &runtimetest.Sandbox{Instance: inst, Client: agentclient.New(inst.Dial)}
		t.Cleanup(func() {
			sb.Client.Close()
			if _, err := os.Stat(filepath.Join(rt.cfg.StateDir, inst.ID())); err == nil {
				_ = inst.Destroy(context.Background())
			}
		})
		sbs[kind] = sb
	}
	return sbs
}

func TestAttackContainment(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	before, err := takeSnapshot(rt)
	if err != nil {
		t.Fatal(err)
	}
	marker := newEscapeMarker(t)
	sbs := containedSandboxes(t, ctx, rt)
	for kind, sb := range sbs {
		fds := agentFDs(t, sb)
		t.Run(kind+"/cwd-names-agent-fd", func(t *testing.T) { testCwdNamesAgentFD(t, ctx, sb, fds) })
		t.Run(kind+"/planted-cwd", func(t *testing.T) { testPlantedCwd(t, ctx, sb, fds) })
		t.Run(kind+"/planted-workdir", func(t *testing.T) { testPlantedWorkdir(t, ctx, sb, kind, fds) })
		t.Run(kind+"/planted-cwd-race", func(t *testing.T) { testPlantedCwdRace(t, ctx, sb, fds) })
		t.Run(kind+"/exec-through-agent-fd", func(t *testing.T) { testExecThroughAgentFD(t, ctx, sb, fds, marker) })
		t.Run(kind+"/host-paths-after-exec", func(t *testing.T) { testHostPathsAfterExec(t, ctx, sb, fds, marker) })
		t.Run(kind+"/agent-dirs-detached", func(t *testing.T) { testAgentDirsDetached(t, sb) })
		t.Run(kind+"/file-api-host-details", func(t *testing.T) { testFileAPIHostDetails(t, ctx, rt, sb, fds) })
		if res, out, err := execOut(ctx, sb, agentclient.ExecRequest{Shell: "echo ok", User: "root"}); err != nil || out != "ok\n" {
			t.Fatalf("%s after the attacks: %+v %q %v", kind, res, out, err)
		}
	}
	select {
	case <-marker.accepted:
		t.Error("a sandbox connected to the host's unix socket")
	default:
	}
	// Every sandbox that tried the escapes above is destroyed completely.
	for kind, sb := range sbs {
		if err := sb.Instance.Destroy(ctx); err != nil {
			t.Fatalf("destroy %s: %v", kind, err)
		}
	}
	requireNoLeaks(t, rt, before)
}

// testCwdNamesAgentFD names each of the agent's descriptors as a cwd, as
// each user, directly and with ".." after it.
func testCwdNamesAgentFD(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, fds []int) {
	for _, user := range []string{"user", "root"} {
		for _, fd := range fds {
			for _, p := range fdPrefixes {
				n := p + strconv.Itoa(fd)
				requireRefusedCwd(t, ctx, sb, user, n)
				requireRefusedCwd(t, ctx, sb, user, n+"/cgroup.procs/..")
				// A cwd is cleaned lexically first, as every path of
				// the API is: ".." after the link is "/" of the sandbox.
				res, out, err := execOut(ctx, sb, agentclient.ExecRequest{Shell: "pwd -P; ls -a", User: user, Cwd: n + "/" + climb})
				if err != nil || res.Status != agentclient.StatusSuccess || !strings.HasPrefix(out, "/\n") || !strings.Contains(out, "\n.airlock\n") {
					t.Fatalf("%s with cwd %s/%s: %+v %q %v", user, n, climb, res, out, err)
				}
			}
		}
	}
}

// testPlantedCwd: the sandbox's user plants symlinks (direct, chained,
// relative, through a symlinked /proc/self) where a later command's cwd
// will be: in its home, for its own commands (relative cwds), and in a
// directory root can search (/home/user is 0750), for root's.
func testPlantedCwd(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, fds []int) {
	var plant strings.Builder
	var names []string
	for _, fd := range fds {
		for i, target := range []string{"/proc/1/fd/%d", "/proc/self/fd/%d", "../../proc/thread-self/fd/%d", "/proc/1/task/1/fd/%d"} {
			name := fmt.Sprintf("ws-%d-%d", fd, i)
			fmt.Fprintf(&plant, "ln -sfn %s %s; ln -sfn %s chain-%s\n", fmt.Sprintf(target, fd), name, name, name)
			names = append(names, name, "chain-"+name)
		}
		names = append(names, fmt.Sprintf("p/fd/%d", fd))
	}
	for _, dir := range []string{"/home/user", "/tmp/plant"} {
		sb.Sh(t, ctx, "set -e; mkdir -p -m 755 "+dir+"; cd "+dir+"; ln -sfn /proc/self p\n"+plant.String())
	}
	for _, name := range names {
		requireRefusedCwd(t, ctx, sb, "user", name) // relative to home
		requireRefusedCwd(t, ctx, sb, "root", "/tmp/plant/"+name)
	}
}

// plantedWorkdir is the sandboxes' WORKDIR: made root-owned at start, in
// the user's home, where the user may replace it.
const plantedWorkdir = "/home/user/ws"

// testPlantedWorkdir: the user replaces the WORKDIR with a symlink to an
// agent descriptor; commands that name no cwd then start in their user's
// home, never there. In the build sandbox root may enter /home/user, so
// root's fallback is tested there too.
func testPlantedWorkdir(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, kind string, fds []int) {
	if out := sb.Sh(t, ctx, "pwd -P"); out != plantedWorkdir+"\n" {
		t.Fatalf("before planting, commands start in %q, want the WORKDIR", out)
	}
	if kind == "build" {
		if res, out, err := execOut(ctx, sb, agentclient.ExecRequest{Shell: "chmod 755 /home/user", User: "root"}); err != nil || res.Status != agentclient.StatusSuccess {
			t.Fatalf("chmod: %v %+v %q", err, res, out)
		}
	}
	for _, fd := range fds {
		for _, p := range fdPrefixes {
			sb.Sh(t, ctx, fmt.Sprintf("cd /home/user && rm -rf ws && ln -s %s%d ws", p, fd))
			for user, home := range map[string]string{"user": "/home/user", "root": "/root"} {
				res, out, err := execOut(ctx, sb, agentclient.ExecRequest{Shell: "pwd -P; ls -a", User: user})
				if err != nil || res.Status != agentclient.StatusSuccess || !strings.HasPrefix(out, home+"\n") {
					t.Fatalf("%s with WORKDIR -> %s%d: %v %+v %q", user, p, fd, err, res, out)
				}
				// A terminal session's default directory too.
				res, out, err = execOut(ctx, sb, agentclient.ExecRequest{Shell: "pwd -P", User: user, Pty: &agentclient.PtySize{Cols: 80, Rows: 24}})
				if err != nil || res.Status != agentclient.StatusSuccess || strings.TrimSpace(out) != home {
					t.Fatalf("%s on a terminal with WORKDIR -> %s%d: %v %+v %q", user, p, fd, err, res, out)
				}
			}
		}
	}
	sb.Sh(t, ctx, "rm -f /home/user/ws")
}

// testPlantedCwdRace: while the user swaps a directory for a symlink to an
// agent descriptor and back, root commands start there; each either is
// refused or runs in the real directory.
func testPlantedCwdRace(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, fds []int) {
	fd := fds[len(fds)/2]
	swapper, err := sb.Client.Start(ctx, agentclient.ExecRequest{
		Shell: fmt.Sprintf(`mkdir -p /tmp/race; cd /tmp/race; mkdir -p real; i=0; while [ $i -lt 200000 ]; do
ln -sfn /proc/self/fd/%d race.new; mv -T race.new race; ln -sfn real race.new; mv -T race.new race; i=$((i+1)); done`, fd),
		Timeout: 60 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Client.Signal(ctx, swapper.PID, int(syscall.SIGKILL))
	ran, refused := 0, map[string]int{}
	for range 150 {
		res, out, err := execOut(ctx, sb, agentclient.ExecRequest{Shell: "pwd -P; ls -a", User: "root", Cwd: "/tmp/race/race"})
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("race: %v", err)
			}
			refused[err.Error()]++
			continue
		}
		ran++
		if res.Status != agentclient.StatusSuccess || out != "/tmp/race/real\n.\n..\n" {
			t.Fatalf("race: a command ran elsewhere than /tmp/race/real: %+v %q", res, out)
		}
	}
	t.Logf("%d of 150 commands ran (in the real directory), the rest were refused: %v", ran, refused)
}

// testExecThroughAgentFD: an executable, a PATH entry or a script's
// interpreter that leads through an agent descriptor to a host file must
// not run it. Before execve the child holds copies of the agent's
// descriptors, so /proc/self/fd names them then.
func testExecThroughAgentFD(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, fds []int, m *escapeMarker) {
	var plant strings.Builder
	// In a directory root can search too (/home/user is 0750).
	plant.WriteString("set -e; mkdir -p -m 755 /tmp/plant/bin; cd /tmp/plant\n")
	var paths []string
	for _, fd := range fds {
		for i, p := range fdPrefixes {
			host := p + strconv.Itoa(fd) + "/" + climb + strings.TrimPrefix(m.script, "/")
			paths = append(paths, host)
			fmt.Fprintf(&plant, "ln -sfn %s bin/esc-%d-%d; printf '#!%s\\n' > s-%d-%d.sh; chmod +x s-%d-%d.sh\n", host, fd, i, host, fd, i, fd, i)
		}
	}
	sb.Sh(t, ctx, plant.String())
	check := func(user string, req agentclient.ExecRequest) {
		t.Helper()
		req.User = user
		res, out, err := execOut(ctx, sb, req)
		if strings.Contains(out, escapedText) {
			t.Fatalf("%s ran a host file: %q %v: %+v %q", user, req.Argv, err, res, out)
		}
	}
	for _, user := range []string{"user", "root"} {
		for _, p := range paths {
			check(user, agentclient.ExecRequest{Argv: []string{p}})
		}
		for _, fd := range fds {
			for i := range fdPrefixes {
				check(user, agentclient.ExecRequest{Argv: []string{fmt.Sprintf("esc-%d-%d", fd, i)}, Env: map[string]string{"PATH": "/tmp/plant/bin:/usr/bin:/bin"}})
				check(user, agentclient.ExecRequest{Argv: []string{fmt.Sprintf("/tmp/plant/s-%d-%d.sh", fd, i)}})
			}
		}
	}
}

// hostProbe runs in the sandbox after execve: it tries to stat, list,
// open and connect through every agent descriptor it can name and through
// every process's descriptors, and prints what succeeded.
const hostProbe = `
import os, socket, sys
climb, shadow_rel, sock_rel = sys.argv[1], sys.argv[2], sys.argv[3]
hits = []
bases = []
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    for sub in ("fd", "task/" + pid + "/fd"):
        try:
            names = os.listdir("/proc/%s/%s" % (pid, sub))
        except OSError:
            names = [str(n) for n in range(64)]
        bases += ["/proc/%s/%s/%s" % (pid, sub, n) for n in names]
for b in bases:
    for p, what in ((b + "/" + climb + shadow_rel, "stat"), (b + "/" + climb, "list"), (b + "/cgroup.procs", "open")):
        try:
            if what == "stat":
                os.stat(p)
            elif what == "list":
                os.listdir(p)
            else:
                open(p, "a").close()
            hits.append(what + " " + p)
        except OSError:
            pass
    try:
        s = socket.socket(socket.AF_UNIX)
        s.connect(b + "/" + climb + sock_rel)
        hits.append("connect " + b)
    except OSError:
        pass
print("HITS", len(hits), hits[:5])
`

func testHostPathsAfterExec(t *testing.T, ctx context.Context, sb *runtimetest.Sandbox, _ []int, m *escapeMarker) {
	if res, _, err := execOut(ctx, sb, agentclient.ExecRequest{Argv: []string{"python3", "-c", "pass"}}); err != nil || res.Status != agentclient.StatusSuccess {
		t.Skip("the probe needs python3 in the host template")
	}
	// A host file the sandbox has no copy of: its own /etc is curated,
	// so the probe's stat must not succeed by resolving inside.
	for _, user := range []string{"user", "root"} {
		res, out, err := execOut(ctx, sb, agentclient.ExecRequest{
			Argv: []string{"python3", "-c", hostProbe, climb, strings.TrimPrefix(m.script, "/"), strings.TrimPrefix(m.socket, "/")},
			User: user,
		})
		if err != nil || res.Status != agentclient.StatusSuccess {
			t.Fatalf("probe as %s: %v %+v %q", user, err, res, out)
		}
		if !strings.HasPrefix(out, "HITS 0 ") {
			t.Fatalf("probe as %s reached through descriptors: %s", user, out)
		}
	}
}

// testAgentDirsDetached checks, from the host, that no directory the agent
// holds leads by ".." to the host's root: each is on a mount of the
// sandbox's own or on a detached one.
func testAgentDirsDetached(t *testing.T, sb *runtimetest.Sandbox) {
	pid := sb.Instance.(*Instance).Pid()
	var root syscall.Stat_t
	if err := syscall.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	for _, fd := range agentFDs(t, sb) {
		p := fmt.Sprintf("/proc/%d/fd/%d", pid, fd)
		fi, err := os.Stat(p)
		if err != nil || !fi.IsDir() {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(p+"/"+climb, &st); err != nil {
			t.Fatalf("stat through agent fd %d: %v", fd, err)
		}
		if st.Dev == root.Dev && st.Ino == root.Ino {
			link, _ := os.Readlink(p)
			t.Errorf("agent fd %d (%s) leads to the host's root", fd, link)
		}
	}
}

// testFileAPIHostDetails: the file API runs in the agent, with its
// privileges; listing /proc/1/fd or writing through a planted link to one
// of the agent's descriptors must not name a host path (the state dir, the
// cgroup mount) in an answer.
func testFileAPIHostDetails(t *testing.T, ctx context.Context, rt *Runtime, sb *runtimetest.Sandbox, fds []int) {
	hostish := []string{rt.cfg.StateDir, "/sys/fs/cgroup", testBase}
	leaks := func(what, s string) {
		t.Helper()
		for _, h := range hostish {
			if strings.Contains(s, h) {
				t.Fatalf("%s names the host path %s: %s", what, h, s)
			}
		}
	}
	for _, dir := range []string{"/proc/1/fd", "/proc/1/task/1/fd", "/proc/1", "/proc/self/fd", "/proc"} {
		ents, _, err := sb.Client.ListDir(ctx, dir, 1)
		if err != nil {
			leaks("listing "+dir, err.Error())
			continue
		}
		for _, e := range ents {
			leaks("listing "+dir, fmt.Sprintf("%+v", e))
		}
	}
	for _, fd := range fds {
		link := fmt.Sprintf("/home/user/agentfd-%d", fd)
		sb.Sh(t, ctx, fmt.Sprintf("ln -sfn /proc/1/fd/%d %s", fd, link))
		for _, p := range []string{link, fmt.Sprintf("/proc/1/fd/%d", fd), link + "/x"} {
			if _, err := sb.Client.WriteFile(ctx, p, strings.NewReader("x"), agentclient.WriteOptions{}); err != nil {
				leaks("write to "+p, err.Error())
			}
			if _, err := sb.Client.Stat(ctx, p); err != nil {
				leaks("stat of "+p, err.Error())
			}
			if _, err := sb.Client.ReadFile(ctx, p, io.Discard); err != nil {
				leaks("read of "+p, err.Error())
			}
		}
	}
	// The sandbox's mount table names no host directory either.
	leaks("/proc/self/mountinfo", sb.Sh(t, ctx, "cat /proc/self/mountinfo"))
}

// inotifyProbe watches a directory for accesses while the test makes
// other sandboxes and the host open files in it, then opens one itself
// (the control: the watch works) and prints how many events each phase
// brought.
const inotifyProbe = `
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(os.O_NONBLOCK)
if fd < 0 or libc.inotify_add_watch(fd, sys.argv[1].encode(), 0xfff) < 0:
    print("inotify failed", ctypes.get_errno()); sys.exit(1)
def drain():
    n = 0
    while True:
        try:
            n += len(os.read(fd, 65536))
        except BlockingIOError:
            return n
print("ready", flush=True)
sys.stdin.readline()  # the others have opened files meanwhile
others = drain()
os.close(os.open(os.path.join(sys.argv[1], sys.argv[2]), os.O_RDONLY))
print("others", others, "own", drain(), flush=True)
`

// TestAttackInotifySideChannel: a sandbox watching the host template's
// /usr/bin must not see which files other sandboxes (or the host) open.
func TestAttackInotifySideChannel(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	rootfs := hostRootfsFor(t)
	watcher := runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{})
	other := runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{})
	const dir, file = "/usr/bin", "env"
	var out syncBuffer
	proc, err := watcher.Client.Start(ctx, agentclient.ExecRequest{
		Argv: []string{"python3", "-c", inotifyProbe, dir, file}, OpenStdin: true, Stdout: &out, Stderr: &out, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "ready") {
		if time.Now().After(deadline) {
			t.Fatalf("watcher did not start: %q", out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, user := range []string{"user", "root"} {
		other.Run(t, ctx, agentclient.ExecRequest{Shell: "cat " + dir + "/" + file + " >/dev/null; ls " + dir + " >/dev/null", User: user})
	}
	if f, err := os.Open(filepath.Join(dir, file)); err == nil {
		f.Close()
	}
	if err := watcher.Client.SendInput(ctx, proc.PID, []byte("go\n")); err != nil {
		t.Fatal(err)
	}
	res, err := proc.Wait()
	if err != nil || res.Status != agentclient.StatusSuccess {
		t.Fatalf("watcher: %v %+v %q", err, res, out.String())
	}
	var others, own int
	if _, err := fmt.Sscanf(strings.TrimSpace(strings.TrimPrefix(out.String(), "ready\n")), "others %d own %d", &others, &own); err != nil {
		t.Fatalf("watcher said %q: %v", out.String(), err)
	}
	if own == 0 {
		t.Fatalf("the watch saw not even its own open: %q", out.String())
	}
	if others != 0 {
		t.Fatalf("a sandbox saw %d bytes of inotify events caused by another sandbox and the host", others)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader at once.
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
