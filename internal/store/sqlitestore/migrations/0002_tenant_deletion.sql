-- 0002: deleted tenants, and the templates:read scope for existing keys.
--
-- A deleted tenant keeps its row (so that its ID, which names its audit
-- and sandbox records, is never given to a new tenant) with deleted_at
-- set; its keys are revoked when it is deleted.
ALTER TABLE tenants ADD COLUMN deleted_at INTEGER;

-- Listing and inspecting templates needed sandboxes:read before the
-- templates:read scope existed: keys that had it keep that power.
-- (Scopes are read back sorted whatever their stored order.)
UPDATE api_keys SET scopes = scopes || ' templates:read'
WHERE (' ' || scopes || ' ') LIKE '% sandboxes:read %'
  AND (' ' || scopes || ' ') NOT LIKE '% templates:read %';
