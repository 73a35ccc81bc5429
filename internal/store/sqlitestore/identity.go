package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// CreateTenant implements store.TenantStore.
func (s *Store) CreateTenant(ctx context.Context, t store.Tenant) error {
	if err := t.Validate(); err != nil {
		return err
	}
	if t.CreatedAt.IsZero() {
		t.CreatedAt = time.Now()
	}
	_, err := s.w.ExecContext(ctx, "INSERT INTO tenants (id, name, created_at, max_sandboxes) VALUES (?, ?, ?, ?)",
		t.ID, t.Name, nanos(t.CreatedAt), t.MaxSandboxes)
	if err != nil {
		return fmt.Errorf("create tenant %s: %w", t.ID, wrap(err))
	}
	return nil
}

const tenantCols = "id, name, created_at, max_sandboxes, deleted_at"

func scanTenant(sc interface{ Scan(...any) error }) (store.Tenant, error) {
	var t store.Tenant
	var created int64
	var deleted sql.NullInt64
	if err := sc.Scan(&t.ID, &t.Name, &created, &t.MaxSandboxes, &deleted); err != nil {
		return store.Tenant{}, err
	}
	t.CreatedAt = fromNanos(created)
	t.DeletedAt = fromNullNanos(deleted)
	return t, nil
}

// GetTenant implements store.TenantStore.
func (s *Store) GetTenant(ctx context.Context, id string) (store.Tenant, error) {
	t, err := scanTenant(s.r.QueryRowContext(ctx, "SELECT "+tenantCols+" FROM tenants WHERE id = ?", id))
	if err != nil {
		return store.Tenant{}, fmt.Errorf("tenant %s: %w", store.Clip(id), wrap(err))
	}
	return t, nil
}

// ListTenants implements store.TenantStore.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+tenantCols+" FROM tenants ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("list tenants: %w", wrap(err))
	}
	defer rows.Close()
	var out []store.Tenant
	for rows.Next() {
		t, err := scanTenant(rows)
		if err != nil {
			return nil, fmt.Errorf("list tenants: %w", wrap(err))
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tenants: %w", wrap(err))
	}
	return out, nil
}

// UpdateTenant implements store.TenantStore.
func (s *Store) UpdateTenant(ctx context.Context, t store.Tenant) error {
	if err := t.Validate(); err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, "UPDATE tenants SET name = ?, max_sandboxes = ? WHERE id = ? AND deleted_at IS NULL",
		t.Name, t.MaxSandboxes, t.ID)
	if err != nil {
		return fmt.Errorf("update tenant %s: %w", t.ID, wrap(err))
	}
	return affectedOne(res, "tenant "+t.ID)
}

// DeleteTenant implements store.TenantStore: the check for active
// sandboxes, the mark, the revocation of the keys and the deletion of
// the secrets, tools, toolsets and policy are one transaction on the single
// writer connection, so no sandbox record, key, secret or tool can be
// created in between.
func (s *Store) DeleteTenant(ctx context.Context, id string, at time.Time) error {
	if at.IsZero() {
		at = time.Now()
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT deleted_at FROM tenants WHERE id = ?", id).Scan(&deleted)
		if err != nil {
			return fmt.Errorf("tenant %s: %w", store.Clip(id), wrap(err))
		}
		if deleted.Valid {
			return fmt.Errorf("tenant %s: %w", store.Clip(id), errdefs.ErrNotFound)
		}
		var active int
		if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM sandboxes WHERE tenant_id = ? AND state != ?",
			id, store.SandboxStopped).Scan(&active); err != nil {
			return fmt.Errorf("delete tenant %s: %w", store.Clip(id), wrap(err))
		}
		if active > 0 {
			return fmt.Errorf("tenant %s has %d active sandboxes; delete them first: %w", id, active, errdefs.ErrFailedPrecondition)
		}
		if _, err := tx.ExecContext(ctx, "UPDATE tenants SET deleted_at = ? WHERE id = ?", nanos(at), id); err != nil {
			return fmt.Errorf("delete tenant %s: %w", id, wrap(err))
		}
		if _, err := tx.ExecContext(ctx, "UPDATE api_keys SET revoked_at = ? WHERE tenant_id = ? AND revoked_at IS NULL",
			nanos(at), id); err != nil {
			return fmt.Errorf("delete tenant %s: revoke keys: %w", id, wrap(err))
		}
		if _, err := tx.ExecContext(ctx, "DELETE FROM secrets WHERE tenant_id = ?", id); err != nil {
			return fmt.Errorf("delete tenant %s: delete secrets: %w", id, wrap(err))
		}
		for _, table := range []string{"tools", "toolsets", "policies"} {
			if _, err := tx.ExecContext(ctx, "DELETE FROM "+table+" WHERE tenant_id = ?", id); err != nil {
				return fmt.Errorf("delete tenant %s: delete %s: %w", id, table, wrap(err))
			}
		}
		return nil
	})
}

// affectedOne turns "no row changed" into ErrNotFound.
func affectedOne(res sql.Result, what string) error {
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("%s: %w", what, wrap(err))
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, errdefs.ErrNotFound)
	}
	return nil
}

// CreateAPIKey implements store.KeyStore.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if err := k.Validate(); err != nil {
		return err
	}
	// The SELECT inserts nothing for a deleted tenant; a missing one
	// fails the foreign key.
	res, err := s.w.ExecContext(ctx, `INSERT INTO api_keys
		(id, tenant_id, name, hash, scopes, created_at, last_used_at, revoked_at, expires_at)
		SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?
		WHERE NOT EXISTS (SELECT 1 FROM tenants WHERE id = ? AND deleted_at IS NOT NULL)`,
		k.ID, k.TenantID, k.Name, k.Hash, strings.Join(store.NormalizeScopes(k.Scopes), " "),
		nanos(k.CreatedAt), nullNanos(k.LastUsedAt), nullNanos(k.RevokedAt), nullNanos(k.ExpiresAt), k.TenantID)
	if err != nil {
		err = wrap(err)
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("create key: tenant %s: %w", k.TenantID, errdefs.ErrNotFound)
		}
		return fmt.Errorf("create key %s: %w", k.ID, err)
	}
	return affectedOne(res, "create key: tenant "+k.TenantID)
}

const keyCols = "id, tenant_id, name, hash, scopes, created_at, last_used_at, revoked_at, expires_at"

func scanKey(sc interface{ Scan(...any) error }) (store.APIKey, error) {
	var k store.APIKey
	var scopes string
	var created int64
	var used, revoked, expires sql.NullInt64
	if err := sc.Scan(&k.ID, &k.TenantID, &k.Name, &k.Hash, &scopes, &created, &used, &revoked, &expires); err != nil {
		return store.APIKey{}, err
	}
	k.Scopes = store.NormalizeScopes(strings.Fields(scopes))
	k.CreatedAt = fromNanos(created)
	k.LastUsedAt = fromNullNanos(used)
	k.RevokedAt = fromNullNanos(revoked)
	k.ExpiresAt = fromNullNanos(expires)
	return k, nil
}

// GetAPIKey implements store.KeyStore.
func (s *Store) GetAPIKey(ctx context.Context, id string) (store.APIKey, error) {
	k, err := scanKey(s.r.QueryRowContext(ctx, "SELECT "+keyCols+" FROM api_keys WHERE id = ?", id))
	if err != nil {
		return store.APIKey{}, fmt.Errorf("key %s: %w", store.Clip(id), wrap(err))
	}
	return k, nil
}

// ListAPIKeys implements store.KeyStore.
func (s *Store) ListAPIKeys(ctx context.Context, tenantID string) ([]store.APIKey, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+keyCols+" FROM api_keys WHERE tenant_id = ? ORDER BY created_at, id", tenantID)
	if err != nil {
		return nil, fmt.Errorf("list keys: %w", wrap(err))
	}
	defer rows.Close()
	var out []store.APIKey
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, fmt.Errorf("list keys: %w", wrap(err))
		}
		out = append(out, k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list keys: %w", wrap(err))
	}
	return out, nil
}

// CountAPIKeys implements store.KeyStore.
func (s *Store) CountAPIKeys(ctx context.Context) (int, error) {
	var n int
	if err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM api_keys").Scan(&n); err != nil {
		return 0, fmt.Errorf("count keys: %w", wrap(err))
	}
	return n, nil
}

// RevokeAPIKey implements store.KeyStore.
func (s *Store) RevokeAPIKey(ctx context.Context, tenantID, id string, at time.Time) error {
	if at.IsZero() {
		at = time.Now()
	}
	res, err := s.w.ExecContext(ctx,
		"UPDATE api_keys SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ? AND tenant_id = ?",
		nanos(at), id, tenantID)
	if err != nil {
		return fmt.Errorf("revoke key %s: %w", store.Clip(id), wrap(err))
	}
	return affectedOne(res, "key "+store.Clip(id))
}

// TouchAPIKey implements store.KeyStore.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	res, err := s.w.ExecContext(ctx, "UPDATE api_keys SET last_used_at = ? WHERE id = ?", nanos(at), id)
	if err != nil {
		return fmt.Errorf("touch key %s: %w", store.Clip(id), wrap(err))
	}
	return affectedOne(res, "key "+store.Clip(id))
}

// SetAPIKeyScopes implements store.KeyStore.
func (s *Store) SetAPIKeyScopes(ctx context.Context, id string, scopes []string) error {
	if err := store.ValidateScopes(scopes); err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, "UPDATE api_keys SET scopes = ? WHERE id = ?",
		strings.Join(store.NormalizeScopes(scopes), " "), id)
	if err != nil {
		return fmt.Errorf("set scopes of key %s: %w", store.Clip(id), wrap(err))
	}
	return affectedOne(res, "key "+store.Clip(id))
}
