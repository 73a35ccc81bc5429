package openai

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/toolexec/inflight"
)

// executor runs the calls of one request in sandbox id with the
// caller's client.
type executor struct {
	c   *client.Client
	id  string
	req *Request
	// patches are the handler's patch slots; budget is what the answer
	// may still carry of outputs.
	patches chan struct{}
	budget  answerBudget
}

// shellOutput is one command's entry of a shell_call_output.
type shellOutput struct {
	Stdout  string  `json:"stdout"`
	Stderr  string  `json:"stderr"`
	Outcome outcome `json:"outcome"`
}

// outcome is how a command ended: {"type":"exit","exit_code":N} or
// {"type":"timeout"}.
type outcome struct {
	Type     string `json:"type"`
	ExitCode *int   `json:"exit_code,omitempty"`
}

func exited(code int) outcome { return outcome{Type: "exit", ExitCode: &code} }

type shellCallOutput struct {
	Type            string          `json:"type"`
	CallID          string          `json:"call_id"`
	Output          []shellOutput   `json:"output"`
	MaxOutputLength int             `json:"max_output_length"`
	Caller          json.RawMessage `json:"caller,omitempty"`
}

type localShellCallOutput struct {
	Type string `json:"type"`
	// ID is the call's call_id (the API names it id on this item).
	ID     string `json:"id"`
	Output string `json:"output"`
}

type applyPatchCallOutput struct {
	Type   string          `json:"type"`
	CallID string          `json:"call_id"`
	Status string          `json:"status"`
	Output string          `json:"output"`
	Caller json.RawMessage `json:"caller,omitempty"`
}

type functionCallOutput struct {
	Type   string          `json:"type"`
	CallID string          `json:"call_id"`
	Output string          `json:"output"`
	Caller json.RawMessage `json:"caller,omitempty"`
}

// run runs one call and returns its answer. An error is one that ends
// the whole request (the key, or the sandbox, is gone); the call's own
// failures are in its answer.
func (x *executor) run(ctx context.Context, c *call) (any, error) {
	switch c.Type {
	case typeShellCall:
		return x.shell(ctx, c)
	case typeLocalShellCall:
		return x.localShell(ctx, c)
	case typeApplyPatchCall:
		return x.applyPatch(ctx, c)
	case typeFunctionCall:
		return x.program(ctx, c)
	}
	return nil, fmt.Errorf("openai: no runner for %s", c.Type)
}

// fatal reports whether err from exec or run ends the request: a key
// that is no longer valid, a sandbox that is gone or not running, an
// API that cannot be reached, or the request's own end. Anything else (a
// command policy's denial, a limit) is the call's failure.
func fatal(ctx context.Context, err error) bool {
	return unreachable(ctx, err) || errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrConflict)
}

// unreachable reports whether err ends the request whatever the call:
// the request's end, a key that is no longer valid, or a failure to
// reach the API (an error that is neither the API's answer nor one of
// the client's or this package's refusals).
func unreachable(ctx context.Context, err error) bool {
	var ae *client.APIError
	switch {
	case ctx.Err() != nil || errors.Is(err, client.ErrUnauthorized):
		return true
	case errors.As(err, &ae), errors.Is(err, client.ErrInvalid), errors.Is(err, errNotText), errors.Is(err, errFileTooLarge):
		return false
	}
	return true
}

// message is the text of err the model gets.
func message(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Message
	}
	return err.Error()
}

// timeout is a call's timeout: its own (ms), else the request's, else
// the default; at most maxTimeout.
func (x *executor) timeout(ms *int64) time.Duration {
	d := defaultTimeout
	switch {
	case ms != nil && *ms > 0:
		d = time.Duration(*ms) * time.Millisecond
	case x.req.TimeoutMS > 0:
		d = time.Duration(x.req.TimeoutMS) * time.Millisecond
	}
	return min(d, maxTimeout)
}

// outputLimit is a call's cap on each output stream: its own, else the
// request's, else the default; at most maxOutputLength.
func (x *executor) outputLimit(n *int) int {
	l := defaultOutputLength
	switch {
	case n != nil && *n > 0:
		l = *n
	case x.req.MaxOutputLength > 0:
		l = x.req.MaxOutputLength
	}
	return min(l, maxOutputLength)
}

// truncate is b as valid UTF-8, cut to at most n bytes on a character
// boundary.
func truncate(b []byte, n int) string {
	if len(b) > n {
		b = b[:n]
		for i := 0; i < utf8.UTFMax-1 && len(b) > 0; i++ {
			if r, size := utf8.DecodeLastRune(b); r != utf8.RuneError || size != 1 {
				break
			}
			b = b[:len(b)-1]
		}
	}
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// exitCode is how a finished command's result reads as an exit code: a
// command killed by a signal is 128+signal, as a shell reports it.
func exitCode(res *client.ExecResult) int {
	if res.Signal > 0 {
		return 128 + res.Signal
	}
	return res.ExitCode
}

// shell runs a shell_call's commands in order, each with bash -lc, one
// output entry each; a command that times out ends the call.
func (x *executor) shell(ctx context.Context, c *call) (any, error) {
	limit := x.outputLimit(c.Shell.MaxOutputLength)
	out := shellCallOutput{Type: typeShellOutput, CallID: c.CallID, Output: []shellOutput{}, MaxOutputLength: limit, Caller: c.Caller}
	if c.problem != "" {
		out.Output = append(out.Output, shellOutput{Stderr: x.budget.keep("airlock: "+c.problem, false), Outcome: exited(2)})
		return out, nil
	}
	timeout := x.timeout(c.Shell.TimeoutMS)
	for _, cmd := range c.Shell.Commands {
		res, err := x.c.Exec(ctx, x.id, client.ExecRequest{Cmd: []string{"bash", "-lc", cmd}, Cwd: x.req.Cwd, Env: x.req.Env,
			User: x.req.User, Timeout: timeout})
		if err != nil {
			if fatal(ctx, err) {
				return nil, err
			}
			out.Output = append(out.Output, shellOutput{Stderr: x.budget.keep("airlock: "+message(err), false), Outcome: exited(126)})
			continue
		}
		o := shellOutput{Stdout: truncate(res.Stdout, limit), Stderr: truncate(res.Stderr, limit), Outcome: exited(exitCode(res))}
		if res.Error != "" {
			o.Stderr = truncate([]byte(o.Stderr+"airlock: "+res.Error), limit)
		}
		o.Stdout, o.Stderr = x.budget.keep(o.Stdout, false), x.budget.keep(o.Stderr, false)
		if res.Status == client.StatusTimeout {
			o.Outcome = outcome{Type: "timeout"}
			out.Output = append(out.Output, o)
			break
		}
		out.Output = append(out.Output, o)
	}
	return out, nil
}

// localShellResult is the JSON text of a local_shell_call_output, in the
// form Codex's shell tool answers with.
type localShellResult struct {
	Output   string `json:"output"`
	Metadata struct {
		ExitCode        int     `json:"exit_code"`
		DurationSeconds float64 `json:"duration_seconds"`
		TimedOut        bool    `json:"timed_out,omitempty"`
	} `json:"metadata"`
}

// localShell runs a local_shell_call's argv (no shell), in its working
// directory with its environment added to the request's.
func (x *executor) localShell(ctx context.Context, c *call) (any, error) {
	var r localShellResult
	answer := func() (any, error) {
		r.Output = x.budget.keep(r.Output, true)
		b, _ := json.Marshal(r)
		return localShellCallOutput{Type: typeLocalShellOutput, ID: c.CallID, Output: string(b)}, nil
	}
	if c.problem != "" {
		r.Output, r.Metadata.ExitCode = "airlock: "+c.problem, 2
		return answer()
	}
	env := maps.Clone(x.req.Env)
	if env == nil {
		env = map[string]string{}
	}
	maps.Copy(env, c.Local.Env)
	cwd := x.req.Cwd
	if c.Local.WorkingDirectory != "" {
		cwd = c.Local.WorkingDirectory
	}
	limit := x.outputLimit(nil)
	res, err := x.c.Exec(ctx, x.id, client.ExecRequest{Cmd: c.Local.Command, Cwd: cwd, Env: env, User: x.req.User,
		Timeout: x.timeout(c.Local.TimeoutMS)})
	if err != nil {
		if fatal(ctx, err) {
			return nil, err
		}
		r.Output, r.Metadata.ExitCode = "airlock: "+message(err), 126
		return answer()
	}
	r.Output = truncate(append(append([]byte(nil), res.Stdout...), res.Stderr...), limit)
	if res.Error != "" {
		r.Output += "airlock: " + res.Error
	}
	r.Metadata.ExitCode, r.Metadata.DurationSeconds = exitCode(res), res.Duration.Seconds()
	r.Metadata.TimedOut = res.Status == client.StatusTimeout
	return answer()
}

// patchPath is where an operation's path is: relative paths start at
// the request's cwd (or, without one, at the user's home, as the files
// API has it).
func (x *executor) patchPath(p string) string {
	if path.IsAbs(p) || x.req.Cwd == "" {
		return p
	}
	return path.Join(x.req.Cwd, p)
}

// applyPatch carries out an apply_patch_call's operation through the
// files API, the diff applied here.
func (x *executor) applyPatch(ctx context.Context, c *call) (any, error) {
	out := applyPatchCallOutput{Type: typeApplyPatchOutput, CallID: c.CallID, Status: "completed", Caller: c.Caller}
	fail := func(msg string) (any, error) {
		out.Status, out.Output = "failed", x.budget.keep(msg, false)
		return out, nil
	}
	if c.problem != "" {
		return fail(c.problem)
	}
	// A patch holds its file and their lines several times over, and
	// matches them: a few at a time (bounds.go).
	free, err := inflight.Slot(ctx, x.patches)
	if err != nil {
		return nil, err
	}
	defer free()
	p := x.patchPath(c.Patch.Path)
	opts := []client.FileOption{}
	if x.req.User != "" {
		opts = append(opts, client.AsUser(x.req.User))
	}
	switch c.Patch.Type {
	case "create_file":
		var content string
		if content, err = applyDiff("", *c.Patch.Diff, true); err != nil {
			return fail(fmt.Sprintf("%s: %v", c.Patch.Path, err))
		}
		if _, err = x.c.WriteFile(ctx, x.id, p, strings.NewReader(content), opts...); err == nil {
			out.Output = "Created " + c.Patch.Path
		}
	case "update_file":
		var old []byte
		if old, err = x.readText(ctx, p, opts); err == nil {
			var content string
			if content, err = applyDiff(string(old), *c.Patch.Diff, false); err != nil {
				return fail(fmt.Sprintf("%s: %v", c.Patch.Path, err))
			}
			if _, err = x.c.WriteFile(ctx, x.id, p, strings.NewReader(content), opts...); err == nil {
				out.Output = "Updated " + c.Patch.Path
			}
		}
	case "delete_file":
		if err = x.c.RemoveFile(ctx, x.id, p, false, opts...); err == nil {
			out.Output = "Deleted " + c.Patch.Path
		}
	}
	if err != nil {
		if unreachable(ctx, err) {
			return nil, err
		}
		return fail(fmt.Sprintf("%s: %s", c.Patch.Path, message(err)))
	}
	out.Output = x.budget.keep(out.Output, false)
	return out, nil
}

// The files apply_patch cannot update.
var (
	errNotText      = errors.New("not a UTF-8 text file")
	errFileTooLarge = fmt.Errorf("larger than %d bytes", maxPatchFile)
)

// readText reads a file to patch: at most maxPatchFile bytes of UTF-8.
func (x *executor) readText(ctx context.Context, p string, opts []client.FileOption) ([]byte, error) {
	rc, err := x.c.ReadFile(ctx, x.id, p, opts...)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var b bytes.Buffer
	if _, err := io.Copy(&b, io.LimitReader(rc, maxPatchFile+1)); err != nil {
		return nil, err
	}
	switch {
	case b.Len() > maxPatchFile:
		return nil, errFileTooLarge
	case !utf8.Valid(b.Bytes()) || bytes.IndexByte(b.Bytes(), 0) >= 0:
		return nil, errNotText
	}
	return b.Bytes(), nil
}

// programResult is the JSON text of airlock_run_program's output.
type programResult struct {
	Status           string      `json:"status"`
	ExitCode         int         `json:"exit_code"`
	Stdout           string      `json:"stdout"`
	Stderr           string      `json:"stderr"`
	Error            string      `json:"error,omitempty"`
	ToolCalls        []toolTrace `json:"tool_calls"`
	ToolCallsOmitted int         `json:"tool_calls_omitted,omitempty"`
}

// toolTrace is one gateway call of a program, as the model sees it.
type toolTrace struct {
	Tool    string `json:"tool"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
}

// maxTraces caps the tool calls a program's output lists.
const maxTraces = 100

// program runs airlock_run_program's program in the sandbox.
func (x *executor) program(ctx context.Context, c *call) (any, error) {
	out := functionCallOutput{Type: typeFunctionOutput, CallID: c.CallID, Caller: c.Caller}
	if c.problem != "" {
		out.Output = x.budget.keep("error: "+c.problem, false)
		return out, nil
	}
	timeout := x.timeout(nil)
	if c.Program.TimeoutS > 0 {
		timeout = time.Duration(c.Program.TimeoutS) * time.Second
	}
	res, err := x.c.Run(ctx, x.id, client.RunRequest{Language: c.Program.Language, Code: c.Program.Code, Timeout: timeout,
		Env: x.req.Env}, nil)
	if err != nil {
		if fatal(ctx, err) {
			return nil, err
		}
		out.Output = x.budget.keep("error: "+message(err), false)
		return out, nil
	}
	limit := x.outputLimit(nil)
	r := programResult{Status: res.Status, ExitCode: exitCode(&res.ExecResult), Stdout: x.budget.keep(truncate(res.Stdout, limit), true),
		Stderr: x.budget.keep(truncate(res.Stderr, limit), true), Error: res.Error, ToolCalls: []toolTrace{}, ToolCallsOmitted: res.ToolCallsDropped}
	for i, t := range res.ToolCalls {
		if i == maxTraces {
			r.ToolCallsOmitted += len(res.ToolCalls) - i
			break
		}
		r.ToolCalls = append(r.ToolCalls, toolTrace{Tool: t.Tool, Outcome: t.Outcome, Reason: t.Reason})
	}
	b, _ := json.Marshal(r)
	out.Output = string(b)
	return out, nil
}
