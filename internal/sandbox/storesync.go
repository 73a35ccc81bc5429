package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// RecordStore keeps the durable record of every sandbox (the table of
// store.SandboxStore); *sqlitestore.Store satisfies it.
//
// With Config.Records set, a sandbox is recorded (state running) right
// after its create, through RecordCreated, whose atomic quota check
// enforces the tenant's MaxSandboxes even across concurrent creates; a
// delete marks the record stopped with its stop time (RecordStopped).
// Sandboxes also end without a delete (expiry, idle reaping, a restart
// that could not adopt them): SyncRecords marks those stopped, and a
// create that the store refuses for the quota first syncs the tenant's
// records and tries once more, so stale records never block a tenant for
// long.
type RecordStore interface {
	// CreateSandbox inserts a record if the tenant's quota allows it
	// (ErrResourceExhausted otherwise).
	CreateSandbox(ctx context.Context, s store.Sandbox) error
	// PutSandbox inserts or replaces a record without a quota check.
	PutSandbox(ctx context.Context, s store.Sandbox) error
	// ListSandboxes returns the records f selects, oldest first.
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error)
}

// activeRecordStates are the record states that count against a tenant's
// quota: every sandbox state but stopped. The Manager's own view is
// Filter.Live, in which a failed sandbox whose agent died has ended; its
// record counts until SyncRecords marks it stopped.
var activeRecordStates = []string{
	string(StateCreating), string(StateAdopting), string(StateRunning), string(StatePaused),
	string(StateStopping), string(StateFailed),
}

// maxSyncPages bounds one sync's passes over the active records.
const maxSyncPages = 100

// KeepsRecords reports whether the Manager keeps durable records
// (Config.Records is set). Without them, RecordCreated, RecordStopped and
// SyncRecords do nothing, and a caller that enforces a tenant's quota
// must do it from List alone.
func (m *Manager) KeepsRecords() bool { return m.cfg.Records != nil }

// RecordCreated records sb, just created for its owner, as running. The
// store's quota check and the insert are one atomic step; when the quota
// is reached, the owner's records are synced first (some may belong to
// sandboxes that ended without a delete) and the insert is tried once
// more. It returns an ErrResourceExhausted error when the quota is still
// reached, and an ErrUnavailable one when the store fails: the caller
// should then destroy the sandbox, which cannot be kept unrecorded.
func (m *Manager) RecordCreated(ctx context.Context, sb Sandbox) error {
	if m.cfg.Records == nil {
		return nil
	}
	rec := toRecord(sb)
	err := m.cfg.Records.CreateSandbox(ctx, rec)
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		if serr := m.syncRecords(ctx, sb.Owner); serr != nil {
			return recordFailed(sb.ID, serr)
		}
		err = m.cfg.Records.CreateSandbox(ctx, rec)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return fmt.Errorf("this tenant's sandbox quota is reached; delete one first: %w", errdefs.ErrResourceExhausted)
	default:
		return recordFailed(sb.ID, err)
	}
}

// RecordStopped marks the record of sb stopped, keeping the stop time it
// has, if any (the record is inserted if missing, e.g. for a sandbox
// created before records were kept). The Manager's current view of the
// sandbox is recorded if it still holds it; sb otherwise. A store failure
// is an ErrUnavailable error.
func (m *Manager) RecordStopped(ctx context.Context, sb Sandbox) error {
	if m.cfg.Records == nil {
		return nil
	}
	if cur, err := m.Get(sb.ID); err == nil {
		sb = cur
	}
	if err := m.cfg.Records.PutSandbox(ctx, stoppedRecord(toRecord(sb), time.Now())); err != nil {
		return recordFailed(sb.ID, err)
	}
	return nil
}

// recordFailed is the error of a record the store could not write or
// read: the store's error, classed unavailable for the caller.
func recordFailed(id string, err error) error {
	return fmt.Errorf("record of sandbox %s: %v: %w", id, err, errdefs.ErrUnavailable)
}

// SyncRecords brings the durable records up to date with the Manager: an
// active record whose sandbox the Manager no longer holds, or holds as
// ended, is marked stopped. Sandboxes that expire or are reaped as idle
// end without a delete, so the daemon calls SyncRecords once after Start
// and then periodically (every minute). Only "stopped" is ever written,
// so it is safe to run alongside creates and deletes. It does nothing
// without Config.Records.
func (m *Manager) SyncRecords(ctx context.Context) error {
	if m.cfg.Records == nil {
		return nil
	}
	return m.syncRecords(ctx, "")
}

// syncRecords syncs the active records of tenant ("" for every tenant).
// Records are listed a page at a time, oldest first; a page in which
// nothing changed ends the sync, since the next page would be the same.
func (m *Manager) syncRecords(ctx context.Context, tenant string) error {
	for range maxSyncPages {
		recs, err := m.cfg.Records.ListSandboxes(ctx, store.SandboxFilter{
			TenantID: tenant, States: activeRecordStates, Limit: store.MaxListLimit,
		})
		if err != nil {
			return fmt.Errorf("sync sandbox records: %w", err)
		}
		changed := 0
		for _, rec := range recs {
			stoppedAt := time.Now()
			sb, err := m.Get(rec.ID)
			switch {
			case err != nil:
				// The Manager forgot it: it ended a while ago.
			case sb.Ended():
				// Stopped, or failed with its agent dead.
				stoppedAt = sb.StoppedAt
			default:
				continue
			}
			if err := m.cfg.Records.PutSandbox(ctx, stoppedRecord(rec, stoppedAt)); err != nil {
				return fmt.Errorf("sync sandbox record %s: %w", rec.ID, err)
			}
			changed++
		}
		if changed == 0 || len(recs) < store.MaxListLimit {
			return nil
		}
	}
	return nil
}

// toRecord is the store's record of sb. Metadata too large for the store
// (the Manager allows more) is replaced by a marker rather than failing
// the create.
func toRecord(sb Sandbox) store.Sandbox {
	rec := store.Sandbox{
		ID:        sb.ID,
		TenantID:  sb.Owner,
		Template:  sb.Template,
		State:     string(sb.State),
		CreatedAt: sb.CreatedAt.UTC(),
		Metadata:  sb.Metadata,
	}
	if !sb.StoppedAt.IsZero() {
		rec.StoppedAt = sb.StoppedAt.UTC()
	}
	if _, err := store.EncodeMetadata(rec.Metadata); err != nil {
		rec.Metadata = map[string]string{"_truncated": "true"}
	}
	return rec
}

// stoppedRecord is rec marked stopped at t (now if t is zero), unless it
// has a stop time already; the stop time is never before the creation.
func stoppedRecord(rec store.Sandbox, t time.Time) store.Sandbox {
	rec.State = store.SandboxStopped
	if t.IsZero() {
		t = time.Now()
	}
	if rec.StoppedAt.IsZero() {
		rec.StoppedAt = t.UTC()
	}
	if rec.StoppedAt.Before(rec.CreatedAt) {
		rec.StoppedAt = rec.CreatedAt
	}
	return rec
}
