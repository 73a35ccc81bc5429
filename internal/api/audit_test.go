package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// oneEvent returns the single event recorded since the last call.
func oneEvent(t *testing.T, e *testEnv) audit.Event {
	t.Helper()
	ev := e.audit.take()
	if len(ev) != 1 {
		t.Fatalf("%d audit events, want 1: %+v", len(ev), ev)
	}
	if ev[0].Time.IsZero() {
		t.Error("event without a time")
	}
	return ev[0]
}

func checkEvent(t *testing.T, ev audit.Event, action, target, outcome string, details map[string]any) {
	t.Helper()
	if ev.Action != action || ev.Target != target || ev.Outcome != outcome || ev.TenantID != tenantA || ev.KeyID != "ka" {
		t.Errorf("event %+v, want %s on %s by %s/ka: %s", ev, action, target, tenantA, outcome)
	}
	for k, want := range details {
		if got, ok := ev.Details[k]; !ok || got != want {
			t.Errorf("%s: details[%s] = %v (%T), want %v (%T)", action, k, got, got, want, want)
		}
	}
}

func TestAudit(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "other"})
	if err != nil {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxCreate, sb.ID, "ok", map[string]any{"template": "other"})

	if _, err := c.SetTimeout(ctx, sb.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxTimeout, sb.ID, "ok", map[string]any{"timeout_s": int64(3600)})

	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "exit 4"}); err != nil {
		t.Fatal(err)
	}
	ev := oneEvent(t, e)
	checkEvent(t, ev, ActionSandboxExec, sb.ID, "ok", map[string]any{"command": "exit 4", "exit_code": 4, "status": "error"})
	if _, ok := ev.Details["duration_ms"].(int64); !ok {
		t.Errorf("exec event has no duration: %+v", ev.Details)
	}
	if _, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "hi"}}, nil); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxExec, sb.ID, "ok", map[string]any{"command": `["echo","hi"]`, "exit_code": 0, "status": "success"})

	content := "some file content"
	sum := sha256.Sum256([]byte(content))
	if _, err := c.WriteFile(ctx, sb.ID, "a/b.txt", strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionFileWrite, sb.ID, "ok",
		map[string]any{"path": "a/b.txt", "size": int64(len(content)), "sha256": hex.EncodeToString(sum[:])})

	// Reads are not audited.
	if _, _, err := c.ListDir(ctx, sb.ID, "a", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if ev := e.audit.take(); len(ev) != 0 {
		t.Errorf("reads were audited: %+v", ev)
	}

	if err := c.RemoveFile(ctx, sb.ID, "a", true); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionFileDelete, sb.ID, "ok", map[string]any{"path": "a", "recursive": true})

	// Failures are recorded with their public code.
	if err := c.RemoveFile(ctx, sb.ID, "a", false); !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionFileDelete, sb.ID, CodeNotFound, map[string]any{"path": "a"})
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "true", User: "nobody"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxExec, sb.ID, CodeInvalidArgument, nil)
	if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "nope"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxCreate, "", CodeNotFound, map[string]any{"template": "nope"})
	if _, err := e.client(keyWithout(auth.ScopeExec)).Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrForbidden) {
		t.Fatal(err)
	}
	if ev := oneEvent(t, e); ev.Action != ActionSandboxExec || ev.Outcome != CodePermissionDenied || ev.Target != sb.ID {
		t.Errorf("denied exec recorded as %+v", ev)
	}

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxDelete, sb.ID, "ok", nil)
}

func TestAuditFailure(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	e.audit.setFail(errors.Join(errors.New("disk full at /var/lib/airlock"), errdefs.ErrUnavailable))

	// A create that cannot be recorded is undone.
	_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 503 || strings.Contains(ae.Message, "/var/lib") {
		t.Fatalf("create with the audit log down: %v", err)
	}
	running := e.mgr.List(sandbox.Filter{States: []sandbox.State{sandbox.StateRunning}})
	if len(running) != 1 || running[0].ID != sb.ID {
		t.Errorf("running sandboxes %+v, want only the first", running)
	}
	// Other mutations report that they happened but were not recorded.
	if _, err := c.WriteFile(ctx, sb.ID, "f", strings.NewReader("x")); !errors.Is(err, client.ErrUnavailable) ||
		!strings.Contains(err.Error(), "not recorded") {
		t.Errorf("write with the audit log down: %v", err)
	}
	e.audit.setFail(nil)
	if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
		t.Errorf("create after the audit log is back: %v", err)
	}
}
