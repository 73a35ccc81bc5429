package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// PutSecret implements store.SecretStore. The tenant check, the count
// cap and the upsert share one BEGIN IMMEDIATE transaction on the single
// writer connection, so concurrent puts never exceed the cap.
func (s *Store) PutSecret(ctx context.Context, r store.SecretRecord, maxPerTenant int) (store.SecretRecord, error) {
	if err := r.Validate(); err != nil {
		return store.SecretRecord{}, err
	}
	if err := store.ValidateSecretCap(maxPerTenant); err != nil {
		return store.SecretRecord{}, err
	}
	var out store.SecretRecord
	err := s.writeTx(ctx, func(tx *sql.Tx) error {
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT deleted_at FROM tenants WHERE id = ?", r.TenantID).Scan(&deleted)
		if err != nil {
			return fmt.Errorf("put secret: tenant %s: %w", r.TenantID, wrap(err))
		}
		if deleted.Valid {
			return fmt.Errorf("put secret: tenant %s: %w", r.TenantID, errdefs.ErrNotFound)
		}
		var exists, count int
		if err := tx.QueryRowContext(ctx,
			"SELECT COUNT(*), COALESCE(SUM(name = ?), 0) FROM secrets WHERE tenant_id = ?",
			r.Name, r.TenantID).Scan(&count, &exists); err != nil {
			return fmt.Errorf("put secret %s: %w", r.Name, wrap(err))
		}
		if exists == 0 && count >= maxPerTenant {
			return fmt.Errorf("tenant %s already has %d of its %d secrets: %w", r.TenantID, count, maxPerTenant, errdefs.ErrResourceExhausted)
		}
		row := tx.QueryRowContext(ctx, `INSERT INTO secrets
			(tenant_id, name, description, key_id, ciphertext, version, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, 1, ?, ?)
			ON CONFLICT (tenant_id, name) DO UPDATE SET
				description = excluded.description, key_id = excluded.key_id,
				ciphertext = excluded.ciphertext, version = secrets.version + 1,
				updated_at = excluded.updated_at
			RETURNING `+secretMetaCols,
			r.TenantID, r.Name, r.Description, r.KeyID, r.Ciphertext, nanos(r.CreatedAt), nanos(r.UpdatedAt))
		out, err = scanSecret(row, false)
		if err != nil {
			return fmt.Errorf("put secret %s: %w", r.Name, wrap(err))
		}
		return nil
	})
	if err != nil {
		return store.SecretRecord{}, err
	}
	return out, nil
}

const secretMetaCols = "tenant_id, name, description, key_id, version, created_at, updated_at"

func scanSecret(sc interface{ Scan(...any) error }, withCiphertext bool) (store.SecretRecord, error) {
	var r store.SecretRecord
	var created, updated int64
	dest := []any{&r.TenantID, &r.Name, &r.Description, &r.KeyID, &r.Version, &created, &updated}
	if withCiphertext {
		dest = append(dest, &r.Ciphertext)
	}
	if err := sc.Scan(dest...); err != nil {
		return store.SecretRecord{}, err
	}
	r.CreatedAt = fromNanos(created)
	r.UpdatedAt = fromNanos(updated)
	return r, nil
}

// GetSecret implements store.SecretStore.
func (s *Store) GetSecret(ctx context.Context, tenantID, name string) (store.SecretRecord, error) {
	r, err := scanSecret(s.r.QueryRowContext(ctx, "SELECT "+secretMetaCols+", ciphertext FROM secrets WHERE tenant_id = ? AND name = ?",
		tenantID, name), true)
	if err != nil {
		return store.SecretRecord{}, fmt.Errorf("secret %s: %w", store.Clip(name), wrap(err))
	}
	return r, nil
}

// ListSecrets implements store.SecretStore.
func (s *Store) ListSecrets(ctx context.Context, tenantID string) ([]store.SecretRecord, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+secretMetaCols+" FROM secrets WHERE tenant_id = ? ORDER BY name LIMIT ?",
		tenantID, store.MaxSecretsPerTenant)
	if err != nil {
		return nil, fmt.Errorf("list secrets: %w", wrap(err))
	}
	defer rows.Close()
	var out []store.SecretRecord
	for rows.Next() {
		r, err := scanSecret(rows, false)
		if err != nil {
			return nil, fmt.Errorf("list secrets: %w", wrap(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list secrets: %w", wrap(err))
	}
	return out, nil
}

// DeleteSecret implements store.SecretStore.
func (s *Store) DeleteSecret(ctx context.Context, tenantID, name string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM secrets WHERE tenant_id = ? AND name = ?", tenantID, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", store.Clip(name), wrap(err))
	}
	return affectedOne(res, "secret "+store.Clip(name))
}

// CountSecretsByKey implements store.SecretStore.
func (s *Store) CountSecretsByKey(ctx context.Context) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT key_id, COUNT(*) FROM secrets GROUP BY key_id")
	if err != nil {
		return nil, fmt.Errorf("count secrets: %w", wrap(err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			return nil, fmt.Errorf("count secrets: %w", wrap(err))
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count secrets: %w", wrap(err))
	}
	return out, nil
}
