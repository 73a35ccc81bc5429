package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Caps on exec requests, besides Limits.
const (
	maxArgs       = 4096
	maxPathBytes  = 4096
	maxEnvKeys    = 256
	maxEnvValue   = 128 << 10
	maxAuditBytes = 4096 // command text kept in an audit event
	maxTagBytes   = 64
	// execGrace is how long past its own timeout an exec may take before
	// the request gives up on the agent.
	execGrace = 30 * time.Second
)

// ndjsonType is the media type of streamed exec output.
const ndjsonType = "application/x-ndjson"

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// execRequest is the body of POST /v1/sandboxes/{id}/exec (api.ExecRequest),
// with its validation.
type execRequest wire.ExecRequest

// agentRequest validates req and turns it into an agent request (without
// output writers). lim supplies the caps and the default timeout.
func (req *execRequest) agentRequest(lim Limits) (agentclient.ExecRequest, error) {
	var out agentclient.ExecRequest
	switch {
	case len(req.Cmd) > 0 && req.Command != "":
		return out, invalidf("give either cmd or command, not both")
	case len(req.Cmd) == 0 && req.Command == "":
		return out, invalidf("cmd (an argument list) or command (a shell string) is required")
	case len(req.Cmd) > maxArgs:
		return out, invalidf("cmd has more than %d arguments", maxArgs)
	}
	if req.Cmd != nil && req.Cmd[0] == "" {
		return out, invalidf("cmd[0] must not be empty")
	}
	for _, a := range req.Cmd {
		if strings.IndexByte(a, 0) >= 0 {
			return out, invalidf("cmd arguments must not contain NUL bytes")
		}
	}
	if strings.IndexByte(req.Command, 0) >= 0 {
		return out, invalidf("command must not contain NUL bytes")
	}
	if len(req.Cwd) > maxPathBytes || strings.IndexByte(req.Cwd, 0) >= 0 {
		return out, invalidf("cwd must be at most %d bytes without NUL bytes", maxPathBytes)
	}
	if len(req.Env) > maxEnvKeys {
		return out, invalidf("env has more than %d variables", maxEnvKeys)
	}
	for k, v := range req.Env {
		if !envKey.MatchString(k) || len(k) > 256 {
			return out, invalidf("env name %q is not valid; want [A-Za-z_][A-Za-z0-9_]*", clean(truncate(k, 64)))
		}
		if len(v) > maxEnvValue || strings.IndexByte(v, 0) >= 0 {
			return out, invalidf("env value of %s must be at most %d bytes without NUL bytes", k, maxEnvValue)
		}
	}
	switch req.User {
	case "", "user", "root":
	default:
		return out, invalidf("user must be \"user\" or \"root\"")
	}
	timeout := time.Duration(req.TimeoutS) * time.Second
	switch {
	case req.TimeoutS < 0 || req.TimeoutS > int64(lim.MaxExecTimeout/time.Second):
		return out, invalidf("timeout_s must be between 0 and %d", int64(lim.MaxExecTimeout/time.Second))
	case req.TimeoutS == 0:
		timeout = lim.DefaultExecTimeout
	}
	if req.Stdin != nil && req.StdinB64 != nil {
		return out, invalidf("give either stdin or stdin_b64, not both")
	}
	stdin, hasStdin := req.stdin()
	if len(stdin) > lim.MaxStdinBytes {
		// 413, as a body over its cap: the same request can never pass.
		return out, &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
			msg: fmt.Sprintf("stdin is %d bytes, more than the limit of %d bytes; upload larger input as a file (PUT /v1/sandboxes/{id}/files) and read it from there", len(stdin), lim.MaxStdinBytes)}
	}
	var pty *agentclient.PtySize
	if req.Pty != nil {
		size, err := ptySize(*req.Pty)
		if err != nil {
			return out, err
		}
		pty = &size
	}
	if len(req.Tag) > maxTagBytes || strings.IndexByte(req.Tag, 0) >= 0 || !utf8.ValidString(req.Tag) {
		return out, invalidf("tag must be UTF-8 of at most %d bytes without NUL bytes", maxTagBytes)
	}
	out = agentclient.ExecRequest{
		Argv:       req.Cmd,
		Shell:      req.Command,
		Cwd:        req.Cwd,
		Env:        req.Env,
		User:       req.User,
		Timeout:    timeout,
		Tag:        req.Tag,
		Background: req.Background,
		Pty:        pty,
	}
	if hasStdin {
		out.Stdin = bytes.NewReader(stdin)
	}
	return out, nil
}

// ptySize checks a terminal size: 1 to maxPTYDim each way.
func ptySize(s wire.PtySize) (agentclient.PtySize, error) {
	if s.Cols < 1 || s.Cols > maxPTYDim || s.Rows < 1 || s.Rows > maxPTYDim {
		return agentclient.PtySize{}, invalidf("pty cols and rows must be integers from 1 to %d", maxPTYDim)
	}
	return agentclient.PtySize{Cols: uint16(s.Cols), Rows: uint16(s.Rows)}, nil
}

// size is about what the decoded request holds while its exec runs: its
// command, environment and stdin.
func (req *execRequest) size() int64 {
	n := len(req.Command) + len(req.Cwd) + len(req.User) + len(req.StdinB64)
	for _, a := range req.Cmd {
		n += len(a) + 16 // the string header
	}
	for k, v := range req.Env {
		n += len(k) + len(v) + 32
	}
	if req.Stdin != nil {
		n += len(*req.Stdin)
	}
	return int64(n)
}

// stdin returns the stdin the request gives, and whether it gives one.
func (req *execRequest) stdin() ([]byte, bool) {
	switch {
	case req.Stdin != nil:
		return []byte(*req.Stdin), true
	case req.StdinB64 != nil:
		return req.StdinB64, true
	}
	return nil, false
}

// auditDetails is the request summary of an exec in the audit log: the
// command (capped), the user, and what the process gets besides its
// command (see addInputDetails).
func (req *execRequest) auditDetails() map[string]any {
	d := map[string]any{"command": req.commandText()}
	if req.User != "" {
		d["user"] = req.User
	}
	if req.Background {
		d["background"] = true
	}
	if req.Tag != "" {
		d["tag"] = req.Tag
	}
	if req.Pty != nil {
		d["pty"] = true
	}
	if stdin, ok := req.stdin(); ok {
		addStdinDetails(d, stdin)
	}
	addEnvDetails(d, req.Env)
	return d
}

// addStdinDetails records the sha256 and size of a process's stdin, so
// that a payload piped into a shell leaves a trace that can be matched
// against a copy of it.
func addStdinDetails(d map[string]any, stdin []byte) {
	sum := sha256.Sum256(stdin)
	d["stdin_sha256"] = hex.EncodeToString(sum[:])
	d["stdin_bytes"] = len(stdin)
}

// addEnvDetails records the names of the environment variables a request
// sets ("env": sorted, comma-separated) and a sha256 over the names and
// values, never the values themselves, which may be secrets: env_sha256
// is the sha256 of NAME=VALUE followed by a NUL byte for each variable in
// the order of "env" (names and values hold no NUL). The digest shows whether the
// environment was a known one; it does not hide a value that can be
// guessed (a flag, a small number) from someone who has the record.
func addEnvDetails(d map[string]any, env map[string]string) {
	if len(env) == 0 {
		return
	}
	names := slices.Sorted(maps.Keys(env))
	h := sha256.New()
	for _, k := range names {
		h.Write([]byte(k))
		h.Write([]byte{'='})
		h.Write([]byte(env[k]))
		h.Write([]byte{0})
	}
	d["env"] = strings.Join(names, ",")
	d["env_sha256"] = hex.EncodeToString(h.Sum(nil))
}

// commandText is the command as recorded in the audit log, capped.
func (req *execRequest) commandText() string {
	s := req.Command
	if s == "" {
		b, _ := json.Marshal(req.Cmd)
		s = string(b)
	}
	if len(s) > maxAuditBytes {
		s = strings.ToValidUTF8(s[:maxAuditBytes], "") + "...(truncated)"
	}
	return s
}

// resultJSON converts an agent result.
func resultJSON(r *agentclient.ExecResult) wire.ExecResult {
	return wire.ExecResult{
		Status:          string(r.Status),
		ExitCode:        r.ExitCode,
		Signal:          r.Signal,
		StdoutTruncated: r.StdoutTruncated,
		StderrTruncated: r.StderrTruncated,
		DurationMS:      r.Duration.Milliseconds(),
		CPUMS:           r.CPUTime.Milliseconds(),
		PeakMemoryBytes: r.PeakMemoryBytes,
		Error:           clean(r.Error),
	}
}

// wantsNDJSON reports whether the Accept header asks for streamed output.
func wantsNDJSON(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if !strings.Contains(v, ndjsonType) {
			continue
		}
		for _, part := range strings.Split(v, ",") {
			if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == ndjsonType {
				return true
			}
		}
	}
	return false
}

// exec serves POST /v1/sandboxes/{id}/exec.
func (h *Handler) exec(c *call) (err error) {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	var req execRequest
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	areq, err := req.agentRequest(h.lim)
	if err != nil {
		return err
	}
	c.ev.Details = req.auditDetails()
	if err := h.checkCommandPolicy(c, sb, &req); err != nil {
		return err
	}
	stream := wantsNDJSON(c.r)
	if !stream && (req.Background || req.KeepStdin || req.Pty != nil) {
		return invalidf("background, keep_stdin and pty need a streamed exec (Accept: %s)", ndjsonType)
	}
	if _, has := req.stdin(); has && (req.KeepStdin || req.Pty != nil) {
		// Input sent to the route could overtake it.
		return invalidf("give the first input of a process with keep_stdin or pty through POST .../processes/{pid}/stdin, not stdin")
	}
	cost := h.execCost()
	if stream {
		cost = streamCost
	}
	release, err := c.admit(sb.ID, cost+req.size())
	if err != nil {
		return err
	}
	defer release()
	if err := c.begin(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.r.Context(), areq.Timeout+execGrace)
	defer cancel()
	mode := metrics.ExecBuffered
	if stream {
		mode = metrics.ExecStream
	}
	ctx, span := tracing.Start(ctx, "sandbox.exec")
	if span.IsRecording() {
		span.SetAttributes(execAttrs(sb.ID, mode, areq)...) // a digest: only when traced
	}
	var res *agentclient.ExecResult
	defer func() { endExecSpan(span, res, err) }()
	if stream {
		res, err = h.execStream(ctx, c, sb.ID, areq, req.KeepStdin || req.Pty != nil)
		return err
	}
	stdout := &capBuffer{max: h.lim.MaxOutputBytes}
	stderr := &capBuffer{max: h.lim.MaxOutputBytes}
	areq.Stdout, areq.Stderr = stdout, stderr
	areq.OutputLimit = uint64(h.lim.MaxOutputBytes)
	began := time.Now()
	res, err = h.mgr.Exec(ctx, sb.ID, areq)
	h.metrics.Exec(metrics.ExecBuffered, execStatus(res), time.Since(began))
	if res == nil {
		if err == nil {
			err = fmt.Errorf("exec: no result: %w", errdefs.ErrInternal)
		}
		return err
	}
	out := resultJSON(res)
	out.StdoutTruncated = out.StdoutTruncated || stdout.truncated
	out.StderrTruncated = out.StderrTruncated || stderr.truncated
	if err != nil {
		// The result came with a stdin or output failure.
		h.log.Warn("exec finished with an I/O error", "sandbox", sb.ID, "err", err)
	}
	addExitDetails(c, res)
	if err := c.commit(); err != nil {
		return err
	}
	return c.writeExecResult(out, stdout.buf, stderr.buf)
}

// execAttrs are the attributes of an exec's span: the command's digest
// and size, never its text.
func execAttrs(id, mode string, areq agentclient.ExecRequest) []attribute.KeyValue {
	cmd := areq.Shell
	if cmd == "" {
		cmd = strings.Join(areq.Argv, "\x00")
	}
	return append(tracing.Command(cmd), tracing.KeySandbox.String(id), tracing.KeyExecMode.String(mode))
}

// endExecSpan records an exec's status and exit code and ends its span.
func endExecSpan(span trace.Span, res *agentclient.ExecResult, err error) {
	if span.IsRecording() {
		span.SetAttributes(tracing.KeyExecStatus.String(execStatus(res)))
		if res != nil {
			span.SetAttributes(tracing.KeyExitCode.Int(res.ExitCode))
		}
	}
	tracing.End(span, err)
}

// execStatus is the status label of an exec's result (metrics).
func execStatus(res *agentclient.ExecResult) string {
	if res == nil {
		return metrics.ExecFailed
	}
	switch res.Status {
	case agentclient.StatusSuccess, agentclient.StatusError, agentclient.StatusTimeout,
		agentclient.StatusResourceExceeded, agentclient.StatusKilled:
		return string(res.Status)
	}
	return "other"
}

// addExitDetails records how the process ended in the audit event.
func addExitDetails(c *call, res *agentclient.ExecResult) {
	c.ev.Details["status"] = string(res.Status)
	c.ev.Details["exit_code"] = res.ExitCode
	c.ev.Details["duration_ms"] = res.Duration.Milliseconds()
	if res.Signal != 0 {
		c.ev.Details["signal"] = res.Signal
	}
}

// capBuffer keeps the first max bytes written to it. Its buffer grows by
// doubling but never past max, so it holds at most max bytes, and at most
// 1.5 x max while it grows.
type capBuffer struct {
	buf       []byte
	max       int
	truncated bool
}

// minCapBuffer is the first allocation of a capBuffer that gets output.
const minCapBuffer = 4 << 10

func (b *capBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.max - len(b.buf); len(p) > room {
		b.truncated = true
		p = p[:max(room, 0)]
	}
	if need := len(b.buf) + len(p); need > cap(b.buf) {
		grown := make([]byte, len(b.buf), min(max(2*cap(b.buf), need, minCapBuffer), b.max))
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// jsonChunk is how much output writeExecResult encodes at a time: the
// encoded chunk takes at most 6 times that (\u00XX escapes).
const jsonChunk = 8 << 10

// writeExecResult writes out with stdout and stderr as the 200 response
// of a buffered exec. The output is encoded in chunks straight to the
// connection, so that the response never exists whole in memory (its
// JSON escapes could make it 6 times the output). A client that does not
// take a write within Limits.WriteIdleTimeout has its connection cut.
func (c *call) writeExecResult(out any, stdout, stderr []byte) error {
	head, err := json.Marshal(out) // without the output, which is nil
	if err != nil {
		return fmt.Errorf("encode exec result: %w: %v", errdefs.ErrInternal, err)
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	c.w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(c.w)
	w := &idleWriter{w: c.w, rc: rc, idle: c.h.lim.WriteIdleTimeout}
	w.write(head[:len(head)-1]) // without its closing brace
	writeOutputField(w, "stdout", stdout)
	writeOutputField(w, "stderr", stderr)
	w.write([]byte("}\n"))
	if w.err == nil {
		w.err = rc.Flush()
	}
	if w.err != nil {
		abortConn(rc)
	}
	_ = rc.SetWriteDeadline(time.Time{})
	return nil
}

// writeOutputField writes `,"name":"..."` with b as JSON text when it is
// valid UTF-8, else `,"name_b64":"..."` with b in standard base64.
func writeOutputField(w *idleWriter, name string, b []byte) {
	if !utf8.Valid(b) {
		w.write([]byte(`,"` + name + `_b64":"`))
		enc := base64.NewEncoder(base64.StdEncoding, w)
		_, _ = enc.Write(b)
		_ = enc.Close()
		w.write([]byte(`"`))
		return
	}
	w.write([]byte(`,"` + name + `":"`))
	for len(b) > 0 {
		n := min(len(b), jsonChunk)
		for n < len(b) && !utf8.RuneStart(b[n]) {
			n-- // end the chunk on a character boundary
		}
		enc, _ := json.Marshal(string(b[:n])) // a string always encodes
		w.write(enc[1 : len(enc)-1])          // without the quotes
		b = b[n:]
	}
	w.write([]byte(`"`))
}

// idleWriter writes to a response with a write deadline of idle per
// write; after the first failure it writes nothing and keeps the error.
type idleWriter struct {
	w    io.Writer
	rc   *http.ResponseController
	idle time.Duration
	err  error
}

func (w *idleWriter) write(p []byte) { _, _ = w.Write(p) }

func (w *idleWriter) Write(p []byte) (int, error) {
	if w.err != nil {
		return 0, w.err
	}
	_ = w.rc.SetWriteDeadline(time.Now().Add(w.idle))
	n, err := w.w.Write(p)
	w.err = err
	return n, err
}

// execStream runs the exec with its output streamed as NDJSON lines. The
// status line and the start line (the pid) are sent once the process has
// started, so that errors up to then are ordinary JSON errors. After that, a failure of the agent
// stream ends the response with an {"type":"error"} line. A client that
// stops taking the output (no write succeeds for Limits.WriteIdleTimeout)
// or goes away has the process killed: what is buffered for it meanwhile
// is bounded by the agent stream's flow-control window.
func (h *Handler) execStream(ctx context.Context, c *call, id string, areq agentclient.ExecRequest, keepStdin bool) (*agentclient.ExecResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nw := &ndjsonWriter{c: c, rc: http.NewResponseController(c.w), idle: h.lim.WriteIdleTimeout, onFail: cancel}
	defer nw.done()
	stdin := areq.Stdin
	areq.Stdin = nil
	areq.OpenStdin = stdin != nil || keepStdin
	// The start line goes first: output waits for it.
	started := make(chan struct{})
	emit := func(ev wire.OutputLine) error { <-started; return nw.writeLine(ev) }
	stdoutW := &streamWriter{emit: emit, typ: wire.StreamStdout}
	stderrW := &streamWriter{emit: emit, typ: wire.StreamStderr}
	areq.Stdout, areq.Stderr = stdoutW, stderrW
	began := time.Now()
	p, err := h.mgr.StartProcess(ctx, id, areq)
	if err != nil {
		close(started)
		h.metrics.Exec(metrics.ExecStream, metrics.ExecFailed, time.Since(began))
		return nil, err
	}
	if p.PID != 0 {
		err = nw.writeLine(wire.ExecStart{Type: "start", PID: p.PID})
	} else {
		err = nw.start()
	}
	close(started)
	if err != nil {
		return nil, err // the client is gone; ending ctx kills the process (or detaches from a background one)
	}
	var inErr error
	var wg sync.WaitGroup
	if stdin != nil && p.PID != 0 {
		wg.Go(func() {
			if err := p.StreamInput(ctx, stdin); err == nil && !keepStdin {
				inErr = p.CloseStdin(ctx)
			} else {
				inErr = err
			}
		})
	}
	res, err := p.Wait()
	wg.Wait()
	h.metrics.Exec(metrics.ExecStream, execStatus(res), time.Since(began))
	if res == nil {
		if err == nil {
			err = fmt.Errorf("exec: no result: %w", errdefs.ErrInternal)
		}
		if areq.Background && ctx.Err() != nil {
			// The client went: a background process runs on.
			h.log.Debug("exec stream detached from a background process", "sandbox", id, "pid", p.PID)
		} else {
			h.log.Warn("exec stream failed", "sandbox", id, "err", err)
		}
		nw.endWithError(err)
		nw.abortIfFailed()
		return nil, nil // the stream has started: the error line reports it
	}
	if inErr != nil {
		h.log.Debug("exec stdin copy ended early", "sandbox", id, "err", inErr)
	}
	stdoutW.flushRest()
	stderrW.flushRest()
	addExitDetails(c, res)
	c.record("ok")
	_ = nw.writeLine(wire.ExecExit{Type: "exit", ExecResult: resultJSON(res)})
	nw.abortIfFailed()
	return res, nil
}

// ndjsonWriter writes NDJSON lines, each flushed at once, with an idle
// write deadline. It is safe for concurrent use.
type ndjsonWriter struct {
	c    *call
	rc   *http.ResponseController
	idle time.Duration
	// onFail is called once at the first write failure.
	onFail  func()
	mu      sync.Mutex
	started bool
	err     error // the first write failure; later writes are dropped
}

// failLocked records the first write failure.
func (nw *ndjsonWriter) failLocked(err error) error {
	if nw.err == nil {
		nw.err = err
		// Whatever net/http still tries to write fails at once.
		_ = nw.rc.SetWriteDeadline(aLongTimeAgo)
		if nw.onFail != nil {
			nw.onFail()
		}
	}
	return nw.err
}

// start sends the status line and headers (once).
func (nw *ndjsonWriter) start() error {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	return nw.startLocked()
}

func (nw *ndjsonWriter) startLocked() error {
	if nw.started {
		return nw.err
	}
	nw.started = true
	h := nw.c.w.Header()
	h.Set("Content-Type", ndjsonType)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	nw.c.w.WriteHeader(http.StatusOK)
	if err := nw.flushLocked(); err != nil {
		return nw.failLocked(err)
	}
	return nil
}

func (nw *ndjsonWriter) flushLocked() error {
	_ = nw.rc.SetWriteDeadline(time.Now().Add(nw.idle))
	return nw.rc.Flush()
}

// writeLine writes v as one line and flushes it.
func (nw *ndjsonWriter) writeLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode stream line: %w: %v", errdefs.ErrInternal, err)
	}
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if err := nw.startLocked(); err != nil {
		return err
	}
	if nw.err != nil {
		return nw.err
	}
	_ = nw.rc.SetWriteDeadline(time.Now().Add(nw.idle))
	if _, err := nw.c.w.Write(append(b, '\n')); err != nil {
		return nw.failLocked(err)
	}
	if err := nw.flushLocked(); err != nil {
		return nw.failLocked(err)
	}
	return nil
}

// abortIfFailed cuts the connection if a write failed: the client is not
// taking the output (or is gone), and net/http would otherwise go on
// trying to write the end of the response.
func (nw *ndjsonWriter) abortIfFailed() {
	nw.mu.Lock()
	failed := nw.err != nil
	nw.mu.Unlock()
	if failed {
		abortConn(nw.rc)
	}
}

// endWithError ends a started stream that err broke: the mutation's
// outcome is recorded, then the error line sent. It returns the public
// error code.
func (nw *ndjsonWriter) endWithError(err error) string {
	_, code, msg := nw.c.h.publicError(nw.c.explain(err))
	nw.c.record(code)
	_ = nw.writeLine(wire.StreamError{Type: "error", Error: wire.ErrorDetail{Code: code, Message: msg}})
	return code
}

// done clears the write deadline so that it does not outlive the request
// on a kept-alive connection, unless a write failed.
func (nw *ndjsonWriter) done() {
	nw.mu.Lock()
	defer nw.mu.Unlock()
	if nw.err == nil {
		_ = nw.rc.SetWriteDeadline(time.Time{})
	}
}

// streamWriter turns one output stream into NDJSON lines. Text is sent in
// "data" as long as it is valid UTF-8; an incomplete UTF-8 sequence at the
// end of a chunk is held back until the next one, so that a character
// split between two chunks stays text. Bytes that are not UTF-8 are sent
// in "data_b64".
type streamWriter struct {
	emit    func(wire.OutputLine) error
	typ     string
	pending []byte // an incomplete UTF-8 sequence held back (< 4 bytes)
}

func (s *streamWriter) Write(p []byte) (int, error) {
	n := len(p)
	buf := p
	if len(s.pending) > 0 {
		buf = append(s.pending, p...)
		s.pending = nil
	}
	text, bad, rest := splitUTF8(buf)
	if len(text) > 0 {
		if err := s.emit(wire.OutputLine{Type: s.typ, Data: string(text)}); err != nil {
			return 0, err
		}
	}
	if len(bad) > 0 {
		if err := s.emit(wire.OutputLine{Type: s.typ, DataB64: bad}); err != nil {
			return 0, err
		}
	}
	s.pending = append([]byte(nil), rest...)
	return n, nil
}

// flushRest sends a held-back incomplete sequence as base64.
func (s *streamWriter) flushRest() {
	if len(s.pending) > 0 {
		_ = s.emit(wire.OutputLine{Type: s.typ, DataB64: s.pending})
		s.pending = nil
	}
}

// splitUTF8 splits b into its longest valid UTF-8 prefix (text), then
// either an incomplete but so far valid sequence at its very end (rest, to
// be completed by the next chunk) or everything after the first invalid
// byte (bad).
func splitUTF8(b []byte) (text, bad, rest []byte) {
	i := 0
	for i < len(b) {
		r, size := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	switch {
	case i == len(b):
		return b, nil, nil
	case len(b)-i < utf8.UTFMax && !utf8.FullRune(b[i:]):
		return b[:i], nil, b[i:]
	default:
		return b[:i], b[i:], nil
	}
}
