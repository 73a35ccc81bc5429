-- 0001: tenants, API keys, sandbox records and the audit log.
-- Times are INTEGER nanoseconds since the Unix epoch (UTC); NULL = not set.

CREATE TABLE tenants (
    id            TEXT    PRIMARY KEY,
    name          TEXT    NOT NULL DEFAULT '',
    created_at    INTEGER NOT NULL,
    max_sandboxes INTEGER NOT NULL DEFAULT 0 CHECK (max_sandboxes >= 0)
) STRICT;

CREATE TABLE api_keys (
    id           TEXT    PRIMARY KEY,
    tenant_id    TEXT    NOT NULL REFERENCES tenants (id),
    name         TEXT    NOT NULL DEFAULT '',
    hash         TEXT    NOT NULL,
    scopes       TEXT    NOT NULL, -- space-separated, sorted
    created_at   INTEGER NOT NULL,
    last_used_at INTEGER,
    revoked_at   INTEGER,
    expires_at   INTEGER
) STRICT;

CREATE INDEX api_keys_by_tenant ON api_keys (tenant_id, created_at);

CREATE TABLE sandboxes (
    id         TEXT    PRIMARY KEY,
    tenant_id  TEXT    NOT NULL REFERENCES tenants (id),
    template   TEXT    NOT NULL DEFAULT '',
    state      TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    stopped_at INTEGER,
    metadata   TEXT    NOT NULL DEFAULT '' -- JSON object or ''
) STRICT;

CREATE INDEX sandboxes_by_tenant_state ON sandboxes (tenant_id, state);
CREATE INDEX sandboxes_by_tenant_created ON sandboxes (tenant_id, created_at, id);

-- The audit log: append-only (the triggers refuse UPDATE and DELETE) and
-- hash-chained by internal/audit.
CREATE TABLE audit_records (
    seq       INTEGER PRIMARY KEY CHECK (seq > 0),
    time      INTEGER NOT NULL,
    tenant_id TEXT    NOT NULL DEFAULT '',
    key_id    TEXT    NOT NULL DEFAULT '',
    action    TEXT    NOT NULL,
    target    TEXT    NOT NULL DEFAULT '',
    outcome   TEXT    NOT NULL DEFAULT '',
    details   TEXT    NOT NULL DEFAULT '', -- compact JSON or ''
    prev_hash TEXT    NOT NULL,
    hash      TEXT    NOT NULL
) STRICT;

CREATE INDEX audit_records_by_tenant ON audit_records (tenant_id, seq);

CREATE TRIGGER audit_records_no_update BEFORE UPDATE ON audit_records
BEGIN
    SELECT RAISE(ABORT, 'audit records are append-only');
END;

CREATE TRIGGER audit_records_no_delete BEFORE DELETE ON audit_records
BEGIN
    SELECT RAISE(ABORT, 'audit records are append-only');
END;

-- The head anchor: Seq and hash of the last appended record, updated in
-- the same transaction as the records, so that deleting the tail of the
-- log is detectable.
CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL,
    hash TEXT    NOT NULL
) STRICT;
