package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
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
	// Background keeps the process running if ExecStream ends before it
	// does (its context ends): FollowProcess, SignalProcess and
	// SendProcessInput reach it by pid. ExecStream only.
	Background bool
	// Tag names the process in the process list.
	Tag string
	// KeepStdin keeps stdin open for SendProcessInput (ExecStream only;
	// not with Stdin).
	KeepStdin bool
	// OnStart, if set, is called by ExecStream with the process's pid
	// once it has started, before any output.
	OnStart func(pid int)
	// Pty runs the process on a terminal of this size (ExecStream
	// only): all its output arrives as Stdout; SendProcessInput types
	// on it and ResizeProcess resizes it.
	Pty *PtySize
}

// PtySize is a terminal's size.
type PtySize = api.PtySize

// Exec statuses.
const (
	StatusSuccess          = api.StatusSuccess
	StatusError            = api.StatusError
	StatusTimeout          = api.StatusTimeout
	StatusResourceExceeded = api.StatusResourceExceeded
	StatusKilled           = api.StatusKilled
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
	Stdout Stream = api.StreamStdout
	Stderr Stream = api.StreamStderr
)

// execResultFrom is the ExecResult that the wire form r describes.
func execResultFrom(r *api.ExecResult) *ExecResult {
	return &ExecResult{
		Status:          r.Status,
		ExitCode:        r.ExitCode,
		Signal:          r.Signal,
		Stdout:          pick(r.Stdout, r.StdoutB64),
		Stderr:          pick(r.Stderr, r.StderrB64),
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		Duration:        time.Duration(r.DurationMS) * time.Millisecond,
		CPUTime:         time.Duration(r.CPUMS) * time.Millisecond,
		PeakMemoryBytes: r.PeakMemoryBytes,
		Error:           r.Error,
	}
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

func (req *ExecRequest) body() (api.ExecRequest, error) {
	if (len(req.Cmd) == 0) == (req.Command == "") {
		return api.ExecRequest{}, fmt.Errorf("airlock: exec: exactly one of Cmd and Command must be set: %w", ErrInvalid)
	}
	b := api.ExecRequest{
		Cmd:        req.Cmd,
		Command:    req.Command,
		Cwd:        req.Cwd,
		Env:        req.Env,
		User:       req.User,
		TimeoutS:   seconds(req.Timeout),
		Background: req.Background,
		Tag:        req.Tag,
		KeepStdin:  req.KeepStdin,
		Pty:        req.Pty,
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
	var out api.ExecResult
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/exec"), nil, in, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return execResultFrom(&out), nil
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
	lines := outputLines(onOutput, &res, "exec stream failed")
	err = streamJSON(ctx, c, sandboxPath(id, "/exec"), b, "exec stream", maxStreamLine, func(line *api.ExecStreamLine) (bool, error) {
		if line.Type == "start" {
			if req.OnStart != nil {
				req.OnStart(line.PID)
			}
			return false, nil
		}
		return lines(line)
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// outputLines handles the lines of an exec output stream (exec, a
// followed process): output goes to onOutput, the exit line becomes *res
// and ends the stream, an error line ends it with that error.
func outputLines(onOutput func(s Stream, data []byte) error, res **ExecResult, failed string) func(*api.ExecStreamLine) (bool, error) {
	return func(line *api.ExecStreamLine) (bool, error) {
		switch line.Type {
		case api.StreamStdout, api.StreamStderr:
			data := line.DataB64
			if line.Data != "" {
				data = []byte(line.Data)
			}
			if onOutput != nil && len(data) > 0 {
				return false, onOutput(Stream(line.Type), data)
			}
		case "exit":
			*res = execResultFrom(&line.ExecResult)
			if len(line.Error) > 0 {
				_ = json.Unmarshal(line.Error, &(*res).Error)
			}
			return true, nil
		case "error":
			return true, streamError(parseErrorDetail(line.Error), failed)
		}
		return false, nil
	}
}
