package daemon

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// The audit checkpoint files under <data-dir>/audit.
const (
	auditDir          = "audit"
	checkpointKeyFile = "checkpoint.key"    // the ed25519 signing key, PKCS #8 PEM, 0600
	checkpointsFile   = "checkpoints.jsonl" // the default export file
)

// Modes of the data directory and of the directories in it.
const (
	// dataDirMode: sandbox uids traverse the data dir to the template
	// layers and to the agent binary's copy under sandboxes/.
	dataDirMode        = 0o711
	privateDirMode     = 0o700
	traversableDirMode = 0o711
)

// dataDirModes are the modes the daemon gives the entries of its data
// directory it owns (the others are their packages': the runtime keeps
// sandboxes/ at 0711 with private state files, the layer store its own
// tree), whatever the umask and whatever an older version left. Nothing
// in them is for other local users: the database and the admin key are
// secrets, records/ and audit/ are records. Directories that sandbox uids
// must traverse to reach template layers are 0711 (no listing); the rest
// are 0700. Directories marked create are made if missing, before the
// packages that would create them with a umask-dependent mode.
var dataDirModes = []struct {
	path   string
	mode   fs.FileMode
	dir    bool
	create bool
}{
	{auth.AdminKeyFile, 0o600, false, false},
	{recordsDir, privateDirMode, true, true},
	{auditDir, privateDirMode, true, true},
	{templatesDir, traversableDirMode, true, true},
	{filepath.Join(templatesDir, templateWorkDir), privateDirMode, true, false},
	{filepath.Join(templatesDir, templateContextsDir), privateDirMode, true, false},
}

// secureDataDir makes dataDir 0711, creating it if needed, and gives the
// entries of dataDirModes their modes. A symbolic link in their place is
// refused: the daemon would otherwise change, or later write into, what
// it points to.
func secureDataDir(dataDir string) error {
	if err := os.MkdirAll(dataDir, dataDirMode); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(dataDir, dataDirMode); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	for _, e := range dataDirModes {
		p := filepath.Join(dataDir, e.path)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) && e.create {
			if err := os.Mkdir(p, privateDirMode); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			fi, err = os.Lstat(p)
		}
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("data dir: %w", err)
		case fi.IsDir() != e.dir || (!e.dir && !fi.Mode().IsRegular()):
			return fmt.Errorf("data dir: %s is a %v, not a %s: %w", p, fi.Mode().Type(), map[bool]string{true: "directory", false: "regular file"}[e.dir], errdefs.ErrFailedPrecondition)
		}
		if fi.Mode().Perm() != e.mode {
			if err := os.Chmod(p, e.mode); err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
		}
	}
	return nil
}

// state is what the daemon keeps in its data directory besides sandboxes
// and templates: the store, the audit log over it, the API keys, the
// audit checkpoint signer and the secret store.
type state struct {
	store  *sqlitestore.Store
	audit  *audit.Log
	keys   *auth.Service
	signer *audit.Signer
	// secrets is the encrypted secret store. Only the daemon's own users
	// of values (the egress edge, the tool gateway) get a
	// secrets.NewReader over it, never the API.
	secrets *secrets.Store
	// adminKey is the operator key created by this start ("" if one
	// existed).
	adminKey string
}

// openState secures the data directory (secureDataDir) and opens the
// state in it, creating what a new installation lacks: the database, the
// first operator key, the checkpoint signing key and the secrets key.
func openState(ctx context.Context, cfg Config, log *slog.Logger, met *metrics.Metrics) (_ *state, err error) {
	if err := secureDataDir(cfg.DataDir); err != nil {
		return nil, err
	}
	s := &state{}
	defer func() {
		if err != nil {
			_ = s.close()
		}
	}()
	s.store, err = sqlitestore.Open(ctx, filepath.Join(cfg.DataDir, dbFile), sqlitestore.Options{Logger: log.With("component", "store")})
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	aopts := audit.Options{Logger: log.With("component", "audit")}
	if met != nil {
		aopts.Observe = met.AuditAppend
	}
	s.audit, err = audit.New(ctx, s.store, aopts)
	if err != nil {
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	s.keys, err = auth.NewService(s.store, auth.Options{Logger: log.With("component", "auth")})
	if err != nil {
		return nil, err
	}
	s.adminKey, err = s.keys.EnsureAdmin(ctx, cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("bootstrap admin key: %w", err)
	}
	var created bool
	s.signer, created, err = audit.LoadSigner(filepath.Join(cfg.DataDir, auditDir, checkpointKeyFile))
	if err != nil {
		return nil, err
	}
	if created {
		log.Info("created the audit checkpoint key", "key_id", s.signer.Public().ID())
	}
	s.secrets, err = openSecrets(ctx, cfg.DataDir, os.Getenv(secrets.KeyEnv), s.store, log.With("component", "secrets"))
	if err != nil {
		return nil, err
	}
	return s, nil
}

// close closes the audit log, committing what it holds, then the store.
func (s *state) close() error {
	var errs []error
	if s.audit != nil {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := s.audit.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("close audit log: %w", err))
		}
	}
	if s.store != nil {
		if err := s.store.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close store: %w", err))
		}
	}
	return errors.Join(errs...)
}
