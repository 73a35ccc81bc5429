package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestCmdDeny drives a sandbox's command policy (deny curl, ask rm,
// allow the rest) through a real daemon: curl is refused 403
// permission_denied, with the rule in the message and an audit record,
// plain and smuggled (a pipeline, sh -c, env, find -exec, su -c, the
// argument-list form, a PTY's command), and nothing of the refused line
// runs; allowed commands run; rm waits in /v1/approvals, runs once
// approved and is refused once denied.
func TestCmdDeny(t *testing.T) {
	d := newEnv(t).start()
	ctx := ctxT(t, 3*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{CommandPolicy: &client.CommandPolicy{Rules: []client.CommandRule{
		{Action: "deny", Prefix: []string{"curl"}},
		{Action: "ask", Prefix: []string{"rm"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)

	// Allowed commands run, wrappers included.
	res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "echo hello | tr a-z A-Z; find /tmp -maxdepth 0 -exec echo found {} \\;"})
	if res.ExitCode != 0 || string(res.Stdout) != "HELLO\nfound /tmp\n" {
		t.Fatalf("allowed exec: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	hasSu := mustExec(t, d, sb.ID, client.ExecRequest{Command: "test -x /bin/su || test -x /usr/bin/su"}).ExitCode == 0

	// Each refused line first creates a marker: that none exists later
	// shows nothing of it ran.
	const curl = "curl -s http://127.0.0.1:9/"
	denied := []client.ExecRequest{
		{Command: "touch /tmp/m-plain; " + curl},
		{Command: "touch /tmp/m-pipe; echo hi | " + curl + " -d @-"},
		{Command: "touch /tmp/m-shc; sh -c '" + curl + "'"},
		{Command: "touch /tmp/m-env; env X=1 " + curl},
		{Command: "touch /tmp/m-find; find /tmp -maxdepth 0 -exec curl -s {} \\;"},
		{Cmd: []string{"sh", "-c", "touch /tmp/m-argv; " + curl}},
	}
	if hasSu {
		denied = append(denied, client.ExecRequest{Command: "touch /tmp/m-su; su -c '" + curl + "' root"})
	} else {
		t.Log("the default template has no su: its variant is skipped")
	}
	for _, req := range denied {
		_, err := d.C.Exec(ctx, sb.ID, req)
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != "permission_denied" ||
			!strings.Contains(ae.Message, "command policy denies") || !strings.Contains(ae.Message, `rule deny "curl"`) {
			t.Errorf("exec %q%q = %v, want 403 permission_denied naming the rule", req.Command, req.Cmd, err)
		}
	}
	res = mustExec(t, d, sb.ID, client.ExecRequest{Command: "ls /tmp"})
	for _, f := range strings.Fields(string(res.Stdout)) {
		if strings.HasPrefix(f, "m-") {
			t.Errorf("a refused command ran: /tmp holds %s", f)
		}
	}

	// A PTY's command is judged when it opens.
	if _, err := d.C.PTY(ctx, sb.ID, client.PTYOptions{Command: curl}); !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "command policy denies") {
		t.Errorf("PTY running curl: %v, want 403 from the command policy", err)
	}
	p, err := d.C.PTY(ctx, sb.ID, client.PTYOptions{Command: "echo pty-ok"})
	if err != nil {
		t.Fatalf("PTY running an allowed command: %v", err)
	}
	out := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(p); out <- b }()
	if ex, err := p.Wait(ctx); err != nil || ex.ExitCode != 0 {
		t.Errorf("PTY exit %+v, %v", ex, err)
	}
	select {
	case b := <-out:
		if !strings.Contains(string(b), "pty-ok") {
			t.Errorf("PTY output %q", b)
		}
	case <-time.After(30 * time.Second):
		t.Error("the PTY's output did not end")
	}
	p.Close()

	// rm waits for a person: approved it runs, denied it is refused.
	mustExec(t, d, sb.ID, client.ExecRequest{Command: "touch /tmp/a1 /tmp/a2"})
	ask := func(cmd string, approve bool, reason string) error {
		t.Helper()
		done := make(chan error, 1)
		go func() {
			_, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Command: cmd})
			done <- err
		}()
		if !waitFor(30*time.Second, func() bool {
			pending, err := d.C.ListApprovals(ctx, "pending")
			if err != nil || len(pending) != 1 {
				return false
			}
			a := pending[0]
			var args struct {
				Command string `json:"command"`
			}
			if a.Tool != "exec" || a.Sandbox != sb.ID || json.Unmarshal(a.Args, &args) != nil || args.Command != cmd {
				t.Errorf("pending approval %+v (args %s)", a, a.Args)
			}
			if _, err := d.C.DecideApproval(ctx, a.ID, approve, reason); err != nil {
				t.Fatal(err)
			}
			return true
		}) {
			t.Fatalf("%q is not pending approval within 30 s", cmd)
		}
		select {
		case err := <-done:
			return err
		case <-time.After(time.Minute):
			t.Fatalf("%q still waits after its approval was decided", cmd)
			return nil
		}
	}
	if err := ask("rm /tmp/a1", true, "fine"); err != nil {
		t.Errorf("approved rm: %v", err)
	}
	err = ask("rm /tmp/a2", false, "keep that file")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != http.StatusForbidden || ae.Code != "permission_denied" || !strings.Contains(ae.Message, "keep that file") {
		t.Errorf("denied rm = %v, want 403 permission_denied with the reason", err)
	}
	res = mustExec(t, d, sb.ID, client.ExecRequest{Command: "ls /tmp"})
	if got := strings.Fields(string(res.Stdout)); slices.Contains(got, "a1") || !slices.Contains(got, "a2") {
		t.Errorf("after an approved rm of a1 and a denied one of a2, /tmp holds %q", got)
	}

	// Every decision is on the audit record.
	recs := auditAll(ctx, t, d, client.AuditQuery{Action: "sandbox.exec", Target: sb.ID, Phase: client.PhaseOutcome})
	type decision struct {
		Command string `json:"command"`
		Policy  struct {
			Action   string `json:"action"`
			Reason   string `json:"reason"`
			Approval string `json:"approval"`
			Rule     struct {
				Prefix []string `json:"prefix"`
			} `json:"rule"`
		} `json:"command_policy"`
	}
	var denies, approved, refused int
	for _, r := range recs {
		var det decision
		if err := json.Unmarshal(r.Details, &det); err != nil {
			t.Fatalf("record %d: %v", r.Seq, err)
		}
		switch {
		case det.Policy.Action == "deny":
			denies++
			if r.Outcome != "permission_denied" || r.IntentSeq != 0 || len(det.Policy.Rule.Prefix) != 1 || det.Policy.Rule.Prefix[0] != "curl" {
				t.Errorf("a deny's record: outcome %s, intent %d, details %s", r.Outcome, r.IntentSeq, r.Details)
			}
		case det.Command == "rm /tmp/a1":
			approved++
			if r.Outcome != "ok" || det.Policy.Action != "ask" || det.Policy.Approval != "approved" {
				t.Errorf("the approved rm's record: outcome %s, details %s", r.Outcome, r.Details)
			}
		case det.Command == "rm /tmp/a2":
			refused++
			if r.Outcome != "permission_denied" || det.Policy.Action != "ask" || !strings.Contains(det.Policy.Approval, "keep that file") {
				t.Errorf("the denied rm's record: outcome %s, details %s", r.Outcome, r.Details)
			}
		case det.Policy.Action != "allow":
			t.Errorf("an exec's record without the policy's decision: %s", r.Details)
		}
	}
	if denies != len(denied) || approved != 1 || refused != 1 {
		t.Errorf("audit: %d denies (want %d), %d approved rm, %d denied rm", denies, len(denied), approved, refused)
	}
	pty := auditAll(ctx, t, d, client.AuditQuery{Action: "sandbox.pty", Target: sb.ID, Phase: client.PhaseOutcome})
	ptyDenied := 0
	for _, r := range pty {
		if r.Outcome == "permission_denied" && strings.Contains(string(r.Details), `"action":"deny"`) {
			ptyDenied++
		}
	}
	if ptyDenied != 1 {
		t.Errorf("%d refused PTY records, want 1: %+v", ptyDenied, pty)
	}
}

// auditAll is every record q selects, page by page.
func auditAll(ctx context.Context, t *testing.T, d *daemon, q client.AuditQuery) []client.AuditRecord {
	t.Helper()
	var all []client.AuditRecord
	q.Limit = 1000
	for {
		recs, next, err := d.C.AuditList(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, recs...)
		if next == 0 {
			return all
		}
		q.After = next
	}
}
