package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// auditInsertChunk is how many records one INSERT statement carries; with
// 10 columns it stays far below SQLite's limit of 32766 bound parameters.
const auditInsertChunk = 64

const (
	auditHeadQuery = "SELECT seq, hash FROM audit_head WHERE id = 1"
	// auditHeadFirst creates the anchor with the first record; it fails
	// on the primary key if the log is not empty.
	auditHeadFirst = "INSERT INTO audit_head (id, seq, hash) VALUES (1, ?, ?)"
	// auditHeadMove moves the anchor only if it is where the batch
	// expects it, checking and updating in one statement.
	auditHeadMove    = "UPDATE audit_head SET seq = ?, hash = ? WHERE id = 1 AND seq = ? AND hash = ?"
	auditInsertStart = "INSERT INTO audit_records (seq, time, tenant_id, key_id, action, target, outcome, details, prev_hash, hash) VALUES "
	auditInsertRow   = "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

// auditInsertQuery is the INSERT of n rows.
func auditInsertQuery(n int) string {
	return auditInsertStart + strings.TrimSuffix(strings.Repeat(auditInsertRow+", ", n), ", ")
}

// AppendAudit implements store.AuditStore: one write transaction moves
// the head anchor, if it is where recs expect it, and inserts recs. Its
// statements are prepared once and reused.
func (s *Store) AppendAudit(ctx context.Context, recs []store.AuditRecord) error {
	if err := store.ValidateAuditBatch(recs); err != nil {
		return err
	}
	first, last := recs[0], recs[len(recs)-1]
	headQuery := auditHeadMove
	if first.Seq == 1 {
		if first.PrevHash != store.GenesisHash {
			return fmt.Errorf("audit append: the first record must follow the genesis hash: %w", errdefs.ErrFailedPrecondition)
		}
		headQuery = auditHeadFirst
	}
	headStmt, err := s.stmts.prepare(ctx, headQuery)
	if err != nil {
		return fmt.Errorf("audit append: %w", err)
	}
	inserts := map[int]*sql.Stmt{}
	for i := 0; i < len(recs); i += auditInsertChunk {
		n := min(auditInsertChunk, len(recs)-i)
		if inserts[n] == nil {
			if inserts[n], err = s.stmts.prepare(ctx, auditInsertQuery(n)); err != nil {
				return fmt.Errorf("audit append: %w", err)
			}
		}
	}
	return s.writeTx(ctx, func(tx *sql.Tx) error {
		notHead := fmt.Errorf("audit append at seq %d does not continue the head of the log: %w", first.Seq, errdefs.ErrFailedPrecondition)
		if first.Seq == 1 {
			if _, err := tx.StmtContext(ctx, headStmt).ExecContext(ctx, int64(last.Seq), last.Hash); err != nil {
				if err = wrap(err); errors.Is(err, errdefs.ErrAlreadyExists) {
					return notHead
				}
				return fmt.Errorf("audit head: %w", err)
			}
		} else {
			res, err := tx.StmtContext(ctx, headStmt).ExecContext(ctx, int64(last.Seq), last.Hash, int64(first.Seq-1), first.PrevHash)
			if err != nil {
				return fmt.Errorf("audit head: %w", wrap(err))
			}
			if n, err := res.RowsAffected(); err != nil || n != 1 {
				return notHead
			}
		}
		args := make([]any, 0, 10*min(len(recs), auditInsertChunk))
		for i := 0; i < len(recs); i += auditInsertChunk {
			chunk := recs[i:min(i+auditInsertChunk, len(recs))]
			args = args[:0]
			for _, r := range chunk {
				args = append(args, int64(r.Seq), nanos(r.Time), r.TenantID, r.KeyID, r.Action, r.Target, r.Outcome,
					string(r.Details), r.PrevHash, r.Hash)
			}
			if _, err := tx.StmtContext(ctx, inserts[len(chunk)]).ExecContext(ctx, args...); err != nil {
				return fmt.Errorf("audit append at seq %d: %w", chunk[0].Seq, wrap(err))
			}
		}
		return nil
	})
}

type queryRower interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func auditHead(ctx context.Context, q queryRower) (store.AuditHead, error) {
	var h store.AuditHead
	var seq int64
	err := q.QueryRowContext(ctx, auditHeadQuery).Scan(&seq, &h.Hash)
	switch {
	case err == sql.ErrNoRows:
		return store.AuditHead{Hash: store.GenesisHash}, nil
	case err != nil:
		return store.AuditHead{}, fmt.Errorf("audit head: %w", wrap(err))
	}
	h.Seq = uint64(seq)
	return h, nil
}

// AuditHead implements store.AuditStore.
func (s *Store) AuditHead(ctx context.Context) (store.AuditHead, error) {
	return auditHead(ctx, s.r)
}

// ListAudit implements store.AuditStore.
func (s *Store) ListAudit(ctx context.Context, q store.AuditQuery) ([]store.AuditRecord, error) {
	if err := q.Validate(); err != nil {
		return nil, err
	}
	where := []string{"seq > ?"}
	args := []any{int64(q.AfterSeq)}
	for _, f := range []struct{ col, v string }{{"tenant_id", q.TenantID}, {"action", q.Action}, {"target", q.Target}} {
		if f.v != "" {
			where = append(where, f.col+" = ?")
			args = append(args, f.v)
		}
	}
	if !q.Since.IsZero() {
		where = append(where, "time >= ?")
		args = append(args, nanos(q.Since))
	}
	if !q.Until.IsZero() {
		where = append(where, "time < ?")
		args = append(args, nanos(q.Until))
	}
	args = append(args, store.EffectiveLimit(q.Limit))
	rows, err := s.r.QueryContext(ctx, `SELECT seq, time, tenant_id, key_id, action, target, outcome, details, prev_hash, hash
		FROM audit_records WHERE `+strings.Join(where, " AND ")+" ORDER BY seq LIMIT ?", args...)
	if err != nil {
		return nil, fmt.Errorf("list audit: %w", wrap(err))
	}
	defer rows.Close()
	var out []store.AuditRecord
	for rows.Next() {
		var r store.AuditRecord
		var seq, t int64
		var details string
		if err := rows.Scan(&seq, &t, &r.TenantID, &r.KeyID, &r.Action, &r.Target, &r.Outcome, &details, &r.PrevHash, &r.Hash); err != nil {
			return nil, fmt.Errorf("list audit: %w", wrap(err))
		}
		r.Seq, r.Time = uint64(seq), fromNanos(t)
		if details != "" {
			r.Details = []byte(details)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list audit: %w", wrap(err))
	}
	return out, nil
}
