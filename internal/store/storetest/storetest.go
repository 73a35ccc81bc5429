// Package storetest is the conformance suite every store.Store
// implementation must pass: tenants, keys, sandbox records with quotas,
// audit rows with the head anchor, secret rows with their count cap,
// tools and toolsets with theirs, tenant scoping, error classes and correctness under concurrent writers. An implementation's tests call Run
// with a function that returns a fresh, empty store.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// NewStore returns a fresh, empty store; the suite closes it.
type NewStore func(t *testing.T) store.Store

// Run runs the conformance suite.
func Run(t *testing.T, newStore NewStore) {
	t.Run("Tenants", func(t *testing.T) { testTenants(t, newStore(t)) })
	t.Run("Keys", func(t *testing.T) { testKeys(t, newStore(t)) })
	t.Run("DeleteTenant", func(t *testing.T) { testDeleteTenant(t, newStore(t)) })
	t.Run("Sandboxes", func(t *testing.T) { testSandboxes(t, newStore(t)) })
	t.Run("SandboxQuotaConcurrent", func(t *testing.T) { testQuotaConcurrent(t, newStore(t)) })
	t.Run("Audit", func(t *testing.T) { testAudit(t, newStore(t)) })
	t.Run("AuditQuery", func(t *testing.T) { testAuditQuery(t, newStore(t)) })
	t.Run("ConcurrentWriters", func(t *testing.T) { testConcurrentWriters(t, newStore(t)) })
	t.Run("Secrets", func(t *testing.T) { testSecrets(t, newStore(t)) })
	t.Run("SecretCapConcurrent", func(t *testing.T) { testSecretCapConcurrent(t, newStore(t)) })
	t.Run("SecretsOfDeletedTenant", func(t *testing.T) { testSecretsOfDeletedTenant(t, newStore(t)) })
	t.Run("Tools", func(t *testing.T) { testTools(t, newStore(t)) })
	t.Run("ToolCaps", func(t *testing.T) { testToolCaps(t, newStore(t)) })
	t.Run("ToolsOfDeletedTenant", func(t *testing.T) { testToolsOfDeletedTenant(t, newStore(t)) })
	t.Run("Policies", func(t *testing.T) { testPolicies(t, newStore(t)) })
}

// base is a fixed time with a nanosecond part, to check precision.
var base = time.Date(2026, 3, 4, 5, 6, 7, 123456789, time.UTC)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Errorf("%s: err = %v, want class %v", what, err, class)
	}
}

func must(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// Hash returns a valid lowercase hex hash derived from s, for tests.
func Hash(s string) string {
	h := fmt.Sprintf("%x", s)
	return (h + strings.Repeat("0", 64))[:64]
}

func testTenants(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "create b", s.CreateTenant(ctx, store.Tenant{ID: "b", Name: "Bee", CreatedAt: base, MaxSandboxes: 3}))
	must(t, "create a", s.CreateTenant(ctx, store.Tenant{ID: "a", Name: "Ay", CreatedAt: base}))
	wantClass(t, "duplicate", s.CreateTenant(ctx, store.Tenant{ID: "a", CreatedAt: base}), errdefs.ErrAlreadyExists)

	bad := []store.Tenant{
		{ID: ""}, {ID: "has space"}, {ID: strings.Repeat("x", 65)}, {ID: "ok", Name: "nul\x00"},
		{ID: "ok", MaxSandboxes: -1}, {ID: "ok", Name: string([]byte{0xff})},
	}
	for _, tn := range bad {
		wantClass(t, fmt.Sprintf("create %+v", tn), s.CreateTenant(ctx, tn), errdefs.ErrInvalidArgument)
	}

	got, err := s.GetTenant(ctx, "b")
	must(t, "get", err)
	if want := (store.Tenant{ID: "b", Name: "Bee", CreatedAt: base, MaxSandboxes: 3}); got != want {
		t.Errorf("get = %+v, want %+v", got, want)
	}
	_, err = s.GetTenant(ctx, "nope")
	wantClass(t, "get missing", err, errdefs.ErrNotFound)

	list, err := s.ListTenants(ctx)
	must(t, "list", err)
	if len(list) != 2 || list[0].ID != "a" || list[1].ID != "b" {
		t.Errorf("list = %+v, want a, b", list)
	}

	must(t, "update", s.UpdateTenant(ctx, store.Tenant{ID: "a", Name: "New", MaxSandboxes: 7}))
	got, err = s.GetTenant(ctx, "a")
	must(t, "get updated", err)
	if got.Name != "New" || got.MaxSandboxes != 7 || !got.CreatedAt.Equal(base) {
		t.Errorf("updated = %+v", got)
	}
	wantClass(t, "update missing", s.UpdateTenant(ctx, store.Tenant{ID: "zz"}), errdefs.ErrNotFound)
}

func testKeys(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant t1", s.CreateTenant(ctx, store.Tenant{ID: "t1", CreatedAt: base}))
	must(t, "tenant t2", s.CreateTenant(ctx, store.Tenant{ID: "t2", CreatedAt: base}))
	if n, err := s.CountAPIKeys(ctx); err != nil || n != 0 {
		t.Fatalf("count on empty = %d, %v", n, err)
	}

	k1 := store.APIKey{ID: "k1", TenantID: "t1", Name: "first", Hash: Hash("1"), Scopes: []string{"exec", "admin", "exec"},
		CreatedAt: base, ExpiresAt: base.Add(time.Hour)}
	must(t, "create k1", s.CreateAPIKey(ctx, k1))
	must(t, "create k2", s.CreateAPIKey(ctx, store.APIKey{ID: "k2", TenantID: "t1", Hash: Hash("2"), Scopes: []string{"exec"}, CreatedAt: base.Add(time.Second)}))
	must(t, "create k3", s.CreateAPIKey(ctx, store.APIKey{ID: "k3", TenantID: "t2", Hash: Hash("3"), Scopes: []string{"exec"}, CreatedAt: base}))
	wantClass(t, "duplicate", s.CreateAPIKey(ctx, store.APIKey{ID: "k1", TenantID: "t2", Hash: Hash("x"), Scopes: []string{"exec"}, CreatedAt: base}), errdefs.ErrAlreadyExists)
	wantClass(t, "unknown tenant", s.CreateAPIKey(ctx, store.APIKey{ID: "k9", TenantID: "nope", Hash: Hash("x"), Scopes: []string{"exec"}, CreatedAt: base}), errdefs.ErrNotFound)
	for _, k := range []store.APIKey{
		{ID: "k9", TenantID: "t1", Hash: "short", Scopes: []string{"exec"}, CreatedAt: base},
		{ID: "k9", TenantID: "t1", Hash: strings.ToUpper(Hash("z")), Scopes: []string{"exec"}, CreatedAt: base},
		{ID: "k9", TenantID: "t1", Hash: Hash("1"), CreatedAt: base},
		{ID: "k9", TenantID: "t1", Hash: Hash("1"), Scopes: []string{"a b"}, CreatedAt: base},
		{ID: "k9", TenantID: "t1", Hash: Hash("1"), Scopes: []string{"exec"}},
	} {
		wantClass(t, fmt.Sprintf("create %+v", k), s.CreateAPIKey(ctx, k), errdefs.ErrInvalidArgument)
	}

	got, err := s.GetAPIKey(ctx, "k1")
	must(t, "get", err)
	if got.ID != "k1" || got.TenantID != "t1" || got.Name != "first" || got.Hash != k1.Hash ||
		!slices.Equal(got.Scopes, []string{"admin", "exec"}) || !got.CreatedAt.Equal(base) ||
		!got.ExpiresAt.Equal(k1.ExpiresAt) || !got.LastUsedAt.IsZero() || !got.RevokedAt.IsZero() {
		t.Errorf("get = %+v", got)
	}
	_, err = s.GetAPIKey(ctx, "nope")
	wantClass(t, "get missing", err, errdefs.ErrNotFound)

	l1, err := s.ListAPIKeys(ctx, "t1")
	must(t, "list t1", err)
	if len(l1) != 2 || l1[0].ID != "k1" || l1[1].ID != "k2" {
		t.Errorf("list t1 = %+v", l1)
	}
	l2, err := s.ListAPIKeys(ctx, "t2")
	must(t, "list t2", err)
	if len(l2) != 1 || l2[0].ID != "k3" {
		t.Errorf("list t2 = %+v", l2)
	}
	if n, err := s.CountAPIKeys(ctx); err != nil || n != 3 {
		t.Errorf("count = %d, %v; want 3", n, err)
	}

	wantClass(t, "revoke in other tenant", s.RevokeAPIKey(ctx, "t2", "k1", base), errdefs.ErrNotFound)
	wantClass(t, "revoke missing", s.RevokeAPIKey(ctx, "t1", "nope", base), errdefs.ErrNotFound)
	must(t, "revoke", s.RevokeAPIKey(ctx, "t1", "k1", base.Add(time.Minute)))
	must(t, "revoke again", s.RevokeAPIKey(ctx, "t1", "k1", base.Add(time.Hour)))
	got, _ = s.GetAPIKey(ctx, "k1")
	if !got.RevokedAt.Equal(base.Add(time.Minute)) {
		t.Errorf("revoked_at = %v, want the first revocation", got.RevokedAt)
	}
	if k3, _ := s.GetAPIKey(ctx, "k3"); !k3.RevokedAt.IsZero() {
		t.Errorf("revoking k1 revoked k3")
	}

	must(t, "touch", s.TouchAPIKey(ctx, "k2", base.Add(2*time.Minute)))
	got, _ = s.GetAPIKey(ctx, "k2")
	if !got.LastUsedAt.Equal(base.Add(2 * time.Minute)) {
		t.Errorf("last_used_at = %v", got.LastUsedAt)
	}
	wantClass(t, "touch missing", s.TouchAPIKey(ctx, "nope", base), errdefs.ErrNotFound)
}

func testDeleteTenant(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant gone", s.CreateTenant(ctx, store.Tenant{ID: "gone", Name: "Gone", CreatedAt: base}))
	must(t, "tenant kept", s.CreateTenant(ctx, store.Tenant{ID: "kept", CreatedAt: base}))
	for _, k := range []store.APIKey{
		{ID: "g1", TenantID: "gone", Hash: Hash("g1"), Scopes: []string{"admin"}, CreatedAt: base},
		{ID: "g2", TenantID: "gone", Hash: Hash("g2"), Scopes: []string{"exec"}, CreatedAt: base, RevokedAt: base.Add(time.Second)},
		{ID: "k1", TenantID: "kept", Hash: Hash("k1"), Scopes: []string{"admin"}, CreatedAt: base},
	} {
		must(t, "create key "+k.ID, s.CreateAPIKey(ctx, k))
	}
	must(t, "active sandbox", s.CreateSandbox(ctx, sbx("sb-1", "gone", "running", base)))
	wantClass(t, "delete with an active sandbox", s.DeleteTenant(ctx, "gone", base.Add(time.Hour)), errdefs.ErrFailedPrecondition)
	if tn, err := s.GetTenant(ctx, "gone"); err != nil || !tn.DeletedAt.IsZero() {
		t.Fatalf("after a refused delete: %+v, %v", tn, err)
	}
	if k, _ := s.GetAPIKey(ctx, "g1"); !k.RevokedAt.IsZero() {
		t.Fatalf("a refused delete revoked key g1")
	}
	must(t, "stop sandbox", s.PutSandbox(ctx, store.Sandbox{ID: "sb-1", TenantID: "gone", Template: "host", State: store.SandboxStopped,
		CreatedAt: base, StoppedAt: base.Add(time.Minute)}))

	at := base.Add(2 * time.Hour)
	must(t, "delete", s.DeleteTenant(ctx, "gone", at))
	tn, err := s.GetTenant(ctx, "gone")
	must(t, "get deleted", err)
	if !tn.DeletedAt.Equal(at) || tn.Name != "Gone" {
		t.Errorf("deleted tenant = %+v, want DeletedAt %v", tn, at)
	}
	if k, _ := s.GetAPIKey(ctx, "g1"); !k.RevokedAt.Equal(at) {
		t.Errorf("key g1 revoked at %v, want %v", k.RevokedAt, at)
	}
	if k, _ := s.GetAPIKey(ctx, "g2"); !k.RevokedAt.Equal(base.Add(time.Second)) {
		t.Errorf("key g2 revoked at %v, want its first revocation kept", k.RevokedAt)
	}
	if k, _ := s.GetAPIKey(ctx, "k1"); !k.RevokedAt.IsZero() {
		t.Errorf("deleting a tenant revoked another tenant's key")
	}
	list, err := s.ListTenants(ctx)
	must(t, "list", err)
	if len(list) != 2 || list[0].ID != "gone" || list[0].DeletedAt.IsZero() || !list[1].DeletedAt.IsZero() {
		t.Errorf("list = %+v, want the deleted tenant marked", list)
	}

	// Nothing more happens in a deleted tenant, and its ID is not reused.
	wantClass(t, "delete again", s.DeleteTenant(ctx, "gone", at), errdefs.ErrNotFound)
	wantClass(t, "delete missing", s.DeleteTenant(ctx, "nope", at), errdefs.ErrNotFound)
	wantClass(t, "key in deleted tenant", s.CreateAPIKey(ctx, store.APIKey{ID: "g3", TenantID: "gone", Hash: Hash("g3"),
		Scopes: []string{"admin"}, CreatedAt: at}), errdefs.ErrNotFound)
	if _, err := s.GetAPIKey(ctx, "g3"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a key was stored in a deleted tenant: %v", err)
	}
	wantClass(t, "sandbox in deleted tenant", s.CreateSandbox(ctx, sbx("sb-2", "gone", "running", at)), errdefs.ErrNotFound)
	wantClass(t, "update deleted", s.UpdateTenant(ctx, store.Tenant{ID: "gone", Name: "again"}), errdefs.ErrNotFound)
	wantClass(t, "recreate", s.CreateTenant(ctx, store.Tenant{ID: "gone", CreatedAt: at}), errdefs.ErrAlreadyExists)

	// Scopes of an existing key can be replaced (the operator bootstrap).
	must(t, "set scopes", s.SetAPIKeyScopes(ctx, "k1", []string{"operator", "admin", "operator"}))
	if k, _ := s.GetAPIKey(ctx, "k1"); !slices.Equal(k.Scopes, []string{"admin", "operator"}) {
		t.Errorf("scopes after SetAPIKeyScopes = %v", k.Scopes)
	}
	wantClass(t, "set scopes of missing key", s.SetAPIKeyScopes(ctx, "nope", []string{"admin"}), errdefs.ErrNotFound)
	wantClass(t, "set no scopes", s.SetAPIKeyScopes(ctx, "k1", nil), errdefs.ErrInvalidArgument)
	wantClass(t, "set a malformed scope", s.SetAPIKeyScopes(ctx, "k1", []string{"a b"}), errdefs.ErrInvalidArgument)
}

func sbx(id, tenant, state string, at time.Time) store.Sandbox {
	return store.Sandbox{ID: id, TenantID: tenant, Template: "host", State: state, CreatedAt: at}
}

func testSandboxes(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant t1", s.CreateTenant(ctx, store.Tenant{ID: "t1", CreatedAt: base, MaxSandboxes: 2}))
	must(t, "tenant t2", s.CreateTenant(ctx, store.Tenant{ID: "t2", CreatedAt: base}))

	a := sbx("sa", "t1", "running", base)
	a.Metadata = map[string]string{"team": "x", "quote": `"<&>"`}
	must(t, "create a", s.CreateSandbox(ctx, a))
	must(t, "create b", s.CreateSandbox(ctx, sbx("sb", "t1", "creating", base.Add(time.Second))))
	wantClass(t, "over quota", s.CreateSandbox(ctx, sbx("sc", "t1", "creating", base)), errdefs.ErrResourceExhausted)
	wantClass(t, "duplicate", s.CreateSandbox(ctx, sbx("sa", "t2", "running", base)), errdefs.ErrAlreadyExists)
	wantClass(t, "unknown tenant", s.CreateSandbox(ctx, sbx("sz", "nope", "running", base)), errdefs.ErrNotFound)
	wantClass(t, "bad state", s.CreateSandbox(ctx, sbx("sz", "t2", "Running!", base)), errdefs.ErrInvalidArgument)
	wantClass(t, "bad id", s.CreateSandbox(ctx, sbx("../x", "t2", "running", base)), errdefs.ErrInvalidArgument)
	big := sbx("sz", "t2", "running", base)
	big.Metadata = map[string]string{"k": strings.Repeat("v", store.MaxMetadataJSONBytes)}
	wantClass(t, "big metadata", s.CreateSandbox(ctx, big), errdefs.ErrInvalidArgument)
	for i := range 3 {
		must(t, "create t2", s.CreateSandbox(ctx, sbx(fmt.Sprintf("t2-%d", i), "t2", "running", base.Add(time.Duration(i)*time.Second))))
	}

	got, err := s.GetSandbox(ctx, "t1", "sa")
	must(t, "get", err)
	if got.ID != "sa" || got.State != "running" || got.Template != "host" || !got.CreatedAt.Equal(base) ||
		!got.StoppedAt.IsZero() || got.Metadata["quote"] != `"<&>"` || len(got.Metadata) != 2 {
		t.Errorf("get = %+v", got)
	}
	_, err = s.GetSandbox(ctx, "t2", "sa")
	wantClass(t, "get from other tenant", err, errdefs.ErrNotFound)
	if _, err := s.GetSandbox(ctx, "", "sa"); err != nil {
		t.Errorf("get with any tenant: %v", err)
	}

	// Stopping frees quota.
	stopped := a
	stopped.State, stopped.StoppedAt = store.SandboxStopped, base.Add(time.Minute)
	must(t, "put stopped", s.PutSandbox(ctx, stopped))
	if n, err := s.CountActiveSandboxes(ctx, "t1"); err != nil || n != 1 {
		t.Errorf("active t1 = %d, %v; want 1", n, err)
	}
	must(t, "create after stop", s.CreateSandbox(ctx, sbx("sc", "t1", "creating", base.Add(2*time.Second))))
	got, _ = s.GetSandbox(ctx, "t1", "sa")
	if got.State != store.SandboxStopped || !got.StoppedAt.Equal(base.Add(time.Minute)) || got.Metadata["team"] != "x" {
		t.Errorf("after put = %+v", got)
	}
	wantClass(t, "put into other tenant", s.PutSandbox(ctx, sbx("sa", "t2", "running", base)), errdefs.ErrAlreadyExists)
	must(t, "put new", s.PutSandbox(ctx, sbx("sp", "t2", "running", base.Add(9*time.Second))))

	tests := []struct {
		f    store.SandboxFilter
		want []string
	}{
		{store.SandboxFilter{TenantID: "t1"}, []string{"sa", "sb", "sc"}},
		{store.SandboxFilter{TenantID: "t1", States: []string{"creating"}}, []string{"sb", "sc"}},
		{store.SandboxFilter{TenantID: "t1", States: []string{"running", store.SandboxStopped}}, []string{"sa"}},
		{store.SandboxFilter{TenantID: "t2"}, []string{"t2-0", "t2-1", "t2-2", "sp"}},
		{store.SandboxFilter{TenantID: "t2", Limit: 2}, []string{"t2-0", "t2-1"}},
		{store.SandboxFilter{TenantID: "nope"}, nil},
		{store.SandboxFilter{States: []string{"creating"}}, []string{"sb", "sc"}},
	}
	for _, tt := range tests {
		l, err := s.ListSandboxes(ctx, tt.f)
		must(t, "list", err)
		var ids []string
		for _, sb := range l {
			ids = append(ids, sb.ID)
		}
		if !slices.Equal(ids, tt.want) {
			t.Errorf("list %+v = %v, want %v", tt.f, ids, tt.want)
		}
	}
	for _, f := range []store.SandboxFilter{{Limit: -1}, {Limit: store.MaxListLimit + 1}, {TenantID: "a b"}, {States: []string{""}}} {
		_, err := s.ListSandboxes(ctx, f)
		wantClass(t, fmt.Sprintf("list %+v", f), err, errdefs.ErrInvalidArgument)
	}
	if n, err := s.CountActiveSandboxes(ctx, "t2"); err != nil || n != 4 {
		t.Errorf("active t2 = %d, %v; want 4", n, err)
	}
}

// testQuotaConcurrent checks that concurrent creations never exceed a
// tenant's quota.
func testQuotaConcurrent(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	const quota, tries = 5, 40
	must(t, "tenant", s.CreateTenant(ctx, store.Tenant{ID: "t", CreatedAt: base, MaxSandboxes: quota}))
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, exhausted := 0, 0
	for i := range tries {
		wg.Go(func() {
			err := s.CreateSandbox(ctx, sbx(fmt.Sprintf("s%d", i), "t", "creating", base))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, errdefs.ErrResourceExhausted):
				exhausted++
			default:
				t.Errorf("create %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	if ok != quota || exhausted != tries-quota {
		t.Errorf("created %d, refused %d; want %d, %d", ok, exhausted, quota, tries-quota)
	}
	if n, _ := s.CountActiveSandboxes(ctx, "t"); n != quota {
		t.Errorf("active = %d, want %d", n, quota)
	}
}

// chain returns n records continuing head, linked by made-up hashes.
func chain(head store.AuditHead, n int, tenant string) []store.AuditRecord {
	recs := make([]store.AuditRecord, n)
	prev := head.Hash
	for i := range recs {
		seq := head.Seq + uint64(i) + 1
		recs[i] = store.AuditRecord{
			Seq: seq, Time: base.Add(time.Duration(seq) * time.Second), TenantID: tenant, KeyID: "k",
			Action: "sandbox.exec", Target: fmt.Sprintf("sb%d", seq%3), Outcome: "ok",
			Details: []byte(fmt.Sprintf(`{"n":%d}`, seq)), PrevHash: prev, Hash: Hash(fmt.Sprint("h", seq)),
		}
		prev = recs[i].Hash
	}
	return recs
}

func testAudit(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	head, err := s.AuditHead(ctx)
	must(t, "head", err)
	if head != (store.AuditHead{Hash: store.GenesisHash}) {
		t.Fatalf("empty head = %+v", head)
	}
	first := chain(head, 3, "t1")
	must(t, "append", s.AppendAudit(ctx, first))
	head, _ = s.AuditHead(ctx)
	if head.Seq != 3 || head.Hash != first[2].Hash {
		t.Errorf("head = %+v, want 3 %s", head, first[2].Hash)
	}

	// Appends that do not continue the head write nothing.
	gap := chain(store.AuditHead{Seq: 4, Hash: head.Hash}, 2, "t1")
	wantClass(t, "gap", s.AppendAudit(ctx, gap), errdefs.ErrFailedPrecondition)
	fork := chain(store.AuditHead{Seq: 3, Hash: Hash("other")}, 2, "t1")
	wantClass(t, "fork", s.AppendAudit(ctx, fork), errdefs.ErrFailedPrecondition)
	replay := chain(store.AuditHead{Seq: 2, Hash: first[1].Hash}, 1, "t1")
	wantClass(t, "replay", s.AppendAudit(ctx, replay), errdefs.ErrFailedPrecondition)
	broken := chain(head, 3, "t1")
	broken[2].PrevHash = Hash("x")
	wantClass(t, "unlinked batch", s.AppendAudit(ctx, broken), errdefs.ErrInvalidArgument)
	bad := chain(head, 1, "t1")
	bad[0].Details = []byte("{not json")
	wantClass(t, "bad details", s.AppendAudit(ctx, bad), errdefs.ErrInvalidArgument)
	wantClass(t, "empty batch", s.AppendAudit(ctx, nil), errdefs.ErrInvalidArgument)

	all, err := s.ListAudit(ctx, store.AuditQuery{})
	must(t, "list", err)
	if len(all) != 3 {
		t.Fatalf("after refused appends: %d records, want 3", len(all))
	}
	for i, r := range all {
		w := first[i]
		if r.Seq != w.Seq || !r.Time.Equal(w.Time) || r.TenantID != w.TenantID || r.KeyID != w.KeyID ||
			r.Action != w.Action || r.Target != w.Target || r.Outcome != w.Outcome ||
			string(r.Details) != string(w.Details) || r.PrevHash != w.PrevHash || r.Hash != w.Hash {
			t.Errorf("record %d = %+v, want %+v", i, r, w)
		}
	}
	// A record without details reads back with empty details.
	nod := chain(head, 1, "")
	nod[0].Details = nil
	must(t, "append without details", s.AppendAudit(ctx, nod))
	r, _ := s.ListAudit(ctx, store.AuditQuery{AfterSeq: 3})
	if len(r) != 1 || len(r[0].Details) != 0 || r[0].TenantID != "" {
		t.Errorf("record without details = %+v", r)
	}
}

func testAuditQuery(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	head, _ := s.AuditHead(ctx)
	recs := chain(head, 12, "t1")
	for i := range recs {
		if i%3 == 2 {
			recs[i].TenantID = "t2"
		}
		if i%4 == 0 {
			recs[i].Action = "file.write"
		}
	}
	must(t, "append", s.AppendAudit(ctx, recs[:5]))
	must(t, "append", s.AppendAudit(ctx, recs[5:]))
	seqs := func(q store.AuditQuery) []uint64 {
		t.Helper()
		rs, err := s.ListAudit(ctx, q)
		must(t, fmt.Sprintf("list %+v", q), err)
		var out []uint64
		for _, r := range rs {
			out = append(out, r.Seq)
		}
		return out
	}
	tests := []struct {
		q    store.AuditQuery
		want []uint64
	}{
		{store.AuditQuery{TenantID: "t2"}, []uint64{3, 6, 9, 12}},
		{store.AuditQuery{TenantID: "t1", Action: "file.write"}, []uint64{1, 5}},
		{store.AuditQuery{Action: "file.write"}, []uint64{1, 5, 9}},
		{store.AuditQuery{Target: "sb0"}, []uint64{3, 6, 9, 12}},
		{store.AuditQuery{TenantID: "t1", Target: "sb0"}, nil},
		{store.AuditQuery{Since: base.Add(10 * time.Second)}, []uint64{10, 11, 12}},
		{store.AuditQuery{Since: base.Add(4 * time.Second), Until: base.Add(6 * time.Second)}, []uint64{4, 5}},
		{store.AuditQuery{AfterSeq: 7, Limit: 2}, []uint64{8, 9}},
		{store.AuditQuery{TenantID: "t1", AfterSeq: 8}, []uint64{10, 11}},
		{store.AuditQuery{AfterSeq: 12}, nil},
		{store.AuditQuery{TenantID: "nope"}, nil},
	}
	for _, tt := range tests {
		if got := seqs(tt.q); !slices.Equal(got, tt.want) {
			t.Errorf("list %+v = %v, want %v", tt.q, got, tt.want)
		}
	}
	for _, q := range []store.AuditQuery{
		{Limit: -1}, {Limit: store.MaxListLimit + 1}, {Since: base, Until: base.Add(-1)},
		{Action: strings.Repeat("a", store.MaxAuditFieldBytes+1)}, {Target: "\x00"},
	} {
		_, err := s.ListAudit(ctx, q)
		wantClass(t, fmt.Sprintf("list %+v", q), err, errdefs.ErrInvalidArgument)
	}
	// Paging through everything with a small limit.
	var got []uint64
	after := uint64(0)
	for {
		rs, err := s.ListAudit(ctx, store.AuditQuery{AfterSeq: after, Limit: 5})
		must(t, "page", err)
		if len(rs) == 0 {
			break
		}
		for _, r := range rs {
			got = append(got, r.Seq)
		}
		after = rs[len(rs)-1].Seq
	}
	if len(got) != 12 || got[0] != 1 || got[11] != 12 {
		t.Errorf("paged = %v", got)
	}
}

// testConcurrentWriters runs many goroutines writing every kind of row at
// once, with readers alongside, and checks nothing was lost.
func testConcurrentWriters(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	const workers, each = 16, 20
	must(t, "tenant", s.CreateTenant(ctx, store.Tenant{ID: "t", CreatedAt: base}))
	var wg sync.WaitGroup
	var auditMu sync.Mutex // audit appends must be serialized by the caller (internal/audit does it)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				if err := s.CreateSandbox(ctx, sbx(id, "t", "running", base)); err != nil {
					t.Errorf("create sandbox %s: %v", id, err)
					return
				}
				if err := s.CreateAPIKey(ctx, store.APIKey{ID: id, TenantID: "t", Hash: Hash(id), Scopes: []string{"exec"}, CreatedAt: base}); err != nil {
					t.Errorf("create key %s: %v", id, err)
					return
				}
				if err := s.TouchAPIKey(ctx, id, base); err != nil {
					t.Errorf("touch %s: %v", id, err)
				}
				auditMu.Lock()
				head, err := s.AuditHead(ctx)
				if err == nil {
					err = s.AppendAudit(ctx, chain(head, 2, "t"))
				}
				auditMu.Unlock()
				if err != nil {
					t.Errorf("append: %v", err)
				}
				if _, err := s.ListSandboxes(ctx, store.SandboxFilter{TenantID: "t", Limit: 10}); err != nil {
					t.Errorf("list: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n, err := s.CountActiveSandboxes(ctx, "t"); err != nil || n != workers*each {
		t.Errorf("sandboxes = %d, %v; want %d", n, err, workers*each)
	}
	if n, err := s.CountAPIKeys(ctx); err != nil || n != workers*each {
		t.Errorf("keys = %d, %v; want %d", n, err, workers*each)
	}
	head, err := s.AuditHead(ctx)
	if err != nil || head.Seq != 2*workers*each {
		t.Errorf("audit head = %+v, %v; want seq %d", head, err, 2*workers*each)
	}
}
