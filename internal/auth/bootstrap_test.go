package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestEnsureAdmin(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "data")
	st := openStore(t)
	s := newService(t, st, Options{})

	tok, err := s.EnsureAdmin(ctx, dir)
	if err != nil || tok == "" {
		t.Fatalf("first start: %q, %v", tok, err)
	}
	path := filepath.Join(dir, AdminKeyFile)
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("admin.key: %v, %v", fi, err)
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != tok {
		t.Errorf("file holds %q, returned %q", b, tok)
	}
	if di, _ := os.Stat(dir); di.Mode().Perm() != 0o700 {
		t.Errorf("data dir mode %v", di.Mode().Perm())
	}
	p, err := s.Authenticate(ctx, tok)
	if err != nil || p.TenantID != DefaultTenantID || !p.Has(ScopeAdmin) {
		t.Fatalf("admin key: %+v, %v", p, err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".admin.key-*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}

	// Later starts do nothing, even if the file was removed.
	os.Remove(path)
	tok2, err := s.EnsureAdmin(ctx, dir)
	if err != nil || tok2 != "" {
		t.Errorf("second start: %q, %v", tok2, err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("second start wrote admin.key")
	}
	if n, _ := st.CountAPIKeys(ctx); n != 1 {
		t.Errorf("%d keys after two starts", n)
	}
}

// TestEnsureAdminResumes covers a crash after the file was written but
// before the key was stored, and an operator-provided key.
func TestEnsureAdminResumes(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	_, want, _ := newToken()
	if err := os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte(want+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st := openStore(t)
	s := newService(t, st, Options{})
	// A crash also may have left the tenant behind.
	if _, err := s.CreateTenant(ctx, store.Tenant{ID: DefaultTenantID, CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	tok, err := s.EnsureAdmin(ctx, dir)
	if err != nil || tok != want {
		t.Fatalf("resume: %q, %v; want the key from the file", tok, err)
	}
	if _, err := s.Authenticate(ctx, want); err != nil {
		t.Errorf("resumed key refused: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, AdminKeyFile))
	if string(b) != want+"\n" {
		t.Errorf("admin.key rewritten: %q", b)
	}
}

func TestEnsureAdminRefusesJunkFile(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte("not a key"), 0o600)
	s := newService(t, openStore(t), Options{})
	_, err := s.EnsureAdmin(context.Background(), dir)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || strings.Contains(err.Error(), dir) {
		t.Errorf("junk admin.key: %v (want failed precondition without the host path)", err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, AdminKeyFile))
	if string(b) != "not a key" {
		t.Errorf("junk admin.key was overwritten")
	}
}

func TestWriteNewFileNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, AdminKeyFile)
	_, first, _ := newToken()
	_, second, _ := newToken()
	if got, err := writeNewFile(path, first); err != nil || got != first {
		t.Fatalf("first write: %q, %v", got, err)
	}
	if got, err := writeNewFile(path, second); err != nil || got != first {
		t.Errorf("second write returned %q, %v; want the existing key", got, err)
	}
	b, _ := os.ReadFile(path)
	if strings.TrimSpace(string(b)) != first {
		t.Errorf("file overwritten")
	}
}
