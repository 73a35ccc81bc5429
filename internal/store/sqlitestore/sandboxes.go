package sqlitestore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// CreateSandbox implements store.SandboxStore. The quota check and the
// insert share one BEGIN IMMEDIATE transaction on the single writer
// connection, so concurrent creations are serialized.
func (s *Store) CreateSandbox(ctx context.Context, sb store.Sandbox) error {
	if err := sb.Validate(); err != nil {
		return err
	}
	meta, _ := store.EncodeMetadata(sb.Metadata) // validated above
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var quota int
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT max_sandboxes, deleted_at FROM tenants WHERE id = ?", sb.TenantID).Scan(&quota, &deleted)
		if err != nil {
			return fmt.Errorf("create sandbox: tenant %s: %w", sb.TenantID, wrap(err))
		}
		if deleted.Valid {
			return fmt.Errorf("create sandbox: tenant %s: %w", sb.TenantID, errdefs.ErrNotFound)
		}
		if quota > 0 && sb.State != store.SandboxStopped {
			var active int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM sandboxes WHERE tenant_id = ? AND state != ?",
				sb.TenantID, store.SandboxStopped).Scan(&active); err != nil {
				return fmt.Errorf("create sandbox: %w", wrap(err))
			}
			if active >= quota {
				return fmt.Errorf("tenant %s already has %d of its %d sandboxes: %w",
					sb.TenantID, active, quota, errdefs.ErrResourceExhausted)
			}
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO sandboxes
			(id, tenant_id, template, state, created_at, stopped_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)`,
			sb.ID, sb.TenantID, sb.Template, sb.State, nanos(sb.CreatedAt), nullNanos(sb.StoppedAt), meta)
		if err != nil {
			return fmt.Errorf("create sandbox %s: %w", sb.ID, wrap(err))
		}
		return nil
	})
}

// PutSandbox implements store.SandboxStore.
func (s *Store) PutSandbox(ctx context.Context, sb store.Sandbox) error {
	if err := sb.Validate(); err != nil {
		return err
	}
	meta, _ := store.EncodeMetadata(sb.Metadata)
	res, err := s.w.ExecContext(ctx, `INSERT INTO sandboxes
		(id, tenant_id, template, state, created_at, stopped_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET
			template = excluded.template, state = excluded.state, created_at = excluded.created_at,
			stopped_at = excluded.stopped_at, metadata = excluded.metadata
		WHERE sandboxes.tenant_id = excluded.tenant_id`,
		sb.ID, sb.TenantID, sb.Template, sb.State, nanos(sb.CreatedAt), nullNanos(sb.StoppedAt), meta)
	if err != nil {
		err = wrap(err)
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("put sandbox: tenant %s: %w", sb.TenantID, errdefs.ErrNotFound)
		}
		return fmt.Errorf("put sandbox %s: %w", sb.ID, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("put sandbox %s: %w", sb.ID, wrap(err))
	}
	if n == 0 {
		return fmt.Errorf("sandbox %s belongs to another tenant: %w", sb.ID, errdefs.ErrAlreadyExists)
	}
	return nil
}

const sandboxCols = "id, tenant_id, template, state, created_at, stopped_at, metadata"

func scanSandbox(sc interface{ Scan(...any) error }) (store.Sandbox, error) {
	var sb store.Sandbox
	var created int64
	var stopped sql.NullInt64
	var meta string
	if err := sc.Scan(&sb.ID, &sb.TenantID, &sb.Template, &sb.State, &created, &stopped, &meta); err != nil {
		return store.Sandbox{}, err
	}
	sb.CreatedAt = fromNanos(created)
	sb.StoppedAt = fromNullNanos(stopped)
	if meta != "" {
		if err := json.Unmarshal([]byte(meta), &sb.Metadata); err != nil {
			return store.Sandbox{}, fmt.Errorf("sandbox %s: stored metadata: %v: %w", sb.ID, err, errdefs.ErrInternal)
		}
	}
	return sb, nil
}

// GetSandbox implements store.SandboxStore.
func (s *Store) GetSandbox(ctx context.Context, tenantID, id string) (store.Sandbox, error) {
	q := "SELECT " + sandboxCols + " FROM sandboxes WHERE id = ?"
	args := []any{id}
	if tenantID != "" {
		q += " AND tenant_id = ?"
		args = append(args, tenantID)
	}
	sb, err := scanSandbox(s.r.QueryRowContext(ctx, q, args...))
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox %s: %w", store.Clip(id), wrap(err))
	}
	return sb, nil
}

// ListSandboxes implements store.SandboxStore.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	var where []string
	var args []any
	if f.TenantID != "" {
		where = append(where, "tenant_id = ?")
		args = append(args, f.TenantID)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN ("+strings.TrimSuffix(strings.Repeat("?, ", len(f.States)), ", ")+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	q := "SELECT " + sandboxCols + " FROM sandboxes"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created_at, id LIMIT ?"
	args = append(args, store.EffectiveLimit(f.Limit))
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", wrap(err))
	}
	defer rows.Close()
	var out []store.Sandbox
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", wrap(err))
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", wrap(err))
	}
	return out, nil
}

// CountActiveSandboxes implements store.SandboxStore.
func (s *Store) CountActiveSandboxes(ctx context.Context, tenantID string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, "SELECT COUNT(*) FROM sandboxes WHERE tenant_id = ? AND state != ?",
		tenantID, store.SandboxStopped).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count sandboxes: %w", wrap(err))
	}
	return n, nil
}
