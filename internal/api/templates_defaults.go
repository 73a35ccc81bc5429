package api

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
)

// A template's governance defaults: the toolsets a sandbox created from
// it without tools and toolsets is granted, and the command policy one
// created without a command_policy gets. A build gives them
// (wire.BuildTemplateRequest Toolsets and CommandPolicy; the toolsets
// and command_policy query parameters of a build context upload) and
// its manifest keeps them (the template layers' Config). The manager applies the
// command policy itself (sandbox.Spec.CommandPolicy); the toolsets are
// a tenant's, so a create resolves them here, for the creating tenant
// (templateToolsets).

// maxCommandPolicyQuery caps the command_policy query parameter of a
// build context upload.
const maxCommandPolicyQuery = 64 << 10

// templateToolsetsFrom validates a build's default toolsets (field names
// them in errors): at most registry.MaxToolsets toolset names
// (gateway.ValidName), none twice. Whether a tenant has them is checked
// at each create, for the creating tenant.
func templateToolsetsFrom(names []string, field string) ([]string, error) {
	if len(names) > registry.MaxToolsets {
		return nil, invalidf("%s names %d toolsets, at most %d are allowed", field, len(names), registry.MaxToolsets)
	}
	for i, n := range names {
		if err := gateway.ValidName(n); err != nil {
			return nil, fmt.Errorf("%s[%d]: toolset %w", field, i, err)
		}
		if slices.Contains(names[:i], n) {
			return nil, invalidf("%s names toolset %s twice", field, n)
		}
	}
	return slices.Clone(names), nil
}

// templateCommandPolicyFrom validates a build's default command policy
// (nil: none given) as a sandbox's.
func templateCommandPolicyFrom(p *wire.CommandPolicy) (*cmdpolicy.Policy, error) {
	cp := commandPolicyFrom(p)
	if err := cp.Validate(); err != nil {
		return nil, err
	}
	return cp, nil
}

// templateDefaultsQuery reads the toolsets (comma-separated names) and
// command_policy (a CommandPolicy JSON object) query parameters of a
// build context upload; either may be absent.
func templateDefaultsQuery(toolsets, policy string) ([]string, *cmdpolicy.Policy, error) {
	var names []string
	if toolsets != "" {
		names = strings.Split(toolsets, ",")
	}
	ts, err := templateToolsetsFrom(names, "toolsets")
	if err != nil || policy == "" {
		return ts, nil, err
	}
	if len(policy) > maxCommandPolicyQuery {
		return nil, nil, invalidf("command_policy is longer than %d bytes", maxCommandPolicyQuery)
	}
	var in wire.CommandPolicy
	if err := decodeJSONBytes([]byte(policy), &in, false); err != nil {
		return nil, nil, invalidf("command_policy must be a JSON object with rules and default")
	}
	cp, err := templateCommandPolicyFrom(&in)
	return ts, cp, err
}

// templateToolsets returns the default toolsets of the template a create
// for tenant names (name; "" is the manager's default template),
// resolved in tenant's namespace as the manager resolves it, and its
// name as the caller knows it. A template without default toolsets
// gives none, and so does one that cannot be found: the create reports
// that, after its audit intent, as it would without defaults.
func (h *Handler) templateToolsets(tenant, name string) ([]string, string) {
	src, err := h.mgr.Template(tenant, name)
	if err != nil {
		return nil, ""
	}
	t, ok := src.(template.Toolsetter)
	if !ok {
		return nil, ""
	}
	return t.Toolsets(), templateDisplayName(src.Name())
}

// createGrants resolves the tools a create for tenant grants: those of
// tools and toolsets when it names any; else those of the default
// toolsets of its template (tmpl), which it returns as fromTemplate. A
// default toolset the tenant does not have is not_found naming it and
// the template.
func (h *Handler) createGrants(ctx context.Context, tenant, tmpl string, tools, toolsets []string) (granted, fromTemplate []string, err error) {
	if len(tools) > 0 || len(toolsets) > 0 {
		granted, err = h.grantedTools(ctx, tenant, tools, toolsets)
		return granted, nil, err
	}
	defaults, name := h.templateToolsets(tenant, tmpl)
	if len(defaults) == 0 {
		return nil, nil, nil
	}
	granted, err = h.grantedTools(ctx, tenant, nil, defaults)
	if err != nil {
		var ae *apiError
		if errors.As(err, &ae) {
			ae.msg = fmt.Sprintf("template %s grants toolsets %s by default: %s", name, strings.Join(defaults, ", "), ae.msg)
			return nil, nil, ae
		}
		return nil, nil, fmt.Errorf("template %s grants toolsets %s by default: %w", name, strings.Join(defaults, ", "), err)
	}
	return granted, defaults, nil
}
