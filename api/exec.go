package api

import (
	"encoding/json"
	"time"
)

// The statuses of a finished command (ExecResult.Status, PtyExit.Status):
// the ExecStatus schema.
const (
	// StatusSuccess: it exited with status 0.
	StatusSuccess = "success"
	// StatusError: it exited with another status, was killed by a signal
	// or could not be started.
	StatusError = "error"
	// StatusTimeout: its timeout killed it.
	StatusTimeout = "timeout"
	// StatusResourceExceeded: it hit a resource limit (memory, output).
	StatusResourceExceeded = "resource_exceeded"
	// StatusKilled: it was killed from outside (a signal request, a
	// kill-all, the sandbox ending).
	StatusKilled = "killed"
)

// The types of the lines of an output stream (a streamed exec, a
// followed process, a streamed code cell).
const (
	StreamStdout = "stdout"
	StreamStderr = "stderr"
)

// ExecRequest is the body of POST /v1/sandboxes/{id}/exec. Exactly one
// of Cmd and Command is set; at most one of Stdin and StdinB64.
type ExecRequest struct {
	// Cmd is the argument list; Cmd[0] is looked up in PATH.
	Cmd []string `json:"cmd,omitempty"`
	// Command is a shell command line, run with /bin/sh -c.
	Command string `json:"command,omitempty"`
	// Cwd is the working directory, relative to the user's home.
	Cwd string `json:"cwd,omitempty"`
	// Env is added to the sandbox's environment.
	Env map[string]string `json:"env,omitempty"`
	// User is "user" or "root"; empty means the template's user.
	User string `json:"user,omitempty"`
	// Stdin is the standard input as UTF-8 text; nil means none.
	Stdin *string `json:"stdin,omitempty"`
	// StdinB64 is the standard input as any bytes (base64 on the wire).
	StdinB64 []byte `json:"stdin_b64,omitempty"`
	// TimeoutS kills the command after this many seconds; 0 means the
	// server's default.
	TimeoutS int64 `json:"timeout_s,omitempty"`
	// Background keeps the process running when the stream that started
	// it ends (streamed exec only): follow it again with GET
	// .../processes/{pid}/output, signal it, feed its stdin.
	Background bool `json:"background,omitempty"`
	// Tag names the process in the process list (at most 64 bytes).
	Tag string `json:"tag,omitempty"`
	// KeepStdin keeps the process's stdin open for POST
	// .../processes/{pid}/stdin (streamed exec only; not with Stdin,
	// which input sent there could overtake).
	KeepStdin bool `json:"keep_stdin,omitempty"`
	// Pty runs the process on a terminal of this size (streamed exec
	// only): its output, all of it on stdout, is the terminal's; its
	// input goes through POST .../processes/{pid}/stdin (keep_stdin is
	// implied) and POST .../processes/{pid}/resize resizes it.
	Pty *PtySize `json:"pty,omitempty"`
}

// PtySize is a terminal's size, in a streamed exec and the body of POST
// /v1/sandboxes/{id}/processes/{pid}/resize.
type PtySize struct {
	Cols int `json:"cols"`
	Rows int `json:"rows"`
}

// ExecStart is the first line of a streamed exec, once the process has
// started: its pid, for the process routes.
type ExecStart struct {
	// Type is "start".
	Type string `json:"type"`
	PID  int    `json:"pid"`
}

// ProcessInputRequest is the body of POST
// /v1/sandboxes/{id}/processes/{pid}/stdin: bytes for the process's
// stdin (Data as text or DataB64, at most 1 MiB), and whether to close
// it after them.
type ProcessInputRequest struct {
	Data    *string `json:"data,omitempty"`
	DataB64 []byte  `json:"data_b64,omitempty"`
	Close   bool    `json:"close,omitempty"`
}

// ExecResult is how a command ended: the body of a buffered exec. Output
// that is valid UTF-8 is carried in Stdout and Stderr, other output in
// StdoutB64 and StderrB64, never both; the server writes the output
// fields after the others.
type ExecResult struct {
	// Status is one of the Status constants.
	Status string `json:"status"`
	// ExitCode is the exit code: -1 when killed by a signal, 127 or 126
	// when the command could not be started.
	ExitCode int `json:"exit_code"`
	// Signal is the signal that killed it, 0 if it exited.
	Signal int `json:"signal"`
	// Stdout and Stderr are the output as text; nil when absent.
	Stdout *string `json:"stdout,omitempty"`
	// StdoutB64 is the output when it is not valid UTF-8 (base64 on the
	// wire).
	StdoutB64 []byte  `json:"stdout_b64,omitempty"`
	Stderr    *string `json:"stderr,omitempty"`
	StderrB64 []byte  `json:"stderr_b64,omitempty"`
	// StdoutTruncated and StderrTruncated report output over the
	// server's cap, which was dropped.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// DurationMS is its wall time, CPUMS its CPU time, both in
	// milliseconds.
	DurationMS int64 `json:"duration_ms"`
	CPUMS      int64 `json:"cpu_ms"`
	// PeakMemoryBytes is the most memory its process tree used.
	PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
	// Error says why the command could not be started, if it could not.
	Error string `json:"error,omitempty"`
}

// ExecExit is the last line of an output stream: the result, without
// output, after Type "exit".
type ExecExit struct {
	// Type is "exit".
	Type string `json:"type"`
	ExecResult
}

// OutputLine is a chunk of output in an exec's output stream: Data when
// it is valid UTF-8, DataB64 otherwise. A UTF-8 character split between
// two chunks is held back so that it stays text.
type OutputLine struct {
	// Type is StreamStdout or StreamStderr.
	Type string `json:"type"`
	// Data is the chunk as text.
	Data string `json:"data,omitempty"`
	// DataB64 is the chunk when it is not valid UTF-8 (base64 on the
	// wire).
	DataB64 []byte `json:"data_b64,omitempty"`
}

// ExecStreamLine is any line of an exec's output stream (a streamed exec,
// GET .../processes/{pid}/output), for a reader: Type says which of
// ExecStart ("start", a streamed exec's first line), OutputLine
// ("stdout", "stderr"), ExecExit ("exit") and StreamError ("error") the
// line is. Error is the exit line's string or the error
// line's object, as JSON.
type ExecStreamLine struct {
	Type string `json:"type"`
	// PID is the start line's.
	PID int `json:"pid"`
	OutputLine
	ExecResult
	Error json.RawMessage `json:"error"`
}

// SandboxProcess is one process of a sandbox, whoever started it.
type SandboxProcess struct {
	// PID is the process id inside the sandbox; PPID its parent's (1,
	// the sandbox's agent, for the processes it started and for
	// orphans).
	PID  int `json:"pid"`
	PPID int `json:"ppid"`
	// Cmd is the command line, empty for a zombie; CmdTruncated is set
	// when the server cut it (64 arguments, 4 KiB).
	Cmd          []string `json:"cmd"`
	CmdTruncated bool     `json:"cmd_truncated"`
	// Name is the executable's name as the kernel keeps it (15 bytes).
	Name string `json:"name"`
	// UID is the real uid inside the sandbox; User its account name, when
	// known.
	UID  int    `json:"uid"`
	User string `json:"user,omitempty"`
	// State is running, sleeping, disk-sleep, stopped, tracing-stop,
	// zombie, dead, idle, parked, waking, wakekill or unknown.
	State string `json:"state"`
	// Cgroup is the process's cgroup inside the sandbox: /work/cN for the
	// Nth process tree started in it.
	Cgroup string `json:"cgroup,omitempty"`
	// Session is the pid of the started process whose tree holds this one.
	Session   int       `json:"session"`
	StartedAt time.Time `json:"started_at"`
	// StartedByAgent is set for a process the sandbox's agent started and
	// tracks (an exec, a background process, a code context's kernel):
	// its output can be followed. Tag and Background are its own.
	StartedByAgent bool   `json:"started_by_agent"`
	Tag            string `json:"tag,omitempty"`
	Background     bool   `json:"background"`
}

// ProcessList is the body of GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	// Processes are the sandbox's processes but its agent, by pid.
	Processes []SandboxProcess `json:"processes"`
	// Total counts every process of the sandbox (its agent excluded);
	// Truncated is set when the list left some out (more than 4096).
	Total     int  `json:"total"`
	Truncated bool `json:"truncated"`
}

// SignalRequest is the body of POST
// /v1/sandboxes/{id}/processes/{pid}/signal.
type SignalRequest struct {
	// Signal is a name ("TERM", "SIGKILL") or a number (1..64), as a
	// JSON string or number.
	Signal json.RawMessage `json:"signal"`
}

// KillAllRequest is the optional body of POST
// /v1/sandboxes/{id}/processes/kill.
type KillAllRequest struct {
	// TimeoutS bounds the wait for the last process to be reaped; 0
	// means 10 s.
	TimeoutS int64 `json:"timeout_s,omitempty"`
}

// KillAllResult is the answer of POST /v1/sandboxes/{id}/processes/kill.
type KillAllResult struct {
	// Killed counts the processes killed (zombies not counted).
	Killed int `json:"killed"`
}
