package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// agentPid reads the host pid of sandbox id's agent from its runtime state
// file.
func agentPid(t *testing.T, e *env, id string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.dir, "sandboxes", id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Pid int `json:"pid"`
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Pid <= 0 {
		t.Fatalf("state of %s: pid %d, %v", id, st.Pid, err)
	}
	return st.Pid
}

// endRecords returns, by target, the reasons of the sandbox.end intents
// whose outcome is ok in recs.
func endRecords(t *testing.T, recs []store.AuditRecord) map[string]string {
	t.Helper()
	intents := map[uint64]store.AuditRecord{}
	out := map[string]string{}
	for _, r := range recs {
		if r.Action != "sandbox.end" {
			continue
		}
		if r.Outcome == "intent" {
			intents[r.Seq] = r
			continue
		}
		var o struct {
			IntentSeq uint64 `json:"intent_seq"`
		}
		_ = json.Unmarshal(r.Details, &o)
		in, ok := intents[o.IntentSeq]
		if !ok || r.Outcome != "ok" {
			t.Errorf("sandbox.end outcome %+v without its intent, or not ok", r)
			continue
		}
		var d struct {
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal(in.Details, &d); err != nil {
			t.Errorf("sandbox.end details %s: %v", in.Details, err)
		}
		out[in.Target] = d.Reason
	}
	return out
}

// TestAgentDeathReleased kills a sandbox's agent (its PID 1) from the
// host and checks that the daemon reports the sandbox failed within a
// second; that exec, files and code then answer 409 saying the agent died
// (not 503 "try again"); that everything the sandbox held is released at
// once (its processes, cgroups, state dir, record file, and its slot:
// with --max-sandboxes 1 the next create succeeds); that it stays visible
// as failed with its end reason; and that its end is in the audit log.
// Before the fix it stayed running for tens of seconds (until three
// health checks failed), answered 503, and kept everything.
func TestAgentDeathReleased(t *testing.T) {
	e := newEnv(t, "--max-sandboxes", "1")
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	mustExec(t, d, sb.ID, client.ExecRequest{Command: "setsid sleep 300 </dev/null >/dev/null 2>&1 &"})
	pid := agentPid(t, e, sb.ID)

	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var got *client.Sandbox
	if !waitFor(time.Second, func() bool {
		got, err = d.C.GetSandbox(ctx, sb.ID)
		return err == nil && got.State == client.StateFailed
	}) {
		t.Fatalf("a second after its agent was killed the sandbox is %+v, %v; want failed", got, err)
	}
	t.Logf("failed %v after the kill", time.Since(t0).Round(time.Millisecond))

	for what, call := range map[string]func() error{
		"exec": func() error { _, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); return err },
		"file": func() error { _, err := d.C.WriteFile(ctx, sb.ID, "x.txt", strings.NewReader("x")); return err },
		"code": func() error {
			_, err := d.C.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "bash", Code: "true"})
			return err
		},
	} {
		if err := call(); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "agent stopped") {
			t.Errorf("%s on the dead sandbox: %v; want 409 saying its agent stopped", what, err)
		}
	}

	if !waitFor(time.Second, func() bool {
		got, err = d.C.GetSandbox(ctx, sb.ID)
		return err == nil && !got.StoppedAt.IsZero()
	}) {
		t.Fatalf("the dead sandbox was not released within a second: %+v, %v", got, err)
	}
	t.Logf("released %v after the kill", time.Since(t0).Round(time.Millisecond))
	if got.State != client.StateFailed || got.EndReason != client.EndAgentDied || !strings.Contains(got.Error, "agent") {
		t.Errorf("the released sandbox: %+v; want failed, agent_died, an error", got)
	}
	if cg := sandboxCgroups(sb.ID); len(cg) > 0 {
		t.Errorf("cgroups kept: %v", cg)
	}
	for _, p := range []string{filepath.Join(e.dir, "sandboxes", sb.ID), filepath.Join(e.dir, "records", sb.ID+".json")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s kept: %v", p, err)
		}
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the agent's pid %d: %v, want gone and reaped", pid, err)
	}
	next, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create with --max-sandboxes 1 after the only sandbox died: %v", err)
	}
	track(next.ID)
	if list, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(list) != 2 {
		t.Errorf("list: %d sandboxes, %v; want the dead one and the new one", len(list), err)
	}
	if err := d.C.DeleteSandbox(ctx, next.ID); err != nil {
		t.Fatal(err)
	}
	d.Stop()
	if got := endRecords(t, verifyAudit(t, e))[sb.ID]; got != "agent_died" {
		t.Errorf("audit: the end of %s is recorded as %q, want agent_died", sb.ID, got)
	}
}

// TestSystemEndsRecorded checks that every end the daemon decides itself
// is in the audit log with its reason (sandbox.end, intent and ok), and
// that the ended sandbox stays visible as stopped or failed, with its
// reason, until --ended-retention passes (then 404): expiry and idle
// timeout while the daemon runs; at a restart, expiry while no daemon ran
// and an agent that died meanwhile. Before the fix these sandboxes went
// straight to 404, and only the restart's ends were recorded.
func TestSystemEndsRecorded(t *testing.T) {
	const retention = 4 * time.Second
	e := newEnv(t, "--ended-retention", retention.String())
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	create := func(req client.CreateSandboxRequest) string {
		t.Helper()
		sb, err := d.C.CreateSandbox(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		return sb.ID
	}
	expired := create(client.CreateSandboxRequest{Timeout: time.Second})
	idle := create(client.CreateSandboxRequest{IdleTimeout: time.Second})
	ended := func(d *daemon, id string) *client.Sandbox {
		t.Helper()
		var sb *client.Sandbox
		var err error
		if !waitFor(10*time.Second, func() bool {
			sb, err = d.C.GetSandbox(ctx, id)
			return err == nil && !sb.StoppedAt.IsZero()
		}) {
			t.Fatalf("%s did not end: %+v, %v", id, sb, err)
		}
		return sb
	}
	for id, reason := range map[string]string{expired: client.EndExpired, idle: client.EndIdle} {
		sb := ended(d, id)
		if sb.State != client.StateStopped || sb.EndReason != reason {
			t.Errorf("%s: %s (%s), want stopped (%s)", id, sb.State, sb.EndReason, reason)
		}
		if _, err := d.C.Exec(ctx, id, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "has ended") {
			t.Errorf("exec on %s (%s): %v, want 409 saying it has ended", id, reason, err)
		}
	}
	if !waitFor(retention+5*time.Second, func() bool {
		_, err := d.C.GetSandbox(ctx, expired)
		return errors.Is(err, client.ErrNotFound)
	}) {
		t.Errorf("%s still visible after the retention of %v", expired, retention)
	}

	// Ends found by a restart.
	late := create(client.CreateSandboxRequest{Timeout: 2 * time.Second})
	dead := create(client.CreateSandboxRequest{})
	deadPid := agentPid(t, e, dead)
	d.Kill()
	if err := syscall.Kill(deadPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // late expires while no daemon runs
	d = e.start()
	for id, want := range map[string]struct {
		state  client.State
		reason string
	}{late: {client.StateStopped, client.EndExpired}, dead: {client.StateFailed, client.EndAgentGone}} {
		sb := ended(d, id)
		if sb.State != want.state || sb.EndReason != want.reason {
			t.Errorf("%s after the restart: %s (%s), want %s (%s)", id, sb.State, sb.EndReason, want.state, want.reason)
		}
	}
	d.Stop()
	got := endRecords(t, verifyAudit(t, e))
	for id, reason := range map[string]string{expired: "expired", idle: "idle", late: "expired", dead: "agent_gone"} {
		if got[id] != reason {
			t.Errorf("audit: the end of %s is recorded as %q, want %q", id, got[id], reason)
		}
	}
}
