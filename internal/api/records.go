package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// Records keeps the durable record of every sandbox the API creates
// (store.SandboxStore's table). *sqlitestore.Store satisfies it.
//
// With Records set, a create is recorded (state running) right after the
// Manager created the sandbox, through CreateSandbox, whose atomic quota
// check enforces the tenant's MaxSandboxes even across concurrent creates;
// a sandbox that cannot be recorded is destroyed and the request fails.
// A delete marks the record stopped with its stop time. Sandboxes also
// end without the API (expiry, idle reaping, a restart that could not
// adopt them): SyncRecords marks those stopped, and a create that the
// store refuses for the quota first syncs the tenant's records and
// tries once more, so stale records never block a tenant for long.
type Records interface {
	// CreateSandbox inserts a record if the tenant's quota allows it
	// (ErrResourceExhausted otherwise).
	CreateSandbox(ctx context.Context, s store.Sandbox) error
	// PutSandbox inserts or replaces a record without a quota check.
	PutSandbox(ctx context.Context, s store.Sandbox) error
	// ListSandboxes returns the records f selects, oldest first.
	ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, error)
}

// activeRecordStates are the record states that count against a quota:
// every sandbox state but stopped.
var activeRecordStates = func() []string {
	out := make([]string, 0, len(liveStates))
	for _, s := range liveStates {
		out = append(out, string(s))
	}
	return out
}()

// maxSyncPages bounds one sync's passes over the active records.
const maxSyncPages = 100

// toRecord is the store's record of sb. Metadata too large for the store
// (the Manager allows more) is replaced by a marker rather than failing
// the create.
func toRecord(sb sandbox.Sandbox) store.Sandbox {
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

// stoppedRecord is rec marked stopped at t (if it has no stop time yet).
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

// recordCtx detaches ctx from the request's cancellation, so that a
// client that goes away does not leave a record half written.
func (h *Handler) recordCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), h.lim.AuditTimeout)
}

// recordUnavailable is the public error of a record that could not be
// written; the real error is logged.
func (h *Handler) recordUnavailable(id string, err error, note string) error {
	h.log.Error("sandbox record failed", "sandbox", id, "err", err)
	return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
		msg: "the sandbox store is unavailable; " + note}
}

// recordCreated records a sandbox the API has just created.
func (h *Handler) recordCreated(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := h.recordCtx(ctx)
	defer cancel()
	rec := toRecord(sb)
	err := h.records.CreateSandbox(ctx, rec)
	if errors.Is(err, errdefs.ErrResourceExhausted) {
		// Records of sandboxes that ended without the API may still
		// count: bring the tenant's up to date and try once more.
		if serr := h.syncRecords(ctx, sb.Owner); serr != nil {
			return h.recordUnavailable(sb.ID, serr, "the sandbox was not kept")
		}
		err = h.records.CreateSandbox(ctx, rec)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return fmt.Errorf("this tenant's sandbox quota is reached; delete one first: %w", errdefs.ErrResourceExhausted)
	default:
		return h.recordUnavailable(sb.ID, err, "the sandbox was not kept")
	}
}

// recordStopped marks the record of sb stopped (inserting it if it is
// missing, e.g. for a sandbox created before records were kept).
func (h *Handler) recordStopped(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := h.recordCtx(ctx)
	defer cancel()
	if cur, err := h.mgr.Get(sb.ID); err == nil {
		sb = cur
	}
	return h.records.PutSandbox(ctx, stoppedRecord(toRecord(sb), time.Now()))
}

// SyncRecords brings the durable sandbox records up to date with the
// Manager: an active record whose sandbox the Manager no longer holds, or
// holds as stopped, is marked stopped. Sandboxes that expire or are reaped
// as idle end without the API, so the daemon should call SyncRecords once
// after Manager.Start and then periodically (every minute, say). Only
// "stopped" is ever written, so it is safe to run alongside requests.
// It does nothing without Config.Records.
func (h *Handler) SyncRecords(ctx context.Context) error {
	if h.records == nil {
		return nil
	}
	return h.syncRecords(ctx, "")
}

// syncRecords syncs the active records of tenant ("" for every tenant).
// Records are listed a page at a time, oldest first; a page in which
// nothing changed ends the sync, since the next page would be the same.
func (h *Handler) syncRecords(ctx context.Context, tenant string) error {
	for range maxSyncPages {
		recs, err := h.records.ListSandboxes(ctx, store.SandboxFilter{
			TenantID: tenant, States: activeRecordStates, Limit: store.MaxListLimit,
		})
		if err != nil {
			return fmt.Errorf("sync sandbox records: %w", err)
		}
		changed := 0
		for _, rec := range recs {
			stoppedAt := time.Now()
			sb, err := h.mgr.Get(rec.ID)
			switch {
			case err != nil:
				// The Manager forgot it: it ended a while ago.
			case sb.Ended():
				// Stopped, or failed with its agent dead.
				stoppedAt = sb.StoppedAt
			default:
				continue
			}
			if err := h.records.PutSandbox(ctx, stoppedRecord(rec, stoppedAt)); err != nil {
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
