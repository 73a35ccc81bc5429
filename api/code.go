package api

import (
	"encoding/json"
	"time"
)

// The code interpreter's languages.
const (
	LangPython     = "python"
	LangJavaScript = "javascript"
	LangBash       = "bash"
)

// The statuses of a cell (CodeEnd.Status).
const (
	// CodeStatusOK: the cell ran to its end.
	CodeStatusOK = "ok"
	// CodeStatusError: the cell raised an error (bash: exited non-zero).
	CodeStatusError = "error"
	// CodeStatusTimeout: its timeout interrupted the cell.
	CodeStatusTimeout = "timeout"
	// CodeStatusInterrupted: an interrupt (or the output cap) stopped it.
	CodeStatusInterrupted = "interrupted"
	// CodeStatusDied: the context's process ended; its state is lost.
	CodeStatusDied = "died"
)

// CodeRequest is the body of POST /v1/sandboxes/{id}/code: one cell.
type CodeRequest struct {
	// Language is python, javascript or bash; required without
	// ContextID.
	Language string `json:"language,omitempty"`
	// Code is the cell's source (required: nil is absent).
	Code *string `json:"code"`
	// ContextID names a context; empty means the language's default
	// context.
	ContextID string `json:"context_id,omitempty"`
	// Env is set for this cell only.
	Env map[string]string `json:"env,omitempty"`
	// TimeoutS interrupts the cell after this many seconds; 0 means the
	// server's default.
	TimeoutS int64 `json:"timeout_s,omitempty"`
}

// CodeResult is a value a cell showed: its last expression's value
// (IsMainResult), a figure or a display() call, in one or more
// representations. Absent representations are empty.
type CodeResult struct {
	IsMainResult bool   `json:"is_main_result"`
	Text         string `json:"text,omitempty"`
	HTML         string `json:"html,omitempty"`
	Markdown     string `json:"markdown,omitempty"`
	SVG          string `json:"svg,omitempty"`
	// PNG and JPEG are the images, in base64.
	PNG        string          `json:"png,omitempty"`
	JPEG       string          `json:"jpeg,omitempty"`
	LaTeX      string          `json:"latex,omitempty"`
	JSON       json.RawMessage `json:"json,omitempty"`
	JavaScript string          `json:"javascript,omitempty"`
	// Omitted says what the server left out for a size limit.
	Omitted string `json:"omitted,omitempty"`
}

// CodeError is the error a cell raised: for Python and JavaScript the
// exception's class, message and traceback; ExitStatus for a bash cell
// that exited non-zero; ContextDied when the context's process ended;
// OutputLimitExceeded.
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback"`
}

// CodeEnd is how a cell ended.
type CodeEnd struct {
	// ContextID and Language name the context that ran it.
	ContextID string `json:"context_id"`
	Language  string `json:"language"`
	// ExecutionCount counts the cells of the context, this one included.
	ExecutionCount int `json:"execution_count"`
	// Status is one of the CodeStatus constants.
	Status string `json:"status"`
	// ExitCode is the exit status of a bash cell, 0 for the other
	// languages.
	ExitCode int `json:"exit_code"`
	// OutputTruncated: stdout plus stderr passed the server's cap;
	// ResultsTruncated: results did.
	OutputTruncated  bool `json:"output_truncated"`
	ResultsTruncated bool `json:"results_truncated"`
	// DurationMS is the cell's wall time in milliseconds.
	DurationMS int64 `json:"duration_ms"`
}

// CodeExecution is the body of a buffered POST /v1/sandboxes/{id}/code:
// how the cell ended, its results in order, its output per stream and its
// error, if any.
type CodeExecution struct {
	CodeEnd
	Results []CodeResult `json:"results"`
	Stdout  string       `json:"stdout"`
	Stderr  string       `json:"stderr"`
	// Error is null unless the cell raised one.
	Error *CodeError `json:"error"`
}

// The lines of a streamed code cell (Accept: application/x-ndjson): its
// output (CodeOutputLine), results (CodeResultLine) and error
// (CodeErrorLine) as they come, then CodeEndLine, or a StreamError when
// the stream broke.

// CodeOutputLine is output of a cell, as text.
type CodeOutputLine struct {
	// Type is StreamStdout or StreamStderr.
	Type string `json:"type"`
	Data string `json:"data"`
}

// CodeResultLine is a result, after Type "result".
type CodeResultLine struct {
	Type string `json:"type"`
	CodeResult
}

// CodeErrorLine is the cell's error (at most one), after Type "error".
type CodeErrorLine struct {
	Type string `json:"type"`
	CodeError
}

// CodeEndLine is the last line: how the cell ended, after Type "end".
type CodeEndLine struct {
	Type string `json:"type"`
	CodeEnd
}

// CodeStreamLine is any line of a streamed cell, for a reader: Type says
// which it is. An "error" line is the cell's error (CodeError's fields
// set) or, with Error set, a StreamError.
type CodeStreamLine struct {
	Type string `json:"type"`
	Data string `json:"data"`
	CodeResult
	CodeError
	CodeEnd
	Error *ErrorDetail `json:"error"`
}

// CodeContextRequest is the body of POST /v1/sandboxes/{id}/contexts.
type CodeContextRequest struct {
	// Language is python, javascript or bash.
	Language string `json:"language"`
	// Cwd is the working directory (relative to the user's home).
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the sandbox's environment for the context.
	Env map[string]string `json:"env,omitempty"`
}

// CodeContext is a stateful code context of a sandbox.
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	// Cwd is the working directory its process started in.
	Cwd string `json:"cwd"`
	// Default marks the language's default context.
	Default bool `json:"default"`
	// State is idle, busy or dead (Error says why).
	State          string    `json:"state"`
	Error          string    `json:"error,omitempty"`
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
}

// CodeContextList is the body of GET /v1/sandboxes/{id}/contexts.
type CodeContextList struct {
	// Contexts are the sandbox's contexts, oldest first.
	Contexts []CodeContext `json:"contexts"`
}

// InterruptResult is the answer of POST
// /v1/sandboxes/{id}/contexts/{cid}/interrupt.
type InterruptResult struct {
	// Interrupted reports whether a cell was running.
	Interrupted bool `json:"interrupted"`
}

// String is the error as a line: its name, and its value if any.
func (e *CodeError) String() string {
	if e.Value == "" {
		return e.Name
	}
	return e.Name + ": " + e.Value
}
