package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

func openT(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(context.Background(), path, Options{})
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return openT(t, filepath.Join(t.TempDir(), "airlock.db"))
	})
}

func TestPragmas(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "a.db"))
	ctx := context.Background()
	for _, db := range []*sql.DB{s.w, s.r} {
		var mode string
		var fk, syncMode, busy int
		if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		db.QueryRowContext(ctx, "PRAGMA foreign_keys").Scan(&fk)
		db.QueryRowContext(ctx, "PRAGMA synchronous").Scan(&syncMode)
		db.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&busy)
		if mode != "wal" || fk != 1 || syncMode != 1 || busy != 5000 {
			t.Errorf("journal_mode=%s foreign_keys=%d synchronous=%d busy_timeout=%d; want wal 1 1 5000", mode, fk, syncMode, busy)
		}
	}
	if _, err := s.r.ExecContext(ctx, "INSERT INTO tenants (id, created_at) VALUES ('x', 0)"); err == nil {
		t.Error("the read pool accepted a write")
	}
}

func TestFullSync(t *testing.T) {
	s, err := Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), Options{FullSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var syncMode int
	s.w.QueryRow("PRAGMA synchronous").Scan(&syncMode)
	if syncMode != 2 {
		t.Errorf("synchronous = %d, want 2 (FULL)", syncMode)
	}
}

func TestOpenBadPath(t *testing.T) {
	for _, p := range []string{"", "a?b", "a#b"} {
		if _, err := Open(context.Background(), p, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(%q) = %v, want invalid argument", p, err)
		}
	}
	if _, err := Open(context.Background(), filepath.Join(t.TempDir(), "missing", "dir", "a.db"), Options{}); err == nil {
		t.Error("Open in a missing directory succeeded")
	}
}

func schemaVersions(t *testing.T, s *Store) []int {
	t.Helper()
	rows, err := s.w.Query("SELECT version FROM schema_migrations ORDER BY version")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var vs []int
	for rows.Next() {
		var v int
		rows.Scan(&v)
		vs = append(vs, v)
	}
	return vs
}

func TestMigrations(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")

	// Fresh: every migration applied once.
	s := openT(t, path)
	if v := schemaVersions(t, s); len(v) != SchemaVersion() || v[len(v)-1] != SchemaVersion() {
		t.Fatalf("fresh versions = %v, want 1..%d", v, SchemaVersion())
	}
	if err := s.CreateTenant(ctx, store.Tenant{ID: "keep", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	s.Close()

	// Re-open: idempotent, data kept.
	s = openT(t, path)
	if v := schemaVersions(t, s); len(v) != SchemaVersion() {
		t.Fatalf("versions after reopen = %v", v)
	}
	if _, err := s.GetTenant(ctx, "keep"); err != nil {
		t.Fatalf("data lost on reopen: %v", err)
	}

	// A later migration is applied to an existing database, in order.
	next := SchemaVersion() + 1
	fsys := fstest.MapFS{}
	ms, _ := loadMigrations(migrationFiles)
	for _, m := range ms {
		fsys["migrations/"+m.name+".sql"] = &fstest.MapFile{Data: []byte(m.sql)}
	}
	fsys["migrations/9999_bad.sql"] = &fstest.MapFile{Data: []byte("SELECT 1")}
	if err := s.migrateFrom(ctx, fsys); err == nil {
		t.Error("migrations with a gap were accepted")
	}
	delete(fsys, "migrations/9999_bad.sql")
	name := "migrations/" + leftPad(next) + "_extra.sql"
	fsys[name] = &fstest.MapFile{Data: []byte("CREATE TABLE extra (x INTEGER) STRICT; INSERT INTO extra VALUES (42);")}
	if err := s.migrateFrom(ctx, fsys); err != nil {
		t.Fatalf("apply extra migration: %v", err)
	}
	var x int
	if err := s.w.QueryRow("SELECT x FROM extra").Scan(&x); err != nil || x != 42 {
		t.Errorf("extra migration not applied: %d, %v", x, err)
	}

	// A failing migration is rolled back whole.
	fsys["migrations/"+leftPad(next+1)+"_fails.sql"] = &fstest.MapFile{Data: []byte("CREATE TABLE half (x INTEGER); SELECT * FROM no_such_table;")}
	if err := s.migrateFrom(ctx, fsys); err == nil {
		t.Fatal("failing migration succeeded")
	}
	if err := s.w.QueryRow("SELECT COUNT(*) FROM half").Scan(&x); err == nil {
		t.Error("a failed migration left a table behind")
	}
	if v := schemaVersions(t, s); v[len(v)-1] != next {
		t.Errorf("versions after failed migration = %v, want last %d", v, next)
	}
	s.Close()

	// The binary knows fewer migrations than the database has: refused.
	if _, err := Open(ctx, path, Options{}); !errors.Is(err, errdefs.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), "newer than this binary") {
		t.Errorf("open of a too-new database = %v, want failed precondition", err)
	}
}

func leftPad(v int) string {
	s := "0000" + itoa(v)
	return s[len(s)-4:]
}

func itoa(v int) string {
	if v == 0 {
		return "0"
	}
	var b []byte
	for ; v > 0; v /= 10 {
		b = append([]byte{byte('0' + v%10)}, b...)
	}
	return string(b)
}

func TestAuditRowsAreAppendOnly(t *testing.T) {
	ctx := context.Background()
	s := openT(t, filepath.Join(t.TempDir(), "a.db"))
	head, _ := s.AuditHead(ctx)
	r := store.AuditRecord{Seq: 1, Time: time.Now(), Action: "x", Outcome: "ok", PrevHash: head.Hash, Hash: storetest.Hash("1")}
	if err := s.AppendAudit(ctx, []store.AuditRecord{r}); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"UPDATE audit_records SET outcome = 'no'", "DELETE FROM audit_records"} {
		if _, err := s.w.ExecContext(ctx, q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: err = %v, want refused", q, err)
		}
	}
}

func TestClosedStore(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "a.db"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second close: %v", err)
	}
	_, err := s.GetTenant(context.Background(), "x")
	if err == nil {
		t.Error("get on a closed store succeeded")
	}
}

func TestCanceledContext(t *testing.T) {
	s := openT(t, filepath.Join(t.TempDir(), "a.db"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := s.CreateTenant(ctx, store.Tenant{ID: "x", CreatedAt: time.Now()})
	if !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("create with canceled ctx = %v, want canceled", err)
	}
}

func TestFilePermissions(t *testing.T) {
	dir := t.TempDir()
	openT(t, filepath.Join(dir, "a.db"))
	if _, err := os.Stat(filepath.Join(dir, "a.db-wal")); err != nil {
		t.Errorf("no WAL file: %v", err)
	}
}
