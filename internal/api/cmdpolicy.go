package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// A sandbox's command policy (wire.CommandPolicy) is checked by exec
// before the exec's audit intent: deny refuses the exec (403), ask waits
// for a person's decision in the approval queue (Config.Approvals, as
// the tool "exec" with arguments {"command": ...}) and is denied where
// there is none. The decision goes into the exec's audit details.

// execApprovalTool is the tool name of an exec's approval.
const execApprovalTool = "exec"

// commandApprover is what of the approval queue an ask needs:
// *gateway.Approvals.Approve.
type commandApprover interface {
	Approve(ctx context.Context, c gateway.Caller, t gateway.Tool, args json.RawMessage) (bool, string, error)
}

var _ commandApprover = (*gateway.Approvals)(nil)

// commandPolicyFrom converts a request's policy; the manager validates it.
func commandPolicyFrom(p *wire.CommandPolicy) *cmdpolicy.Policy {
	if p == nil {
		return nil
	}
	out := &cmdpolicy.Policy{Default: p.Default, Rules: make([]cmdpolicy.Rule, len(p.Rules))}
	for i, r := range p.Rules {
		out.Rules[i] = cmdpolicy.Rule{Action: r.Action, Prefix: slices.Clone(r.Prefix)}
	}
	return out
}

// commandPolicyJSON is the wire form of p.
func commandPolicyJSON(p *cmdpolicy.Policy) *wire.CommandPolicy {
	if p == nil {
		return nil
	}
	out := &wire.CommandPolicy{Default: p.Default, Rules: make([]wire.CommandRule, len(p.Rules))}
	for i, r := range p.Rules {
		out.Rules[i] = wire.CommandRule{Action: r.Action, Prefix: slices.Clone(r.Prefix)}
	}
	return out
}

// checkCommandPolicy judges req's command by sb's policy, if it has one,
// records the decision in c.ev.Details (set by then), and returns nil
// when the exec may run: allowed, or asked and approved.
func (h *Handler) checkCommandPolicy(c *call, sb sandbox.Sandbox, req *execRequest) error {
	p := sb.CmdPolicy
	if p == nil {
		return nil
	}
	var d cmdpolicy.Decision
	if req.Command != "" {
		d = p.Decide(req.Command)
	} else {
		d = p.DecideArgv(req.Cmd)
	}
	details := map[string]any{"action": d.Action, "reason": d.Reason}
	if d.Rule != nil {
		details["rule"] = map[string]any{"action": d.Rule.Action, "prefix": d.Rule.Prefix}
	}
	c.ev.Details["command_policy"] = details
	switch d.Action {
	case cmdpolicy.Allow:
		return nil
	case cmdpolicy.Ask:
		return h.askCommand(c, sb, req, details, d.Reason)
	}
	return &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
		msg: "the sandbox's command policy denies this command: " + d.Reason}
}

// askCommand waits for a person's decision on an exec the policy asks
// about; without an approval queue the exec is denied.
func (h *Handler) askCommand(c *call, sb sandbox.Sandbox, req *execRequest, details map[string]any, reason string) error {
	deny := func(why string) error {
		details["approval"] = why
		return &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
			msg: fmt.Sprintf("the sandbox's command policy asks for approval of this command (%s), and %s", reason, why)}
	}
	q, ok := h.approvals.(commandApprover)
	if !ok || h.approvals == nil {
		return deny("this daemon has no approval queue")
	}
	args, err := json.Marshal(map[string]any{"command": req.commandText()})
	if err != nil {
		return err
	}
	caller := gateway.Caller{Tenant: sb.Owner, Sandbox: sb.ID, KeyID: c.p.KeyID}
	approved, why, err := q.Approve(c.r.Context(), caller, gateway.Tool{Name: execApprovalTool}, args)
	switch {
	case err != nil && errors.Is(err, context.Canceled):
		return err
	case err != nil:
		return deny("it was not approved: " + clean(err.Error()))
	case !approved:
		if why == "" {
			why = "no reason given"
		}
		return deny("it was denied: " + clean(why))
	}
	details["approval"] = "approved"
	return nil
}
