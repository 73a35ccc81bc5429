package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// ToolCallTrace is one tool call a program made, as the gateway decided
// and recorded it.
type ToolCallTrace = api.ToolCallTrace

// ToolRequest is a call of a caller-executed tool that waits for its
// caller's answer.
type ToolRequest = api.ToolRequest

// RunRequest is a program to run. Run runs it in a sandbox that exists,
// with the tools granted to it; RunOnce in a sandbox created for it
// with Template, Network, Limits, Tools and Toolsets, which Run refuses.
type RunRequest struct {
	// Language is LangPython, LangJavaScript (CommonJS:
	// require('tools')) or LangBash.
	Language string
	// Code is the program (at most 100 KiB).
	Code string
	// Timeout kills the program after this long, rounded up to whole
	// seconds; zero means the server's default (60 s).
	Timeout time.Duration
	Env     map[string]string
	// For RunOnce.
	Template string
	Network  *Network
	Limits   *Limits
	Tools    []string
	Toolsets []string
}

// ToolFunc runs one call of a caller-executed tool with its arguments
// (JSON) and returns its result, which is encoded as JSON (a
// json.RawMessage is sent as it is), or an error, whose text the
// program gets as the tool's failure.
type ToolFunc func(ctx context.Context, args json.RawMessage) (any, error)

// RunOptions streams a run. With any of them set, the run is streamed
// and its output, tool requests and tool calls are handled as they
// come; without, it is one request and one answer.
type RunOptions struct {
	// Tools run the calls of caller-executed tools, by tool name, each
	// on its own goroutine (at most MaxToolCalls at once); a call of a
	// tool not here is answered with an error.
	Tools map[string]ToolFunc
	// MaxToolCalls caps the Tools calls running at once (default 64).
	MaxToolCalls int
	// OnOutput, if set, gets the output as it comes (as ExecStream's
	// callback); otherwise the result holds it (up to 16 MiB per
	// stream, the rest dropped and flagged as truncated).
	OnOutput func(s Stream, data []byte) error
	// OnToolCall, if set, gets each tool call as it ends.
	OnToolCall func(ToolCallTrace)
}

func (o *RunOptions) streamed() bool {
	return o != nil && (len(o.Tools) > 0 || o.OnOutput != nil || o.OnToolCall != nil)
}

// RunResult is how a program ended, its output and its tool calls in
// the order they ended.
type RunResult struct {
	// SandboxID is the sandbox it ran in (for RunOnce, gone by now).
	SandboxID string
	ExecResult
	ToolCalls []ToolCallTrace
	// ToolCallsDropped counts the calls past the trace's cap.
	ToolCallsDropped int
}

// maxRunCollect caps the output a streamed run collects per stream.
const maxRunCollect = 16 << 20

func (req *RunRequest) body() api.RunRequest {
	return api.RunRequest{
		Language: req.Language, Code: req.Code, TimeoutS: seconds(req.Timeout), Env: req.Env,
		Template: req.Template, Network: req.Network, Limits: req.Limits, Tools: req.Tools, Toolsets: req.Toolsets,
	}
}

// Run runs a program in sandbox id: it calls the tools granted to the
// sandbox through the gateway, and only its output and the trace of its
// tool calls come back. A program that ran and failed is a result, not
// an error. opts (may be nil) streams it; caller-executed tools need
// opts.Tools, or another client answering at ToolRequests.
func (c *Client) Run(ctx context.Context, id string, req RunRequest, opts *RunOptions) (*RunResult, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	return c.run(ctx, sandboxPath(id, "/run"), req.body(), opts)
}

// RunOnce runs a program in a sandbox created for it (from the warm
// pool where one is ready), granted req.Tools and req.Toolsets, and
// destroyed before the answer. It needs the tools:call scope only.
// Caller-executed tools need opts.Tools.
func (c *Client) RunOnce(ctx context.Context, req RunRequest, opts *RunOptions) (*RunResult, error) {
	return c.run(ctx, "/v1/run", req.body(), opts)
}

func (c *Client) run(ctx context.Context, path string, body api.RunRequest, opts *RunOptions) (*RunResult, error) {
	if !opts.streamed() {
		var out api.RunResult
		if err := c.doJSON(ctx, http.MethodPost, path, nil, body, &out, http.StatusOK); err != nil {
			return nil, err
		}
		return &RunResult{SandboxID: out.SandboxID, ExecResult: *execResultFrom(&out.ExecResult),
			ToolCalls: out.ToolCalls, ToolCallsDropped: out.ToolCallsDropped}, nil
	}
	r := &runner{c: c, opts: opts, res: &RunResult{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.ctx, r.cancel = ctx, cancel
	max := opts.MaxToolCalls
	if max <= 0 {
		max = 64
	}
	r.slots = make(chan struct{}, max)
	err := streamJSON(ctx, c, path, body, "run stream", maxStreamLine, r.line)
	cancel()
	r.wg.Wait()
	if r.answerErr != nil {
		return nil, r.answerErr
	}
	if err != nil {
		return nil, err
	}
	return r.res, nil
}

// runner handles the lines of a streamed run.
type runner struct {
	c      *Client
	ctx    context.Context
	cancel context.CancelFunc // ends the run (and kills the program)
	opts   *RunOptions
	res    *RunResult
	slots  chan struct{}
	wg     sync.WaitGroup

	mu        sync.Mutex
	answerErr error // the first answer that could not be sent
}

func (r *runner) line(raw *json.RawMessage) (bool, error) {
	var head struct {
		Type string `json:"type"`
	}
	if err := json.Unmarshal(*raw, &head); err != nil {
		return false, fmt.Errorf("airlock: run stream: malformed line: %w", err)
	}
	switch head.Type {
	case "start":
		var s api.RunStart
		if err := json.Unmarshal(*raw, &s); err != nil {
			return false, fmt.Errorf("airlock: run stream: malformed start line: %w", err)
		}
		r.res.SandboxID = s.SandboxID
	case api.StreamStdout, api.StreamStderr:
		var o api.OutputLine
		if err := json.Unmarshal(*raw, &o); err != nil {
			return false, fmt.Errorf("airlock: run stream: malformed output line: %w", err)
		}
		data := o.DataB64
		if o.Data != "" {
			data = []byte(o.Data)
		}
		if r.opts.OnOutput != nil {
			return false, r.opts.OnOutput(Stream(o.Type), data)
		}
		buf, cut := &r.res.Stdout, &r.res.StdoutTruncated
		if o.Type == api.StreamStderr {
			buf, cut = &r.res.Stderr, &r.res.StderrTruncated
		}
		if n := maxRunCollect - len(*buf); n < len(data) {
			data, *cut = data[:max(n, 0)], true
		}
		*buf = append(*buf, data...)
	case "tool_request":
		var tr api.ToolRequest
		if err := json.Unmarshal(*raw, &tr); err != nil {
			return false, fmt.Errorf("airlock: run stream: malformed tool request: %w", err)
		}
		r.answer(tr)
	case "tool_call":
		var tc api.RunToolCall
		if err := json.Unmarshal(*raw, &tc); err != nil {
			return false, fmt.Errorf("airlock: run stream: malformed tool call: %w", err)
		}
		r.res.ToolCalls = append(r.res.ToolCalls, tc.ToolCallTrace)
		if r.opts.OnToolCall != nil {
			r.opts.OnToolCall(tc.ToolCallTrace)
		}
	case "exit":
		var line api.ExecStreamLine
		if err := json.Unmarshal(*raw, &line); err != nil {
			return false, fmt.Errorf("airlock: run stream: malformed exit line: %w", err)
		}
		var exit api.RunExit
		_ = json.Unmarshal(*raw, &exit)
		res := execResultFrom(&line.ExecResult)
		if len(line.Error) > 0 {
			_ = json.Unmarshal(line.Error, &res.Error)
		}
		res.Stdout, res.Stderr = r.res.Stdout, r.res.Stderr
		res.StdoutTruncated = res.StdoutTruncated || r.res.StdoutTruncated
		res.StderrTruncated = res.StderrTruncated || r.res.StderrTruncated
		r.res.ExecResult = *res
		r.res.ToolCallsDropped = exit.ToolCallsDropped
		return true, nil
	case "error":
		var line api.StreamError
		_ = json.Unmarshal(*raw, &line)
		return true, streamError(&line.Error, "run stream failed")
	}
	return false, nil
}

// answer runs a tool request's function on its own goroutine and sends
// its answer.
func (r *runner) answer(tr api.ToolRequest) {
	r.wg.Go(func() {
		select {
		case r.slots <- struct{}{}:
		case <-r.ctx.Done():
			return
		}
		defer func() { <-r.slots }()
		var out any
		var err error
		if fn := r.opts.Tools[tr.Tool]; fn != nil {
			out, err = callTool(r.ctx, fn, tr.Args)
		} else {
			err = fmt.Errorf("this caller runs no tool %s", tr.Tool)
		}
		if aerr := r.c.AnswerToolCall(r.ctx, r.res.SandboxID, tr.ID, out, err); aerr != nil && r.ctx.Err() == nil {
			r.mu.Lock()
			if r.answerErr == nil {
				r.answerErr = fmt.Errorf("airlock: answering tool call %s of %s: %w", tr.ID, tr.Tool, aerr)
			}
			r.mu.Unlock()
			r.cancel() // the program would wait for the answer in vain
		}
	})
}

// callTool runs fn, turning a panic into an error for the program.
func callTool(ctx context.Context, fn ToolFunc, args json.RawMessage) (out any, err error) {
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, fmt.Errorf("the tool panicked: %v", p)
		}
	}()
	return fn(ctx, args)
}

// checkToolCallID checks the form of a tool call's ID: "tc-" and 16
// characters a-z, 2-7.
func checkToolCallID(id string) error {
	rest, ok := strings.CutPrefix(id, "tc-")
	if !ok || len(rest) != 16 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return fmt.Errorf("airlock: tool call ID %q is malformed (want tc- and 16 characters a-z, 2-7): %w", id, ErrInvalid)
	}
	return nil
}

// ToolRequests returns the calls of sandbox id's caller-executed tools
// that wait for an answer, the oldest first.
func (c *Client) ToolRequests(ctx context.Context, id string) ([]ToolRequest, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.ToolRequestList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/tool-calls"), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return out.Calls, nil
}

// AnswerToolCall answers the waiting call callID of sandbox id: with
// output (encoded as JSON; a json.RawMessage as it is) when toolErr is
// nil, else with toolErr's text, which the program gets as the tool's
// failure. A call no longer waiting is ErrNotFound.
func (c *Client) AnswerToolCall(ctx context.Context, id, callID string, output any, toolErr error) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkToolCallID(callID); err != nil {
		return err
	}
	var body api.AnswerToolCallRequest
	if toolErr != nil {
		msg := toolErr.Error()
		if msg == "" {
			msg = "the tool failed"
		}
		if len(msg) > 4096 {
			msg = strings.ToValidUTF8(msg[:4096], "")
		}
		body.Error = msg
	} else {
		raw, ok := output.(json.RawMessage)
		if !ok {
			var err error
			if raw, err = json.Marshal(output); err != nil {
				return fmt.Errorf("airlock: the output of tool call %s does not encode as JSON: %w", callID, errors.Join(ErrInvalid, err))
			}
		}
		body.Output = raw
	}
	return c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/tool-calls/"+url.PathEscape(callID)), nil, body, nil, http.StatusNoContent)
}
