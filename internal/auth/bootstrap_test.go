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
	if err != nil || p.TenantID != DefaultTenantID || !p.Has(ScopeAdmin) || !p.IsOperator() {
		t.Fatalf("admin key: %+v, %v; want the operator's", p, err)
	}
	if tmp, _ := filepath.Glob(filepath.Join(dir, ".admin.key-*")); len(tmp) != 0 {
		t.Errorf("temporary files left: %v", tmp)
	}

	// Later starts do nothing while the operator key lives, even if the
	// file was removed.
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

// oldAdmin stores an admin key the way EnsureAdmin did before operator
// keys existed (scope admin only) and returns it.
func oldAdmin(t *testing.T, s *Service) string {
	t.Helper()
	ctx := context.Background()
	if _, err := s.CreateTenant(ctx, store.Tenant{ID: DefaultTenantID, Name: "Default"}); err != nil {
		t.Fatal(err)
	}
	tok, _, err := s.CreateKey(ctx, DefaultTenantID, "admin", []Scope{ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// TestEnsureAdminUpgrade: an installation from before operator keys has
// its bootstrap key in admin.key; that key becomes the operator's.
func TestEnsureAdminUpgrade(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t)
	s := newService(t, st, Options{})
	old := oldAdmin(t, s)
	other, _, err := s.CreateKey(ctx, DefaultTenantID, "second admin", []Scope{ScopeAdmin}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := s.Authenticate(ctx, old); p.IsOperator() {
		t.Fatal("an admin key is an operator key before the upgrade")
	}
	if err := os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte(old+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tok, err := s.EnsureAdmin(ctx, dir)
	if err != nil || tok != "" {
		t.Fatalf("upgrade: %q, %v; want nothing to print", tok, err)
	}
	p, err := s.Authenticate(ctx, old)
	if err != nil || !p.IsOperator() || !p.Has(ScopeAdmin) {
		t.Errorf("the key in admin.key after the upgrade: %+v, %v; want admin and operator", p, err)
	}
	if p, _ := s.Authenticate(ctx, other); p.IsOperator() {
		t.Error("another admin key became an operator key")
	}
	if n, _ := st.CountAPIKeys(ctx); n != 2 {
		t.Errorf("%d keys after the upgrade, want 2", n)
	}
	if tok, err := s.EnsureAdmin(ctx, dir); err != nil || tok != "" {
		t.Errorf("start after the upgrade: %q, %v", tok, err)
	}
}

// TestEnsureAdminNewOperator: without a live operator key and without
// admin.key (an upgrade whose operator removed the file, or an operator
// who revoked every operator key), a new operator key is made.
func TestEnsureAdminNewOperator(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st := openStore(t)
	s := newService(t, st, Options{})
	old := oldAdmin(t, s)
	tok, err := s.EnsureAdmin(ctx, dir)
	if err != nil || tok == "" || tok == old {
		t.Fatalf("start without admin.key: %q, %v; want a new key", tok, err)
	}
	if p, err := s.Authenticate(ctx, tok); err != nil || !p.IsOperator() || p.TenantID != DefaultTenantID {
		t.Errorf("new key: %+v, %v", p, err)
	}
	if p, _ := s.Authenticate(ctx, old); p.IsOperator() {
		t.Error("the old admin key became an operator key")
	}
	b, _ := os.ReadFile(filepath.Join(dir, AdminKeyFile))
	if strings.TrimSpace(string(b)) != tok {
		t.Errorf("admin.key holds %q", b)
	}

	// Every operator key revoked: the file's key is revoked too, so
	// nothing is done until the file is removed.
	id, _, _ := ParseToken(tok)
	if err := s.RevokeKey(ctx, DefaultTenantID, id); err != nil {
		t.Fatal(err)
	}
	if got, err := s.EnsureAdmin(ctx, dir); err != nil || got != "" {
		t.Errorf("start with a revoked admin.key: %q, %v; want nothing", got, err)
	}
	if n, _ := st.CountAPIKeys(ctx); n != 2 {
		t.Errorf("%d keys, want 2", n)
	}
	os.Remove(filepath.Join(dir, AdminKeyFile))
	again, err := s.EnsureAdmin(ctx, dir)
	if err != nil || again == "" || again == tok {
		t.Fatalf("start after removing admin.key: %q, %v; want a new key", again, err)
	}
	if p, err := s.Authenticate(ctx, again); err != nil || !p.IsOperator() {
		t.Errorf("recovered key: %+v, %v", p, err)
	}
}

// TestEnsureAdminMismatchedFile: admin.key naming a stored key ID with
// another secret is refused.
func TestEnsureAdminMismatchedFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := newService(t, openStore(t), Options{})
	tok, err := s.EnsureAdmin(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	id, _, _ := ParseToken(tok)
	if err := s.RevokeKey(ctx, DefaultTenantID, id); err != nil {
		t.Fatal(err)
	}
	// Same ID, another secret: refused, the file is left alone.
	forged := tok[:len(tok)-4] + "aaaa"
	if forged == tok {
		forged = tok[:len(tok)-4] + "bbbb"
	}
	os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte(forged), 0o600)
	if _, err := s.EnsureAdmin(ctx, dir); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("admin.key with a stored ID and another secret: %v, want failed precondition", err)
	}
}
