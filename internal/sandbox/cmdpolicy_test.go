package sandbox

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// A sandbox keeps its command policy, a copy of the Spec's, across a
// restart of its daemon, cold and pooled.
func TestCommandPolicyKept(t *testing.T) {
	ctx := context.Background()
	e := newToolsEnv(t)
	m := e.manager(nil, Config{PoolSize: map[string]int{"host": 1}})
	eventually(t, 10*time.Second, "the pool to fill", func() bool { return m.PoolStats()[0].Ready == 1 })
	spec := Spec{Owner: "acme", CommandPolicy: &cmdpolicy.Policy{Default: cmdpolicy.Ask,
		Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny, Prefix: []string{"git", "push"}}}}}
	want := &cmdpolicy.Policy{Default: cmdpolicy.Ask, Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny, Prefix: []string{"git", "push"}}}}
	pooled, err := m.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	cold, err := m.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.CommandPolicy.Rules[0].Prefix[0] = "changed"
	plain, err := m.Create(ctx, Spec{Owner: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := e.manager(nil, Config{})
	for _, id := range []string{pooled.ID, cold.ID} {
		got, err := m2.Get(id)
		if err != nil || !reflect.DeepEqual(got.CmdPolicy, want) {
			t.Errorf("adopted sandbox %s: policy %+v, %v; want %+v", id, got.CmdPolicy, err, want)
		}
	}
	if got, err := m2.Get(plain.ID); err != nil || got.CmdPolicy != nil {
		t.Errorf("a sandbox without a policy has %+v, %v", got.CmdPolicy, err)
	}
}

func TestCommandPolicySpecChecks(t *testing.T) {
	m := newToolsEnv(t).manager(nil, Config{})
	for _, p := range []*cmdpolicy.Policy{
		{Default: "block"},
		{Rules: []cmdpolicy.Rule{{Action: "allow"}}},
	} {
		if _, err := m.Create(context.Background(), Spec{CommandPolicy: p}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("policy %+v: %v, want invalid argument", p, err)
		}
	}
}

// policyTemplate is a template with a default command policy.
type policyTemplate struct {
	staticSource
	p *cmdpolicy.Policy
}

func (t policyTemplate) CommandPolicy() *cmdpolicy.Policy { return t.p }

// A sandbox created without a command policy gets its template's (the
// creating owner's template of the name first, else the shared one),
// cold and pooled; a Spec's own policy replaces it whole. Manager.Template
// resolves the template a create would use.
func TestTemplateCommandPolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	shared := &cmdpolicy.Policy{Default: cmdpolicy.Deny, Rules: []cmdpolicy.Rule{}}
	owned := &cmdpolicy.Policy{Rules: []cmdpolicy.Rule{{Action: cmdpolicy.Deny, Prefix: []string{"git", "push"}}}}
	for _, src := range []template.Source{policyTemplate{staticSource{"gov"}, shared}, policyTemplate{staticSource{"acme~gov"}, owned}} {
		if err := e.templates.Add(src); err != nil {
			t.Fatal(err)
		}
	}
	m := e.manager(Config{PoolSize: map[string]int{"gov": 1}})
	eventually(t, 10*time.Second, "the pool to fill", func() bool { return m.PoolStats()[0].Ready == 1 })
	own := &cmdpolicy.Policy{Default: cmdpolicy.Ask, Rules: []cmdpolicy.Rule{}}
	for _, tt := range []struct {
		name string
		spec Spec
		want *cmdpolicy.Policy
	}{
		{"pooled, shared template", Spec{Owner: "other", Template: "gov"}, shared},
		{"cold, shared template", Spec{Owner: "other", Template: "gov"}, shared},
		{"the owner's template", Spec{Owner: "acme", Template: "gov"}, owned},
		{"own policy", Spec{Owner: "other", Template: "gov", CommandPolicy: own}, own},
		{"template without one", Spec{Owner: "other", Template: "other"}, nil},
	} {
		sb, err := m.Create(ctx, tt.spec)
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !reflect.DeepEqual(sb.CmdPolicy, tt.want) {
			t.Errorf("%s: policy %+v, want %+v", tt.name, sb.CmdPolicy, tt.want)
		}
	}

	for _, tt := range []struct{ owner, name, want string }{
		{"acme", "gov", "acme~gov"},
		{"other", "gov", "gov"},
		{"", "gov", "gov"},
		{"acme", "", "host"}, // the default template
	} {
		src, err := m.Template(tt.owner, tt.name)
		if err != nil || src.Name() != tt.want {
			t.Errorf("Template(%q, %q) = %v, %v; want %s", tt.owner, tt.name, src, err, tt.want)
		}
	}
	if _, err := m.Template("acme", "nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Template of a missing template: %v", err)
	}
}
