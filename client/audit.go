package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// AuditQuery selects audit records. Zero fields match everything.
type AuditQuery struct {
	// Action and Target keep records with exactly this value, e.g.
	// "sandbox.exec" and a sandbox ID.
	Action string
	Target string
	// Since keeps records at or after this time, Until those before it.
	Since, Until time.Time
	// After keeps records with a larger Seq: pass the nextAfter of the
	// previous page.
	After uint64
	// Limit caps the records of one page: the server's default (100) if
	// 0, at most 1000.
	Limit int
	// Phase keeps intents (PhaseIntent) or outcomes (PhaseOutcome) only;
	// empty keeps both. With a phase, a page may hold fewer records than
	// Limit, even none, while more follow: page on until nextAfter is 0.
	Phase string
}

// The phases of an audit record. Every mutation is recorded twice: an
// intent, committed before the server carried out the action, and its
// outcome, committed before the server answered, which names the intent
// in IntentSeq. An intent without an outcome is an action that was
// started but never answered (in flight, or cut short by a crash of the
// daemon). A request refused before it did anything has an outcome only,
// without IntentSeq.
const (
	PhaseIntent  = api.PhaseIntent
	PhaseOutcome = api.PhaseOutcome
)

// AuditRecord is one record of the audit log, with its place in the hash
// chain.
type AuditRecord = api.AuditRecord

// AuditHead names a record of the chain by its Seq and Hash: the head of
// the log in a report, or a checkpoint saved earlier.
type AuditHead = api.AuditHead

// AuditReport is the outcome of AuditVerify. Its Head is the anchor
// verified up to: keep it off the host and pass it to a later AuditVerify
// as a checkpoint.
type AuditReport = api.VerifyReport

// AuditCheckpoint is a head of the audit chain signed by the daemon: its
// statement that the chain ended at Seq, with the record Hash, at Time.
// Kept off the daemon's host and passed to AuditVerifyCheckpoints later,
// it catches a log truncated or wiped since, or rewritten with recomputed
// hashes. A checkpoint with only Seq and Hash is unsigned: a head the
// caller saved itself.
type AuditCheckpoint = api.AuditCheckpoint

// AuditCheckpointResult is the answer of AuditCheckpoint: the checkpoint
// and the daemon's public key, to keep with the checkpoints to verify
// them offline.
type AuditCheckpointResult = api.AuditCheckpointResponse

// AuditCheckpoint returns the current head of the audit chain signed by
// the daemon, and its public key. It needs the admin scope.
func (c *Client) AuditCheckpoint(ctx context.Context) (*AuditCheckpointResult, error) {
	var out AuditCheckpointResult
	if err := c.doJSON(ctx, http.MethodGet, "/v1/audit/checkpoint", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// AuditList returns a page of the caller's tenant's audit records, in
// ascending Seq order. nextAfter is the After of the next page, 0 when
// this page is the last. It needs the audit:read scope.
func (c *Client) AuditList(ctx context.Context, q AuditQuery) (records []AuditRecord, nextAfter uint64, err error) {
	v := url.Values{}
	if q.Action != "" {
		v.Set("action", q.Action)
	}
	if q.Target != "" {
		v.Set("target", q.Target)
	}
	if !q.Since.IsZero() {
		v.Set("since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		v.Set("until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.After > 0 {
		v.Set("after", strconv.FormatUint(q.After, 10))
	}
	if q.Limit < 0 {
		return nil, 0, fmt.Errorf("airlock: audit limit %d is negative: %w", q.Limit, ErrInvalid)
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Phase != "" {
		v.Set("phase", q.Phase)
	}
	var out api.AuditList
	if err := c.doJSON(ctx, http.MethodGet, "/v1/audit", v, nil, &out, http.StatusOK); err != nil {
		return nil, 0, err
	}
	return out.Records, out.NextAfter, nil
}

// AuditVerify checks the whole audit chain on the server, and that each
// checkpoint (a head saved earlier) still matches. A broken chain is a
// report with OK false, not an error. It needs the admin scope.
func (c *Client) AuditVerify(ctx context.Context, checkpoints ...AuditHead) (*AuditReport, error) {
	cps := make([]AuditCheckpoint, len(checkpoints))
	for i, h := range checkpoints {
		cps[i] = AuditCheckpoint{Seq: h.Seq, Hash: h.Hash}
	}
	return c.AuditVerifyCheckpoints(ctx, cps...)
}

// AuditVerifyCheckpoints is AuditVerify against checkpoints, signed (from
// AuditCheckpoint or the daemon's export file) or not. A record that no
// longer matches a checkpoint, or a log that ends before one, is a report
// with OK false whose Reason names the checkpoint. A signed checkpoint
// whose signature does not verify with the daemon's key (forged, edited,
// or another key's) is refused with ErrInvalid. At most 1024 checkpoints.
func (c *Client) AuditVerifyCheckpoints(ctx context.Context, checkpoints ...AuditCheckpoint) (*AuditReport, error) {
	in := api.VerifyRequest{Checkpoints: checkpoints}
	var out AuditReport
	if err := c.doJSON(ctx, http.MethodPost, "/v1/audit/verify", nil, in, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}
