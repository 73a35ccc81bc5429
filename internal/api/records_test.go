package api

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// record returns the store's record of id for tenant A.
func (e *realEnv) record(id string) store.Sandbox {
	e.t.Helper()
	rec, err := e.st.GetSandbox(context.Background(), tenantA, id)
	if err != nil {
		e.t.Fatalf("record of %s: %v", id, err)
	}
	return rec
}

// activeRecords counts tenant A's records that are not stopped.
func (e *realEnv) activeRecords() int {
	e.t.Helper()
	n, err := e.st.CountActiveSandboxes(context.Background(), tenantA)
	if err != nil {
		e.t.Fatal(err)
	}
	return n
}

func TestRecordsCreateDelete(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	a := e.client(e.adminA)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{Metadata: map[string]string{"job": "42"}})
	if err != nil {
		t.Fatal(err)
	}
	rec := e.record(sb.ID)
	if rec.State != "running" || rec.TenantID != tenantA || rec.Template != "host" || rec.Metadata["job"] != "42" ||
		!rec.CreatedAt.Equal(sb.CreatedAt) || !rec.StoppedAt.IsZero() {
		t.Errorf("record after create: %+v", rec)
	}
	// Another tenant cannot see it in the store either.
	if _, err := e.st.GetSandbox(ctx, tenantB, sb.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("tenant B reads A's record: %v", err)
	}
	before := time.Now()
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	rec = e.record(sb.ID)
	if rec.State != store.SandboxStopped || rec.StoppedAt.IsZero() || rec.StoppedAt.Before(before.Add(-time.Second)) {
		t.Errorf("record after delete: %+v", rec)
	}
	// Deleting again (the sandbox is stopped) keeps the first stop time.
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if again := e.record(sb.ID); !again.StoppedAt.Equal(rec.StoppedAt) {
		t.Errorf("stop time moved from %v to %v", rec.StoppedAt, again.StoppedAt)
	}
}

func TestRecordsQuota(t *testing.T) {
	ctx := context.Background()
	// No Quota: the store's atomic check alone enforces the quota.
	e := newRealEnv(t, func(c *Config) { c.Quota = nil })
	if err := e.st.UpdateTenant(ctx, store.Tenant{ID: tenantA, Name: tenantA, MaxSandboxes: 2}); err != nil {
		t.Fatal(err)
	}
	a := e.client(e.adminA)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ok, limited int
	for range 5 {
		wg.Go(func() {
			_, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, client.ErrQuotaExceeded):
				limited++
			default:
				t.Errorf("create: %v", err)
			}
		})
	}
	wg.Wait()
	if ok != 2 || limited != 3 {
		t.Fatalf("5 concurrent creates with a quota of 2: %d created, %d refused", ok, limited)
	}
	if n := e.activeRecords(); n != 2 {
		t.Errorf("%d active records, want 2", n)
	}
	waitUntil(t, 5*time.Second, "refused sandboxes to be destroyed", func() bool { return len(e.rt.Live()) == 2 })
	// Tenant B is not affected.
	if _, err := e.client(e.adminB).CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
		t.Errorf("tenant B create: %v", err)
	}
}

// A sandbox that expires ends without the API: its record must not keep
// counting against the quota.
func TestRecordsExpiredSandboxFreesQuota(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	if err := e.st.UpdateTenant(ctx, store.Tenant{ID: tenantA, Name: tenantA, MaxSandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	a := e.client(e.adminA)
	short, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Fatalf("second create within the quota of 1: %v", err)
	}
	waitUntil(t, 10*time.Second, "the sandbox to expire", func() bool {
		sb, err := e.mgr.Get(short.ID)
		return err == nil && sb.State == sandbox.StateStopped
	})
	if rec := e.record(short.ID); rec.State != "running" {
		t.Fatalf("the expired sandbox's record is already %q; the test needs a stale record", rec.State)
	}
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create after the only sandbox expired: %v", err)
	}
	if rec := e.record(short.ID); rec.State != store.SandboxStopped || rec.StoppedAt.IsZero() {
		t.Errorf("expired sandbox's record: %+v", rec)
	}
	if rec := e.record(sb.ID); rec.State != "running" {
		t.Errorf("new sandbox's record: %+v", rec)
	}
}

func TestRecordsUndo(t *testing.T) {
	ctx := context.Background()
	fa := &fakeAudit{}
	e := newRealEnv(t, func(c *Config) { c.Audit = fa })
	a := e.client(e.adminA)
	fa.setFailOutcomes(errors.New("audit down"))
	if _, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{}); !errors.Is(err, client.ErrUnavailable) {
		t.Fatalf("create with the audit log down: %v", err)
	}
	recs, err := e.st.ListSandboxes(ctx, store.SandboxFilter{TenantID: tenantA})
	if err != nil || len(recs) != 1 {
		t.Fatalf("records: %+v, %v", recs, err)
	}
	if recs[0].State != store.SandboxStopped {
		t.Errorf("the record of a sandbox that was not kept: %+v", recs[0])
	}
	if n := len(e.rt.Live()); n != 0 {
		t.Errorf("%d sandboxes live after an undone create", n)
	}
}
