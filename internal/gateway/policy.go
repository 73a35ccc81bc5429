package gateway

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/cedar-policy/cedar-go"
	"github.com/cedar-policy/cedar-go/types"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The Cedar model of a call. The tenant's policies see:
//
//	principal  Airlock::Sandbox::"<sandbox id>"  {tenant: String, key: String}
//	action     Airlock::Action::"call"
//	resource   Airlock::Tool::"<tool name>"      {read_only: Bool, destructive: Bool}
//	context    {args: <the arguments>, calls: Long}
//
// where args are the validated arguments as Cedar values (objects are
// records, arrays sets, integral numbers longs, other numbers decimals
// when Cedar's decimal holds them exactly and strings otherwise; nulls
// are left out) and calls is how many calls of the tool the sandbox has
// made before this one. A tenant without policies is permitted every
// call; with policies, Cedar's rule holds: denied unless a permit
// applies, and any applicable forbid wins. Unlike plain Cedar, a forbid
// policy that fails to evaluate (say it reads an argument the call does
// not have) denies the call: the gateway fails closed.
//
// A forbid policy annotated @dry_run (log only) never denies: a call it
// would have denied goes ahead, and its record says which dry-run
// policies would have refused it (so a new rule can be watched before
// it is enforced). Only forbid policies may be dry-run: a dry-run
// permit would widen nothing and hide nothing, so the text is refused.
const (
	cedarSandboxType = types.EntityType("Airlock::Sandbox")
	cedarToolType    = types.EntityType("Airlock::Tool")
	cedarActionType  = types.EntityType("Airlock::Action")
)

var cedarCall = types.NewEntityUID(cedarActionType, "call")

// policyCache keeps each tenant's parsed policy set, by its text.
type policyCache struct {
	mu sync.Mutex
	m  map[string]*parsedPolicies
}

type parsedPolicies struct {
	text string
	set  *cedar.PolicySet // the enforced policies
	// dry holds the enforced policies and the dry-run forbids; nil
	// when there are none of those.
	dry   *cedar.PolicySet
	names map[cedar.PolicyID]string // what a reason calls each policy
	err   error                     // the parse error, if the text does not parse
}

// dryRunAnnotation marks a forbid policy that only records.
const dryRunAnnotation = "dry_run"

// maxCachedPolicies caps policyCache's tenants; past it the cache starts
// over.
const maxCachedPolicies = 1024

func newPolicyCache() *policyCache { return &policyCache{m: make(map[string]*parsedPolicies)} }

// parsed returns the tenant's text parsed, from the cache when the text
// is the one parsed last.
func (pc *policyCache) parsed(tenant, text string) *parsedPolicies {
	pc.mu.Lock()
	p := pc.m[tenant]
	pc.mu.Unlock()
	if p != nil && p.text == text {
		return p
	}
	p = parsePolicies(text)
	pc.mu.Lock()
	if len(pc.m) >= maxCachedPolicies {
		clear(pc.m)
	}
	pc.m[tenant] = p
	pc.mu.Unlock()
	return p
}

// CheckPolicies reports a Cedar policy text that does not parse, for
// the API to refuse it when a tenant sets it (the pipeline denies every
// call of a tenant whose text does not parse). The error wraps
// errdefs.ErrInvalidArgument.
func CheckPolicies(text string) error {
	if p := parsePolicies(text); p.err != nil {
		return fmt.Errorf("policies: %s: %w", shorten(p.err.Error(), 512), errdefs.ErrInvalidArgument)
	}
	return nil
}

// parsePolicies parses text, naming each policy by its @id annotation,
// else "policyN" (its place, from 0), with its line.
func parsePolicies(text string) *parsedPolicies {
	p := &parsedPolicies{text: text}
	list, err := cedar.NewPolicyListFromBytes("policies", []byte(text))
	if err != nil {
		p.err = err
		return p
	}
	p.set = cedar.NewPolicySet()
	all := cedar.NewPolicySet()
	p.names = make(map[cedar.PolicyID]string, len(list))
	for i, pol := range list {
		id := cedar.PolicyID("policy" + strconv.Itoa(i))
		name := string(id)
		if a, ok := pol.Annotations()["id"]; ok && a != "" {
			name = string(a)
		}
		p.names[id] = fmt.Sprintf("%s (line %d)", name, pol.Position().Line)
		all.Add(id, pol)
		if _, dry := pol.Annotations()[dryRunAnnotation]; dry {
			if pol.Effect() != cedar.Forbid {
				p.set, p.dry = nil, nil
				p.err = fmt.Errorf("policy %s: only forbid policies can be @%s", p.names[id], dryRunAnnotation)
				return p
			}
			p.dry = all
			continue
		}
		p.set.Add(id, pol)
	}
	return p
}

// authorize asks the tenant's policies, text, about c calling t with
// args. It returns whether the call is permitted and, when it is not,
// why, naming the policies that decided.
//
// dry, when the call is permitted, names the dry-run forbids that would
// have denied it ("" when none would).
func (pc *policyCache) authorize(c Caller, t Tool, args map[string]any, calls int64, text string) (reason string, ok bool, dry string) {
	p := pc.parsed(c.Tenant, text)
	if p.err != nil {
		return "the tenant's policies do not parse, so every call is denied until they are fixed: " + shorten(p.err.Error(), 200), false, ""
	}
	principal := types.NewEntityUID(cedarSandboxType, types.String(c.Sandbox))
	resource := types.NewEntityUID(cedarToolType, types.String(t.Name))
	entities := types.EntityMap{
		principal: {UID: principal, Attributes: types.NewRecord(types.RecordMap{
			"tenant": types.String(c.Tenant), "key": types.String(c.KeyID),
		})},
		resource: {UID: resource, Attributes: types.NewRecord(types.RecordMap{
			"read_only": types.Boolean(t.Governance.ReadOnly), "destructive": types.Boolean(t.Governance.Destructive),
		})},
	}
	req := cedar.Request{
		Principal: principal, Action: cedarCall, Resource: resource,
		Context: types.NewRecord(types.RecordMap{"args": cedarValue(args), "calls": types.Long(calls)}),
	}
	reason, ok = p.decide(p.set, entities, req)
	if !ok || p.dry == nil {
		return reason, ok, ""
	}
	if why, would := p.decide(p.dry, entities, req); !would {
		return "", true, why
	}
	return "", true, ""
}

// decide asks set about req: whether it is permitted and, when not, why.
func (p *parsedPolicies) decide(set *cedar.PolicySet, entities types.EntityMap, req cedar.Request) (string, bool) {
	decision, diag := cedar.Authorize(set, entities, req)
	var broken []string
	for _, e := range diag.Errors {
		if pol := set.Get(e.PolicyID); pol != nil && pol.Effect() == cedar.Forbid {
			broken = append(broken, p.names[e.PolicyID])
		}
	}
	if len(broken) > 0 {
		slices.Sort(broken)
		return "forbid policy " + strings.Join(broken, ", ") + " could not be evaluated for this call", false
	}
	if decision == cedar.Allow {
		return "", true
	}
	if len(diag.Reasons) == 0 {
		return "no policy permits it", false
	}
	var names []string
	for _, r := range diag.Reasons {
		names = append(names, p.names[r.PolicyID])
	}
	slices.Sort(names)
	return "forbidden by " + strings.Join(names, ", "), false
}

// cedarValue converts a JSON value as DecodeJSON returns it to Cedar's.
// A null converts to nil, which records and sets leave out.
func cedarValue(v any) types.Value {
	switch v := v.(type) {
	case bool:
		return types.Boolean(v)
	case string:
		return types.String(v)
	case json.Number:
		return cedarNumber(v)
	case map[string]any:
		m := make(types.RecordMap, len(v))
		for k, x := range v {
			if cv := cedarValue(x); cv != nil {
				m[types.String(k)] = cv
			}
		}
		return types.NewRecord(m)
	case []any:
		vals := make([]types.Value, 0, len(v))
		for _, x := range v {
			if cv := cedarValue(x); cv != nil {
				vals = append(vals, cv)
			}
		}
		return types.NewSet(vals...)
	}
	return nil
}

// cedarNumber converts a JSON number: a long when it is integral and
// fits, else a decimal when Cedar's decimal (four places) holds it
// exactly, else its text.
func cedarNumber(n json.Number) types.Value {
	s := string(n)
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return types.Long(i)
	}
	if f, err := strconv.ParseFloat(s, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
		return types.Long(int64(f))
	}
	if d, err := types.ParseDecimal(s); err == nil {
		return d
	}
	return types.String(s)
}
