-- 0005: each tenant's Cedar policy document for the tool gateway
-- (internal/gateway/policy.go). A tenant has at most one; none means the
-- gateway's policy stage permits every call.
CREATE TABLE policies (
    tenant_id  TEXT    NOT NULL PRIMARY KEY REFERENCES tenants (id),
    cedar      TEXT    NOT NULL,
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
