package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestLimits checks that a sandbox's limits hold through the real daemon,
// and still hold once a restarted daemon (after SIGKILL, then SIGTERM) has
// adopted it: a memory bomb ends resource_exceeded, an exec's peak memory
// and CPU time come back, a spinning process gets its CPU quota and no
// more, a timed-out command's whole tree dies (a detached grandchild too),
// and after the delete nothing of the sandbox is left. The pids limit is
// TestForkBombRecovery's.
func TestLimits(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	limits := client.Limits{MemoryMB: 128, Pids: 64, CPUs: 1}
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &limits, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	if l := sb.Limits; l.MemoryMB != limits.MemoryMB || l.Pids != limits.Pids || l.CPUs != limits.CPUs {
		t.Fatalf("created with limits %+v, asked for %+v", l, limits)
	}

	// 600 MB without a newline: tail keeps it all, past the 128 MiB
	// limit, and the OOM killer ends the command.
	memoryBomb := func(d *daemon, when string) {
		t.Helper()
		t0 := time.Now()
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "head -c 600000000 /dev/zero | tail", Timeout: time.Minute})
		if err != nil {
			t.Fatalf("%s: memory bomb: %v", when, err)
		}
		if res.Status != client.StatusResourceExceeded {
			t.Errorf("%s: memory bomb: status %q exit %d (error %q), want %s", when, res.Status, res.ExitCode, res.Error, client.StatusResourceExceeded)
		}
		// The kernel charges up to the limit, and its watermark may pass
		// it by a little (a charge forced for a task being OOM-killed,
		// per-CPU batches; seen: 0.3 MiB on 6.1), not by the 600 MB.
		const slack = 4 << 20
		if res.PeakMemoryBytes > uint64(limits.MemoryMB)<<20+slack || res.PeakMemoryBytes < 32<<20 {
			t.Errorf("%s: memory bomb: peak memory %d bytes, want 32 MiB to the limit of %d MiB (and %d MiB of slack)", when, res.PeakMemoryBytes, limits.MemoryMB, slack>>20)
		}
		t.Logf("%s: memory bomb: %s after %v (peak %d MiB)", when, res.Status, time.Since(t0).Round(time.Millisecond), res.PeakMemoryBytes>>20)
	}
	memoryBomb(d, "first daemon")

	// Usage is reported: 50 MB kept by tail, a little CPU.
	res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "head -c 50000000 /dev/zero | tail >/dev/null", Timeout: time.Minute})
	if res.Status != client.StatusSuccess || res.PeakMemoryBytes < 45e6 || res.PeakMemoryBytes > uint64(limits.MemoryMB)<<20 || res.CPUTime <= 0 {
		t.Errorf("50 MB in tail: status %q, peak memory %d, CPU time %v; want success, 45 MB to the limit, some CPU", res.Status, res.PeakMemoryBytes, res.CPUTime)
	}

	// The CPU limit, in a second sandbox with a quarter of a CPU (so that
	// the first one's bombs keep a whole one): a process spinning for 2 s
	// gets about 0.5 s of CPU, where without the limit it would get most
	// of the 2 s even on a busy 2-core machine.
	slow, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &client.Limits{CPUs: 0.25}, Timeout: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	track(slow.ID)
	spinner := func(d *daemon, when string) {
		t.Helper()
		res := mustExec(t, d, slow.ID, client.ExecRequest{Command: `timeout 2 sh -c 'while :; do :; done'`, Timeout: time.Minute})
		// timeout exits 124 (coreutils) or 143 (busybox) when it ends
		// the command.
		if (res.ExitCode != 124 && res.ExitCode != 143) || res.CPUTime < 200*time.Millisecond || res.CPUTime > res.Duration*3/10+200*time.Millisecond {
			t.Errorf("%s: a spinner under cpus=0.25: exit %d, CPU time %v in %v; want timeout's 124 or 143, 0.2 s to about a quarter of the wall time", when, res.ExitCode, res.CPUTime, res.Duration)
		}
		t.Logf("%s: a spinner under cpus=0.25: CPU time %v in %v", when, res.CPUTime.Round(time.Millisecond), res.Duration.Round(time.Millisecond))
	}
	spinner(d, "first daemon")

	// A command past its timeout dies with its whole tree: a background
	// child, a grandchild in its own session, and the foreground.
	t0 := time.Now()
	res, err = d.C.Exec(ctx, sb.ID, client.ExecRequest{
		Command: "sleep 1001 & (setsid sleep 1002 </dev/null >/dev/null 2>&1 &); echo started; sleep 1003",
		Timeout: 2 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != client.StatusTimeout || string(res.Stdout) != "started\n" {
		t.Errorf("timed-out tree: status %q stdout %q, want timeout and started", res.Status, res.Stdout)
	}
	if left := sandboxProcs(t, d, sb.ID, "sleep 100"); len(left) > 0 {
		t.Errorf("after the timeout, %v: %v still run", time.Since(t0).Round(time.Millisecond), left)
	}

	d.Kill()
	d = e.start()
	checkLimits(t, d, sb.ID, sb.Limits, "after SIGKILL")
	checkLimits(t, d, slow.ID, slow.Limits, "after SIGKILL")
	memoryBomb(d, "after SIGKILL")
	spinner(d, "after SIGKILL")
	d.Stop()
	d = e.start()
	checkLimits(t, d, sb.ID, sb.Limits, "after SIGTERM")
	checkLimits(t, d, slow.ID, slow.Limits, "after SIGTERM")
	memoryBomb(d, "after SIGTERM")
	spinner(d, "after SIGTERM")
	if r := mustExec(t, d, sb.ID, client.ExecRequest{Command: "echo ok"}); r.Status != client.StatusSuccess || string(r.Stdout) != "ok\n" {
		t.Errorf("exec after the bombs: %q %q", r.Status, r.Stdout)
	}

	for _, id := range []string{sb.ID, slow.ID} {
		if err := d.C.DeleteSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		checkGone(t, e, id)
	}
}

// checkLimits checks that the daemon shows sandbox id running, with l,
// once adopted (bounded).
func checkLimits(t *testing.T, d *daemon, id string, l client.Limits, when string) {
	t.Helper()
	var got *client.Sandbox
	var err error
	waitFor(30*time.Second, func() bool {
		got, err = d.C.GetSandbox(ctxT(t, 30*time.Second), id)
		return err != nil || got.State == client.StateRunning
	})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if got.State != client.StateRunning || got.Limits != l {
		t.Errorf("%s: %s is %s with limits %+v, want running with %+v", when, id, got.State, got.Limits, l)
	}
}

// sandboxProcs returns the processes of sandbox id (as the API lists
// them) whose command line contains s.
func sandboxProcs(t *testing.T, d *daemon, id, s string) []string {
	t.Helper()
	l, err := d.C.ListProcesses(ctxT(t, 30*time.Second), id)
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	var out []string
	for _, p := range l.Processes {
		if cmd := strings.Join(p.Cmd, " "); strings.Contains(cmd, s) {
			out = append(out, fmt.Sprintf("%d %q (%s)", p.PID, cmd, p.State))
		}
	}
	return out
}

// checkGone checks that nothing of sandbox id is left: no cgroup, no
// process in it or with a mount of its state, no state in the data dir.
func checkGone(t *testing.T, e *env, id string) {
	t.Helper()
	if dirs := sandboxCgroups(id); len(dirs) > 0 {
		t.Errorf("sandbox %s: cgroups left: %v", id, dirs)
	}
	if procs := cgroupProcs(id); len(procs) > 0 {
		t.Errorf("sandbox %s: processes left in its cgroups: %v", id, procs)
	}
	if pids := mountingProcs(id); len(pids) > 0 {
		t.Errorf("sandbox %s: processes with mounts of it: %v", id, pids)
	}
	if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", id)); !os.IsNotExist(err) {
		t.Errorf("sandbox %s: state dir: %v, want gone", id, err)
	}
}

// mountingProcs returns the processes whose mount table names s (a
// sandbox's ID: its state dir's name).
func mountingProcs(s string) []int {
	var out []int
	pids, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range pids {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if mi, err := os.ReadFile(filepath.Join(p, "mountinfo")); err == nil && bytes.Contains(mi, []byte(s)) {
			out = append(out, pid)
		}
	}
	return out
}
