package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// oneEvent returns the single event recorded since the last call: the
// outcome of a request refused before it did anything.
func oneEvent(t *testing.T, e *testEnv) audit.Event {
	t.Helper()
	ev := e.audit.take()
	if len(ev) != 1 {
		t.Fatalf("%d audit events, want 1: %+v", len(ev), ev)
	}
	if ev[0].Time.IsZero() {
		t.Error("event without a time")
	}
	if ev[0].Outcome == audit.OutcomeIntent || ev[0].IntentSeq != 0 {
		t.Errorf("a refused request left %+v, want a lone outcome", ev[0])
	}
	return ev[0]
}

// intentOutcome returns the two events recorded since the last call: an
// intent and the outcome that names it. The intent carries the request
// summary (the outcome's details without the result keys given).
func intentOutcome(t *testing.T, e *testEnv, resultKeys ...string) audit.Event {
	t.Helper()
	ev := e.audit.take()
	if len(ev) != 2 {
		t.Fatalf("%d audit events, want an intent and an outcome: %+v", len(ev), ev)
	}
	in, out := ev[0], ev[1]
	if in.Outcome != audit.OutcomeIntent || in.IntentSeq != 0 || in.Action != out.Action || in.KeyID != out.KeyID ||
		in.TenantID != out.TenantID || in.Time.IsZero() || out.Time.Before(in.Time) {
		t.Errorf("intent %+v for outcome %+v", in, out)
	}
	if named, ok := e.audit.event(out.IntentSeq); !ok || named.Outcome != audit.OutcomeIntent || named.Action != out.Action {
		t.Errorf("outcome %+v names intent %d: %+v", out, out.IntentSeq, named)
	}
	if in.Target != "" && in.Target != out.Target {
		t.Errorf("intent target %q, outcome target %q", in.Target, out.Target)
	}
	for k, v := range out.Details {
		if slices.Contains(resultKeys, k) {
			if _, ok := in.Details[k]; ok {
				t.Errorf("intent has the result detail %s", k)
			}
			continue
		}
		if in.Details[k] != v {
			t.Errorf("intent details[%s] = %v, outcome has %v", k, in.Details[k], v)
		}
	}
	return out
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
	checkEvent(t, intentOutcome(t, e), ActionSandboxCreate, sb.ID, "ok", map[string]any{"template": "other"})

	if _, err := c.SetTimeout(ctx, sb.ID, time.Hour); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e), ActionSandboxTimeout, sb.ID, "ok", map[string]any{"timeout_s": int64(3600)})

	execResult := []string{"exit_code", "status", "duration_ms", "signal"}
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "exit 4"}); err != nil {
		t.Fatal(err)
	}
	ev := intentOutcome(t, e, execResult...)
	checkEvent(t, ev, ActionSandboxExec, sb.ID, "ok", map[string]any{"command": "exit 4", "exit_code": 4, "status": "error"})
	if _, ok := ev.Details["duration_ms"].(int64); !ok {
		t.Errorf("exec event has no duration: %+v", ev.Details)
	}
	if _, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "hi"}}, nil); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e, execResult...), ActionSandboxExec, sb.ID, "ok",
		map[string]any{"command": `["echo","hi"]`, "exit_code": 0, "status": "success"})

	content := "some file content"
	sum := sha256.Sum256([]byte(content))
	if _, err := c.WriteFile(ctx, sb.ID, "a/b.txt", strings.NewReader(content)); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e, "size", "sha256"), ActionFileWrite, sb.ID, "ok",
		map[string]any{"path": "a/b.txt", "size": int64(len(content)), "sha256": hex.EncodeToString(sum[:])})

	if _, err := c.MakeDir(ctx, sb.ID, "d/e"); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e), ActionFileMkdir, sb.ID, "ok", map[string]any{"path": "d/e"})

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
	checkEvent(t, intentOutcome(t, e), ActionFileDelete, sb.ID, "ok", map[string]any{"path": "a", "recursive": true})

	// A failure of the action is its outcome, with the public code.
	if err := c.RemoveFile(ctx, sb.ID, "a", false); !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e), ActionFileDelete, sb.ID, CodeNotFound, map[string]any{"path": "a"})
	if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "nope"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e), ActionSandboxCreate, "", CodeNotFound, map[string]any{"template": "nope"})
	// A request refused before the action has one record.
	if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "true", User: "nobody"}); !errors.Is(err, client.ErrInvalid) {
		t.Fatal(err)
	}
	checkEvent(t, oneEvent(t, e), ActionSandboxExec, sb.ID, CodeInvalidArgument, nil)
	if _, err := e.client(keyWithout(auth.ScopeExec)).Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrForbidden) {
		t.Fatal(err)
	}
	if ev := oneEvent(t, e); ev.Action != ActionSandboxExec || ev.Outcome != CodePermissionDenied || ev.Target != sb.ID {
		t.Errorf("denied exec recorded as %+v", ev)
	}

	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	checkEvent(t, intentOutcome(t, e), ActionSandboxDelete, sb.ID, "ok", nil)
}

// TestIntentBeforeAction: with the audit log refusing intents, no action
// is carried out, and the client is told that nothing was done.
func TestIntentBeforeAction(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	if _, err := c.WriteFile(ctx, sb.ID, "keep.txt", strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	e.audit.take()
	e.audit.setFail(errors.Join(errors.New("disk full at /var/lib/airlock"), errdefs.ErrUnavailable))
	nothingDone := func(what string, err error) {
		t.Helper()
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != 503 || !strings.Contains(ae.Message, "nothing was done") ||
			strings.Contains(ae.Message, "/var/lib") {
			t.Errorf("%s with the audit log down: %v", what, err)
		}
	}
	_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	nothingDone("create", err)
	_, err = c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo ran > ran.txt"})
	nothingDone("exec", err)
	_, err = c.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "echo ran > ran2.txt"}, nil)
	nothingDone("streamed exec", err)
	_, err = c.WriteFile(ctx, sb.ID, "keep.txt", strings.NewReader("overwritten"))
	nothingDone("write", err)
	_, err = c.MakeDir(ctx, sb.ID, "newdir")
	nothingDone("mkdir", err)
	nothingDone("remove", c.RemoveFile(ctx, sb.ID, "keep.txt", false))
	_, err = c.SetTimeout(ctx, sb.ID, 2*time.Hour)
	nothingDone("timeout", err)
	nothingDone("delete", c.DeleteSandbox(ctx, sb.ID))

	e.audit.setFail(nil)
	if n := len(e.mgr.List(sandbox.Filter{States: []sandbox.State{sandbox.StateRunning}})); n != 1 {
		t.Errorf("%d sandboxes running, want the first one only", n)
	}
	got, err := c.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != client.StateRunning || got.ExpiresAt.After(time.Now().Add(90*time.Minute)) {
		t.Errorf("sandbox after the refused requests: %+v, %v", got, err)
	}
	entries, _, err := c.ListDir(ctx, sb.ID, "", 1)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, en := range entries {
		names = append(names, en.Name)
	}
	if !slices.Equal(names, []string{"keep.txt"}) {
		t.Errorf("home holds %v after the refused requests, want only keep.txt", names)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "keep.txt")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "original" {
		t.Errorf("keep.txt = %q", b)
	}
}

// TestAuditFailure: when the outcome cannot be recorded, a create is
// undone and other mutations report that they happened unrecorded; their
// intents stay as the trace.
func TestAuditFailure(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	e.audit.take()
	e.audit.setFailOutcomes(errors.Join(errors.New("disk full at /var/lib/airlock"), errdefs.ErrUnavailable))

	_, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 503 || strings.Contains(ae.Message, "/var/lib") ||
		!strings.Contains(ae.Message, "not kept") {
		t.Fatalf("create with the audit log down: %v", err)
	}
	running := e.mgr.List(sandbox.Filter{States: []sandbox.State{sandbox.StateRunning}})
	if len(running) != 1 || running[0].ID != sb.ID {
		t.Errorf("running sandboxes %+v, want only the first", running)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "f", strings.NewReader("x")); !errors.Is(err, client.ErrUnavailable) ||
		!strings.Contains(err.Error(), "not recorded") {
		t.Errorf("write with the audit log down: %v", err)
	}
	evs := e.audit.take()
	if len(evs) != 2 || evs[0].Action != ActionSandboxCreate || evs[1].Action != ActionFileWrite ||
		evs[0].Outcome != audit.OutcomeIntent || evs[1].Outcome != audit.OutcomeIntent {
		t.Errorf("recorded %+v, want the two intents", evs)
	}
	e.audit.setFailOutcomes(nil)
	if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
		t.Errorf("create after the audit log is back: %v", err)
	}
}
