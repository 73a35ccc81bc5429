package api

import (
	"context"
	"errors"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The durable record of every sandbox is the Manager's to keep (see
// sandbox.RecordStore): the create and delete handlers ask it to record
// each sandbox they create or delete, on a context that outlives the
// request, and answer 503 when the store fails.

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

// recordCreated records a sandbox the API has just created: a quota
// refusal is returned as it is, any other failure as unavailable.
func (h *Handler) recordCreated(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := h.recordCtx(ctx)
	defer cancel()
	err := h.mgr.RecordCreated(ctx, sb)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errdefs.ErrResourceExhausted):
		return err
	default:
		return h.recordUnavailable(sb.ID, err, "the sandbox was not kept")
	}
}

// recordStopped marks the record of sb stopped (see
// sandbox.Manager.RecordStopped).
func (h *Handler) recordStopped(ctx context.Context, sb sandbox.Sandbox) error {
	ctx, cancel := h.recordCtx(ctx)
	defer cancel()
	return h.mgr.RecordStopped(ctx, sb)
}
