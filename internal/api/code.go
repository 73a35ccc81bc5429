package api

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/interp"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// CodeRunner runs code in stateful contexts of sandboxes
// (*interp.Manager). The API checks the sandbox's tenant first; errors
// keep their errdefs classes.
type CodeRunner interface {
	Run(ctx context.Context, sandboxID string, req interp.RunRequest, emit func(interp.Event) error) error
	CreateContext(ctx context.Context, sandboxID string, opts interp.ContextOptions) (interp.ContextInfo, error)
	ListContexts(ctx context.Context, sandboxID string) ([]interp.ContextInfo, error)
	DeleteContext(ctx context.Context, sandboxID, contextID string) error
	RestartContext(ctx context.Context, sandboxID, contextID string) (interp.ContextInfo, error)
	InterruptContext(ctx context.Context, sandboxID, contextID string) (bool, error)
}

var _ CodeRunner = (*interp.Manager)(nil)

// The audit actions of the code interpreter.
const (
	ActionSandboxCode      = "sandbox.code"
	ActionContextCreate    = "context.create"
	ActionContextDelete    = "context.delete"
	ActionContextRestart   = "context.restart"
	ActionContextInterrupt = "context.interrupt"
)

// codeGrace is how long past its cell's timeout a code request may take
// (the interrupt grace, the kernel's start) before the request gives up.
const codeGrace = 2 * time.Minute

// codeRequest is the body of POST /v1/sandboxes/{id}/code
// (api.CodeRequest), with its validation.
type codeRequest wire.CodeRequest

// contextOf is the wire form of ci.
func contextOf(ci interp.ContextInfo) wire.CodeContext {
	return wire.CodeContext{
		ID: ci.ID, Language: string(ci.Language), Cwd: ci.Cwd, Default: ci.Default, State: string(ci.State),
		Error: ci.Error, ExecutionCount: ci.ExecutionCount, CreatedAt: ci.CreatedAt,
	}
}

// resultOf is the wire form of r.
func resultOf(r *interp.Result) wire.CodeResult {
	return wire.CodeResult{
		IsMainResult: r.IsMain, Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, SVG: r.SVG,
		PNG: r.PNG, JPEG: r.JPEG, LaTeX: r.LaTeX, JSON: r.JSON, JavaScript: r.JavaScript, Omitted: r.Omitted,
	}
}

// errorOf is the wire form of e.
func errorOf(e *interp.ExecError) wire.CodeError {
	return wire.CodeError{Name: e.Name, Value: e.Value, Traceback: e.Traceback}
}

// endOf is the wire form of e.
func endOf(e *interp.End) wire.CodeEnd {
	return wire.CodeEnd{
		ContextID: e.ContextID, Language: string(e.Language), ExecutionCount: e.ExecutionCount,
		Status: string(e.Status), ExitCode: e.ExitCode, OutputTruncated: e.OutputTruncated,
		ResultsTruncated: e.ResultsTruncated, DurationMS: e.Duration.Milliseconds(),
	}
}

// codeRunner returns the CodeRunner, or the error of a server without one.
func (h *Handler) codeRunner() (CodeRunner, error) {
	if h.code == nil {
		return nil, fmt.Errorf("the code interpreter is not enabled on this server: %w", errdefs.ErrNotSupported)
	}
	return h.code, nil
}

// runRequest validates req into an interpreter request.
func (req *codeRequest) runRequest() (interp.RunRequest, error) {
	if req.Code == nil {
		return interp.RunRequest{}, invalidf("code is required")
	}
	if req.TimeoutS < 0 {
		return interp.RunRequest{}, invalidf("timeout_s must not be negative")
	}
	// The interpreter checks the timeout against its real cap and says
	// it in seconds; a value past maxTimeoutS is past any cap, and is cut
	// to it only so that it converts to a time.Duration without overflow.
	return interp.RunRequest{
		ContextID: req.ContextID,
		Language:  interp.Language(req.Language),
		Code:      *req.Code,
		Env:       req.Env,
		Timeout:   time.Duration(min(req.TimeoutS, maxTimeoutS)) * time.Second,
	}, nil
}

// runCode serves POST /v1/sandboxes/{id}/code.
func (h *Handler) runCode(c *call) (err error) {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	runner, err := h.codeRunner()
	if err != nil {
		return err
	}
	var req codeRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	rreq, err := req.runRequest()
	if err != nil {
		return err
	}
	sum := sha256.Sum256([]byte(rreq.Code))
	c.ev.Details = map[string]any{
		"language":    strings.ToValidUTF8(truncate(req.Language, 32), "?"),
		"code_sha256": hex.EncodeToString(sum[:]),
		"code_bytes":  len(rreq.Code),
	}
	if rreq.ContextID != "" {
		c.ev.Details["context_id"] = auditTarget(rreq.ContextID)
	}
	addEnvDetails(c.ev.Details, rreq.Env)
	release, err := c.admit(sb.ID, codeCellCost)
	if err != nil {
		return err
	}
	defer release()
	if err := c.begin(); err != nil {
		return err
	}
	timeout := rreq.Timeout
	if timeout == 0 {
		timeout = time.Hour
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), timeout+codeGrace)
	defer cancel()
	ctx, span := tracing.Start(ctx, "code.cell", tracing.KeySandbox.String(sb.ID),
		tracing.KeyCodeLanguage.String(string(rreq.Language)), tracing.KeyCodeBytes.Int(len(rreq.Code)))
	status := ""
	defer func() {
		span.SetAttributes(tracing.KeyCodeStatus.String(status))
		tracing.End(span, err)
	}()
	if wantsNDJSON(c.r) {
		status, err = h.codeStream(ctx, c, runner, sb.ID, rreq)
		return err
	}
	var out wire.CodeExecution
	out.Results = []wire.CodeResult{}
	var stdout, stderr strings.Builder
	err = runner.Run(ctx, sb.ID, rreq, func(ev interp.Event) error {
		switch ev.Type {
		case interp.EventStdout:
			stdout.WriteString(ev.Text)
		case interp.EventStderr:
			stderr.WriteString(ev.Text)
		case interp.EventResult:
			out.Results = append(out.Results, resultOf(ev.Result))
		case interp.EventError:
			e := errorOf(ev.Error)
			out.Error = &e
		case interp.EventEnd:
			out.CodeEnd = endOf(ev.End)
		}
		return nil
	})
	status = cellStatus(err == nil, out.CodeEnd.Status)
	h.metrics.CodeCell(status)
	if err != nil {
		return err
	}
	out.Stdout, out.Stderr = stdout.String(), stderr.String()
	addCodeDetails(c, out.CodeEnd)
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, out)
}

// addCodeDetails records how the cell ended in the audit event.
func addCodeDetails(c *call, e wire.CodeEnd) {
	c.ev.Details["context_id"] = e.ContextID
	c.ev.Details["language"] = e.Language
	c.ev.Details["status"] = e.Status
	c.ev.Details["duration_ms"] = e.DurationMS
	if e.Language == string(interp.Bash) {
		c.ev.Details["exit_code"] = e.ExitCode
	}
}

// codeStream runs the cell with its events streamed as NDJSON lines. The
// status line goes out with the first event, so that failures before the
// cell runs are ordinary JSON errors.
func (h *Handler) codeStream(ctx context.Context, c *call, runner CodeRunner, id string, req interp.RunRequest) (cell string, _ error) {
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout}
	defer nw.done()
	ended, status := false, ""
	err := runner.Run(ctx, id, req, func(ev interp.Event) error {
		switch ev.Type {
		case interp.EventStdout, interp.EventStderr:
			return nw.writeLine(wire.CodeOutputLine{Type: string(ev.Type), Data: ev.Text})
		case interp.EventResult:
			return nw.writeLine(wire.CodeResultLine{Type: "result", CodeResult: resultOf(ev.Result)})
		case interp.EventError:
			return nw.writeLine(wire.CodeErrorLine{Type: "error", CodeError: errorOf(ev.Error)})
		case interp.EventEnd:
			e := endOf(ev.End)
			ended, status = true, e.Status
			addCodeDetails(c, e)
			c.record("ok")
			return nw.writeLine(wire.CodeEndLine{Type: "end", CodeEnd: e})
		}
		return nil
	})
	cell = cellStatus(ended, status)
	h.metrics.CodeCell(cell)
	switch {
	case err == nil:
		return cell, nil
	case !c.w.started():
		return cell, err // nothing was sent: an ordinary error response
	case !ended:
		// The cell was cut short: by the client going away, the
		// sandbox ending or the daemon's graceful stop. A client still
		// there learns why from the error line.
		nw.endWithError(err)
		nw.abortIfFailed()
	}
	return cell, nil
}

// createContext serves POST /v1/sandboxes/{id}/contexts.
func (h *Handler) createContext(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	runner, err := h.codeRunner()
	if err != nil {
		return err
	}
	var req wire.CodeContextRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	lang, err := interp.ParseLanguage(req.Language)
	if err != nil {
		return err
	}
	c.ev.Details = map[string]any{"language": string(lang)}
	addEnvDetails(c.ev.Details, req.Env)
	if err := c.begin(); err != nil {
		return err
	}
	ci, err := runner.CreateContext(c.r.Context(), sb.ID, interp.ContextOptions{Language: lang, Cwd: req.Cwd, Env: req.Env})
	h.metrics.CodeContext(resultCode(err))
	if err != nil {
		return err
	}
	c.ev.Details["context_id"] = ci.ID
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusCreated, contextOf(ci))
}

// listContexts serves GET /v1/sandboxes/{id}/contexts.
func (h *Handler) listContexts(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	runner, err := h.codeRunner()
	if err != nil {
		return err
	}
	list, err := runner.ListContexts(c.r.Context(), sb.ID)
	if err != nil {
		return err
	}
	out := wire.CodeContextList{Contexts: make([]wire.CodeContext, 0, len(list))}
	for _, ci := range list {
		out.Contexts = append(out.Contexts, contextOf(ci))
	}
	return c.json(http.StatusOK, out)
}

// contextCall checks the sandbox's tenant, the runner and the context ID
// of a request on one context, and records its intent.
func (c *call) contextCall() (runner CodeRunner, sandboxID, contextID string, err error) {
	sb, err := c.agentSandbox()
	if err != nil {
		return nil, "", "", err
	}
	if runner, err = c.h.codeRunner(); err != nil {
		return nil, "", "", err
	}
	contextID = c.r.PathValue("cid")
	if !interp.ValidContextID(contextID) {
		return nil, "", "", invalidf("malformed context id; want %s followed by 16 characters [a-z2-7]", interp.IDPrefix)
	}
	c.ev.Details = map[string]any{"context_id": contextID}
	if err := c.begin(); err != nil {
		return nil, "", "", err
	}
	return runner, sb.ID, contextID, nil
}

// deleteContext serves DELETE /v1/sandboxes/{id}/contexts/{cid}.
func (h *Handler) deleteContext(c *call) error {
	runner, id, cid, err := c.contextCall()
	if err != nil {
		return err
	}
	if err := runner.DeleteContext(c.r.Context(), id, cid); err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

// restartContext serves POST /v1/sandboxes/{id}/contexts/{cid}/restart.
func (h *Handler) restartContext(c *call) error {
	runner, id, cid, err := c.contextCall()
	if err != nil {
		return err
	}
	ci, err := runner.RestartContext(c.r.Context(), id, cid)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, contextOf(ci))
}

// interruptContext serves POST /v1/sandboxes/{id}/contexts/{cid}/interrupt.
func (h *Handler) interruptContext(c *call) error {
	runner, id, cid, err := c.contextCall()
	if err != nil {
		return err
	}
	running, err := runner.InterruptContext(c.r.Context(), id, cid)
	if err != nil {
		return err
	}
	c.ev.Details["interrupted"] = running
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, wire.InterruptResult{Interrupted: running})
}
