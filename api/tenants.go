package api

import "time"

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	// ID is the tenant's ID; the server generates one when empty. The
	// IDs of deleted tenants are never reused.
	ID string `json:"id,omitempty"`
	// Name says who the tenant is (required).
	Name string `json:"name"`
	// MaxSandboxes caps its sandboxes at once; 0: no cap.
	MaxSandboxes int `json:"max_sandboxes,omitempty"`
}

// Tenant is an isolated customer of a server: its keys, sandboxes,
// templates and audit records are its own.
type Tenant struct {
	// ID names the tenant.
	ID string `json:"id"`
	// Name says who the tenant is.
	Name string `json:"name"`
	// MaxSandboxes caps the tenant's sandboxes at once (every state but
	// stopped); 0 means no cap.
	MaxSandboxes int `json:"max_sandboxes"`
	// CreatedAt is when it was created.
	CreatedAt time.Time `json:"created_at"`
}

// CreatedTenant is the body of POST /v1/tenants: the tenant and its
// first API key (scope admin), whose secret is shown only here.
type CreatedTenant struct {
	Tenant
	// AdminKey is the tenant's first key.
	AdminKey CreatedKey `json:"admin_key"`
}

// TenantList is the body of GET /v1/tenants.
type TenantList struct {
	// Tenants are the tenants that are not deleted, by ID.
	Tenants []Tenant `json:"tenants"`
}
