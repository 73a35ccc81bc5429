package linux

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// TestNoLeaksAfterCycles runs create/exec/destroy cycles and inspects the
// host: no process, mount, cgroup, user namespace, uid slot, state file,
// fd or socket may be left behind.
func TestNoLeaksAfterCycles(t *testing.T) {
	requireRoot(t)
	cycles := 200
	if testing.Short() {
		cycles = 20
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	rootfs := hostRootfsFor(t)
	before, err := takeSnapshot(rt)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < cycles; i++ {
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("cycle"), Rootfs: rootfs})
		if err != nil {
			t.Fatalf("cycle %d: create: %v", i, err)
		}
		c := agentclient.New(inst.Dial)
		// A background process and a file, so destroy has work to do.
		res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: "sleep 1000 & echo x > /tmp/f", Background: false})
		c.Close()
		if err != nil || res.Status != agentclient.StatusSuccess {
			t.Fatalf("cycle %d: exec: %v %+v", i, err, res)
		}
		if err := inst.Destroy(ctx); err != nil {
			t.Fatalf("cycle %d: destroy: %v", i, err)
		}
	}
	after := requireNoLeaks(t, rt, before)
	if after.fds > before.fds+2 {
		t.Errorf("daemon fds: %d before, %d after", before.fds, after.fds)
	}
	if after.unixSocks != 0 {
		t.Errorf("%d control sockets left", after.unixSocks)
	}
}

// daemonCommand makes the test binary act as a daemon that creates
// sandboxes and then waits to be killed (see TestDaemonKilledSandboxesSurvive).
const daemonCommand = "test-daemon"

func runTestDaemon(stateDir, cacheDir string, n int) int {
	rt, err := New(Config{StateDir: stateDir, CgroupParent: "airlock-test", AgentArgs: []string{"airlock-test-agent", AgentCommand}})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	h, err := template.NewHost(template.HostOptions{CacheDir: cacheDir})
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	ctx := context.Background()
	rootfs, err := h.Resolve(ctx)
	if err != nil {
		fmt.Println("error:", err)
		return 1
	}
	for i := 0; i < n; i++ {
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("survive"), Rootfs: rootfs})
		if err != nil {
			fmt.Println("error:", err)
			return 1
		}
		c := agentclient.New(inst.Dial)
		res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: "echo " + inst.ID() + " > /tmp/marker", Background: false})
		if err != nil || res.Status != agentclient.StatusSuccess {
			fmt.Println("error: exec", err)
			return 1
		}
		// A background process that must outlive the daemon.
		if _, err := c.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "1000"}, Background: true, Tag: "bg"}); err != nil {
			fmt.Println("error: start", err)
			return 1
		}
		fmt.Println("sandbox", inst.ID())
	}
	fmt.Println("ready")
	select {}
}

func TestDaemonKilledSandboxesSurvive(t *testing.T) {
	requireRoot(t)
	setupBase(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	hostRootfsFor(t) // build the template cache once, outside the child
	stateDir, err := os.MkdirTemp(testBase, "state-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/proc/self/exe", daemonCommand, stateDir, filepath.Join(testBase, "templates", "host"), "3")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ids []string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if line == "ready" {
			break
		}
		if id, ok := strings.CutPrefix(line, "sandbox "); ok {
			ids = append(ids, id)
			continue
		}
		t.Fatalf("test daemon: %s", line)
	}
	if len(ids) != 3 {
		_ = cmd.Process.Kill()
		t.Fatalf("test daemon made %d sandboxes", len(ids))
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	rt := openRuntime(t, stateDir)
	adopted, err := rt.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	var got []string
	for _, inst := range adopted {
		got = append(got, inst.ID())
		defer inst.Destroy(ctx)
	}
	slices.Sort(got)
	slices.Sort(ids)
	if !slices.Equal(got, ids) {
		t.Fatalf("adopted %v, want %v", got, ids)
	}
	for _, inst := range adopted {
		c := agentclient.New(inst.Dial)
		var out strings.Builder
		res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: "cat /tmp/marker; pgrep -x sleep >/dev/null && echo bg-alive", Stdout: &out})
		c.Close()
		if err != nil || res.Status != agentclient.StatusSuccess || out.String() != inst.ID()+"\nbg-alive\n" {
			t.Fatalf("adopted %s: %v %+v %q", inst.ID(), err, res, out.String())
		}
	}
}

// TestRecoverRemovesDeadSandboxes checks that Recover removes, completely,
// a sandbox whose agent was killed while no daemon ran.
func TestRecoverRemovesDeadSandboxes(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rt := newRuntime(t)
	alive := runtimetest.Create(t, ctx, rt, hostRootfsFor(t), runtime.Spec{})
	dead, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("dead"), Rootfs: hostRootfsFor(t)})
	if err != nil {
		t.Fatal(err)
	}
	// Kill the agent behind the runtime's back: its state dir and cgroup stay.
	if err := syscall.Kill(dead.(*Instance).Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	rt2 := openRuntime(t, rt.cfg.StateDir)
	adopted, err := rt2.Recover(ctx)
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if len(adopted) != 1 || adopted[0].ID() != alive.ID() {
		t.Fatalf("adopted %d sandboxes, want only %s", len(adopted), alive.ID())
	}
	if _, err := os.Stat(filepath.Join(rt.cfg.StateDir, dead.ID())); !os.IsNotExist(err) {
		t.Fatalf("state dir of the dead sandbox: %v", err)
	}
	if _, err := rt2.cg.Open(dead.ID()); err == nil {
		t.Fatal("cgroup of the dead sandbox still exists")
	}
}
