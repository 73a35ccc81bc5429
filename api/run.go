package api

import (
	"encoding/json"
	"time"
)

// RunRequest is the body of POST /v1/sandboxes/{id}/run (a program in a
// sandbox that exists) and of POST /v1/run (a program in a sandbox
// created for it, from the warm pool where one is ready, and destroyed
// when it ends). The program calls the tools granted to its sandbox
// through the gateway (the in-sandbox tools modules and the tool
// command); only its output and the trace of its tool calls come back.
type RunRequest struct {
	// Language is LangPython (python3), LangJavaScript (node) or
	// LangBash.
	Language string `json:"language"`
	// Code is the program (at most 100 KiB of UTF-8).
	Code string `json:"code"`
	// TimeoutS kills the program after this many seconds (default 60,
	// at most the exec limit).
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// Env is added to the program's environment.
	Env map[string]string `json:"env,omitempty"`
	// The rest is for POST /v1/run only: the sandbox to create. Template
	// (default: the daemon's), its network, its limits, and the tools
	// and toolsets granted to it (as at sandbox create).
	Template string   `json:"template,omitempty"`
	Network  *Network `json:"network,omitempty"`
	Limits   *Limits  `json:"limits,omitempty"`
	Tools    []string `json:"tools,omitempty"`
	Toolsets []string `json:"toolsets,omitempty"`
}

// ToolCallTrace is one tool call a program made, as the gateway decided
// and recorded it (the audit log holds the same as a tool.call record).
type ToolCallTrace struct {
	Tool string `json:"tool"`
	// Args are the call's arguments, the tool's redact fields shown as
	// "[redacted]".
	Args json.RawMessage `json:"args,omitempty"`
	// Outcome is "ok", "denied" (a stage refused it) or "error" (its
	// upstream failed).
	Outcome string `json:"outcome"`
	// Stage and Reason say where and why it was refused or failed.
	Stage  string `json:"stage,omitempty"`
	Reason string `json:"reason,omitempty"`
	// DryRun: a refusal was only recorded (the tool's log-only mode).
	DryRun     bool      `json:"dry_run,omitempty"`
	Start      time.Time `json:"start"`
	DurationMS float64   `json:"duration_ms"`
	// HTTPStatus is the HTTP upstream's status, when it answered.
	HTTPStatus int `json:"http_status,omitempty"`
	// OutputBytes is the size of the result the program got.
	OutputBytes int `json:"output_bytes,omitempty"`
}

// RunResult is the answer of a run that is not streamed: how the program
// ended, its output (as in ExecResult) and its tool calls in the order
// they ended.
type RunResult struct {
	// SandboxID is the sandbox it ran in (for POST /v1/run, gone by
	// now).
	SandboxID string `json:"sandbox_id"`
	ExecResult
	ToolCalls []ToolCallTrace `json:"tool_calls"`
	// ToolCallsDropped counts the calls past the trace's cap (10,000),
	// which the audit log still holds.
	ToolCallsDropped int `json:"tool_calls_dropped,omitempty"`
}

// ToolRequest is a call of a caller-executed tool that waits for its
// caller's answer (POST /v1/sandboxes/{id}/tool-calls/{call}). It has
// passed every check of the gateway: the caller only runs the tool.
type ToolRequest struct {
	// Type is "tool_request".
	Type string `json:"type"`
	// ID is "tc-" and 16 lowercase base32 characters.
	ID   string `json:"id"`
	Tool string `json:"tool"`
	// Args are the call's validated arguments, as the program gave them.
	Args json.RawMessage `json:"args"`
	// CreatedAt is when the program called; ExpiresAt when the call
	// fails (class timeout) unless answered.
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ToolRequestList is the answer of GET /v1/sandboxes/{id}/tool-calls:
// the sandbox's calls waiting for an answer, the oldest first.
type ToolRequestList struct {
	Calls []ToolRequest `json:"calls"`
}

// AnswerToolCallRequest is the body of POST
// /v1/sandboxes/{id}/tool-calls/{call}: the tool's output (any JSON
// value, at most 1 MiB), or the error the program gets (at most 4 KiB
// of UTF-8). Exactly one is set.
type AnswerToolCallRequest struct {
	Output json.RawMessage `json:"output,omitempty"`
	Error  string          `json:"error,omitempty"`
}

// RunStart is the first line of a streamed run: the sandbox it runs in.
type RunStart struct {
	// Type is "start".
	Type      string `json:"type"`
	SandboxID string `json:"sandbox_id"`
}

// RunToolCall is a line of a streamed run: a tool call that ended.
type RunToolCall struct {
	// Type is "tool_call".
	Type string `json:"type"`
	ToolCallTrace
}

// RunExit is the last line of a streamed run that ended (as ExecExit),
// with the number of tool calls traced and dropped.
type RunExit struct {
	// Type is "exit".
	Type string `json:"type"`
	ExecResult
	ToolCalls        int `json:"tool_calls"`
	ToolCallsDropped int `json:"tool_calls_dropped,omitempty"`
}

// RunStreamLine is any line of a streamed run, for a reader: Type says
// which of RunStart ("start"), OutputLine ("stdout", "stderr"),
// ToolRequest ("tool_request": answer it), RunToolCall ("tool_call"),
// RunExit ("exit") and StreamError ("error") the line is. Error is the
// exit line's string or the error line's object, as JSON.
type RunStreamLine struct {
	Type      string `json:"type"`
	SandboxID string `json:"sandbox_id"`
	OutputLine
	ExecResult
	// A tool_request's.
	ID        string    `json:"id"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// A tool_call's (and Tool and Args a tool_request's).
	Tool        string          `json:"tool"`
	Args        json.RawMessage `json:"args"`
	Outcome     string          `json:"outcome"`
	Stage       string          `json:"stage"`
	Reason      string          `json:"reason"`
	DryRun      bool            `json:"dry_run"`
	Start       time.Time       `json:"start"`
	DurationMS  float64         `json:"duration_ms"`
	HTTPStatus  int             `json:"http_status"`
	OutputBytes int             `json:"output_bytes"`
	// The exit line's.
	ToolCalls        int             `json:"tool_calls"`
	ToolCallsDropped int             `json:"tool_calls_dropped"`
	Error            json.RawMessage `json:"error"`
}
