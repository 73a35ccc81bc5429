-- 0004: the tools and toolsets of the tool gateway (internal/gateway).
--
-- Each row holds the JSON document internal/gateway validated; the store
-- keeps it as it is. A tool and a toolset may share a name.
CREATE TABLE tools (
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    name       TEXT    NOT NULL,
    doc        TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name)
) STRICT, WITHOUT ROWID;

CREATE TABLE toolsets (
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    name       TEXT    NOT NULL,
    doc        TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name)
) STRICT, WITHOUT ROWID;
