package api

import (
	"net/http"
	"strings"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/gateway"
)

// ApprovalQueue holds the tool calls that wait for a person's decision,
// for /v1/approvals. Every method is confined to the tenant it is
// given: another tenant's approval is not found. *gateway.Approvals
// satisfies it.
type ApprovalQueue interface {
	List(tenant string) []gateway.Approval
	Get(tenant, id string) (gateway.Approval, error)
	Decide(tenant, id string, approve bool, approver, reason string) (gateway.Approval, error)
}

var _ ApprovalQueue = (*gateway.Approvals)(nil)

// ActionApprovalDecide is the audit action of a decision. Its record
// names the approval (Target) and holds the decision, the reason, the
// tool, the calling sandbox and the call's hash; the approver is the
// record's key.
const ActionApprovalDecide = "approval.decide"

// approvalsNotServed is the answer of the approval routes without
// Config.Approvals.
func approvalsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server has no approval queue"}
}

// toApprovalJSON is the wire form of a.
func toApprovalJSON(a gateway.Approval) wire.Approval {
	out := wire.Approval{
		ID: a.ID, State: a.State, Sandbox: a.Sandbox, KeyID: a.KeyID, Tool: a.Tool, Args: a.Args, Hash: a.Hash,
		CreatedAt: a.CreatedAt.UTC(), ExpiresAt: a.ExpiresAt.UTC(), Approver: a.Approver, Reason: a.Reason,
	}
	if len(out.Args) == 0 {
		out.Args = []byte("{}")
	}
	if !a.DecidedAt.IsZero() {
		t := a.DecidedAt.UTC()
		out.DecidedAt = &t
	}
	return out
}

// approvalID returns the {id} of the request's path, checked: "ap-"
// and 16 lowercase base32 characters.
func (c *call) approvalID() (string, error) {
	if c.r.URL.RawQuery != "" {
		return "", invalidf("this route takes no query parameters")
	}
	id := c.r.PathValue("id")
	rest, ok := strings.CutPrefix(id, "ap-")
	if !ok || len(rest) != 16 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "", invalidf("approval ID %q is malformed: want ap- and 16 characters a-z, 2-7", auditTarget(id))
	}
	return id, nil
}

// listApprovals serves GET /v1/approvals[?state=STATE]: the caller's
// tenant's pending approvals and those ended in the last hour, the
// newest first.
func (h *Handler) listApprovals(c *call) error {
	if h.approvals == nil {
		return approvalsNotServed()
	}
	v, err := parseQuery(c.r.URL.RawQuery, "state")
	if err != nil {
		return err
	}
	state := v.Get("state")
	switch state {
	case "", wire.ApprovalPending, wire.ApprovalApproved, wire.ApprovalDenied, wire.ApprovalExpired, wire.ApprovalCanceled:
	default:
		return invalidf("state must be pending, approved, denied, expired or canceled")
	}
	out := wire.ApprovalList{Approvals: []wire.Approval{}}
	for _, a := range h.approvals.List(c.p.TenantID) {
		if state == "" || a.State == state {
			out.Approvals = append(out.Approvals, toApprovalJSON(a))
		}
	}
	return c.json(http.StatusOK, out)
}

// getApproval serves GET /v1/approvals/{id}; another tenant's is a 404,
// like a missing one.
func (h *Handler) getApproval(c *call) error {
	if h.approvals == nil {
		return approvalsNotServed()
	}
	id, err := c.approvalID()
	if err != nil {
		return err
	}
	a, err := h.approvals.Get(c.p.TenantID, id)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toApprovalJSON(a))
}

// decideApproval serves POST /v1/approvals/{id}: approve or deny a
// pending approval of the caller's tenant, which releases its call. The
// caller's key is recorded as the approver. Another tenant's is a 404;
// one already ended is 409 failed_precondition.
func (h *Handler) decideApproval(c *call) error {
	if h.approvals == nil {
		return approvalsNotServed()
	}
	id, err := c.approvalID()
	if err != nil {
		return err
	}
	c.ev.Target = id
	var req wire.DecideApprovalRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	switch req.Decision {
	case wire.DecisionApprove, wire.DecisionDeny:
	default:
		return invalidf("decision must be %q or %q", wire.DecisionApprove, wire.DecisionDeny)
	}
	if len(req.Reason) > gateway.MaxApprovalReason || !utf8.ValidString(req.Reason) {
		return invalidf("reason must be UTF-8 of at most %d bytes", gateway.MaxApprovalReason)
	}
	c.ev.Details = map[string]any{"decision": req.Decision, "reason": req.Reason}
	if a, err := h.approvals.Get(c.p.TenantID, id); err == nil {
		c.ev.Details["tool"], c.ev.Details["sandbox"], c.ev.Details["hash"] = a.Tool, a.Sandbox, a.Hash
	}
	if err := c.begin(); err != nil {
		return err
	}
	a, err := h.approvals.Decide(c.p.TenantID, id, req.Decision == wire.DecisionApprove, c.p.KeyID, req.Reason)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		// The decision was made and its call released: it cannot be
		// undone, and its intent record stands.
		return err
	}
	return c.json(http.StatusOK, toApprovalJSON(a))
}
