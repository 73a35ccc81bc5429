package linux

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// attackEnv is a victim sandbox and a sibling that must stay unaffected.
type attackEnv struct {
	rt      *Runtime
	victim  *runtimetest.Sandbox
	sibling *runtimetest.Sandbox
}

func newAttackEnv(t *testing.T, ctx context.Context, limits runtime.Limits) *attackEnv {
	t.Helper()
	rt := newRuntime(t)
	rootfs := hostRootfsFor(t)
	return &attackEnv{
		rt:      rt,
		victim:  runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{Limits: limits}),
		sibling: runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{}),
	}
}

// healthy checks that the victim's agent and the sibling still work.
func (e *attackEnv) healthy(t *testing.T, ctx context.Context) {
	t.Helper()
	if out := e.victim.Sh(t, ctx, "echo victim-ok"); out != "victim-ok\n" {
		t.Fatalf("victim after attack: %q", out)
	}
	if out := e.sibling.Sh(t, ctx, "echo sibling-ok"); out != "sibling-ok\n" {
		t.Fatalf("sibling after attack: %q", out)
	}
}

func TestAttackSyscallsBlocked(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	for _, user := range []string{"user", "root"} {
		for name := range attacks {
			t.Run(user+"/"+name, func(t *testing.T) {
				res, out, errOut := env.victim.Run(t, ctx, agentclient.ExecRequest{
					Argv: []string{agentBinaryPath, attackCommand, name}, User: user, Timeout: 20 * time.Second,
				})
				if res.Status != agentclient.StatusSuccess || !strings.HasPrefix(out, "blocked: ") {
					t.Fatalf("attack %s as %s: status %s, out %q, err %q", name, user, res.Status, out, errOut)
				}
				t.Logf("%s", strings.TrimSpace(out))
			})
		}
	}
	env.healthy(t, ctx)
}

func TestAttackForkBomb(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{Pids: 64})
	// Sample the sandbox's task count while the bomb runs.
	stop := make(chan struct{})
	peak := make(chan uint64, 1)
	go func() {
		var max uint64
		defer func() { peak <- max }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if st, err := env.victim.Stats(ctx); err == nil && st.Pids > max {
				max = st.Pids
			}
		}
	}()
	res, _, _ := env.victim.Run(t, ctx, agentclient.ExecRequest{
		// The bomb starts from a subshell forked before any other task
		// exists, and the shell then becomes sleep without forking: a
		// fork the saturated pid cap refuses cannot end it early.
		Shell: "(bomb() { bomb | bomb & }; bomb) & exec sleep 5", Timeout: 3 * time.Second,
	})
	close(stop)
	if res.Status != agentclient.StatusTimeout {
		log, _ := os.ReadFile(filepath.Join(env.rt.cfg.StateDir, env.victim.ID(), logFile))
		t.Fatalf("fork bomb: %+v\nagent log:\n%s", res, log)
	}
	// Stats counts the agent's threads too; the cap is on the commands.
	if max := <-peak; max > 64+agentThreadAllowance {
		t.Fatalf("%d tasks during the bomb, cap 64 (+%d for the agent)", max, agentThreadAllowance)
	}
	// The kill waits until the bomb's tasks are reaped: nothing is left
	// and the next command can start at once.
	if st, err := env.victim.Stats(ctx); err != nil || st.Pids > agentThreadAllowance {
		t.Fatalf("after the bomb: %+v, %v", st, err)
	}
	env.healthy(t, ctx)
}

// agentThreadAllowance bounds the agent's own threads in Stats.Pids.
const agentThreadAllowance = 32

func TestAttackMemoryBomb(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{MemoryBytes: 64 << 20})
	// tail buffers all of its input in memory.
	res, _, _ := env.victim.Run(t, ctx, agentclient.ExecRequest{
		Shell: "head -c 500000000 /dev/zero | tail", Timeout: 60 * time.Second,
	})
	if res.Status != agentclient.StatusResourceExceeded {
		t.Fatalf("memory bomb: %+v", res)
	}
	env.healthy(t, ctx)
}

func TestAttackDiskFill(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{DiskBytes: 16 << 20, MemoryBytes: 256 << 20})
	res, _, errOut := env.victim.Run(t, ctx, agentclient.ExecRequest{
		Shell: "cat /dev/zero > /home/user/fill", Timeout: 30 * time.Second,
	})
	if res.Status != agentclient.StatusError || !strings.Contains(errOut, "No space left") {
		t.Fatalf("disk fill: %+v %q", res, errOut)
	}
	// Many small files hit the inode cap, also without harm.
	res, _, _ = env.victim.Run(t, ctx, agentclient.ExecRequest{
		Shell: "rm -f /home/user/fill; mkdir /tmp/many && cd /tmp/many && i=0; while : > f$i; do i=$((i+1)); done", Timeout: 60 * time.Second,
	})
	if res.Status != agentclient.StatusError {
		t.Fatalf("inode fill: %+v", res)
	}
	env.victim.Sh(t, ctx, "rm -rf /tmp/many")
	env.healthy(t, ctx)
}

func TestAttackOutputFlood(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	var before goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	var out countingWriter
	res, err := env.victim.Client.Exec(ctx, agentclient.ExecRequest{
		Argv: []string{"yes", strings.Repeat("flood", 100)}, Timeout: 2 * time.Second,
		OutputLimit: 1 << 20, Stdout: &out, Stderr: &out,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != agentclient.StatusTimeout || !res.StdoutTruncated || out.n != 1<<20 {
		t.Fatalf("flood: %+v, %d bytes forwarded", res, out.n)
	}
	var after goruntime.MemStats
	goruntime.ReadMemStats(&after)
	if grew := int64(after.HeapInuse) - int64(before.HeapInuse); grew > 64<<20 {
		t.Fatalf("daemon heap grew by %d MiB during the flood", grew>>20)
	}
	env.healthy(t, ctx)
}

type countingWriter struct{ n int }

func (w *countingWriter) Write(p []byte) (int, error) { w.n += len(p); return len(p), nil }

func TestAttackInfiniteLoopTreeKilled(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	start := time.Now()
	res, _, _ := env.victim.Run(t, ctx, agentclient.ExecRequest{
		// A loop in the background that also escapes into its own session,
		// and one in the foreground.
		Shell: "setsid sh -c 'while :; do :; done' & sh -c 'while :; do :; done' & while :; do :; done", Timeout: 500 * time.Millisecond,
	})
	if res.Status != agentclient.StatusTimeout {
		t.Fatalf("loop: %+v", res)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("timeout took %v", d)
	}
	// Nothing of the tree survives: only the agent (PID 1) and ps itself.
	res, out, _ := env.victim.Run(t, ctx, agentclient.ExecRequest{Argv: []string{"ps", "-e", "-o", "comm="}, User: "root"})
	if res.Status != agentclient.StatusSuccess || strings.Contains(out, "sh\n") || strings.Count(out, "\n") != 2 {
		t.Fatalf("processes left after the timeout: %+v\n%s", res, out)
	}
	env.healthy(t, ctx)
}

func TestAttackHostVisibility(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	// A secret on the host, next to the sandbox's own state.
	secret := filepath.Join(baseDir(t), "host-secret.txt")
	if err := os.WriteFile(secret, []byte("TOPSECRET"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(secret)

	checks := []struct{ name, cmd string }{
		{"secret path", "cat " + secret},
		{"shadow", "cat /etc/shadow"},
		{"host root home", "ls /root/.ssh"},
		{"state dir", "ls " + env.rt.cfg.StateDir},
		{"host pid", "ls /proc/" + strconv.Itoa(os.Getpid())},
		{"sys", "ls /sys/kernel"},
	}
	for _, c := range checks {
		for _, user := range []string{"user", "root"} {
			res, out, _ := env.victim.Run(t, ctx, agentclient.ExecRequest{Shell: c.cmd, User: user})
			if res.Status == agentclient.StatusSuccess || strings.Contains(out, "TOPSECRET") {
				t.Errorf("%s as %s: %+v %q", c.name, user, res, out)
			}
		}
	}
	// grep the whole visible filesystem for the secret.
	res, out, _ := env.victim.Run(t, ctx, agentclient.ExecRequest{
		Shell: "grep -rl TOPSECRET / --exclude-dir=proc --exclude-dir=sys 2>/dev/null", User: "root", Timeout: 60 * time.Second,
	})
	if strings.Contains(out, "host-secret") {
		t.Errorf("secret found from inside: %+v %q", res, out)
	}
	// The cgroup namespace hides the host's cgroup layout and the
	// sandbox's id.
	out = env.victim.Sh(t, ctx, "cat /proc/self/cgroup")
	// v1: rooted at <id>/agent ("/../work/c1"); v2: at <id> ("/work/c1").
	if strings.Contains(out, env.victim.ID()) || strings.Contains(out, "airlock") ||
		!strings.Contains(out, ":/../work/c") && !strings.HasPrefix(out, "0::/work/c") {
		t.Errorf("/proc/self/cgroup shows the host layout:\n%s", out)
	}
	// Only sandbox processes are visible.
	out = env.victim.Sh(t, ctx, "ls /proc | grep -c '^[0-9]'")
	if n, _ := strconv.Atoi(strings.TrimSpace(out)); n > 5 {
		t.Errorf("%d processes visible", n)
	}
	env.healthy(t, ctx)
}

func TestAttackNetworkEgress(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	// A listener on the host's loopback: the sandbox's 127.0.0.1 is its own.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			c.Close()
			accepted <- struct{}{}
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	res, _, errOut := env.victim.Run(t, ctx, agentclient.ExecRequest{
		Shell: "exec 3<>/dev/tcp/127.0.0.1/" + strconv.Itoa(port), Timeout: 10 * time.Second,
	})
	if res.Status == agentclient.StatusSuccess {
		t.Fatalf("connected to the host's loopback: %q", errOut)
	}
	select {
	case <-accepted:
		t.Fatal("host listener accepted a connection from the sandbox")
	case <-time.After(100 * time.Millisecond):
	}
	// No interface but lo, and no route anywhere.
	if out := env.victim.Sh(t, ctx, "cat /proc/net/route | tail -n +2 | wc -l"); strings.TrimSpace(out) != "0" {
		t.Fatalf("routes present: %q", out)
	}
	if out := env.victim.Sh(t, ctx, "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '"); out != "lo\n" {
		t.Fatalf("interfaces: %q", out)
	}
	env.healthy(t, ctx)
}

func TestAttackFileAPISymlinks(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	// Links that point at the host paths of the sandbox's own state and at
	// magic links: the file API must stay inside the sandbox.
	env.victim.Sh(t, ctx, "ln -s "+env.rt.cfg.StateDir+" /home/user/state && ln -s /proc/1/root /home/user/agentroot && ln -s ../../../../../.. /home/user/up")
	for _, p := range []string{"/home/user/state/x", "/home/user/agentroot/tmp/x", "/home/user/up/tmp/escaped"} {
		_, _ = env.victim.Client.WriteFile(ctx, p, strings.NewReader("escape"), agentclient.WriteOptions{MakeParents: true})
	}
	if _, err := os.Stat(filepath.Join(env.rt.cfg.StateDir, "x")); err == nil {
		t.Fatal("file API wrote into the host state dir")
	}
	// "up" resolves to the sandbox root, so the write stays inside.
	var buf bytes.Buffer
	if _, err := env.victim.Client.ReadFile(ctx, "/tmp/escaped", &buf); err != nil || buf.String() != "escape" {
		t.Fatalf("up-link write did not land inside the sandbox: %v %q", err, buf.String())
	}
	env.healthy(t, ctx)
}

// Every sandboxed process sits in one Landlock domain, whichever agent
// thread forked it: processes started by different requests can signal
// and inspect one another (same uid), and the agent can kill them all.
// With a domain per agent thread (landlock_restrict_self on each thread
// without the re-exec) this failed at random with EPERM.
func TestOneLandlockDomain(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	env := newAttackEnv(t, ctx, runtime.Limits{})
	const n = 12
	pids := make(chan int, n)
	errs := make(chan error, n)
	for range n {
		go func() {
			p, err := env.victim.Client.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "60"}, Background: true})
			if err != nil {
				errs <- err
				return
			}
			pids <- p.PID
		}()
	}
	var list []string
	for range n {
		select {
		case err := <-errs:
			t.Fatal(err)
		case pid := <-pids:
			list = append(list, strconv.Itoa(pid))
		}
	}
	res, out, errOut := env.victim.Run(t, ctx, agentclient.ExecRequest{
		Shell: "for p in " + strings.Join(list, " ") + "; do head -c1 /proc/$p/environ >/dev/null && kill $p || exit 1; done; echo done",
	})
	if res.Status != agentclient.StatusSuccess || out != "done\n" {
		t.Fatalf("cross-request signal and /proc access: %+v %q %q", res, out, errOut)
	}
	env.healthy(t, ctx)
}
