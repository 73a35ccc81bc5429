package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func toolRec(tenant, name, doc string, at time.Time) store.ToolRecord {
	return store.ToolRecord{TenantID: tenant, Name: name, Doc: json.RawMessage(doc), CreatedAt: at, UpdatedAt: at}
}

// toolOps are the methods of store.ToolStore for one kind (tools or
// toolsets), so that both run the same checks.
type toolOps struct {
	kind    string
	max     int
	create  func(context.Context, store.ToolRecord) error
	replace func(context.Context, store.ToolRecord) (store.ToolRecord, error)
	get     func(ctx context.Context, tenant, name string) (store.ToolRecord, error)
	list    func(ctx context.Context, tenant string) ([]store.ToolRecord, error)
	del     func(ctx context.Context, tenant, name string) error
}

func toolKinds(s store.Store) []toolOps {
	return []toolOps{
		{"tools", store.MaxToolsPerTenant, s.CreateTool, s.ReplaceTool, s.GetTool, s.ListTools, s.DeleteTool},
		{"toolsets", store.MaxToolsetsPerTenant, s.CreateToolset, s.ReplaceToolset, s.GetToolset, s.ListToolsets, s.DeleteToolset},
	}
}

// testTools checks create, replace, get, list and delete of tools and
// toolsets, tenant scoping, and the refusals, for both kinds; and that
// the two kinds are separate.
func testTools(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant t1", s.CreateTenant(ctx, store.Tenant{ID: "t1", CreatedAt: base}))
	must(t, "tenant t2", s.CreateTenant(ctx, store.Tenant{ID: "t2", CreatedAt: base}))
	later := base.Add(time.Minute)
	for _, k := range toolKinds(s) {
		what := func(s string) string { return k.kind + ": " + s }
		must(t, what("create b"), k.create(ctx, toolRec("t1", "b", `{"v":1}`, base)))
		must(t, what("create a"), k.create(ctx, toolRec("t1", "a", `{"v":"a"}`, base)))
		must(t, what("create b in t2"), k.create(ctx, toolRec("t2", "b", `{"v":"t2"}`, base)))
		wantClass(t, what("create b again"), k.create(ctx, toolRec("t1", "b", `{"v":2}`, later)), errdefs.ErrAlreadyExists)

		got, err := k.get(ctx, "t1", "b")
		must(t, what("get b"), err)
		if string(got.Doc) != `{"v":1}` || got.TenantID != "t1" || got.Name != "b" || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(base) {
			t.Errorf("%s: get b = %+v (a refused create changed it?)", k.kind, got)
		}
		got, err = k.replace(ctx, toolRec("t1", "b", `{"v":3}`, later))
		must(t, what("replace b"), err)
		if string(got.Doc) != `{"v":3}` || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(later) {
			t.Errorf("%s: replace b = %+v, want the new document, the old creation time", k.kind, got)
		}
		got, err = k.get(ctx, "t1", "b")
		must(t, what("get b after replace"), err)
		if string(got.Doc) != `{"v":3}` || !got.CreatedAt.Equal(base) || !got.UpdatedAt.Equal(later) {
			t.Errorf("%s: get b after replace = %+v", k.kind, got)
		}
		if got, err := k.get(ctx, "t2", "b"); err != nil || string(got.Doc) != `{"v":"t2"}` {
			t.Errorf("%s: t2's b = %+v, %v: another tenant's replace changed it", k.kind, got, err)
		}
		_, err = k.replace(ctx, toolRec("t1", "missing", `{}`, later))
		wantClass(t, what("replace missing"), err, errdefs.ErrNotFound)
		_, err = k.replace(ctx, toolRec("t2", "a", `{}`, later))
		wantClass(t, what("replace another tenant's"), err, errdefs.ErrNotFound)
		_, err = k.get(ctx, "t2", "a")
		wantClass(t, what("get another tenant's"), err, errdefs.ErrNotFound)

		list, err := k.list(ctx, "t1")
		must(t, what("list"), err)
		if len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" || string(list[1].Doc) != `{"v":3}` {
			t.Errorf("%s: list t1 = %+v, want a, b", k.kind, list)
		}
		if l, err := k.list(ctx, "nope"); err != nil || len(l) != 0 {
			t.Errorf("%s: list of unknown tenant = %v, %v", k.kind, l, err)
		}

		wantClass(t, what("delete another tenant's"), k.del(ctx, "t2", "a"), errdefs.ErrNotFound)
		must(t, what("delete a"), k.del(ctx, "t1", "a"))
		wantClass(t, what("delete again"), k.del(ctx, "t1", "a"), errdefs.ErrNotFound)
		_, err = k.get(ctx, "t1", "a")
		wantClass(t, what("get deleted"), err, errdefs.ErrNotFound)
		must(t, what("create after delete"), k.create(ctx, toolRec("t1", "a", `{}`, later)))
		wantClass(t, what("unknown tenant"), k.create(ctx, toolRec("nope", "x", `{}`, base)), errdefs.ErrNotFound)

		bad := []func(*store.ToolRecord){
			func(r *store.ToolRecord) { r.Name = "" },
			func(r *store.ToolRecord) { r.Name = "A" },
			func(r *store.ToolRecord) { r.Name = "1a" },
			func(r *store.ToolRecord) { r.Name = "a-b" },
			func(r *store.ToolRecord) { r.Name = strings.Repeat("a", store.MaxToolNameBytes+1) },
			func(r *store.ToolRecord) { r.TenantID = "a b" },
			func(r *store.ToolRecord) { r.Doc = nil },
			func(r *store.ToolRecord) { r.Doc = json.RawMessage(`[1]`) },
			func(r *store.ToolRecord) { r.Doc = json.RawMessage(`null`) },
			func(r *store.ToolRecord) { r.Doc = json.RawMessage(`{"a":`) },
			func(r *store.ToolRecord) {
				r.Doc = json.RawMessage(`{"a":"` + strings.Repeat("x", store.MaxToolDocBytes) + `"}`)
			},
			func(r *store.ToolRecord) { r.CreatedAt = time.Time{} },
			func(r *store.ToolRecord) { r.UpdatedAt = time.Time{} },
		}
		for i, mut := range bad {
			r := toolRec("t2", "ok", `{}`, base)
			mut(&r)
			wantClass(t, what(fmt.Sprintf("bad record %d", i)), k.create(ctx, r), errdefs.ErrInvalidArgument)
			r.Name, r.TenantID = "b", "t2"
			mut(&r)
			if _, err := k.replace(ctx, r); !errorsIsAny(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: replace with bad record %d: %v, want invalid argument", k.kind, i, err)
			}
		}
		if _, err := k.get(ctx, "t2", "ok"); err == nil {
			t.Errorf("%s: a refused create stored a row", k.kind)
		}
		largest := toolRec("t2", "l"+strings.Repeat("x", store.MaxToolNameBytes-1), `{"a":"`+strings.Repeat("x", store.MaxToolDocBytes-8)+`"}`, base)
		must(t, what("create the largest"), k.create(ctx, largest))
		got, err = k.get(ctx, "t2", largest.Name)
		must(t, what("get the largest"), err)
		if string(got.Doc) != string(largest.Doc) {
			t.Errorf("%s: the largest document did not read back intact", k.kind)
		}
	}
	// The kinds are separate: a tool and a toolset may share a name, and
	// deleting one leaves the other.
	must(t, "delete tool b", s.DeleteTool(ctx, "t1", "b"))
	if got, err := s.GetToolset(ctx, "t1", "b"); err != nil || string(got.Doc) != `{"v":3}` {
		t.Errorf("toolset b after deleting tool b = %+v, %v", got, err)
	}
}

func errorsIsAny(err, class error) bool { return err != nil && errdefs.Class(err) == class }

// testToolCaps checks that concurrent creations never pass the cap of
// either kind, and that the two caps are separate.
func testToolCaps(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant", s.CreateTenant(ctx, store.Tenant{ID: "t", CreatedAt: base}))
	must(t, "tenant 2", s.CreateTenant(ctx, store.Tenant{ID: "t2", CreatedAt: base}))
	for _, k := range toolKinds(s) {
		tries := k.max + 20
		var wg sync.WaitGroup
		var mu sync.Mutex
		ok, exhausted := 0, 0
		sem := make(chan struct{}, 8)
		for i := range tries {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				err := k.create(ctx, toolRec("t", fmt.Sprintf("n%d", i), `{}`, base))
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					ok++
				case errorsIsAny(err, errdefs.ErrResourceExhausted):
					exhausted++
				default:
					t.Errorf("%s: create %d: %v", k.kind, i, err)
				}
			})
		}
		wg.Wait()
		if ok != k.max || exhausted != tries-k.max {
			t.Errorf("%s: %d created and %d refused, want %d and %d", k.kind, ok, exhausted, k.max, tries-k.max)
		}
		list, err := k.list(ctx, "t")
		must(t, k.kind+": list", err)
		if len(list) != k.max {
			t.Errorf("%s: list has %d, want %d", k.kind, len(list), k.max)
		}
		// Another tenant has its own cap; a replacement at the cap works.
		must(t, k.kind+": other tenant", k.create(ctx, toolRec("t2", "n0", `{}`, base)))
		_, err = k.replace(ctx, toolRec("t", list[0].Name, `{"x":1}`, base))
		must(t, k.kind+": replace at the cap", err)
	}
}

// testToolsOfDeletedTenant checks that deleting a tenant deletes its
// tools and toolsets, and that none can be created in it afterwards.
func testToolsOfDeletedTenant(t *testing.T, s store.Store) {
	defer s.Close()
	ctx := ctxT(t)
	must(t, "tenant gone", s.CreateTenant(ctx, store.Tenant{ID: "gone", CreatedAt: base}))
	must(t, "tenant kept", s.CreateTenant(ctx, store.Tenant{ID: "kept", CreatedAt: base}))
	for _, k := range toolKinds(s) {
		must(t, k.kind+": create gone/a", k.create(ctx, toolRec("gone", "a", `{}`, base)))
		must(t, k.kind+": create kept/a", k.create(ctx, toolRec("kept", "a", `{}`, base)))
	}
	must(t, "delete tenant", s.DeleteTenant(ctx, "gone", base.Add(time.Hour)))
	for _, k := range toolKinds(s) {
		if l, err := k.list(ctx, "gone"); err != nil || len(l) != 0 {
			t.Errorf("%s of a deleted tenant = %+v, %v; want none", k.kind, l, err)
		}
		wantClass(t, k.kind+": create in deleted tenant", k.create(ctx, toolRec("gone", "b", `{}`, base)), errdefs.ErrNotFound)
		if _, err := k.get(ctx, "kept", "a"); err != nil {
			t.Errorf("%s: deleting a tenant deleted another tenant's: %v", k.kind, err)
		}
	}
}
