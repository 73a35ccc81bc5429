package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// Approval is a tool call that requires a person's decision: pending,
// or ended (approved, denied, expired, canceled) in the last hour.
type Approval = api.Approval

// The states of an approval (Approval.State).
const (
	ApprovalPending  = api.ApprovalPending
	ApprovalApproved = api.ApprovalApproved
	ApprovalDenied   = api.ApprovalDenied
	ApprovalExpired  = api.ApprovalExpired
	ApprovalCanceled = api.ApprovalCanceled
)

// checkApprovalID checks the form of an approval's ID before it goes
// into a path: "ap-" and 16 characters a-z, 2-7.
func checkApprovalID(id string) error {
	rest, ok := strings.CutPrefix(id, "ap-")
	if !ok || len(rest) != 16 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return fmt.Errorf("airlock: approval ID %q is malformed (want ap- and 16 characters a-z, 2-7): %w", id, ErrInvalid)
	}
	return nil
}

// ListApprovals returns the caller's tenant's approvals, the newest
// first: those in state if it is not empty, else every pending one and
// those ended in the last hour. It needs the approvals scope.
func (c *Client) ListApprovals(ctx context.Context, state string) ([]Approval, error) {
	var q url.Values
	if state != "" {
		q = url.Values{"state": {state}}
	}
	var out api.ApprovalList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/approvals", q, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.Approvals, nil
}

// GetApproval returns the caller's tenant's approval id; ErrNotFound if
// there is none (or it ended more than an hour ago). It needs the
// approvals scope.
func (c *Client) GetApproval(ctx context.Context, id string) (*Approval, error) {
	if err := checkApprovalID(id); err != nil {
		return nil, err
	}
	var out Approval
	if err := c.doJSON(ctx, http.MethodGet, "/v1/approvals/"+url.PathEscape(id), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// DecideApproval approves (approve true) or denies the caller's tenant's
// pending approval id with reason, which releases its call, and returns
// the approval as decided. The caller's key is recorded as the
// approver. One that already ended is ErrConflict. It needs
// the approvals scope.
func (c *Client) DecideApproval(ctx context.Context, id string, approve bool, reason string) (*Approval, error) {
	if err := checkApprovalID(id); err != nil {
		return nil, err
	}
	req := api.DecideApprovalRequest{Decision: api.DecisionDeny, Reason: reason}
	if approve {
		req.Decision = api.DecisionApprove
	}
	var out Approval
	if err := c.doJSON(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), nil, req, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}
