package api

import (
	"context"
	"net/http"
	"regexp"
	"strconv"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// AuditLog reads and verifies the audit log for GET /v1/audit,
// POST /v1/audit/verify and GET /v1/audit/checkpoint. *audit.Log
// satisfies it.
type AuditLog interface {
	// Select returns a page of the records q selects in ascending Seq
	// order, of phase only if it is not empty.
	Select(ctx context.Context, q audit.Query, phase audit.Phase) (audit.Page, error)
	// VerifyCheckpoints checks the whole chain against the given
	// checkpoints, whose signatures the caller has checked.
	VerifyCheckpoints(ctx context.Context, checkpoints ...audit.Checkpoint) (audit.Report, error)
	// Head returns the last record committed.
	Head() store.AuditHead
}

// Caps on audit requests.
const (
	// maxCheckpoints caps the checkpoints of one verify request: a day
	// of checkpoints exported every 5 minutes fits 3 times over, and a
	// request of that many stays far below the body cap.
	maxCheckpoints = 1024
	// maxAuditSeq caps seq values (the store refuses larger ones).
	maxAuditSeq = audit.MaxSeq
)

// hexHash is a lowercase hex SHA-256 digest, as the audit chain uses.
var hexHash = regexp.MustCompile(`^[0-9a-f]{64}$`)

// toAuditRecordJSON is the wire form of r.
func toAuditRecordJSON(r audit.Record) wire.AuditRecord {
	return wire.AuditRecord{Seq: r.Seq, Time: r.Time, TenantID: r.TenantID, KeyID: r.KeyID, Action: r.Action,
		Target: r.Target, Outcome: r.Outcome, Phase: string(r.Phase), IntentSeq: r.IntentSeq, Details: r.Details,
		PrevHash: r.PrevHash, Hash: r.Hash}
}

// toCheckpointJSON is the wire form of cp.
func toCheckpointJSON(cp audit.Checkpoint) wire.AuditCheckpoint {
	return wire.AuditCheckpoint{Seq: cp.Seq, Hash: cp.Hash, Time: cp.Time, KeyID: cp.KeyID, Signature: cp.Signature}
}

// fromCheckpointJSON is the checkpoint cp of a verify request: a bare seq
// and hash the caller kept, or a checkpoint this daemon signed (GET
// /v1/audit/checkpoint or the export file), with time, key_id and
// signature.
func fromCheckpointJSON(cp wire.AuditCheckpoint) audit.Checkpoint {
	return audit.Checkpoint{Seq: cp.Seq, Hash: cp.Hash, Time: cp.Time, KeyID: cp.KeyID, Signature: cp.Signature}
}

// auditNotServed is the answer of the audit routes without Config.AuditLog.
func auditNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not serve the audit log"}
}

// checkpointsNotServed is the answer about signed checkpoints without
// Config.AuditSigner.
func checkpointsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not sign audit checkpoints"}
}

// parseAuditQuery parses the query of GET /v1/audit for tenant: action,
// target, since and until (RFC 3339), after (a seq), limit (1 to
// store.MaxListLimit, default store.DefaultListLimit) and phase (intent or
// outcome; both if absent).
func parseAuditQuery(raw, tenant string) (audit.Query, audit.Phase, error) {
	q := audit.Query{TenantID: tenant, Limit: store.DefaultListLimit}
	v, err := parseQuery(raw, "action", "target", "since", "until", "after", "limit", "phase")
	if err != nil {
		return q, "", err
	}
	phase := audit.Phase(v.Get("phase"))
	switch phase {
	case "", audit.PhaseIntent, audit.PhaseOutcome:
	default:
		return q, "", invalidf("phase must be intent or outcome")
	}
	q.Action, q.Target = v.Get("action"), v.Get("target")
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		s := v.Get(f.name)
		if s == "" {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return q, "", invalidf("%s must be an RFC 3339 time such as 2026-01-02T15:04:05Z", f.name)
		}
		*f.dst = t.UTC()
	}
	if s := v.Get("after"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n > maxAuditSeq {
			return q, "", invalidf("after must be a record seq from 0 to %d", uint64(maxAuditSeq))
		}
		q.AfterSeq = n
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > store.MaxListLimit {
			return q, "", invalidf("limit must be an integer from 1 to %d", store.MaxListLimit)
		}
		q.Limit = n
	}
	if err := q.Validate(); err != nil {
		return q, "", invalidf("%s", stripClass(err.Error(), errdefs.ErrInvalidArgument))
	}
	return q, phase, nil
}

// listAudit serves GET /v1/audit: the caller's tenant's records only,
// whatever its scopes. Each record says its phase (intent or outcome) and
// an outcome the seq of its intent.
func (h *Handler) listAudit(c *call) error {
	if h.auditLog == nil {
		return auditNotServed()
	}
	q, phase, err := parseAuditQuery(c.r.URL.RawQuery, c.p.TenantID)
	if err != nil {
		return err
	}
	return h.writeAuditPage(c, q, phase)
}

// writeAuditPage answers with the page of audit records q and phase
// select.
func (h *Handler) writeAuditPage(c *call, q audit.Query, phase audit.Phase) error {
	page, err := h.auditLog.Select(c.r.Context(), q, phase)
	if err != nil {
		return err
	}
	out := wire.AuditList{Records: make([]wire.AuditRecord, 0, len(page.Records)), NextAfter: page.NextAfter}
	for _, r := range page.Records {
		out.Records = append(out.Records, toAuditRecordJSON(r))
	}
	return c.json(http.StatusOK, out)
}

// verifyAudit serves POST /v1/audit/verify. The chain is shared by every
// tenant, so the report covers all records; it reveals counts and hashes,
// never another tenant's records.
func (h *Handler) verifyAudit(c *call) error {
	if h.auditLog == nil {
		return auditNotServed()
	}
	var req wire.VerifyRequest
	if err := c.decodeJSON(&req, true); err != nil {
		return err
	}
	if len(req.Checkpoints) > maxCheckpoints {
		return invalidf("at most %d checkpoints", maxCheckpoints)
	}
	var cps []audit.Checkpoint
	for _, cp := range req.Checkpoints {
		cps = append(cps, fromCheckpointJSON(cp))
	}
	signed := 0
	for i, cp := range cps {
		if !cp.Signed() {
			if cp.Seq < 1 || cp.Seq > maxAuditSeq || !hexHash.MatchString(cp.Hash) {
				return invalidf("checkpoint %d: an unsigned checkpoint needs a seq of at least 1 and a hash of 64 lowercase hex digits", i+1)
			}
			continue
		}
		// A signed checkpoint must be this daemon's: a forged or edited
		// one, or one of another key, is refused rather than trusted.
		if h.auditSigner == nil {
			return checkpointsNotServed()
		}
		if err := h.auditSigner.Public().Verify(cp); err != nil {
			return invalidf("checkpoint %d: %s", i+1, stripClass(err.Error(), errdefs.ErrInvalidArgument))
		}
		signed++
	}
	rep, err := h.auditLog.VerifyCheckpoints(c.r.Context(), cps...)
	if err != nil {
		return err
	}
	out := wire.VerifyReport{
		OK:          rep.OK,
		Records:     rep.Checked,
		FirstBadSeq: rep.BadSeq,
		Reason:      clean(rep.Problem),
		Head:        wire.AuditHead{Seq: rep.Head.Seq, Hash: rep.Head.Hash},
		OpenIntents: rep.OpenIntents,
	}
	for _, o := range rep.Open {
		if o.TenantID == c.p.TenantID {
			out.OpenIntentSeqs = append(out.OpenIntentSeqs, o.Seq)
		}
	}
	c.ev.Details = map[string]any{"ok": rep.OK, "records": rep.Checked, "checkpoints": len(cps), "signed_checkpoints": signed,
		"open_intents": rep.OpenIntents}
	if !rep.OK {
		c.ev.Details["first_bad_seq"] = rep.BadSeq
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, out)
}

// auditCheckpoint serves GET /v1/audit/checkpoint: the head of the chain
// (the last record committed) signed with the daemon's checkpoint key,
// and the public key that verifies it. Like verify, it covers every
// tenant's records: a seq and a hash, nothing of their content.
func (h *Handler) auditCheckpoint(c *call) error {
	if h.auditLog == nil {
		return auditNotServed()
	}
	if h.auditSigner == nil {
		return checkpointsNotServed()
	}
	cp, err := h.auditSigner.Sign(h.auditLog.Head())
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.AuditCheckpointResponse{Checkpoint: toCheckpointJSON(cp), PublicKey: string(h.auditSigner.Public().PEM())})
}
