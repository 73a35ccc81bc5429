package auth

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/fsutil"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// The tenant and key EnsureAdmin creates.
const (
	DefaultTenantID = "default"
	AdminKeyFile    = "admin.key"
	adminKeyName    = "admin"
)

// operatorScopes are the scopes of the key EnsureAdmin creates.
var operatorScopes = []string{string(ScopeAdmin), string(ScopeOperator)}

// EnsureAdmin makes sure the installation has an operator key (see
// ScopeOperator). When the store holds a live (not revoked, not expired)
// operator key, it does nothing and returns "". Otherwise the key in
// <dataDir>/admin.key becomes the operator's:
//
//   - no admin.key: a new key is made and written there (mode 0600) and
//     stored in the tenant DefaultTenantID (created if missing) with the
//     admin and operator scopes. This is the first start of an
//     installation, and the way back for an operator who lost every
//     operator key: remove admin.key and restart.
//   - an admin.key whose key the store lacks (a crashed bootstrap, or a
//     key the operator provided) is stored the same way.
//   - an admin.key whose key is stored and live gets the operator scope.
//     This is how an installation from before operator keys upgrades: its
//     first start wrote the bootstrap key there.
//   - an admin.key whose key is revoked or expired: nothing is done and a
//     warning says to remove the file and restart.
//
// It returns the key when it stored a new one, so that the caller prints
// it once. Only root can read or write admin.key (the data directory is
// 0700), so whoever controls that file is the host operator already.
//
// The file is written before the key is stored, atomically (a temporary
// file, fsynced, then linked into place, which never replaces an existing
// file), so a crash at any point leaves either no admin.key or one that
// the next start stores. EnsureAdmin never overwrites or deletes
// admin.key.
func (s *Service) EnsureAdmin(ctx context.Context, dataDir string) (string, error) {
	live, err := s.hasOperator(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrap: %w", err)
	}
	if live {
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

	rec, err := s.st.GetAPIKey(ctx, id)
	switch {
	case errors.Is(err, errdefs.ErrNotFound):
		return token, s.storeOperatorKey(ctx, id, secret)
	case err != nil:
		return "", fmt.Errorf("bootstrap: %w", err)
	case !secretMatches(id, secret, rec.Hash):
		return "", fmt.Errorf("bootstrap: %s holds a key whose ID is stored with another secret; remove it to create a new operator key: %w",
			AdminKeyFile, errdefs.ErrFailedPrecondition)
	case !rec.RevokedAt.IsZero() || (!rec.ExpiresAt.IsZero() && !s.opts.Now().Before(rec.ExpiresAt)):
		s.opts.Logger.Warn("no operator key: the key in " + AdminKeyFile +
			" is revoked or expired; remove that file and restart to create a new operator key")
		return "", nil
	}
	scopes := append(slices.Clone(rec.Scopes), string(ScopeOperator))
	if err := s.st.SetAPIKeyScopes(ctx, id, store.NormalizeScopes(scopes)); err != nil {
		return "", fmt.Errorf("bootstrap: grant the operator scope: %w", err)
	}
	s.forget(func(k store.APIKey) bool { return k.ID == id })
	s.opts.Logger.Info("the key in "+AdminKeyFile+" is now the operator key", "key_id", id)
	return "", nil
}

// storeOperatorKey stores the operator key id in DefaultTenantID,
// creating the tenant if needed.
func (s *Service) storeOperatorKey(ctx context.Context, id, secret string) error {
	_, err := s.CreateTenant(ctx, store.Tenant{ID: DefaultTenantID, Name: "Default"})
	if err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	rec := store.APIKey{ID: id, TenantID: DefaultTenantID, Name: adminKeyName, Hash: hashSecret(id, secret),
		Scopes: operatorScopes, CreatedAt: s.opts.Now().UTC()}
	if err := s.st.CreateAPIKey(ctx, rec); err != nil {
		return fmt.Errorf("bootstrap: store the operator key: %w", err)
	}
	return nil
}

// hasOperator reports whether a live tenant holds a live operator key.
func (s *Service) hasOperator(ctx context.Context) (bool, error) {
	tenants, err := s.st.ListTenants(ctx)
	if err != nil {
		return false, err
	}
	now := s.opts.Now()
	for _, t := range tenants {
		if !t.DeletedAt.IsZero() {
			continue
		}
		keys, err := s.st.ListAPIKeys(ctx, t.ID)
		if err != nil {
			return false, err
		}
		for _, k := range keys {
			if slices.Contains(k.Scopes, string(ScopeOperator)) && k.RevokedAt.IsZero() &&
				(k.ExpiresAt.IsZero() || now.Before(k.ExpiresAt)) {
				return true, nil
			}
		}
	}
	return false, nil
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
	if err := fsutil.WriteNew(path, []byte(token+"\n"), 0o600); err != nil {
		if errors.Is(err, os.ErrExist) { // another process won the race
			return readAdminKey(path)
		}
		return "", fmt.Errorf("bootstrap: write admin key: %v: %w", err, errdefs.ErrInternal)
	}
	return token, nil
}
