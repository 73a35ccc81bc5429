package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ToolCalls is what the run and tool-call routes need of the tool
// gateway: the records of a sandbox's calls as they end (the run's
// trace), and the relay of caller-executed tools, whose calls wait for
// the program's caller to answer them.
type ToolCalls interface {
	Observe(sandbox string, fn func(gateway.Record)) (stop func())
	Pending(tenant, sandbox string) []gateway.RelayedCall
	Subscribe(sandbox string) (<-chan struct{}, func())
	Answer(tenant, sandbox, id string, output json.RawMessage, errMsg string) error
}

// The audit actions of programs and answers. A run's records hold the
// language, the code's sha256 and size (not the code), the granted
// tools (POST /v1/run), how the program ended and how many tool calls it
// made; each call has its own tool.call record. An answer's record
// names the call (Target), the tool, and the output's sha256 and size
// or the error text.
const (
	ActionSandboxRun = "sandbox.run"
	ActionRun        = "run"
	ActionToolAnswer = "tool.answer"
)

// Bounds of programs.
const (
	// maxCodeBytes caps a program: it is passed as one argument, which
	// Linux caps at 128 KiB.
	maxCodeBytes = 100 << 10
	// maxTraceCalls caps the tool calls a run's trace keeps; the rest
	// are counted (and in the audit log).
	maxTraceCalls = 10000
	// runSandboxGrace is how much longer than its program a run's own
	// sandbox may live, should the run be cut off before it destroys it.
	runSandboxGrace = time.Minute
	// toolStreamCheck is how often a tool-call stream checks that its
	// sandbox still runs.
	toolStreamCheck = 2 * time.Second
)

// interpreters are the commands that run a program, by language: the
// code is their last argument.
var interpreters = map[string][]string{
	wire.LangPython:     {"python3", "-c"},
	wire.LangJavaScript: {"node", "-e"},
	wire.LangBash:       {"bash", "-c"},
}

// runRequest is the body of the run routes, with its validation.
type runRequest wire.RunRequest

// exec validates the program and turns it into the exec that runs it.
func (req *runRequest) exec(lim Limits) (*execRequest, agentclient.ExecRequest, error) {
	argv, ok := interpreters[req.Language]
	if !ok {
		return nil, agentclient.ExecRequest{}, invalidf("language must be %q, %q or %q", wire.LangPython, wire.LangJavaScript, wire.LangBash)
	}
	switch {
	case strings.TrimSpace(req.Code) == "":
		return nil, agentclient.ExecRequest{}, invalidf("code is required")
	case len(req.Code) > maxCodeBytes:
		return nil, agentclient.ExecRequest{}, invalidf("code is %d bytes, at most %d are allowed; put a larger program in a file and run it with exec", len(req.Code), maxCodeBytes)
	case !utf8.ValidString(req.Code):
		return nil, agentclient.ExecRequest{}, invalidf("code must be UTF-8")
	}
	er := &execRequest{Cmd: append(append([]string(nil), argv...), req.Code), Env: req.Env, TimeoutS: req.TimeoutS}
	areq, err := er.agentRequest(lim)
	return er, areq, err
}

// details is the run's summary in the audit log.
func (req *runRequest) details() map[string]any {
	sum := sha256.Sum256([]byte(req.Code))
	d := map[string]any{"language": req.Language, "code_sha256": hex.EncodeToString(sum[:]), "code_bytes": len(req.Code)}
	addEnvDetails(d, req.Env)
	return d
}

// runSandbox serves POST /v1/sandboxes/{id}/run: a program in a sandbox
// that exists, with the tools granted to it.
func (h *Handler) runSandbox(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	var req runRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	if req.Template != "" || req.Network != nil || req.Limits != nil || len(req.Tools) > 0 || len(req.Toolsets) > 0 {
		return invalidf("template, network, limits, tools and toolsets are for POST /v1/run; this sandbox's own apply")
	}
	er, areq, err := req.exec(h.lim)
	if err != nil {
		return err
	}
	c.ev.Details = req.details()
	if err := h.checkCommandPolicy(c, sb, er); err != nil {
		return err
	}
	stream := wantsNDJSON(c.r)
	release, err := c.admit(sb.ID, h.runCost(stream, &req))
	if err != nil {
		return err
	}
	defer release()
	if err := c.begin(); err != nil {
		return err
	}
	return h.runProgram(c, sb, areq, stream, nil)
}

// runOnce serves POST /v1/run: a program in a sandbox created for it
// (from the warm pool when the request asks for what the pool holds)
// and destroyed when it ends, before the answer.
func (h *Handler) runOnce(c *call) error {
	var req runRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	er, areq, err := req.exec(h.lim)
	if err != nil {
		return err
	}
	creq := createRequest{Template: req.Template, Network: req.Network, Limits: req.Limits,
		TimeoutS: int64((areq.Timeout + runSandboxGrace) / time.Second)}
	cfg := h.mgr.Config()
	if creq.TimeoutS > int64(cfg.MaxLifetime/time.Second) {
		creq.TimeoutS = int64(cfg.MaxLifetime / time.Second)
	}
	spec, err := creq.spec(c.p.TenantID, cfg)
	if err != nil {
		return err
	}
	var fromTemplate []string
	if spec.Tools, fromTemplate, err = h.createGrants(c.r.Context(), c.p.TenantID, spec.Template, req.Tools, req.Toolsets); err != nil {
		return err
	}
	spec.KeyID = c.p.KeyID
	stream := wantsNDJSON(c.r)
	if !stream {
		if err := h.needsNoCaller(c.r.Context(), c.p.TenantID, spec.Tools); err != nil {
			return err
		}
	}
	c.ev.Details = req.details()
	c.ev.Details["template"] = spec.Template
	if len(spec.Tools) > 0 {
		c.ev.Details["tools"] = spec.Tools
	}
	if len(fromTemplate) > 0 {
		c.ev.Details["toolsets"] = map[string]any{"names": fromTemplate, "from_template": true}
	}
	if spec.Network.Mode == sandbox.NetworkAllowlist {
		c.ev.Details["network"] = networkDetails(spec.Network)
	}
	sb, undo, err := h.provision(c, spec)
	if err != nil {
		return err
	}
	done := false
	defer func() {
		if !done {
			_ = undo(nil)
		}
	}()
	// The sandbox's command policy (its template's: a run gives none)
	// judges the program as it would on POST /v1/sandboxes/{id}/run.
	err = h.checkCommandPolicy(c, sb, er)
	if d, ok := c.ev.Details["command_policy"].(map[string]any); ok {
		d["from_template"] = true
	}
	if err != nil {
		return err
	}
	release, err := c.admit(sb.ID, h.runCost(stream, &req))
	if err != nil {
		return err
	}
	defer release()
	return h.runProgram(c, sb, areq, stream, func() {
		// Gone before the outcome is recorded and the answer sent.
		done = true
		_ = undo(nil)
		c.ev.Details["destroyed"] = true
	})
}

// needsNoCaller refuses tools that are caller-executed: a run that is
// not streamed has no caller to answer them.
func (h *Handler) needsNoCaller(ctx context.Context, tenant string, tools []string) error {
	if h.tools == nil {
		return nil
	}
	for _, name := range tools {
		t, err := h.tools.Tool(ctx, tenant, name)
		if err != nil {
			return err
		}
		if t.Upstream.Kind == gateway.UpstreamCaller {
			return invalidf("tool %s is caller-executed: stream the run (Accept: %s) to answer its calls", name, ndjsonType)
		}
	}
	return nil
}

// runCost is what a run holds while it runs (see admit).
func (h *Handler) runCost(stream bool, req *runRequest) int64 {
	if stream {
		return streamCost + int64(len(req.Code))
	}
	return h.execCost() + int64(len(req.Code))
}

// runTrace keeps the records of a run's tool calls, as the gateway ends
// them, up to maxTraceCalls.
type runTrace struct {
	mu      sync.Mutex
	calls   []wire.ToolCallTrace
	dropped int
	sent    int           // the calls a stream has sent
	notify  chan struct{} // a call was added (coalesced)
}

func newRunTrace() *runTrace { return &runTrace{notify: make(chan struct{}, 1)} }

// add is the gateway's observer: it must not block.
func (t *runTrace) add(r gateway.Record) {
	t.mu.Lock()
	if len(t.calls) < maxTraceCalls {
		t.calls = append(t.calls, traceOf(r))
	} else {
		t.dropped++
	}
	t.mu.Unlock()
	select {
	case t.notify <- struct{}{}:
	default:
	}
}

// unsent returns the calls not sent yet and marks them sent.
func (t *runTrace) unsent() []wire.ToolCallTrace {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := t.calls[t.sent:]
	t.sent = len(t.calls)
	return out
}

func (t *runTrace) result() ([]wire.ToolCallTrace, int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]wire.ToolCallTrace{}, t.calls...), t.dropped
}

// traceOf is the wire form of a gateway record.
func traceOf(r gateway.Record) wire.ToolCallTrace {
	return wire.ToolCallTrace{
		Tool: r.Tool, Args: r.Args, Outcome: r.Outcome, Stage: r.Stage, Reason: r.Reason, DryRun: r.DryRun,
		Start: r.Start.UTC(), DurationMS: float64(r.Duration.Microseconds()) / 1000, HTTPStatus: r.Status, OutputBytes: r.OutputBytes,
	}
}

// toolRequestJSON is the wire form of a relayed call.
func toolRequestJSON(rc gateway.RelayedCall) wire.ToolRequest {
	return wire.ToolRequest{Type: "tool_request", ID: rc.ID, Tool: rc.Tool, Args: rc.Args, CreatedAt: rc.CreatedAt.UTC(), ExpiresAt: rc.ExpiresAt.UTC()}
}

// runProgram runs the program areq describes in sb (the audit intent is
// written) and answers with its output and the trace of its tool calls:
// one JSON body, or a stream of NDJSON lines (start, output, tool
// requests to answer, tool calls as they end, exit). end, if set, runs
// once the program has ended, before the outcome is recorded.
func (h *Handler) runProgram(c *call, sb sandbox.Sandbox, areq agentclient.ExecRequest, stream bool, end func()) error {
	ctx, cancel := context.WithTimeout(c.r.Context(), areq.Timeout+execGrace)
	defer cancel()
	trace := newRunTrace()
	if h.toolCalls != nil {
		stop := h.toolCalls.Observe(sb.ID, trace.add)
		defer stop()
	}
	finish := func(res *agentclient.ExecResult) {
		if end != nil {
			end()
		}
		addExitDetails(c, res)
		calls, dropped := trace.result()
		c.ev.Details["tool_calls"] = len(calls) + dropped
	}
	if stream {
		return h.runStream(ctx, c, sb, areq, trace, finish)
	}
	stdout := &capBuffer{max: h.lim.MaxOutputBytes}
	stderr := &capBuffer{max: h.lim.MaxOutputBytes}
	areq.Stdout, areq.Stderr = stdout, stderr
	areq.OutputLimit = uint64(h.lim.MaxOutputBytes)
	res, err := h.mgr.Exec(ctx, sb.ID, areq)
	if res == nil {
		if err == nil {
			err = fmt.Errorf("run: no result: %w", errdefs.ErrInternal)
		}
		return err
	}
	if err != nil {
		h.log.Warn("run finished with an I/O error", "sandbox", sb.ID, "err", err)
	}
	finish(res)
	out := wire.RunResult{SandboxID: sb.ID, ExecResult: resultJSON(res)}
	out.StdoutTruncated = out.StdoutTruncated || stdout.truncated
	out.StderrTruncated = out.StderrTruncated || stderr.truncated
	out.ToolCalls, out.ToolCallsDropped = trace.result()
	if err := c.commit(); err != nil {
		return err
	}
	return c.writeExecResult(out, stdout.buf, stderr.buf)
}

// runStream runs the program with its output, its tool requests and its
// tool calls streamed as NDJSON lines. As execStream, the start line is
// sent once the process has started, and a client that goes away (or
// stops reading) has the program killed.
func (h *Handler) runStream(ctx context.Context, c *call, sb sandbox.Sandbox, areq agentclient.ExecRequest, trace *runTrace, finish func(*agentclient.ExecResult)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	// The start line goes first: output waits for it.
	started := make(chan struct{})
	emit := func(ev wire.OutputLine) error { <-started; return nw.writeLine(ev) }
	stdoutW := &streamWriter{emit: emit, typ: wire.StreamStdout}
	stderrW := &streamWriter{emit: emit, typ: wire.StreamStderr}
	areq.Stdout, areq.Stderr = stdoutW, stderrW
	p, err := h.mgr.StartProcess(ctx, sb.ID, areq)
	if err != nil {
		close(started)
		return err
	}
	err = nw.writeLine(wire.RunStart{Type: "start", SandboxID: sb.ID})
	close(started)
	if err != nil {
		return nil // the client is gone; ending ctx kills the program
	}
	stopPump := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { h.pumpTools(c, sb.ID, trace, nw, stopPump) })
	res, err := p.Wait()
	close(stopPump)
	wg.Wait()
	if res == nil {
		if err == nil {
			err = fmt.Errorf("run: no result: %w", errdefs.ErrInternal)
		}
		h.log.Warn("run stream failed", "sandbox", sb.ID, "err", err)
		nw.endWithError(err)
		nw.abortIfFailed()
		return nil
	}
	stdoutW.flushRest()
	stderrW.flushRest()
	for _, t := range trace.unsent() {
		_ = nw.writeLine(wire.RunToolCall{Type: "tool_call", ToolCallTrace: t})
	}
	finish(res)
	calls, dropped := trace.result()
	c.record("ok")
	_ = nw.writeLine(wire.RunExit{Type: "exit", ExecResult: resultJSON(res), ToolCalls: len(calls), ToolCallsDropped: dropped})
	nw.abortIfFailed()
	return nil
}

// pumpTools sends a run's tool calls as they end and the requests of
// its caller-executed tools as they start waiting, until stop closes.
func (h *Handler) pumpTools(c *call, id string, trace *runTrace, nw *ndjsonWriter, stop <-chan struct{}) {
	var relay <-chan struct{}
	seen := map[string]bool{}
	if h.toolCalls != nil {
		ch, unsubscribe := h.toolCalls.Subscribe(id)
		defer unsubscribe()
		relay = ch
		h.sendToolRequests(c, id, nw, seen) // any that wait already
	}
	for {
		select {
		case <-stop:
			return
		case <-trace.notify:
			for _, t := range trace.unsent() {
				if nw.writeLine(wire.RunToolCall{Type: "tool_call", ToolCallTrace: t}) != nil {
					return
				}
			}
		case <-relay:
			if h.sendToolRequests(c, id, nw, seen) != nil {
				return
			}
		}
	}
}

// sendToolRequests sends the sandbox's waiting tool requests not sent
// before (seen), and forgets those that no longer wait.
func (h *Handler) sendToolRequests(c *call, id string, nw *ndjsonWriter, seen map[string]bool) error {
	pending := h.toolCalls.Pending(c.p.TenantID, id)
	waiting := make(map[string]bool, len(pending))
	for _, rc := range pending {
		waiting[rc.ID] = true
		if seen[rc.ID] {
			continue
		}
		seen[rc.ID] = true
		if err := nw.writeLine(toolRequestJSON(rc)); err != nil {
			return err
		}
	}
	for k := range seen {
		if !waiting[k] {
			delete(seen, k)
		}
	}
	return nil
}

// toolCallsNotServed is the answer of the tool-call routes without
// Config.ToolCalls.
func toolCallsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server relays no tool calls"}
}

// listToolCalls serves GET /v1/sandboxes/{id}/tool-calls: the calls of
// the sandbox's caller-executed tools that wait for an answer; streamed
// (NDJSON, each as it starts waiting, until the client goes or the
// sandbox ends) when the client accepts it.
func (h *Handler) listToolCalls(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	if h.toolCalls == nil {
		return toolCallsNotServed()
	}
	if c.r.URL.RawQuery != "" {
		return invalidf("this route takes no query parameters")
	}
	if !wantsNDJSON(c.r) {
		out := wire.ToolRequestList{Calls: []wire.ToolRequest{}}
		for _, rc := range h.toolCalls.Pending(c.p.TenantID, sb.ID) {
			out.Calls = append(out.Calls, toolRequestJSON(rc))
		}
		return c.json(http.StatusOK, out)
	}
	release, err := c.admit(sb.ID, streamCost)
	if err != nil {
		return err
	}
	defer release()
	ch, unsubscribe := h.toolCalls.Subscribe(sb.ID)
	defer unsubscribe()
	ctx, cancel := context.WithCancel(c.r.Context())
	defer cancel()
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	if err := nw.start(); err != nil {
		return nil
	}
	seen := map[string]bool{}
	tick := time.NewTicker(toolStreamCheck)
	defer tick.Stop()
	for {
		if h.sendToolRequests(c, sb.ID, nw, seen) != nil {
			nw.abortIfFailed()
			return nil
		}
		select {
		case <-ctx.Done():
			nw.abortIfFailed()
			return nil
		case <-ch:
		case <-tick.C:
			if cur, err := h.mgr.Get(sb.ID); err != nil || cur.State != sandbox.StateRunning {
				return nil // the sandbox ended: so does the stream
			}
		}
	}
}

// answerToolCall serves POST /v1/sandboxes/{id}/tool-calls/{call}: the
// caller's answer to a waiting call, which releases it.
func (h *Handler) answerToolCall(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	if h.toolCalls == nil {
		return toolCallsNotServed()
	}
	callID := c.r.PathValue("call")
	rest, ok := strings.CutPrefix(callID, "tc-")
	if !ok || len(rest) != 16 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return invalidf("tool call ID %q is malformed: want tc- and 16 characters a-z, 2-7", auditTarget(callID))
	}
	var req wire.AnswerToolCallRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	c.ev.Details = map[string]any{"call": callID}
	for _, rc := range h.toolCalls.Pending(c.p.TenantID, sb.ID) {
		if rc.ID == callID {
			c.ev.Details["tool"] = rc.Tool
		}
	}
	if len(req.Output) > 0 {
		sum := sha256.Sum256(req.Output)
		c.ev.Details["output_sha256"], c.ev.Details["output_bytes"] = hex.EncodeToString(sum[:]), len(req.Output)
	} else {
		c.ev.Details["error"] = truncate(req.Error, 512)
	}
	if err := c.begin(); err != nil {
		return err
	}
	if err := h.toolCalls.Answer(c.p.TenantID, sb.ID, callID, req.Output, req.Error); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err // the call has its answer; the intent stands
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}
