package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// The tenant and key EnsureAdmin creates.
const (
	DefaultTenantID = "default"
	AdminKeyFile    = "admin.key"
	adminKeyName    = "admin"
)

// EnsureAdmin bootstraps a new installation. When the store holds no API
// key at all, it creates the tenant DefaultTenantID and an admin-scoped
// key in it, writes the key to <dataDir>/admin.key (mode 0600) and
// returns it so that the caller prints it once. When the store already
// holds a key, it does nothing and returns "".
//
// The file is written before the key is stored, atomically (a temporary
// file, fsynced, then linked into place, which never replaces an existing
// file), so a crash at any point leaves either no admin.key or one that
// the next start stores. An admin.key already present when the store has
// no key is taken as the admin key: this is how a crashed bootstrap
// resumes, and how an operator can provide the first key. EnsureAdmin
// never overwrites or deletes admin.key.
func (s *Service) EnsureAdmin(ctx context.Context, dataDir string) (string, error) {
	n, err := s.st.CountAPIKeys(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if n > 0 {
		return "", nil
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("bootstrap: create data directory: %v: %w", err, errdefs.ErrInternal)
	}
	path := filepath.Join(dataDir, AdminKeyFile)
	token, err := readAdminKey(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if _, token, err = newToken(); err != nil {
			return "", err
		}
		if token, err = writeNewFile(path, token); err != nil {
			return "", err
		}
	case err != nil:
		return "", err
	}
	id, secret, _ := ParseToken(token)

	_, err = s.CreateTenant(ctx, store.Tenant{ID: DefaultTenantID, Name: "Default"})
	if err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	rec := store.APIKey{ID: id, TenantID: DefaultTenantID, Name: adminKeyName, Hash: hashSecret(id, secret),
		Scopes: []string{string(ScopeAdmin)}, CreatedAt: s.opts.Now().UTC()}
	if err := s.st.CreateAPIKey(ctx, rec); err != nil {
		return "", fmt.Errorf("bootstrap: store admin key: %w", err)
	}
	return token, nil
}

// readAdminKey reads an existing admin key file.
func readAdminKey(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", err
		}
		return "", fmt.Errorf("bootstrap: read admin key file: %v: %w", err, errdefs.ErrInternal)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(TokenLen)+2))
	if err != nil {
		return "", fmt.Errorf("bootstrap: read admin key file: %v: %w", err, errdefs.ErrInternal)
	}
	token := strings.TrimSpace(string(b))
	if _, _, ok := ParseToken(token); !ok {
		return "", fmt.Errorf("bootstrap: %s exists but does not hold an API key; remove it to create a new one: %w",
			AdminKeyFile, errdefs.ErrFailedPrecondition)
	}
	return token, nil
}

// writeNewFile writes token to path, mode 0600, unless path exists, in
// which case it returns the key already there. The content is complete
// and on disk before the name appears.
func writeNewFile(path, token string) (string, error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".admin.key-*")
	if err != nil {
		return "", fmt.Errorf("bootstrap: write admin key: %v: %w", err, errdefs.ErrInternal)
	}
	defer os.Remove(tmp.Name())
	_, werr := tmp.WriteString(token + "\n")
	if werr == nil {
		werr = tmp.Chmod(0o600)
	}
	if werr == nil {
		werr = tmp.Sync()
	}
	if cerr := tmp.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return "", fmt.Errorf("bootstrap: write admin key: %v: %w", werr, errdefs.ErrInternal)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, os.ErrExist) { // another process won the race
			return readAdminKey(path)
		}
		return "", fmt.Errorf("bootstrap: write admin key: %v: %w", err, errdefs.ErrInternal)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return token, nil
}
