package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// TenantManager creates, lists and deletes tenants for /v1/tenants, the
// operator's routes. *auth.Service satisfies it.
type TenantManager interface {
	// CreateTenant creates t, generating its ID when empty;
	// ErrAlreadyExists for an ID that is or was in use.
	CreateTenant(ctx context.Context, t store.Tenant) (store.Tenant, error)
	// GetTenant returns a tenant, a deleted one included (DeletedAt set).
	GetTenant(ctx context.Context, id string) (store.Tenant, error)
	// ListTenants returns every tenant, deleted ones included.
	ListTenants(ctx context.Context) ([]store.Tenant, error)
	// DeleteTenant marks the tenant deleted and revokes its keys at once;
	// ErrFailedPrecondition while it has active sandbox records.
	DeleteTenant(ctx context.Context, id string) error
}

var _ TenantManager = (*auth.Service)(nil)

// The audit actions of tenant management.
const (
	ActionTenantCreate = "tenant.create"
	ActionTenantDelete = "tenant.delete"
)

// maxTenantQuota caps max_sandboxes (the store's own cap).
const maxTenantQuota = 1 << 20

// tenantAdminKeyName names the admin key POST /v1/tenants creates.
const tenantAdminKeyName = "admin"

// createTenantRequest is the body of POST /v1/tenants
// (api.CreateTenantRequest), with its validation.
type createTenantRequest wire.CreateTenantRequest

// toTenantJSON is the wire form of t.
func toTenantJSON(t store.Tenant) wire.Tenant {
	return wire.Tenant{ID: t.ID, Name: t.Name, MaxSandboxes: t.MaxSandboxes, CreatedAt: t.CreatedAt.UTC()}
}

// tenantsNotServed is the answer of the tenant routes without
// Config.Tenants.
func tenantsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not manage tenants"}
}

// validate checks req.
func (req *createTenantRequest) validate() error {
	switch {
	case req.ID != "" && template.ValidateOwner(req.ID) != nil:
		return invalidf("id must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit")
	case strings.TrimSpace(req.Name) == "":
		return invalidf("name is required")
	case len(req.Name) > store.MaxNameBytes || !utf8.ValidString(req.Name) ||
		strings.ContainsFunc(req.Name, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return invalidf("name must be at most %d bytes of printable text", store.MaxNameBytes)
	case req.MaxSandboxes < 0 || req.MaxSandboxes > maxTenantQuota:
		return invalidf("max_sandboxes must be between 0 (no cap) and %d", maxTenantQuota)
	}
	return nil
}

// createTenant serves POST /v1/tenants: the tenant and its first admin
// key (scope admin, named "admin"). If the key cannot be made or the
// creation cannot be recorded, the tenant is deleted again.
func (h *Handler) createTenant(c *call) error {
	if h.tenants == nil {
		return tenantsNotServed()
	}
	var req createTenantRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	if err := req.validate(); err != nil {
		return err
	}
	c.ev.Target = req.ID
	c.ev.Details = map[string]any{"name": req.Name, "max_sandboxes": req.MaxSandboxes}
	if err := c.begin(); err != nil {
		return err
	}
	t, err := h.tenants.CreateTenant(c.r.Context(), store.Tenant{ID: req.ID, Name: req.Name, MaxSandboxes: req.MaxSandboxes})
	if err != nil {
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			return fmt.Errorf("tenant %s exists or existed (the IDs of deleted tenants are not reused): %w", req.ID, errdefs.ErrAlreadyExists)
		}
		return err
	}
	c.ev.Target = t.ID
	undo := func(why error) error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), h.lim.AuditTimeout)
		defer cancel()
		if err := h.tenants.DeleteTenant(ctx, t.ID); err != nil {
			h.log.Error("deleting a tenant whose creation failed", "tenant", t.ID, "err", err)
		}
		return why
	}
	token, key, err := h.keys.CreateKey(c.r.Context(), t.ID, tenantAdminKeyName, []auth.Scope{auth.ScopeAdmin}, time.Time{})
	if err != nil {
		return undo(fmt.Errorf("create the tenant's admin key: %w", err))
	}
	c.ev.Details["admin_key_id"] = key.ID
	if err := c.commit(); err != nil {
		// An unrecorded tenant must not exist: deleting it revokes its key.
		return undo(&apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			msg: "the audit log is unavailable; the tenant was deleted"})
	}
	// The admin key's secret is shown only here.
	return c.json(http.StatusCreated, wire.CreatedTenant{Tenant: toTenantJSON(t), AdminKey: toCreatedKeyJSON(key, token)})
}

// listTenants serves GET /v1/tenants: the tenants that are not deleted.
func (h *Handler) listTenants(c *call) error {
	if h.tenants == nil {
		return tenantsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	all, err := h.tenants.ListTenants(c.r.Context())
	if err != nil {
		return err
	}
	out := wire.TenantList{Tenants: make([]wire.Tenant, 0, len(all))}
	for _, t := range all {
		if t.DeletedAt.IsZero() {
			out.Tenants = append(out.Tenants, toTenantJSON(t))
		}
	}
	return c.json(http.StatusOK, out)
}

// deleteTenant serves DELETE /v1/tenants/{id}. It is refused while the
// tenant has sandboxes that are not stopped, for the caller's own tenant
// and for the operator's (auth.DefaultTenantID). The tenant is marked deleted and its keys revoked at once (its
// ID is never reused: it names its audit records), then its templates
// are removed. A deleted tenant whose templates could not all be removed
// can be deleted again to finish; otherwise it is not found.
func (h *Handler) deleteTenant(c *call) error {
	if h.tenants == nil {
		return tenantsNotServed()
	}
	id := c.r.PathValue("id")
	if template.ValidateOwner(id) != nil {
		return invalidf("malformed tenant id")
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	switch id {
	case c.p.TenantID:
		return fmt.Errorf("a key cannot delete its own tenant: %w", errdefs.ErrFailedPrecondition)
	case auth.DefaultTenantID:
		// It holds the operator key of admin.key, which a start may
		// have to make again.
		return fmt.Errorf("the %s tenant is the operator's and cannot be deleted: %w", auth.DefaultTenantID, errdefs.ErrFailedPrecondition)
	}
	t, err := h.tenants.GetTenant(c.r.Context(), id)
	if err != nil {
		return err
	}
	if t.DeletedAt.IsZero() {
		var live int
		for _, sb := range h.mgr.List(sandbox.Filter{Owner: id}) {
			if sb.State != sandbox.StateStopped {
				live++
			}
		}
		if live > 0 {
			return fmt.Errorf("tenant %s has %d sandboxes; delete them first: %w", id, live, errdefs.ErrFailedPrecondition)
		}
	} else if h.tpl == nil || !h.tpl.HasOwner(id) {
		return fmt.Errorf("tenant %s: %w", id, errdefs.ErrNotFound)
	}
	c.ev.Details = map[string]any{"name": t.Name}
	if err := c.begin(); err != nil {
		return err
	}
	if t.DeletedAt.IsZero() {
		if err := h.tenants.DeleteTenant(c.r.Context(), id); err != nil {
			return err
		}
	} else {
		c.ev.Details["retry"] = true
	}
	if h.tpl != nil {
		n, freed, err := h.tpl.RemoveOwner(context.WithoutCancel(c.r.Context()), id)
		c.ev.Details["templates_removed"] = n
		c.ev.Details["freed_bytes"] = freed.Bytes
		if err != nil {
			return fmt.Errorf("the tenant is deleted, but removing its templates failed (delete it again to retry): %w", err)
		}
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}
