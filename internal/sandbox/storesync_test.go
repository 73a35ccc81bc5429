package sandbox

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// The store the daemon uses satisfies RecordStore.
var _ RecordStore = (*sqlitestore.Store)(nil)

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

// recordsEnv is a started Manager on the fake runtime that keeps its
// records in a real store holding tenants A (quota 1) and B (no quota).
type recordsEnv struct {
	*env
	st *sqlitestore.Store
	m  *Manager
}

func newRecordsEnv(t *testing.T) *recordsEnv {
	t.Helper()
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	for _, tn := range []store.Tenant{{ID: tenantA, Name: tenantA, MaxSandboxes: 1}, {ID: tenantB, Name: tenantB}} {
		if err := st.CreateTenant(ctx, tn); err != nil {
			t.Fatal(err)
		}
	}
	e := &recordsEnv{env: newEnv(t), st: st}
	e.m = e.manager(Config{Records: st})
	return e
}

// create creates a sandbox of owner and records it.
func (e *recordsEnv) create(owner string) (Sandbox, error) {
	e.t.Helper()
	ctx := context.Background()
	sb, err := e.m.Create(ctx, Spec{Owner: owner})
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = e.m.Destroy(context.Background(), sb.ID) })
	return sb, e.m.RecordCreated(ctx, sb)
}

// record returns the store's record of id.
func (e *recordsEnv) record(id string) store.Sandbox {
	e.t.Helper()
	rec, err := e.st.GetSandbox(context.Background(), "", id)
	if err != nil {
		e.t.Fatalf("record of %s: %v", id, err)
	}
	return rec
}

// A create that the quota refuses syncs the tenant's records first: the
// record of a sandbox that ended without a delete no longer counts.
func TestRecordCreatedQuota(t *testing.T) {
	ctx := context.Background()
	e := newRecordsEnv(t)
	first, err := e.create(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	if rec := e.record(first.ID); rec.State != "running" || rec.TenantID != tenantA || rec.Template != "host" ||
		!rec.CreatedAt.Equal(first.CreatedAt) || !rec.StoppedAt.IsZero() {
		t.Errorf("record after create: %+v", rec)
	}
	second, err := e.create(tenantA)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "quota is reached") {
		t.Fatalf("second create within a quota of 1: %v", err)
	}
	if _, err := e.st.GetSandbox(ctx, "", second.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused create left a record: %v", err)
	}
	// The first ends without RecordStopped (as an expiry does).
	if err := e.m.Destroy(ctx, first.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RecordCreated(ctx, second); err != nil {
		t.Fatalf("create after the only sandbox ended: %v", err)
	}
	ended, _ := e.m.Get(first.ID)
	if rec := e.record(first.ID); rec.State != store.SandboxStopped || !rec.StoppedAt.Equal(ended.StoppedAt.UTC()) {
		t.Errorf("ended sandbox's record: %+v, stopped at %v", rec, ended.StoppedAt)
	}
	if rec := e.record(second.ID); rec.State != "running" {
		t.Errorf("new sandbox's record: %+v", rec)
	}
	// Tenant B has no quota.
	for range 3 {
		if _, err := e.create(tenantB); err != nil {
			t.Errorf("tenant B create: %v", err)
		}
	}
}

// RecordStopped marks the record stopped once: a second call (a delete
// of a stopped sandbox) keeps the first stop time; a sandbox the Manager
// forgot is recorded from what the caller has.
func TestRecordStopped(t *testing.T) {
	ctx := context.Background()
	e := newRecordsEnv(t)
	sb, err := e.create(tenantB)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := e.m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := e.m.RecordStopped(ctx, sb); err != nil {
		t.Fatal(err)
	}
	rec := e.record(sb.ID)
	if rec.State != store.SandboxStopped || rec.StoppedAt.Before(before.Add(-time.Second)) {
		t.Errorf("record after delete: %+v", rec)
	}
	if err := e.m.RecordStopped(ctx, sb); err != nil {
		t.Fatal(err)
	}
	if again := e.record(sb.ID); !again.StoppedAt.Equal(rec.StoppedAt) {
		t.Errorf("stop time moved from %v to %v", rec.StoppedAt, again.StoppedAt)
	}
	forgotten := Sandbox{ID: "sb-bbbbbbbbbbbbbbbb", Owner: tenantB, Template: "host", State: StateRunning, CreatedAt: time.Now()}
	if err := e.m.RecordStopped(ctx, forgotten); err != nil {
		t.Fatal(err)
	}
	if rec := e.record(forgotten.ID); rec.State != store.SandboxStopped || rec.StoppedAt.Before(rec.CreatedAt) {
		t.Errorf("record of a sandbox the Manager never held: %+v", rec)
	}
}

func TestSyncRecords(t *testing.T) {
	ctx := context.Background()
	e := newRecordsEnv(t)
	live, err := e.create(tenantB)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := e.create(tenantB)
	if err != nil {
		t.Fatal(err)
	}
	// One sandbox destroyed without RecordStopped, one the Manager never
	// knew (a record left by an earlier daemon).
	if err := e.m.Destroy(ctx, gone.ID); err != nil {
		t.Fatal(err)
	}
	const unknown = "sb-aaaaaaaaaaaaaaaa"
	if err := e.st.PutSandbox(ctx, store.Sandbox{ID: unknown, TenantID: tenantA, State: "running", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := e.m.SyncRecords(ctx); err != nil {
		t.Fatal(err)
	}
	if rec := e.record(live.ID); rec.State != "running" {
		t.Errorf("live sandbox's record: %+v", rec)
	}
	ended, _ := e.m.Get(gone.ID)
	if rec := e.record(gone.ID); rec.State != store.SandboxStopped || !rec.StoppedAt.Equal(ended.StoppedAt.UTC()) {
		t.Errorf("destroyed sandbox's record: %+v, stopped at %v", rec, ended.StoppedAt)
	}
	if rec := e.record(unknown); rec.State != store.SandboxStopped || rec.StoppedAt.IsZero() {
		t.Errorf("unknown sandbox's record: %+v", rec)
	}
}

// One sync reaches every stale record, however many pages of them there
// are.
func TestSyncRecordsPages(t *testing.T) {
	ctx := context.Background()
	e := newRecordsEnv(t)
	live, err := e.create(tenantB)
	if err != nil {
		t.Fatal(err)
	}
	n := store.MaxListLimit + store.MaxListLimit/2
	created := time.Now().Add(-time.Hour)
	for i := range n {
		rec := store.Sandbox{ID: fmt.Sprintf("sb-%016d", i), TenantID: tenantB, State: "running", CreatedAt: created}
		if err := e.st.PutSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.m.SyncRecords(ctx); err != nil {
		t.Fatal(err)
	}
	active, err := e.st.ListSandboxes(ctx, store.SandboxFilter{States: activeRecordStates, Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	if len(active) != 1 || active[0].ID != live.ID {
		t.Errorf("after the sync of %d stale records, %d are active (want only %s)", n, len(active), live.ID)
	}
}

// failingRecords is a store that fails every call.
type failingRecords struct{}

var errStoreDown = errors.New("database is locked")

func (failingRecords) CreateSandbox(context.Context, store.Sandbox) error { return errStoreDown }
func (failingRecords) PutSandbox(context.Context, store.Sandbox) error    { return errStoreDown }
func (failingRecords) ListSandboxes(context.Context, store.SandboxFilter) ([]store.Sandbox, error) {
	return nil, errStoreDown
}

// A store failure is unavailable to the caller (never a quota refusal),
// and says which sandbox and what failed.
func TestRecordStoreFailure(t *testing.T) {
	ctx := context.Background()
	m := newEnv(t).manager(Config{Records: failingRecords{}})
	if !m.KeepsRecords() {
		t.Fatal("KeepsRecords is false with Records set")
	}
	sb, err := m.Create(ctx, Spec{Owner: tenantA})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"RecordCreated": m.RecordCreated(ctx, sb),
		"RecordStopped": m.RecordStopped(ctx, sb),
	} {
		if !errors.Is(err, errdefs.ErrUnavailable) || errors.Is(err, errdefs.ErrResourceExhausted) ||
			!strings.Contains(err.Error(), sb.ID) || !strings.Contains(err.Error(), errStoreDown.Error()) {
			t.Errorf("%s with the store down: %v", name, err)
		}
	}
	if err := m.SyncRecords(ctx); !errors.Is(err, errStoreDown) {
		t.Errorf("SyncRecords with the store down: %v", err)
	}
}

// Without Records the Manager keeps no records and the calls do nothing.
func TestNoRecordStore(t *testing.T) {
	ctx := context.Background()
	m := newEnv(t).manager(Config{})
	sb, err := m.Create(ctx, Spec{Owner: tenantA})
	if err != nil {
		t.Fatal(err)
	}
	if m.KeepsRecords() {
		t.Error("KeepsRecords is true without Records")
	}
	if err := m.RecordCreated(ctx, sb); err != nil {
		t.Error(err)
	}
	if err := m.RecordStopped(ctx, sb); err != nil {
		t.Error(err)
	}
	if err := m.SyncRecords(ctx); err != nil {
		t.Error(err)
	}
}

func TestRecordMetadataTooLarge(t *testing.T) {
	md := map[string]string{}
	for i := range 40 {
		md[string(rune('a'+i%26))+string(rune('a'+i/26))] = string(make([]byte, 4000))
	}
	rec := toRecord(Sandbox{ID: "sb-aaaaaaaaaaaaaaaa", Owner: tenantA, State: "running", CreatedAt: time.Now(), Metadata: md})
	if err := rec.Validate(); err != nil {
		t.Errorf("record of a sandbox with large metadata: %v", err)
	}
	if rec.Metadata["_truncated"] != "true" {
		t.Errorf("metadata %v, want the truncation marker", rec.Metadata)
	}
}

func TestStoppedRecord(t *testing.T) {
	created := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	first := created.Add(time.Minute)
	tests := []struct {
		name string
		rec  store.Sandbox
		at   time.Time
		want time.Time
	}{
		{"running", store.Sandbox{CreatedAt: created, State: "running"}, first, first},
		{"keeps its stop time", store.Sandbox{CreatedAt: created, State: "stopped", StoppedAt: first}, first.Add(time.Hour), first},
		{"never before its creation", store.Sandbox{CreatedAt: created, State: "running"}, created.Add(-time.Hour), created},
	}
	for _, tt := range tests {
		got := stoppedRecord(tt.rec, tt.at)
		if got.State != store.SandboxStopped || !got.StoppedAt.Equal(tt.want) {
			t.Errorf("%s: stoppedRecord = %s at %v, want stopped at %v", tt.name, got.State, got.StoppedAt, tt.want)
		}
	}
	if got := stoppedRecord(store.Sandbox{CreatedAt: created}, time.Time{}); got.StoppedAt.Before(time.Now().Add(-time.Minute)) {
		t.Errorf("stoppedRecord at the zero time: stopped at %v, want now", got.StoppedAt)
	}
}
