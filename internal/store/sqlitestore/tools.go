package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// toolKind is one of the two tables of store.ToolStore: tools and
// toolsets share their shape and their code.
type toolKind struct {
	table string // "tools" or "toolsets"
	what  string // "tool" or "toolset", for messages
	max   int    // the per-tenant cap
}

var (
	toolsKind    = toolKind{"tools", "tool", store.MaxToolsPerTenant}
	toolsetsKind = toolKind{"toolsets", "toolset", store.MaxToolsetsPerTenant}
)

// CreateTool implements store.ToolStore.
func (s *Store) CreateTool(ctx context.Context, r store.ToolRecord) error {
	return s.createTool(ctx, toolsKind, r)
}

// ReplaceTool implements store.ToolStore.
func (s *Store) ReplaceTool(ctx context.Context, r store.ToolRecord) (store.ToolRecord, error) {
	return s.replaceTool(ctx, toolsKind, r)
}

// GetTool implements store.ToolStore.
func (s *Store) GetTool(ctx context.Context, tenantID, name string) (store.ToolRecord, error) {
	return s.getTool(ctx, toolsKind, tenantID, name)
}

// ListTools implements store.ToolStore.
func (s *Store) ListTools(ctx context.Context, tenantID string) ([]store.ToolRecord, error) {
	return s.listTools(ctx, toolsKind, tenantID)
}

// DeleteTool implements store.ToolStore.
func (s *Store) DeleteTool(ctx context.Context, tenantID, name string) error {
	return s.deleteTool(ctx, toolsKind, tenantID, name)
}

// CreateToolset implements store.ToolStore.
func (s *Store) CreateToolset(ctx context.Context, r store.ToolRecord) error {
	return s.createTool(ctx, toolsetsKind, r)
}

// ReplaceToolset implements store.ToolStore.
func (s *Store) ReplaceToolset(ctx context.Context, r store.ToolRecord) (store.ToolRecord, error) {
	return s.replaceTool(ctx, toolsetsKind, r)
}

// GetToolset implements store.ToolStore.
func (s *Store) GetToolset(ctx context.Context, tenantID, name string) (store.ToolRecord, error) {
	return s.getTool(ctx, toolsetsKind, tenantID, name)
}

// ListToolsets implements store.ToolStore.
func (s *Store) ListToolsets(ctx context.Context, tenantID string) ([]store.ToolRecord, error) {
	return s.listTools(ctx, toolsetsKind, tenantID)
}

// DeleteToolset implements store.ToolStore.
func (s *Store) DeleteToolset(ctx context.Context, tenantID, name string) error {
	return s.deleteTool(ctx, toolsetsKind, tenantID, name)
}

// createTool inserts r into k's table. The tenant check, the cap and
// the insert share one transaction on the single writer connection, so
// concurrent creations never exceed the cap.
func (s *Store) createTool(ctx context.Context, k toolKind, r store.ToolRecord) error {
	if err := r.Validate(); err != nil {
		return err
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		var deleted sql.NullInt64
		err := tx.QueryRowContext(ctx, "SELECT deleted_at FROM tenants WHERE id = ?", r.TenantID).Scan(&deleted)
		if err != nil {
			return fmt.Errorf("create %s: tenant %s: %w", k.what, r.TenantID, wrap(err))
		}
		if deleted.Valid {
			return fmt.Errorf("create %s: tenant %s: %w", k.what, r.TenantID, errdefs.ErrNotFound)
		}
		var exists, count int
		if err := tx.QueryRowContext(ctx,
			"SELECT COUNT(*), COALESCE(SUM(name = ?), 0) FROM "+k.table+" WHERE tenant_id = ?",
			r.Name, r.TenantID).Scan(&count, &exists); err != nil {
			return fmt.Errorf("create %s %s: %w", k.what, r.Name, wrap(err))
		}
		if exists != 0 {
			return fmt.Errorf("%s %s: %w", k.what, r.Name, errdefs.ErrAlreadyExists)
		}
		if count >= k.max {
			return fmt.Errorf("tenant %s already has %d %s, the most it may have: %w", r.TenantID, count, k.table, errdefs.ErrResourceExhausted)
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+k.table+" (tenant_id, name, doc, created_at, updated_at) VALUES (?, ?, ?, ?, ?)",
			r.TenantID, r.Name, string(r.Doc), nanos(r.CreatedAt), nanos(r.UpdatedAt)); err != nil {
			return fmt.Errorf("create %s %s: %w", k.what, r.Name, wrap(err))
		}
		return nil
	})
}

const toolCols = "tenant_id, name, doc, created_at, updated_at"

func scanTool(sc interface{ Scan(...any) error }) (store.ToolRecord, error) {
	var r store.ToolRecord
	var doc string
	var created, updated int64
	if err := sc.Scan(&r.TenantID, &r.Name, &doc, &created, &updated); err != nil {
		return store.ToolRecord{}, err
	}
	r.Doc = []byte(doc)
	r.CreatedAt = fromNanos(created)
	r.UpdatedAt = fromNanos(updated)
	return r, nil
}

// replaceTool replaces the document and update time of an existing row.
func (s *Store) replaceTool(ctx context.Context, k toolKind, r store.ToolRecord) (store.ToolRecord, error) {
	if err := r.Validate(); err != nil {
		return store.ToolRecord{}, err
	}
	out, err := scanTool(s.w.QueryRowContext(ctx, "UPDATE "+k.table+" SET doc = ?, updated_at = ? WHERE tenant_id = ? AND name = ? RETURNING "+toolCols,
		string(r.Doc), nanos(r.UpdatedAt), r.TenantID, r.Name))
	if err != nil {
		return store.ToolRecord{}, fmt.Errorf("%s %s: %w", k.what, r.Name, wrap(err))
	}
	return out, nil
}

func (s *Store) getTool(ctx context.Context, k toolKind, tenantID, name string) (store.ToolRecord, error) {
	r, err := scanTool(s.r.QueryRowContext(ctx, "SELECT "+toolCols+" FROM "+k.table+" WHERE tenant_id = ? AND name = ?", tenantID, name))
	if err != nil {
		return store.ToolRecord{}, fmt.Errorf("%s %s: %w", k.what, store.Clip(name), wrap(err))
	}
	return r, nil
}

func (s *Store) listTools(ctx context.Context, k toolKind, tenantID string) ([]store.ToolRecord, error) {
	rows, err := s.r.QueryContext(ctx, "SELECT "+toolCols+" FROM "+k.table+" WHERE tenant_id = ? ORDER BY name LIMIT ?", tenantID, k.max)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", k.table, wrap(err))
	}
	defer rows.Close()
	var out []store.ToolRecord
	for rows.Next() {
		r, err := scanTool(rows)
		if err != nil {
			return nil, fmt.Errorf("list %s: %w", k.table, wrap(err))
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", k.table, wrap(err))
	}
	return out, nil
}

func (s *Store) deleteTool(ctx context.Context, k toolKind, tenantID, name string) error {
	res, err := s.w.ExecContext(ctx, "DELETE FROM "+k.table+" WHERE tenant_id = ? AND name = ?", tenantID, name)
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", k.what, store.Clip(name), wrap(err))
	}
	return affectedOne(res, k.what+" "+store.Clip(name))
}
