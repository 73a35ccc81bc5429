package build

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// A build's default toolsets and command policy go into the template's
// manifest; a build that gives none keeps its FROM template's, one that
// gives some replaces them, and invalid ones are refused before any step.
func TestBuildTemplateDefaults(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	lease := e.store.NewLease()
	defer lease.Release()
	info, err := lease.Extract(ctx, bytes.NewReader(testutil.Tar(t, testutil.Entry{Name: "f", Body: "f"})), layers.ExtractOptions{})
	if err != nil {
		t.Fatal(err)
	}
	basePolicy := &cmdpolicy.Policy{Default: cmdpolicy.Deny, Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Allow, Prefix: []string{"ls"}}}}
	if _, err := e.store.Put(ctx, layers.Manifest{Name: "defaults-base", Layers: []string{info.DiffID},
		Config: layers.Config{Toolsets: []string{"web"}, CommandPolicy: basePolicy}}, layers.PutOptions{Replace: true}); err != nil {
		t.Fatal(err)
	}
	src, err := template.NewStored(e.store, "defaults-base")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Replace(src); err != nil {
		t.Fatal(err)
	}
	kept, _ := e.mustBuild(t, Request{Name: "defaults-kept", Airfile: []byte("FROM template:defaults-base\nENV A=1\n")})
	if !slices.Equal(kept.Config.Toolsets, []string{"web"}) || !reflect.DeepEqual(kept.Config.CommandPolicy, basePolicy) {
		t.Errorf("a build without defaults has toolsets %q, policy %+v; want its base's", kept.Config.Toolsets, kept.Config.CommandPolicy)
	}
	own := &cmdpolicy.Policy{Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny, Prefix: []string{"git", "push"}}}}
	over, _ := e.mustBuild(t, Request{Name: "defaults-own", Airfile: []byte("FROM template:defaults-base\nENV A=1\n"),
		Toolsets: []string{"db", "mail"}, CommandPolicy: own})
	if !slices.Equal(over.Config.Toolsets, []string{"db", "mail"}) || !reflect.DeepEqual(over.Config.CommandPolicy, own) {
		t.Errorf("a build with defaults has toolsets %q, policy %+v", over.Config.Toolsets, over.Config.CommandPolicy)
	}
	if m, err := e.store.Get("defaults-own"); err != nil || !reflect.DeepEqual(m.Config, over.Config) {
		t.Errorf("stored config %+v, %v", m.Config, err)
	}
	for _, req := range []Request{
		{Name: "defaults-bad", Airfile: []byte("FROM template:defaults-base\n"), CommandPolicy: &cmdpolicy.Policy{Default: "block"}},
		{Name: "defaults-bad", Airfile: []byte("FROM template:defaults-base\n"), Toolsets: []string{"web", "web"}},
	} {
		if _, _, err := e.build(t, req); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("build with toolsets %q, policy %+v: %v, want invalid argument", req.Toolsets, req.CommandPolicy, err)
		}
	}
	if _, err := e.store.Get("defaults-bad"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a refused build saved a template: %v", err)
	}
}
