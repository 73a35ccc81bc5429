package template

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestStoreNamePatternMatches(t *testing.T) {
	if got, want := layers.NamePattern(), StoreNamePattern.String(); got != want {
		t.Errorf("layers name pattern %s differs from template.StoreNamePattern %s", got, want)
	}
	// A store name is an optional owner and "~" before a template name.
	prefix := "^(?:" + strings.TrimSuffix(strings.TrimPrefix(OwnerPattern.String(), "^"), "$") + ownerSep + ")?"
	if got, want := StoreNamePattern.String(), prefix+strings.TrimPrefix(NamePattern.String(), "^"); got != want {
		t.Errorf("StoreNamePattern %s, want %s", got, want)
	}
}

func TestStored(t *testing.T) {
	testutil.RequireRoot(t, "needs root: layer extraction keeps file owners")
	ctx := context.Background()
	store, err := layers.Open(filepath.Join(t.TempDir(), "templates"), layers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lease := store.NewLease()
	var diffIDs []string
	for _, body := range []string{"lower", "upper"} {
		info, err := lease.Extract(ctx, bytes.NewReader(testutil.Tar(t, testutil.Entry{Name: body, Body: body})), layers.ExtractOptions{})
		if err != nil {
			t.Fatal(err)
		}
		diffIDs = append(diffIDs, info.DiffID)
	}
	if _, err := store.Put(ctx, layers.Manifest{Name: "img", Layers: diffIDs, Config: layers.Config{Workdir: "/app", User: "node:staff"}}, layers.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	lease.Release()

	if _, err := NewStored(store, "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("NewStored(unknown): %v", err)
	}
	if _, err := NewStored(store, "Bad Name"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("NewStored(bad name): %v", err)
	}
	src, err := NewStored(store, "img")
	if err != nil {
		t.Fatal(err)
	}
	reg, err := NewRegistry(StoredSources(store)...)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := reg.Get("img"); err != nil || got.Name() != "img" {
		t.Fatalf("registry: %v, %v", got, err)
	}
	rootfs, err := src.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rootfs.Layers) != 2 || rootfs.Workdir != "/app" || rootfs.User != "node:staff" {
		t.Fatalf("rootfs = %+v", rootfs)
	}
	for i, want := range []string{"lower", "upper"} {
		if b, err := os.ReadFile(filepath.Join(rootfs.Layers[i], want)); err != nil || string(b) != want {
			t.Errorf("layer %d: %q, %v; want %s (lowest first)", i, b, err, want)
		}
	}
	if m, err := src.Manifest(); err != nil || m.Config.Workdir != "/app" {
		t.Errorf("Manifest: %+v, %v", m, err)
	}
	if _, err := store.Remove(ctx, "img"); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Resolve(ctx); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Resolve after removal: %v, want ErrNotFound", err)
	}
}

// A stored template hands out its default toolsets and command policy
// (template.Toolsetter, template.CommandPolicier), copies of what the
// store keeps, and none once it is removed.
func TestStoredDefaults(t *testing.T) {
	testutil.RequireRoot(t, "needs root: layer extraction keeps file owners")
	ctx := context.Background()
	store, err := layers.Open(filepath.Join(t.TempDir(), "templates"), layers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	lease := store.NewLease()
	defer lease.Release()
	info, err := lease.Extract(ctx, bytes.NewReader(testutil.Tar(t, testutil.Entry{Name: "f", Body: "f"})), layers.ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	policy := &cmdpolicy.Policy{Default: cmdpolicy.Deny, Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Allow, Prefix: []string{"ls"}}}}
	for _, m := range []layers.Manifest{
		{Name: "gov", Layers: []string{info.DiffID}, Config: layers.Config{Toolsets: []string{"web", "db"}, CommandPolicy: policy}},
		{Name: "plain", Layers: []string{info.DiffID}},
	} {
		if _, err := store.Put(ctx, m, layers.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	gov, err := NewStored(store, "gov")
	if err != nil {
		t.Fatal(err)
	}
	var src Source = gov
	ts, ok1 := src.(Toolsetter)
	cp, ok2 := src.(CommandPolicier)
	if !ok1 || !ok2 {
		t.Fatal("a stored template is not a Toolsetter and a CommandPolicier")
	}
	if got := ts.Toolsets(); !slices.Equal(got, []string{"web", "db"}) {
		t.Errorf("Toolsets = %q", got)
	}
	ts.Toolsets()[0] = "changed"
	cp.CommandPolicy().Rules[0].Prefix[0] = "changed"
	if got := ts.Toolsets(); got[0] != "web" {
		t.Errorf("changing the returned toolsets changed the template's: %q", got)
	}
	if got := cp.CommandPolicy(); !reflect.DeepEqual(got, policy) {
		t.Errorf("CommandPolicy = %+v, want %+v", got, policy)
	}
	plain, err := NewStored(store, "plain")
	if err != nil {
		t.Fatal(err)
	}
	if plain.Toolsets() != nil || plain.CommandPolicy() != nil {
		t.Errorf("a template without defaults has toolsets %q, policy %+v", plain.Toolsets(), plain.CommandPolicy())
	}
	if _, err := store.Remove(ctx, "gov"); err != nil {
		t.Fatal(err)
	}
	if gov.Toolsets() != nil || gov.CommandPolicy() != nil {
		t.Error("a removed template still has defaults")
	}
}
