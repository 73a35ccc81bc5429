package api

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// testCommandPolicy denies git push, asks for rm and allows the rest.
var testCommandPolicy = &client.CommandPolicy{Rules: []client.CommandRule{
	{Action: "deny", Prefix: []string{"git", "push"}},
	{Action: "ask", Prefix: []string{"rm"}},
}}

// execAudit returns the command_policy details of the sandbox.exec
// records taken from e's audit log, and how many were intents.
func execAudit(e *testEnv) (outcomes []map[string]any, intents int) {
	for _, ev := range e.audit.take() {
		if ev.Action != ActionSandboxExec {
			continue
		}
		if ev.Outcome == audit.OutcomeIntent {
			intents++
			continue
		}
		d, _ := ev.Details["command_policy"].(map[string]any)
		outcomes = append(outcomes, d)
	}
	return outcomes, intents
}

// A sandbox's command policy is returned with it, lets allowed commands
// run with the decision audited, and refuses denied ones (shell and argv
// forms) with 403 before anything runs or an intent is recorded.
func TestExecCommandPolicy(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{CommandPolicy: testCommandPolicy})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.GetSandbox(ctx, sb.ID); err != nil || !reflect.DeepEqual(got.CommandPolicy, testCommandPolicy) {
		t.Fatalf("GET shows policy %+v, %v", got.CommandPolicy, err)
	}
	e.audit.take()

	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hi | tr a-z A-Z"})
	if err != nil || string(res.Stdout) != "HI\n" {
		t.Fatalf("allowed exec = %+v, %v", res, err)
	}
	outcomes, intents := execAudit(e)
	if len(outcomes) != 1 || intents != 1 || outcomes[0]["action"] != "allow" {
		t.Errorf("allowed exec's audit: %v, %d intents", outcomes, intents)
	}

	mark := filepath.Join(t.TempDir(), "ran")
	for _, req := range []client.ExecRequest{
		{Command: "touch " + mark + "; git push origin main"},
		{Command: "touch " + mark + " && bash -c 'env X=1 git push'"},
		{Command: "touch " + mark + "; $(echo git) push"}, // fails closed
		{Cmd: []string{"sh", "-c", "touch " + mark + "; /usr/bin/git push"}},
	} {
		_, err := c.Exec(ctx, sb.ID, req)
		if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "command policy denies") {
			t.Errorf("exec %q %q = %v, want 403 from the command policy", req.Command, req.Cmd, err)
		}
		if _, serr := os.Stat(mark); serr == nil {
			t.Fatalf("exec %q %q ran although denied", req.Command, req.Cmd)
		}
		outcomes, intents := execAudit(e)
		if len(outcomes) != 1 || intents != 0 || outcomes[0]["action"] != "deny" {
			t.Errorf("denied exec's audit: %v, %d intents; want one outcome with the deny, no intent", outcomes, intents)
		}
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Command: "git push"})
	if err == nil || !strings.Contains(err.Error(), `"git push"`) || !strings.Contains(err.Error(), "rule deny") {
		t.Errorf("the refusal does not name the command and rule: %v", err)
	}
	if outcomes, _ := execAudit(e); len(outcomes) != 1 || !reflect.DeepEqual(outcomes[0]["rule"], map[string]any{"action": "deny", "prefix": []string{"git", "push"}}) {
		t.Errorf("the audit record does not name the rule: %v", outcomes)
	}

	// A sandbox without a policy runs anything, and records no decision.
	plain, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil || plain.CommandPolicy != nil {
		t.Fatalf("create without a policy: %+v, %v", plain, err)
	}
	e.audit.take()
	if _, err := c.Exec(ctx, plain.ID, client.ExecRequest{Command: "git push 2>/dev/null; true"}); err != nil {
		t.Errorf("exec without a policy: %v", err)
	}
	if outcomes, _ := execAudit(e); len(outcomes) != 1 || outcomes[0] != nil {
		t.Errorf("exec without a policy recorded a decision: %v", outcomes)
	}

	// An invalid policy is refused at create.
	for _, p := range []*client.CommandPolicy{{Default: "block"}, {Rules: []client.CommandRule{{Action: "deny"}}}} {
		if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{CommandPolicy: p}); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("create with policy %+v: %v, want 400", p, err)
		}
	}
}

// An exec the policy asks about waits for a decision in the approval
// queue and runs once approved; it is refused when denied, and at once
// where the daemon has no approval queue.
func TestExecCommandPolicyAsk(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{CommandPolicy: testCommandPolicy})
	if err != nil {
		t.Fatal(err)
	}
	e.audit.take()
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Command: "rm " + victim})
	if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "no approval queue") {
		t.Errorf("ask without an approval queue = %v, want 403", err)
	}
	if outcomes, intents := execAudit(e); len(outcomes) != 1 || intents != 0 || outcomes[0]["action"] != "ask" ||
		outcomes[0]["approval"] != "this daemon has no approval queue" {
		t.Errorf("audit of an ask without a queue: %v, %d intents", outcomes, intents)
	}

	q, err := gateway.NewApprovals(gateway.ApprovalsConfig{Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.h.approvals = q
	for _, approve := range []bool{false, true} {
		done := make(chan error, 1)
		go func() {
			_, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "rm " + victim})
			done <- err
		}()
		var id string
		for deadline := time.Now().Add(5 * time.Second); id == "" && time.Now().Before(deadline); time.Sleep(2 * time.Millisecond) {
			for _, a := range q.List(tenantA) {
				if a.State == gateway.ApprovalPending {
					if a.Tool != "exec" || a.Sandbox != sb.ID || string(a.Args) != `{"command":"rm `+victim+`"}` {
						t.Fatalf("approval %+v", a)
					}
					id = a.ID
				}
			}
		}
		if id == "" {
			t.Fatal("the exec did not wait for an approval")
		}
		if _, err := os.Stat(victim); err != nil {
			t.Fatal("the exec ran before its approval")
		}
		if _, err := q.Decide(tenantA, id, approve, "k-approver", "looked at it"); err != nil {
			t.Fatal(err)
		}
		err := <-done
		_, serr := os.Stat(victim)
		outcomes, _ := execAudit(e)
		if !approve {
			if !errors.Is(err, client.ErrForbidden) || !strings.Contains(err.Error(), "looked at it") || serr != nil {
				t.Errorf("denied ask = %v (file: %v), want 403 with the reason", err, serr)
			}
			if len(outcomes) != 1 || outcomes[0]["approval"] != "it was denied: looked at it" {
				t.Errorf("audit of a denied ask: %v", outcomes)
			}
			continue
		}
		if err != nil || !os.IsNotExist(serr) {
			t.Errorf("approved ask = %v (file: %v), want the command run", err, serr)
		}
		if len(outcomes) != 1 || outcomes[0]["action"] != "ask" || outcomes[0]["approval"] != "approved" {
			t.Errorf("audit of an approved ask: %v", outcomes)
		}
	}
}

// TestPTYCommandPolicy checks that a sandbox's command policy judges a
// terminal's command: a PTY running a denied command is refused 403
// before anything starts, the default login shell under a policy that
// denies shells too, and an allowed command opens.
func TestPTYCommandPolicy(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	sb, err := e.client(keyA).CreateSandbox(ctx, client.CreateSandboxRequest{CommandPolicy: &client.CommandPolicy{Rules: []client.CommandRule{
		{Action: "deny", Prefix: []string{"git", "push"}},
		{Action: "deny", Prefix: []string{"bash"}},
		{Action: "deny", Prefix: []string{"sh"}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	dial := func(query string) int {
		u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty" + query
		conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: e.srv.Client(), HTTPHeader: http.Header{"Authorization": {"Bearer " + keyA}}})
		if conn != nil {
			conn.CloseNow()
		}
		if resp == nil {
			t.Fatalf("dial %s: %v", query, err)
		}
		return resp.StatusCode
	}
	for _, q := range []string{"?cmd=" + url.QueryEscape("git push origin main"), ""} {
		if st := dial(q); st != http.StatusForbidden {
			t.Errorf("PTY %q under the policy: status %d, want 403", q, st)
		}
	}
	if st := dial("?cmd=true"); st != http.StatusSwitchingProtocols {
		t.Errorf("PTY running an allowed command: status %d, want 101", st)
	}
}
