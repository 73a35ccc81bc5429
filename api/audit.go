package api

import (
	"encoding/json"
	"time"
)

// The phases of an audit record. Every mutation is recorded twice: an
// intent, committed before the server carried out the action, and its
// outcome, committed before the server answered, which names the intent
// in IntentSeq. An intent without an outcome is an action that was
// started but never answered (in flight, or cut short by a crash of the
// daemon). A request refused before it did anything has an outcome only,
// without IntentSeq.
const (
	PhaseIntent  = "intent"
	PhaseOutcome = "outcome"
)

// AuditRecord is one record of the audit log, with its place in the hash
// chain.
type AuditRecord struct {
	// Seq numbers records from 1 without gaps, across all tenants.
	Seq uint64 `json:"seq"`
	// Time is when the record was written.
	Time time.Time `json:"time"`
	// TenantID is the tenant that acted.
	TenantID string `json:"tenant_id,omitempty"`
	// KeyID is the API key that acted.
	KeyID string `json:"key_id,omitempty"`
	// Action names what was done, e.g. "sandbox.exec".
	Action string `json:"action"`
	// Target is what was acted on, e.g. a sandbox or key ID.
	Target string `json:"target,omitempty"`
	// Outcome is "intent" for an intent, otherwise "ok" or the error
	// code of the failure.
	Outcome string `json:"outcome"`
	// Phase is PhaseIntent or PhaseOutcome.
	Phase string `json:"phase"`
	// IntentSeq is, for an outcome, the Seq of its intent; 0 (absent)
	// for a request refused before it did anything.
	IntentSeq uint64 `json:"intent_seq,omitempty"`
	// Details are action-specific facts, as JSON, as the hash covers
	// them.
	Details json.RawMessage `json:"details,omitempty"`
	// PrevHash is the Hash of the record before it; Hash is this
	// record's, both lowercase hex SHA-256.
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
}

// AuditList is the body of GET /v1/audit.
type AuditList struct {
	// Records are a page of records in ascending Seq order.
	Records []AuditRecord `json:"records"`
	// NextAfter is the after value of the next page, 0 when this page is
	// the last.
	NextAfter uint64 `json:"next_after"`
}

// AuditHead names a record of the chain by its Seq and Hash: the head of
// the log in a report, or a checkpoint saved earlier.
type AuditHead struct {
	// Seq is the record's place in the chain.
	Seq uint64 `json:"seq"`
	// Hash is the record's hash, lowercase hex SHA-256.
	Hash string `json:"hash"`
}

// AuditCheckpoint is a head of the audit chain. Signed (Time, KeyID and
// Signature set), it is the daemon's statement that the chain ended at
// Seq, with the record Hash, at Time: kept off the daemon's host and
// passed to POST /v1/audit/verify later, it catches a log truncated or
// wiped since, or rewritten with recomputed hashes. With only Seq and
// Hash it is unsigned: a head the caller saved itself.
type AuditCheckpoint struct {
	// Seq and Hash name the record, as in AuditHead.
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"`
	// Time is when the daemon signed it (UTC, whole seconds).
	Time time.Time `json:"time,omitzero"`
	// KeyID names the daemon's signing key (16 hex digits of the SHA-256
	// of its ed25519 public key).
	KeyID string `json:"key_id,omitempty"`
	// Signature is the ed25519 signature, base64, of the message
	// openapi.yaml documents.
	Signature string `json:"signature,omitempty"`
}

// AuditCheckpointResponse is the body of GET /v1/audit/checkpoint.
type AuditCheckpointResponse struct {
	// Checkpoint is the head of the chain, signed.
	Checkpoint AuditCheckpoint `json:"checkpoint"`
	// PublicKey is the daemon's checkpoint key, a PEM "PUBLIC KEY" block
	// (PKIX, ed25519): keep it with the checkpoints to verify them
	// offline.
	PublicKey string `json:"public_key"`
}

// VerifyRequest is the optional body of POST /v1/audit/verify:
// checkpoints saved earlier (off the host) that the chain must still
// match, bare heads or checkpoints the daemon signed.
type VerifyRequest struct {
	// Checkpoints are at most 1024.
	Checkpoints []AuditCheckpoint `json:"checkpoints,omitempty"`
}

// VerifyReport is the body of POST /v1/audit/verify. A broken chain is a
// report with OK false, not an error.
type VerifyReport struct {
	// OK is true when every record up to Head checked out.
	OK bool `json:"ok"`
	// Records counts the records whose hashes were checked.
	Records uint64 `json:"records"`
	// FirstBadSeq is the first bad record (0 when OK), and Reason what
	// is wrong with it.
	FirstBadSeq uint64 `json:"first_bad_seq"`
	Reason      string `json:"reason,omitempty"`
	// Head is the anchor verified up to: keep it off the host and pass
	// it to a later verification as a checkpoint.
	Head AuditHead `json:"head"`
	// OpenIntents counts the intents, of every tenant, that no outcome
	// names: actions in flight during the verification, or cut short by a
	// crash of the daemon. They are not chain errors.
	OpenIntents uint64 `json:"open_intents"`
	// OpenIntentSeqs lists the oldest of them that belong to the
	// caller's tenant (at most 100).
	OpenIntentSeqs []uint64 `json:"open_intent_seqs,omitempty"`
}
