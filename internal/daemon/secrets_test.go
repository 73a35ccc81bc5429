package daemon

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// TestOpenSecrets: the first start creates the key file (0600) and later
// starts use it; the environment's key wins; a readable key file refuses
// the start; secrets sealed by a key that is not loaded are logged, not
// fatal.
func TestOpenSecrets(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlitestore.Open(ctx, filepath.Join(dir, dbFile), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.CreateTenant(ctx, store.Tenant{ID: "t1", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	s, err := openSecrets(ctx, dir, "", db, log)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(filepath.Join(dir, secrets.KeyFile))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v, %v; want mode 0600", fi, err)
	}
	if !strings.Contains(logs.String(), "created the secrets key") {
		t.Errorf("the creation of the key was not logged: %s", logs.String())
	}
	if _, err := s.Put(ctx, "t1", "token", "", secrets.NewValue([]byte("v1"))); err != nil {
		t.Fatal(err)
	}

	// A second start reads the same key: the secret reveals.
	logs.Reset()
	s2, err := openSecrets(ctx, dir, "", db, log)
	if err != nil {
		t.Fatal(err)
	}
	v, err := secrets.NewReader(s2).Reveal(ctx, "t1", "token")
	if err != nil || string(v.Bytes()) != "v1" {
		t.Fatalf("reveal after a restart: %v", err)
	}
	if logs.Len() != 0 {
		t.Errorf("a start with the right key logged: %s", logs.String())
	}

	// The environment's key wins over the file; the secret sealed by the
	// file's key is reported, and the start goes on.
	envKey := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{3}, secrets.KeySize))
	s3, err := openSecrets(ctx, dir, envKey, db, log)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "stored secrets cannot be used with the loaded key") || !strings.Contains(logs.String(), "1 sealed by key") {
		t.Errorf("the missing key was not logged: %s", logs.String())
	}
	if _, err := secrets.NewReader(s3).Reveal(ctx, "t1", "token"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("reveal with the environment's key = %v, want failed precondition", err)
	}

	// A key file that others can read refuses the start.
	if err := os.Chmod(filepath.Join(dir, secrets.KeyFile), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := openSecrets(ctx, dir, "", db, slog.New(slog.NewTextHandler(io.Discard, nil))); !errors.Is(err, errdefs.ErrFailedPrecondition) ||
		!strings.Contains(err.Error(), "mode 0644") {
		t.Errorf("start with a readable key file = %v", err)
	}
}

// TestSecretsKeyEnvIsNotASetting: AIRLOCK_SECRETS_KEY is accepted by
// the config loader (not an unknown variable) and lands in no setting.
func TestSecretsKeyEnvIsNotASetting(t *testing.T) {
	const val = "c2VjcmV0LXZhbHVlLW5vdC1pbi1jb25maWc="
	cfg, err := LoadConfig(nil, []string{secrets.KeyEnv + "=" + val}, io.Discard)
	if err != nil {
		t.Fatalf("config with %s: %v", secrets.KeyEnv, err)
	}
	if cfg != Defaults() {
		t.Errorf("%s changed the config", secrets.KeyEnv)
	}
}
