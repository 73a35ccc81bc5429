package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// exited reports whether process pid has exited (gone, or a zombie).
func exited(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ESRCH)
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && (s[i+2] == 'Z' || s[i+2] == 'X')
}

// agentGrace is how long after its expiry a sandbox's agent ends it when
// no daemon has (sandbox.Config.DeadlineGrace's default, which `airlock
// serve` keeps).
const agentGrace = 5 * time.Second

// TestExpiryNoDaemon (a short name: the data dir, which holds the
// control sockets, is named after the test): sandboxes expire while the daemon is down
// (SIGKILLed). Each one's agent ends it by itself some seconds after its
// expiry: every process of it is gone (a detached background process
// included) with no daemon running; one whose timeout was extended lives
// on. The next daemon records those ends as expired (in the API and the
// audit log) and adopts the extended one. Sandboxed code, even root,
// cannot move the deadline: it can set no clock and cannot reach the
// agent's control socket (the socket's path does not exist in the
// sandbox, /proc/net/unix there does not list it, and /proc/1/fd cannot
// be opened, as internal/runtime/linux's TestAttackContainment shows).
// Before the agent held a deadline, a 5 s sandbox still ran 9 s later and
// for as long as the daemon stayed down.
func TestExpiryNoDaemon(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	create := func(req client.CreateSandboxRequest) *client.Sandbox {
		t.Helper()
		sb, err := d.C.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		mustExec(t, d, sb.ID, client.ExecRequest{Command: "setsid sleep 300 </dev/null >/dev/null 2>&1 &"})
		return sb
	}
	const short = 4 * time.Second
	pooled := create(client.CreateSandboxRequest{Timeout: short})
	cold := create(client.CreateSandboxRequest{Timeout: short, Limits: &client.Limits{MemoryMB: 256}})
	shortened := create(client.CreateSandboxRequest{Timeout: time.Hour})
	extended := create(client.CreateSandboxRequest{Timeout: short})
	var err error
	if shortened, err = d.C.SetTimeout(ctx, shortened.ID, short); err != nil {
		t.Fatal(err)
	}
	if extended, err = d.C.SetTimeout(ctx, extended.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	expiring := []*client.Sandbox{pooled, cold, shortened}

	// What sandboxed code (root) can try against its deadline.
	sock := filepath.Join(e.dir, "sandboxes", extended.ID, "agent.sock")
	if _, err := os.Stat(sock); err != nil {
		t.Fatalf("the control socket on the host: %v", err)
	}
	attempts := []struct{ what, cmd string }{
		{"set the wall clock", "date -s @86400"},
		{"make a time namespace", "unshare --time true"},
		{"reach the control socket by its host path", "test -e " + sock},
		{"find the control socket in /proc/net/unix", "grep -q agent.sock /proc/net/unix"},
		{"open the agent's descriptors", "for f in /proc/1/fd/*; do if (exec 9<\"$f\"); then exit 0; fi; done; exit 1"},
	}
	for _, a := range attempts {
		r := mustExec(t, d, extended.ID, client.ExecRequest{Command: a.cmd + " 2>/dev/null", User: "root"})
		if r.ExitCode == 0 {
			t.Errorf("root in a sandbox could %s (%q succeeded)", a.what, a.cmd)
		}
	}

	pids := map[string]int{}
	for _, sb := range append(expiring, extended) {
		pids[sb.ID] = agentPid(t, e, sb.ID)
		if len(cgroupProcs(sb.ID)) < 2 {
			t.Fatalf("sandbox %s: processes %v, want the agent and the sleeper at least", sb.ID, cgroupProcs(sb.ID))
		}
	}
	d.Kill()
	killedAt := time.Now()
	last := pooled.ExpiresAt
	for _, sb := range expiring {
		if sb.ExpiresAt.After(last) {
			last = sb.ExpiresAt
		}
	}
	if !killedAt.Before(last) {
		t.Fatalf("the set-up took too long: the daemon was killed %v after the sandboxes expired", killedAt.Sub(last))
	}

	// The agent has exited when its pid is gone or a zombie: with no
	// daemon, its parent is whatever reaps orphans on this host.
	gone := func(sb *client.Sandbox) bool {
		return len(cgroupProcs(sb.ID)) == 0 && exited(pids[sb.ID])
	}
	// Within the grace, the daemon's reaper would still win: the
	// sandboxes live on.
	time.Sleep(time.Until(last.Add(agentGrace / 2)))
	for _, sb := range expiring {
		if gone(sb) {
			t.Errorf("sandbox %s ended %v after its expiry, before its agent's grace of %v", sb.ID, time.Since(sb.ExpiresAt).Round(time.Millisecond), agentGrace)
		}
	}
	within := agentGrace + 10*time.Second
	for _, sb := range expiring {
		if !waitFor(time.Until(sb.ExpiresAt.Add(within)), func() bool { return gone(sb) }) {
			t.Fatalf("sandbox %s still has processes %v (agent pid %d) %v after its expiry with no daemon running",
				sb.ID, cgroupProcs(sb.ID), pids[sb.ID], within)
		}
		t.Logf("sandbox %s: every process gone %v after its expiry, no daemon running", sb.ID, time.Since(sb.ExpiresAt).Round(100*time.Millisecond))
	}
	if gone(extended) {
		t.Fatalf("the extended sandbox %s ended at its first expiry", extended.ID)
	}

	d = e.start()
	waitRecovered(t, d, time.Minute)
	for _, sb := range expiring {
		got, err := d.C.GetSandbox(ctx, sb.ID)
		if err != nil || got.State != client.StateStopped || got.EndReason != client.EndExpired {
			t.Errorf("sandbox %s after the restart: %+v, %v; want stopped, expired", sb.ID, got, err)
		}
	}
	if got, err := d.C.GetSandbox(ctx, extended.ID); err != nil || got.State != client.StateRunning {
		t.Errorf("the extended sandbox after the restart: %+v, %v; want running", got, err)
	}
	if r := mustExec(t, d, extended.ID, client.ExecRequest{Command: "echo alive"}); strings.TrimSpace(string(r.Stdout)) != "alive" {
		t.Errorf("exec in the extended sandbox: %+v", r)
	}
	if err := d.C.DeleteSandbox(ctx, extended.ID); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	ends := endRecords(t, verifyAudit(t, e))
	for _, sb := range expiring {
		if got := ends[sb.ID]; got != "expired" {
			t.Errorf("audit: the end of %s is recorded as %q, want expired", sb.ID, got)
		}
	}
	if got, ok := ends[extended.ID]; ok {
		t.Errorf("audit: the extended sandbox has an end record %q; its end was a delete", got)
	}
}
