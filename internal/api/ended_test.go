package api

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// TestDeadSandboxEnded checks what the API says of a sandbox whose agent
// died: GET and list show it failed, with its end reason and time; a
// request that needs it is a 409 saying it has ended (not a 503 to
// retry); and it no longer counts against its tenant's quota, in the
// manager's view or the store's.
func TestDeadSandboxEnded(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	if err := e.st.UpdateTenant(ctx, store.Tenant{ID: tenantA, Name: tenantA, MaxSandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	a := e.client(e.adminA)
	dead, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Crash(dead.ID); err != nil {
		t.Fatal(err)
	}
	var got *client.Sandbox
	waitUntil(t, time.Second, "the dead sandbox to end", func() bool {
		got, err = a.GetSandbox(ctx, dead.ID)
		return err == nil && !got.StoppedAt.IsZero()
	})
	if got.State != client.StateFailed || got.EndReason != client.EndAgentDied || !strings.Contains(got.Error, "agent") {
		t.Errorf("GET of a sandbox whose agent died: %+v", got)
	}
	list, err := a.ListSandboxes(ctx, client.ListOptions{States: []client.State{client.StateFailed}})
	if err != nil || len(list) != 1 || list[0].EndReason != client.EndAgentDied {
		t.Errorf("list of failed sandboxes: %+v, %v", list, err)
	}
	_, err = a.Exec(ctx, dead.ID, client.ExecRequest{Command: "true"})
	if !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "has ended") {
		t.Errorf("exec on the dead sandbox = %v, want a 409 saying it has ended", err)
	}
	if rec := e.record(dead.ID); rec.State != "running" {
		t.Fatalf("the dead sandbox's record is already %q; the test needs a stale record", rec.State)
	}
	// The quota of 1 is free again.
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after the only sandbox's agent died: %v", err)
	}
	if rec := e.record(dead.ID); rec.State != store.SandboxStopped || rec.StoppedAt.IsZero() {
		t.Errorf("dead sandbox's record: %+v", rec)
	}
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got, err := a.GetSandbox(ctx, sb.ID); err != nil || got.State != client.StateStopped || got.EndReason != client.EndDeleted {
		t.Errorf("GET after DELETE: %+v, %v", got, err)
	}
}
