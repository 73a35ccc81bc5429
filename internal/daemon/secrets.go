package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// openSecrets loads the secrets key (from envKey, the value of
// secrets.KeyEnv, when it is set, otherwise from secrets.KeyFile in the
// data directory, created on the first start) and returns the secret
// store over st. A key file that other users could read, or that is not
// the daemon's, refuses the start. Secrets sealed by a key that is not
// loaded do not: they are reported in the log, and each fails when it is
// used, until the right key is loaded or the secret is put again.
func openSecrets(ctx context.Context, dataDir, envKey string, st store.SecretStore, log *slog.Logger) (*secrets.Store, error) {
	path := filepath.Join(dataDir, secrets.KeyFile)
	key, created, err := secrets.LoadKey(path, envKey)
	if err != nil {
		return nil, fmt.Errorf("secrets key: %w", err)
	}
	if created {
		log.Info("created the secrets key; back it up: without it no stored secret can be used", "path", path, "key_id", key.ID())
	}
	s, err := secrets.New(st, secrets.Options{Key: key})
	if err != nil {
		return nil, err
	}
	if err := s.CheckKeys(ctx); err != nil {
		log.Warn("stored secrets cannot be used with the loaded key", "err", err)
	}
	return s, nil
}
