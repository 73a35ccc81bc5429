package api

import "time"

// PutPolicyRequest is the body of PUT /v1/policies: the tenant's Cedar
// policy text for the tool gateway, replacing any it had.
type PutPolicyRequest struct {
	// Cedar is the policy text (at most 256 KiB; it must parse). Every
	// tool call of the tenant's sandboxes is an authorization request
	// with principal Airlock::Sandbox::"<sandbox id>" {tenant, key},
	// action Airlock::Action::"call", resource Airlock::Tool::"<tool
	// name>" {read_only, destructive} and context {args, calls}; a call
	// is denied unless a policy permits it, and any forbid that applies
	// wins.
	Cedar string `json:"cedar"`
}

// Policy is the tenant's Cedar policy text: the body of PUT and GET
// /v1/policies.
type Policy struct {
	Cedar     string    `json:"cedar"`
	UpdatedAt time.Time `json:"updated_at"`
}
