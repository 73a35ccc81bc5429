package sandbox

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
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
