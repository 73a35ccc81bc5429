package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// Tenant is an isolated customer of a server: its keys, sandboxes,
// templates and audit records are its own. Managing tenants is the
// server operator's (the operator scope).
type Tenant = api.Tenant

// CreateTenantRequest describes a tenant to create: its ID (generated
// when empty; the IDs of deleted tenants are never reused, ErrConflict),
// its Name (required) and MaxSandboxes (0: no cap).
type CreateTenantRequest = api.CreateTenantRequest

// CreatedTenant is a new tenant with its first API key (admin scope),
// whose secret cannot be shown again.
type CreatedTenant struct {
	Tenant
	AdminKey CreatedKey
}

// CreateTenant creates a tenant and its first admin key. It needs the
// operator scope.
func (c *Client) CreateTenant(ctx context.Context, req CreateTenantRequest) (*CreatedTenant, error) {
	var out api.CreatedTenant
	if err := c.doJSON(ctx, http.MethodPost, "/v1/tenants", nil, req, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	key, err := createdKeyFrom(&out.AdminKey)
	if err != nil {
		return nil, err
	}
	return &CreatedTenant{Tenant: out.Tenant, AdminKey: key}, nil
}

// ListTenants returns the tenants that are not deleted, by ID. It needs
// the operator scope.
func (c *Client) ListTenants(ctx context.Context) ([]Tenant, error) {
	var out api.TenantList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/tenants", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.Tenants, nil
}

// DeleteTenant deletes the tenant called id: its keys stop working at
// once and its templates are removed; its audit records stay. It is
// ErrConflict while the tenant has sandboxes that are not stopped, and
// for the caller's own tenant. It needs the operator scope.
func (c *Client) DeleteTenant(ctx context.Context, id string) error {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return fmt.Errorf("airlock: tenant id %q is not valid: %w", id, ErrInvalid)
	}
	return c.doJSON(ctx, http.MethodDelete, "/v1/tenants/"+url.PathEscape(id), nil, nil, nil, http.StatusNoContent)
}
