package sqlitestore

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// migrationFiles holds the schema migrations, named NNNN_what.sql and
// applied in numeric order. A released migration is never edited: change
// the schema by adding the next number.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// migration is one numbered schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// loadMigrations reads and orders the embedded migrations. Versions must
// run 1, 2, 3... without gaps or duplicates.
func loadMigrations(fsys fs.FS) ([]migration, error) {
	names, err := fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %v: %w", err, errdefs.ErrInternal)
	}
	var ms []migration
	for _, n := range names {
		base := path.Base(n)
		num, _, ok := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %q is not named NNNN_name.sql: %w", base, errdefs.ErrInternal)
		}
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, fmt.Errorf("migration %q: %v: %w", base, err, errdefs.ErrInternal)
		}
		ms = append(ms, migration{version: v, name: strings.TrimSuffix(base, ".sql"), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	for i, m := range ms {
		if m.version != i+1 {
			return nil, fmt.Errorf("migration versions must be 1..%d without gaps, found %d: %w", len(ms), m.version, errdefs.ErrInternal)
		}
	}
	return ms, nil
}

// SchemaVersion is the schema version this binary writes: the number of
// the last embedded migration.
func SchemaVersion() int {
	ms, err := loadMigrations(migrationFiles)
	if err != nil || len(ms) == 0 {
		return 0
	}
	return ms[len(ms)-1].version
}

// migrate brings the schema up to date, one transaction per migration.
func (s *Store) migrate(ctx context.Context) error {
	return s.migrateFrom(ctx, migrationFiles)
}

func (s *Store) migrateFrom(ctx context.Context, fsys fs.FS) error {
	ms, err := loadMigrations(fsys)
	if err != nil {
		return err
	}
	known := 0
	if len(ms) > 0 {
		known = ms[len(ms)-1].version
	}
	if _, err := s.w.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		name       TEXT    NOT NULL,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", wrap(err))
	}
	for {
		done, err := s.migrateOne(ctx, ms, known)
		if err != nil || done {
			return err
		}
	}
}

// migrateOne applies the first missing migration, reading the current
// version inside the same write transaction so that two processes opening
// the file at once cannot both apply it. It reports done when the schema
// is current.
func (s *Store) migrateOne(ctx context.Context, ms []migration, known int) (done bool, err error) {
	var applied migration
	err = s.writeTx(ctx, func(tx *sql.Tx) error {
		var cur int
		if err := tx.QueryRowContext(ctx, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations").Scan(&cur); err != nil {
			return fmt.Errorf("read schema version: %w", wrap(err))
		}
		if cur > known {
			return fmt.Errorf("database schema version %d is newer than this binary supports (%d); upgrade airlock: %w",
				cur, known, errdefs.ErrFailedPrecondition)
		}
		if cur == known {
			done = true
			return nil
		}
		m := ms[cur]
		if _, err := tx.ExecContext(ctx, m.sql); err != nil {
			return fmt.Errorf("apply migration %s: %w", m.name, wrap(err))
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
			m.version, m.name, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("record migration %s: %w", m.name, wrap(err))
		}
		applied = m
		return nil
	})
	if err == nil && !done {
		s.log.Info("applied database migration", "version", applied.version, "name", applied.name)
	}
	return done, err
}
