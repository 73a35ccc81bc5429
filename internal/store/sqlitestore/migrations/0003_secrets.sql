-- 0003: the encrypted secrets of internal/secrets.
--
-- A row holds only what internal/secrets sealed (AES-256-GCM, with the
-- tenant, the name and the key ID bound as additional data) and the ID of
-- the key that sealed it; the value never reaches the database.
CREATE TABLE secrets (
    tenant_id   TEXT    NOT NULL REFERENCES tenants (id),
    name        TEXT    NOT NULL,
    description TEXT    NOT NULL DEFAULT '',
    key_id      TEXT    NOT NULL,
    ciphertext  BLOB    NOT NULL,
    version     INTEGER NOT NULL CHECK (version > 0),
    created_at  INTEGER NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name)
) STRICT, WITHOUT ROWID;
