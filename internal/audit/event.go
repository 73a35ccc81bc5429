package audit

import "time"

// OutcomeIntent is the Outcome of an intent record: an action about to be
// carried out. See "Intents and outcomes" in the package documentation.
const OutcomeIntent = "intent"

// OutcomeOK is the Outcome of an action that succeeded.
const OutcomeOK = "ok"

// Phase tells intent records from outcome records.
type Phase string

// The phases of a record.
const (
	// PhaseIntent is a record written before an action was carried out
	// (Outcome OutcomeIntent).
	PhaseIntent Phase = "intent"
	// PhaseOutcome is how an action ended: "ok" or an error code. It
	// names its intent's Seq in IntentSeq, or none for a request refused
	// before anything was done.
	PhaseOutcome Phase = "outcome"
)

// intentSeqKey is the details key that holds an outcome's IntentSeq.
const intentSeqKey = "intent_seq"

// Event is one thing that happened, as the API layer reports it. The log
// assigns its sequence number and hashes when it is appended.
type Event struct {
	// Time is when the action finished; the log fills it if zero.
	Time time.Time `json:"time"`
	// TenantID and KeyID say who acted ("" for the daemon itself).
	TenantID string `json:"tenant_id,omitempty"`
	KeyID    string `json:"key_id,omitempty"`
	// Action names what was done, e.g. "sandbox.create", "sandbox.exec",
	// "file.write", "key.create".
	Action string `json:"action"`
	// Target is what it was done to, e.g. a sandbox ID.
	Target string `json:"target,omitempty"`
	// Outcome is OutcomeIntent for an intent, otherwise "ok" or the
	// public error code of the failure.
	Outcome string `json:"outcome"`
	// IntentSeq, on an outcome, is the Seq of the intent record written
	// before the action; it is stored in Details as "intent_seq".
	IntentSeq uint64 `json:"intent_seq,omitempty"`
	// Details are action-specific facts: the command and exit status of
	// an exec, the path, size and sha256 of a file write. Values must be
	// JSON-encodable.
	Details map[string]any `json:"details,omitempty"`
}
