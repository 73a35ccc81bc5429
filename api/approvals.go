package api

import (
	"encoding/json"
	"time"
)

// The states of an approval (Approval.State).
const (
	// ApprovalPending: the call waits for a decision.
	ApprovalPending = "pending"
	// ApprovalApproved: an approver let the call go on.
	ApprovalApproved = "approved"
	// ApprovalDenied: an approver refused the call.
	ApprovalDenied = "denied"
	// ApprovalExpired: no decision came in time; the call was denied.
	ApprovalExpired = "expired"
	// ApprovalCanceled: the call ended (its program went away) first.
	ApprovalCanceled = "canceled"
)

// The decisions of DecideApprovalRequest.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// Approval is one call of a tool that requires approval: the body of GET
// and POST /v1/approvals/{id} and an entry of GET /v1/approvals. It is
// bound to exactly that call: a decision releases only it.
type Approval struct {
	// ID is "ap-" and 16 lowercase base32 characters.
	ID    string `json:"id"`
	State string `json:"state"`
	// Sandbox is the calling sandbox, KeyID the API key behind it.
	Sandbox string `json:"sandbox"`
	KeyID   string `json:"key_id"`
	Tool    string `json:"tool"`
	// Args are the call's arguments, the tool's redact fields shown as
	// "[redacted]".
	Args json.RawMessage `json:"args"`
	// Hash is the hex SHA-256 that identifies the call: its tenant,
	// sandbox, tool and canonical arguments.
	Hash string `json:"hash"`
	// CreatedAt is when the call asked; ExpiresAt when it is denied
	// unless decided.
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// DecidedAt is when the approval ended (decided, expired or
	// canceled); Approver is the ID of the API key that decided and
	// Reason the approver's reason (or why it ended otherwise).
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	Approver  string     `json:"approver,omitempty"`
	Reason    string     `json:"reason,omitempty"`
}

// ApprovalList is the body of GET /v1/approvals.
type ApprovalList struct {
	// Approvals are the tenant's pending approvals and those ended in
	// the last hour, the newest first.
	Approvals []Approval `json:"approvals"`
}

// DecideApprovalRequest is the body of POST /v1/approvals/{id}.
type DecideApprovalRequest struct {
	// Decision is DecisionApprove or DecisionDeny.
	Decision string `json:"decision"`
	// Reason is recorded with the decision and, for a denial, told to
	// the calling program (at most 1024 bytes).
	Reason string `json:"reason,omitempty"`
}
