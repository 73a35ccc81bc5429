package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestFileModes: the database, its WAL and its shared-memory file are
// readable by their owner only, whatever the umask, and an existing
// database left readable by everyone is made private on open.
func TestFileModes(t *testing.T) {
	ctx := context.Background()
	for _, umask := range []int{0o022, 0o000} {
		t.Run(fmt.Sprintf("umask %03o", umask), func(t *testing.T) {
			old := syscall.Umask(umask)
			defer syscall.Umask(old)
			path := filepath.Join(t.TempDir(), "airlock.db")
			check := func(when string) {
				t.Helper()
				for _, p := range []string{path, path + "-wal", path + "-shm"} {
					fi, err := os.Stat(p)
					if err != nil {
						t.Fatalf("%s: %v", when, err)
					}
					if fi.Mode().Perm() != 0o600 {
						t.Errorf("%s: %s has mode %v, want 0600", when, filepath.Base(p), fi.Mode().Perm())
					}
				}
			}
			s, err := Open(ctx, path, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.CreateTenant(ctx, store.Tenant{ID: "t1", Name: "t1", CreatedAt: time.Now()}); err != nil {
				t.Fatal(err)
			}
			check("new database")
			// An installation made before: every file readable by all.
			s.Close()
			for _, p := range []string{path, path + "-wal", path + "-shm"} {
				f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				f.Close()
				if err := os.Chmod(p, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s = openT(t, path)
			if _, err := s.GetTenant(ctx, "t1"); err != nil {
				t.Fatal(err)
			}
			check("reopened database")
		})
	}
}

// TestOpenRefusesLinks: the database and its companions must be regular
// files, not symbolic links that would make Open change another file.
func TestOpenRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "elsewhere")
	if err := os.WriteFile(target, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"a.db", "b.db-wal"} {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, db := range []string{"a.db", "b.db"} {
		if _, err := Open(context.Background(), filepath.Join(dir, db), Options{}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("open %s with a symbolic link: %v, want failed precondition", db, err)
		}
	}
	if fi, err := os.Stat(target); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("the link's target was changed: %v, %v", fi.Mode(), err)
	}
}

// TestMigrationTenantDeletion upgrades a database of schema version 1:
// tenants get deleted_at, and keys that could list templates with
// sandboxes:read get templates:read.
func TestMigrationTenantDeletion(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "old.db")
	ms, err := loadMigrations(migrationFiles)
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`,
		ms[0].sql,
		`INSERT INTO schema_migrations VALUES (1, '` + ms[0].name + `', 0)`,
		`INSERT INTO tenants (id, created_at) VALUES ('t', 0)`,
		`INSERT INTO api_keys (id, tenant_id, hash, scopes, created_at) VALUES
			('read', 't', 'h', 'exec sandboxes:read', 0),
			('both', 't', 'h', 'sandboxes:read templates:read', 0),
			('admin', 't', 'h', 'admin', 0),
			('write', 't', 'h', 'sandboxes:write', 0)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()

	s := openT(t, path)
	want := map[string]string{
		"read":  "exec sandboxes:read templates:read",
		"both":  "sandboxes:read templates:read",
		"admin": "admin",
		"write": "sandboxes:write",
	}
	for id, w := range want {
		k, err := s.GetAPIKey(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(k.Scopes, " "); got != w {
			t.Errorf("key %s scopes %q after the upgrade, want %q", id, got, w)
		}
	}
	tn, err := s.GetTenant(ctx, "t")
	if err != nil || !tn.DeletedAt.IsZero() {
		t.Errorf("tenant after the upgrade: %+v, %v", tn, err)
	}
	if err := s.DeleteTenant(ctx, "t", time.Now()); err != nil {
		t.Errorf("delete an upgraded tenant: %v", err)
	}
}
