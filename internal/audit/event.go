package audit

import "time"

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
	// Outcome is "ok" or the public error code of the failure.
	Outcome string `json:"outcome"`
	// Details are action-specific facts: the command and exit status of
	// an exec, the path, size and sha256 of a file write. Values must be
	// JSON-encodable.
	Details map[string]any `json:"details,omitempty"`
}
