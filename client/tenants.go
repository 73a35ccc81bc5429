package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Tenant is an isolated customer of a server: its keys, sandboxes,
// templates and audit records are its own. Managing tenants is the
// server operator's (the operator scope).
type Tenant struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// MaxSandboxes caps the tenant's sandboxes at once (every state but
	// stopped); 0 means no cap.
	MaxSandboxes int       `json:"max_sandboxes"`
	CreatedAt    time.Time `json:"created_at"`
}

// CreateTenantRequest describes a tenant to create.
type CreateTenantRequest struct {
	// ID is the tenant's ID; the server generates one when empty. The
	// IDs of deleted tenants are never reused (ErrConflict).
	ID string
	// Name says who the tenant is (required).
	Name string
	// MaxSandboxes caps its sandboxes at once; 0: no cap.
	MaxSandboxes int
}

// CreatedTenant is a new tenant with its first API key (admin scope),
// whose secret cannot be shown again.
type CreatedTenant struct {
	Tenant
	AdminKey CreatedKey
}

// CreateTenant creates a tenant and its first admin key. It needs the
// operator scope.
func (c *Client) CreateTenant(ctx context.Context, req CreateTenantRequest) (*CreatedTenant, error) {
	in := struct {
		ID           string `json:"id,omitempty"`
		Name         string `json:"name"`
		MaxSandboxes int    `json:"max_sandboxes,omitempty"`
	}{req.ID, req.Name, req.MaxSandboxes}
	var out struct {
		Tenant
		AdminKey keyBody `json:"admin_key"`
	}
	if err := c.doJSON(ctx, http.MethodPost, "/v1/tenants", nil, in, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	if out.AdminKey.Key == "" {
		return nil, fmt.Errorf("airlock: the server returned no key string: %w", ErrInternal)
	}
	return &CreatedTenant{Tenant: out.Tenant, AdminKey: CreatedKey{Key: out.AdminKey.key(), Secret: out.AdminKey.Key}}, nil
}

// ListTenants returns the tenants that are not deleted, by ID. It needs
// the operator scope.
func (c *Client) ListTenants(ctx context.Context) ([]Tenant, error) {
	var out struct {
		Tenants []Tenant `json:"tenants"`
	}
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
