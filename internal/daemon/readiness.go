package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Readiness (GET /readyz). Every mutation writes its intent to the audit
// log before it acts, so a daemon whose store cannot take a write answers
// every mutation with 503: it is not ready. Checks, cheapest first:
//
//   - the sandbox manager (over the runtime) has started and not closed
//     (sandbox.Manager.Ready; adoption of the sandboxes a previous
//     daemon left may go on: those answer 503 until adopted);
//   - the store answers a read (the audit head);
//   - the data directory's filesystem has at least minFreeBytes available
//     (statfs: no write);
//   - the audit log's last commit did not fail (audit.Log.WriteErr). After
//     a failure, readiness comes back once a probe write (a small file,
//     written, synced and removed in the data directory) succeeds; the
//     probe runs at most once per probeInterval, however often /readyz is
//     asked, and never while writes succeed.
const (
	minFreeBytes  = 1 << 20
	probeInterval = 2 * time.Second
	probeFile     = ".ready-probe"
	probeBytes    = 64 << 10
)

// readiness is the daemon's readiness check. It is safe for concurrent use.
type readiness struct {
	runtime  func() error // nil: not checked
	dataDir  string
	head     func(ctx context.Context) (store.AuditHead, error)
	writeErr func() error // the audit log's last commit failure
	now      func() time.Time

	mu       sync.Mutex
	probedAt time.Time
	probeErr error
}

// check returns nil when the daemon can serve mutations, else an error
// saying why not.
func (r *readiness) check(ctx context.Context) error {
	if r.runtime != nil {
		if err := r.runtime(); err != nil {
			return err
		}
	}
	if _, err := r.head(ctx); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(r.dataDir, &fs); err != nil {
		return fmt.Errorf("data dir: statfs: %w: %v", errdefs.ErrUnavailable, err)
	}
	if free := uint64(fs.Bavail) * uint64(fs.Bsize); free < minFreeBytes {
		return fmt.Errorf("data dir's filesystem has %d bytes available, under %d: %w", free, minFreeBytes, errdefs.ErrUnavailable)
	}
	werr := r.writeErr()
	if werr == nil {
		return nil
	}
	return r.probe(werr)
}

// probe answers whether the data directory takes a write again after the
// audit log's commit failed with werr: the answer of a probe younger than
// probeInterval, else that of a fresh probe write.
func (r *readiness) probe(werr error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if !r.probedAt.IsZero() && now.Sub(r.probedAt) < probeInterval {
		return r.probeErr
	}
	r.probedAt = now
	r.probeErr = nil
	if err := probeWrite(filepath.Join(r.dataDir, probeFile)); err != nil {
		r.probeErr = fmt.Errorf("the audit log's last write failed (%v) and the data dir takes no write: %w", werr, err)
	}
	return r.probeErr
}

// probeWrite writes probeBytes to path, syncs and removes it.
func probeWrite(path string) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	defer func() {
		err = errors.Join(err, f.Close(), os.Remove(path))
		if err != nil && !errors.Is(err, errdefs.ErrUnavailable) {
			err = fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
	}()
	if _, err := f.Write(make([]byte, probeBytes)); err != nil {
		return err
	}
	return f.Sync()
}
