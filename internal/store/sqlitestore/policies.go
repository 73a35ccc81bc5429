package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// PutPolicy implements store.PolicyStore. The tenant check and the
// upsert are one transaction on the single writer connection, so no
// policy is stored for a tenant deleted in between.
func (s *Store) PutPolicy(ctx context.Context, tenantID, text string, updatedAt time.Time) error {
	if err := store.ValidatePolicy(tenantID, text, updatedAt); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT deleted_at FROM tenants WHERE id = ?", tenantID).Scan(&deleted)
		if err != nil {
			return fmt.Errorf("put policy: tenant %s: %w", tenantID, wrap(err))
		}
		if deleted.Valid {
			return fmt.Errorf("put policy: tenant %s: %w", tenantID, errdefs.ErrNotFound)
		}
		if _, err := tx.ExecContext(ctx,
			`INSERT INTO policies (tenant_id, cedar, updated_at) VALUES (?, ?, ?)
			 ON CONFLICT (tenant_id) DO UPDATE SET cedar = excluded.cedar, updated_at = excluded.updated_at`,
			tenantID, text, nanos(updatedAt)); err != nil {
			return fmt.Errorf("put policy of tenant %s: %w", tenantID, wrap(err))
		}
		return nil
	})
}

// GetPolicy implements store.PolicyStore.
func (s *Store) GetPolicy(ctx context.Context, tenantID string) (string, time.Time, error) {
	var text string
	var updated int64
	err := s.r.QueryRowContext(ctx, "SELECT cedar, updated_at FROM policies WHERE tenant_id = ?", tenantID).Scan(&text, &updated)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("policy of tenant %s: %w", store.Clip(tenantID), wrap(err))
	}
	return text, fromNanos(updated), nil
}

// DeletePolicy implements store.PolicyStore.
func (s *Store) DeletePolicy(ctx context.Context, tenantID string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM policies WHERE tenant_id = ?", tenantID)
	if err != nil {
		return fmt.Errorf("delete policy of tenant %s: %w", store.Clip(tenantID), wrap(err))
	}
	return affectedOne(res, "policy of tenant "+store.Clip(tenantID))
}
