package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// PolicyStore keeps each tenant's Cedar policy text for /v1/policies
// (see store.PolicyStore, which the daemon's store satisfies): at most
// one per tenant; GetPolicy and DeletePolicy are ErrNotFound when the
// tenant has none.
type PolicyStore interface {
	PutPolicy(ctx context.Context, tenant, text string, updatedAt time.Time) error
	GetPolicy(ctx context.Context, tenant string) (text string, updatedAt time.Time, err error)
	DeletePolicy(ctx context.Context, tenant string) error
}

var _ PolicyStore = store.PolicyStore(nil)

// The audit actions of policies. Their records name the tenant (Target)
// and, for an update, the text's SHA-256 and size (never the text, to
// keep records small: the digest ties a record to the text a tenant
// set).
const (
	ActionPolicyUpdate = "policy.update"
	ActionPolicyDelete = "policy.delete"
)

// policiesNotServed is the answer of the policy routes without
// Config.Policies.
func policiesNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server has no tool gateway policies"}
}

// putPolicy serves PUT /v1/policies: it sets the caller's tenant's
// policy text, replacing any, once it parses (400 with the parser's
// message, position included, if not).
func (h *Handler) putPolicy(c *call) error {
	if h.policies == nil {
		return policiesNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	var req wire.PutPolicyRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	switch {
	case req.Cedar == "":
		return invalidf("cedar is required (DELETE /v1/policies removes the policy)")
	case len(req.Cedar) > store.MaxPolicyBytes:
		return invalidf("cedar is %d bytes, more than the %d allowed", len(req.Cedar), store.MaxPolicyBytes)
	}
	if err := gateway.CheckPolicies(req.Cedar); err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(req.Cedar))
	c.ev.Target = c.p.TenantID
	c.ev.Details = map[string]any{"sha256": hex.EncodeToString(sum[:]), "bytes": len(req.Cedar)}
	if err := c.begin(); err != nil {
		return err
	}
	now := time.Now().UTC()
	if err := h.policies.PutPolicy(c.r.Context(), c.p.TenantID, req.Cedar, now); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.Policy{Cedar: req.Cedar, UpdatedAt: now})
}

// getPolicy serves GET /v1/policies: the caller's tenant's policy text,
// 404 when it has none.
func (h *Handler) getPolicy(c *call) error {
	if h.policies == nil {
		return policiesNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	text, at, err := h.policies.GetPolicy(c.r.Context(), c.p.TenantID)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.Policy{Cedar: text, UpdatedAt: at.UTC()})
}

// deletePolicy serves DELETE /v1/policies: the tenant's calls are
// permitted by policy again (404 when it has none).
func (h *Handler) deletePolicy(c *call) error {
	if h.policies == nil {
		return policiesNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	c.ev.Target = c.p.TenantID
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.policies.DeletePolicy(c.r.Context(), c.p.TenantID); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}
