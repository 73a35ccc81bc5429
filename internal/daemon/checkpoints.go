package daemon

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// checkpointExporter appends signed checkpoints of the audit chain's head
// to a JSON-lines file for the operator to ship off the host (a log
// shipper tailing it, a copy to other storage): at start, every interval
// while the head moves, and at shutdown. An idle log adds no lines.
type checkpointExporter struct {
	head   func() store.AuditHead
	signer *audit.Signer
	path   string
	log    *slog.Logger

	mu   sync.Mutex
	last store.AuditHead // the head of the last line written
}

// checkpointFile is the export file cfg names, or the default one in the
// data directory.
func checkpointFile(cfg Config) string {
	if cfg.AuditCheckpointFile != "" {
		return cfg.AuditCheckpointFile
	}
	return filepath.Join(cfg.DataDir, auditDir, checkpointsFile)
}

// export appends a checkpoint of the current head unless it is the one
// last written or the log is empty (a checkpoint of nothing proves
// nothing).
func (x *checkpointExporter) export() error {
	x.mu.Lock()
	defer x.mu.Unlock()
	head := x.head()
	if head.Seq == 0 || head == x.last {
		return nil
	}
	cp, err := x.signer.Sign(head)
	if err != nil {
		return err
	}
	if err := audit.AppendCheckpoint(x.path, cp); err != nil {
		return err
	}
	x.last = head
	return nil
}

// maxExportBackoff caps the wait before retrying a failed export.
const maxExportBackoff = 5 * time.Minute

// run exports every interval until ctx ends. A failed export is logged and
// retried after a wait that doubles with each failure in a row (from
// interval, at most maxExportBackoff), so that a file that cannot be
// written (a full disk) does not fill the log; the first export that
// succeeds again is logged and brings back the interval.
func (x *checkpointExporter) run(ctx context.Context, interval time.Duration) {
	wait := interval
	failures := 0
	t := time.NewTimer(wait)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := x.export(); err != nil {
			failures++
			wait = min(2*wait, max(maxExportBackoff, interval))
			x.log.Warn("audit checkpoint export failed", "file", x.path, "failures", failures, "retry_in", wait, "err", err)
		} else {
			if failures > 0 {
				x.log.Info("audit checkpoint export works again", "file", x.path, "failures", failures)
			}
			failures, wait = 0, interval
		}
		t.Reset(wait)
	}
}

// startCheckpointExport exports a first checkpoint and starts the
// periodic export; stop ends it and exports a last one. With an interval
// of 0 nothing is exported.
func startCheckpointExport(ctx context.Context, cfg Config, s *state, log *slog.Logger) (stop func(), err error) {
	interval := time.Duration(cfg.AuditCheckpointInterval)
	if interval == 0 {
		return func() {}, nil
	}
	x := &checkpointExporter{head: s.audit.Head, signer: s.signer, path: checkpointFile(cfg), log: log}
	if err := x.export(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		x.run(ctx, interval)
	}()
	return func() {
		cancel()
		<-done
		if err := x.export(); err != nil {
			log.Warn("audit checkpoint export failed", "file", x.path, "err", err)
		}
	}, nil
}
