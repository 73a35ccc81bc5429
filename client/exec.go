package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"
)

// maxStreamLine caps one line of a streamed exec (the server sends at
// most 32 KiB of output per line, base64 makes that ~44 KiB).
const maxStreamLine = 1 << 20

// ExecRequest describes a command to run. Exactly one of Cmd and Command
// must be set.
type ExecRequest struct {
	// Cmd is the argument list; Cmd[0] is looked up in PATH.
	Cmd []string
	// Command is a shell command line (run with /bin/sh -c).
	Command string
	// Cwd is the working directory (relative to the user's home).
	Cwd string
	// Env is added to the sandbox's environment.
	Env map[string]string
	// User is "user" (the default) or "root".
	User string
	// Stdin is the command's standard input; nil means none.
	Stdin []byte
	// Timeout kills the command after this long, rounded up to whole
	// seconds; zero means the server's default (60 s).
	Timeout time.Duration
}

// Exec statuses.
const (
	StatusSuccess          = "success"
	StatusError            = "error"
	StatusTimeout          = "timeout"
	StatusResourceExceeded = "resource_exceeded"
	StatusKilled           = "killed"
)

// ExecResult is how a command ended.
type ExecResult struct {
	// Status is one of the Status constants.
	Status string
	// ExitCode is the exit code, -1 when killed by a signal.
	ExitCode int
	// Signal is the signal that killed the command, 0 if it exited.
	Signal int
	// Stdout and Stderr are the output (Exec only; ExecStream delivers
	// output through its callback).
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	Duration                         time.Duration
	CPUTime                          time.Duration
	PeakMemoryBytes                  uint64
	// Error says why the command could not be started, if it could not.
	Error string
}

// Stream names an output stream.
type Stream string

// The output streams.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

type execBody struct {
	Cmd      []string          `json:"cmd,omitempty"`
	Command  string            `json:"command,omitempty"`
	Cwd      string            `json:"cwd,omitempty"`
	Env      map[string]string `json:"env,omitempty"`
	User     string            `json:"user,omitempty"`
	Stdin    *string           `json:"stdin,omitempty"`
	StdinB64 []byte            `json:"stdin_b64,omitempty"`
	TimeoutS int64             `json:"timeout_s,omitempty"`
}

// resultBody is the result of an exec and the "exit" line of a stream.
type resultBody struct {
	Type            string  `json:"type"`
	Status          string  `json:"status"`
	ExitCode        int     `json:"exit_code"`
	Signal          int     `json:"signal"`
	Stdout          *string `json:"stdout"`
	StdoutB64       []byte  `json:"stdout_b64"`
	Stderr          *string `json:"stderr"`
	StderrB64       []byte  `json:"stderr_b64"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	DurationMS      int64   `json:"duration_ms"`
	CPUMS           int64   `json:"cpu_ms"`
	PeakMemoryBytes uint64  `json:"peak_memory_bytes"`
	Error           string  `json:"error"`
}

func (r *resultBody) result() *ExecResult {
	out := &ExecResult{
		Status:          r.Status,
		ExitCode:        r.ExitCode,
		Signal:          r.Signal,
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		Duration:        time.Duration(r.DurationMS) * time.Millisecond,
		CPUTime:         time.Duration(r.CPUMS) * time.Millisecond,
		PeakMemoryBytes: r.PeakMemoryBytes,
		Error:           r.Error,
	}
	out.Stdout = pick(r.Stdout, r.StdoutB64)
	out.Stderr = pick(r.Stderr, r.StderrB64)
	return out
}

func pick(text *string, raw []byte) []byte {
	if text != nil {
		return []byte(*text)
	}
	if raw != nil {
		return raw
	}
	return nil
}

func (req *ExecRequest) body() (execBody, error) {
	if (len(req.Cmd) == 0) == (req.Command == "") {
		return execBody{}, fmt.Errorf("airlock: exec: exactly one of Cmd and Command must be set: %w", ErrInvalid)
	}
	b := execBody{
		Cmd:      req.Cmd,
		Command:  req.Command,
		Cwd:      req.Cwd,
		Env:      req.Env,
		User:     req.User,
		TimeoutS: seconds(req.Timeout),
	}
	if req.Stdin != nil {
		if utf8.Valid(req.Stdin) {
			s := string(req.Stdin)
			b.Stdin = &s
		} else {
			b.StdinB64 = req.Stdin
		}
	}
	return b, nil
}

// Exec runs a command in sandbox id to completion and returns its result
// with its output (the server keeps at most 1 MiB per stream by default
// and reports the rest as truncated). A command that ran and failed is a
// result, not an error.
func (c *Client) Exec(ctx context.Context, id string, req ExecRequest) (*ExecResult, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	in, err := req.body()
	if err != nil {
		return nil, err
	}
	var out resultBody
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/exec"), nil, in, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.result(), nil
}

// streamLine is one line of a streamed exec.
type streamLine struct {
	resultBody
	Data    *string `json:"data"`
	DataB64 []byte  `json:"data_b64"`
	// Error is a string in an exit line (why the command could not
	// start) and an object in an error line; it shadows resultBody's.
	Error json.RawMessage `json:"error"`
}

// ExecStream runs a command in sandbox id and calls onOutput with each
// chunk of output as the server receives it (in order, from one
// goroutine; data is only valid during the call). If onOutput returns an
// error, the command is killed and ExecStream returns that error. The
// result carries no output.
func (c *Client) ExecStream(ctx context.Context, id string, req ExecRequest, onOutput func(s Stream, data []byte) error) (*ExecResult, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	b, err := req.body()
	if err != nil {
		return nil, err
	}
	var res *ExecResult
	err = streamJSON(ctx, c, sandboxPath(id, "/exec"), b, "exec stream", maxStreamLine, outputLines(onOutput, &res, "exec stream failed"))
	if err != nil {
		return nil, err
	}
	return res, nil
}

// outputLines handles the lines of an exec output stream (exec, a
// followed process): output goes to onOutput, the exit line becomes *res
// and ends the stream, an error line ends it with that error.
func outputLines(onOutput func(s Stream, data []byte) error, res **ExecResult, failed string) func(*streamLine) (bool, error) {
	return func(line *streamLine) (bool, error) {
		switch line.Type {
		case string(Stdout), string(Stderr):
			data := line.DataB64
			if line.Data != nil {
				data = []byte(*line.Data)
			}
			if onOutput != nil && len(data) > 0 {
				return false, onOutput(Stream(line.Type), data)
			}
		case "exit":
			*res = line.result()
			if len(line.Error) > 0 {
				_ = json.Unmarshal(line.Error, &(*res).Error)
			}
			return true, nil
		case "error":
			return true, parseErrDetail(line.Error).apiError(failed)
		}
		return false, nil
	}
}
