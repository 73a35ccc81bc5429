package gateway

import (
	"context"
	"encoding/json"
	"time"
)

// Result is what a call returned.
type Result struct {
	// Output is the tool's result, a JSON value.
	Output json.RawMessage
	// Duration is the call's, decision and upstream together.
	Duration time.Duration
}

// Outcomes of a call (Record.Outcome).
const (
	OutcomeOK     = "ok"     // the upstream answered and the output passed
	OutcomeDenied = "denied" // a stage refused it before the upstream
	OutcomeError  = "error"  // the upstream failed, timed out or answered badly
)

// Record is the evidence of one call, handed to Config.Record once the
// call ends, whatever its outcome. Args are redacted (Governance.Redact)
// and never hold a secret's value.
type Record struct {
	Caller  Caller          `json:"-"`
	Tool    string          `json:"tool"`
	Args    json.RawMessage `json:"args,omitempty"`
	Outcome string          `json:"outcome"`
	// Stage is the stage that refused or failed the call (grant, schema,
	// policy, budget, approval, circuit, upstream, output), empty when
	// it succeeded; Reason says why, in words fit for the caller.
	Stage  string `json:"stage,omitempty"`
	Reason string `json:"reason,omitempty"`
	// DryRun is set when a refusal was only recorded (Governance.DryRun).
	DryRun   bool          `json:"dry_run,omitempty"`
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	// Status is the upstream's HTTP status, when it answered.
	Status int `json:"status,omitempty"`
	// OutputBytes is the size of the output returned.
	OutputBytes int `json:"output_bytes,omitempty"`
}

// Calls is what the sandbox side needs of the gateway: the tools granted
// to a caller (for listing and stubs) and calling one.
type Calls interface {
	Granted(ctx context.Context, c Caller) ([]Tool, error)
	Call(ctx context.Context, c Caller, name string, args json.RawMessage) (Result, error)
}
