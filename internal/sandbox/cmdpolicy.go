package sandbox

import (
	"slices"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// A sandbox's command policy (Spec.CommandPolicy) is kept with it, and
// persisted for a restarted daemon, but the manager does not apply it:
// the API judges each exec's command line with it before the exec runs
// (internal/api). It is a guard-rail for agents, not a boundary.

// checkCommandPolicy validates p and returns a copy of it that nothing
// else holds (nil for none), so that the sandbox's policy never changes
// after create.
func checkCommandPolicy(p *cmdpolicy.Policy) (*cmdpolicy.Policy, error) {
	if p == nil {
		return nil, nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	out := &cmdpolicy.Policy{Default: p.Default, Rules: make([]cmdpolicy.Rule, len(p.Rules))}
	for i, r := range p.Rules {
		out.Rules[i] = cmdpolicy.Rule{Action: r.Action, Prefix: slices.Clone(r.Prefix)}
	}
	return out, nil
}

// templateCommandPolicy is the default command policy of a template
// (layers.Config's CommandPolicy, via template.CommandPolicier), nil when
// it has none. checkCommandPolicy validates and copies it.
func templateCommandPolicy(src template.Source) *cmdpolicy.Policy {
	if t, ok := src.(template.CommandPolicier); ok {
		return t.CommandPolicy()
	}
	return nil
}
