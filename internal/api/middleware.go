package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxTokenBytes caps the bearer token looked up.
const maxTokenBytes = 1024

// call is one request being served: what handlers get instead of
// (w, r). For a mutation, ev is the audit event being built: handlers fill
// Target and Details (the request summary), call begin right before they
// carry out the action, add the result to Details and call commit on
// success; a failure is recorded by wrap with the public error code as
// outcome.
type call struct {
	h  *Handler
	w  *statusWriter
	r  *http.Request
	p  auth.Principal
	ev audit.Event
	// intentSeq is the Seq of the intent record begin wrote (0: none).
	intentSeq uint64
	audited   bool
	// sandboxID is the sandbox whose agent serves the request (see
	// agentSandbox), for explain; "" for other requests.
	sandboxID string
	// viaToken says that a PTY token, not the Authorization header,
	// authenticated the request (see principal).
	viaToken bool
}

// statusWriter records whether the response has started, so that an error
// after that point is not written into a body. Unwrap keeps
// http.ResponseController and WebSocket hijacking working.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// started reports whether the status line has been written.
func (w *statusWriter) started() bool { return w.status != 0 }

// plain adapts an unauthenticated handler (404/405 fallbacks).
func (h *Handler) plain(f func(w http.ResponseWriter, r *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := f(w, r); err != nil {
			h.writeError(w, r, err)
		}
	})
}

// wrap runs rt.serve with authentication, rate limiting, the scope check,
// panic recovery, failure auditing and error responses.
func (h *Handler) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		c := &call{h: h, w: &statusWriter{ResponseWriter: rw}, r: r}
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				h.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", fmt.Sprint(v))
				if !c.w.started() {
					h.writeError(c.w, r, fmt.Errorf("panic: %w", errdefs.ErrInternal))
				}
			}
		}()
		if !h.reqs.enter() {
			// The graceful stop has begun: nothing new starts.
			h.writeError(c.w, r, shutdownError())
			return
		}
		defer h.reqs.leave()
		// The graceful stop ends sessions (a PTY, a followed process's
		// output) at once and every other request after its grace.
		stopping := h.stopping
		if sessionRoutes[rt.path] {
			stopping = h.draining
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		defer context.AfterFunc(stopping, func() { cancel(errShuttingDown) })()
		r = r.WithContext(ctx)
		c.r = r
		if rt.scope != "" {
			p, viaToken, err := h.principal(r, rt)
			c.viaToken = viaToken
			if err != nil {
				h.writeError(c.w, r, err)
				return
			}
			if h.limiter != nil && !h.limiter.Allow(p.KeyID) {
				h.writeError(c.w, r, &apiError{status: http.StatusTooManyRequests, code: CodeRateLimited,
					msg: "too many requests for this API key; slow down"})
				return
			}
			c.p = p
			c.r = r.WithContext(auth.WithPrincipal(r.Context(), p))
			setPrincipal(rw, p.TenantID, p.KeyID)
			if rt.action != "" {
				c.ev = audit.Event{TenantID: p.TenantID, KeyID: p.KeyID, Action: rt.action, Target: auditTarget(r.PathValue("id"))}
			}
			if rt.scope != scopeAnyKey && !p.Has(rt.scope) {
				h.fail(c, &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
					msg: fmt.Sprintf("this API key lacks the %q scope", rt.scope)})
				return
			}
		}
		if err := rt.serve(c); err != nil {
			h.fail(c, err)
		}
	})
}

// fail records a failed mutation and writes the error, unless the
// response has already started (then the connection is cut, so that the
// client sees a broken response rather than a silently short one). The
// record is the outcome of the intent begin wrote, or, for a request
// refused before that, a lone outcome.
func (h *Handler) fail(c *call, err error) {
	err = c.explain(err)
	c.record(outcomeOf(err))
	if c.w.started() {
		h.log.Warn("request failed after the response started", "method", c.r.Method, "path", c.r.URL.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
	h.writeError(c.w, c.r, err)
}

// begin records the intent of the mutation (who, the action, the target
// and c.ev.Details, the request summary) and returns once it is durable.
// Handlers call it after validating the request and right before they
// carry out the action, so that an action is never done without a trace,
// even if the daemon dies during it. When the audit log cannot take the
// intent, nothing is done and the request fails with 503.
func (c *call) begin() error {
	if c.ev.Action == "" || c.audited || c.intentSeq != 0 {
		return nil
	}
	ev := c.ev
	ev.Outcome = audit.OutcomeIntent
	rec, err := c.h.appendAudit(c.r.Context(), ev)
	if err != nil {
		c.audited = true // there is no action whose outcome to record
		c.h.log.Error("audit append failed", "action", c.ev.Action, "target", c.ev.Target, "err", err)
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			msg: "the audit log is unavailable; nothing was done"}
	}
	c.intentSeq = rec.Seq
	return nil
}

// appendOutcome appends the outcome record of the mutation.
func (c *call) appendOutcome(outcome string) error {
	ev := c.ev
	ev.Outcome = outcome
	ev.IntentSeq = c.intentSeq
	_, err := c.h.appendAudit(c.r.Context(), ev)
	return err
}

// commit records the successful mutation's outcome. It is called before
// the 2xx response is written; when the audit log cannot take the event,
// the request fails with 503 (the caller decides whether to undo the
// action). A route whose action changes nothing (audit.verify) calls
// commit without begin and gets a lone outcome record.
func (c *call) commit() error {
	if c.ev.Action == "" || c.audited {
		return nil
	}
	c.audited = true
	if err := c.appendOutcome(audit.OutcomeOK); err != nil {
		c.h.log.Error("audit append failed", "action", c.ev.Action, "target", c.ev.Target, "err", err)
		return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable,
			msg: "the audit log is unavailable; " + auditFailNote(c.ev.Action, c.intentSeq != 0)}
	}
	return nil
}

// record appends the mutation's outcome where a failure to do so can only
// be logged: for a response that has already started (a stream), before
// its last line, and for a failed request (see fail).
func (c *call) record(outcome string) {
	if c.ev.Action == "" || c.audited {
		return
	}
	c.audited = true
	if err := c.appendOutcome(outcome); err != nil {
		c.h.log.Error("audit append failed", "action", c.ev.Action, "target", c.ev.Target, "err", err)
	}
}

// auditFailNote tells the client what became of its request when its
// outcome could not be recorded. intent says whether an intent was
// recorded before the action: a request without one (an audit
// verification) changed nothing, so nothing was carried out.
func auditFailNote(action string, intent bool) string {
	switch {
	case action == ActionSandboxCreate:
		return "the sandbox was not kept"
	case !intent:
		return "nothing was changed, and the request could not be recorded, so it is not answered"
	}
	return "the action was carried out but its outcome was not recorded"
}

// appendAudit appends ev, detached from the request's cancellation so
// that a client that goes away does not erase its trace.
func (h *Handler) appendAudit(ctx context.Context, ev audit.Event) (audit.Record, error) {
	ev.Time = time.Now().UTC()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), h.lim.AuditTimeout)
	defer cancel()
	return h.auditor.AppendRecord(ctx, ev)
}

// auditTarget caps a target taken from the URL.
func auditTarget(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return strings.ToValidUTF8(s, "?")
}

// authenticate resolves the bearer token of r.
func (h *Handler) authenticate(r *http.Request) (auth.Principal, error) {
	unauth := func(msg string) error {
		return &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: msg}
	}
	hdr := r.Header.Values("Authorization")
	if len(hdr) == 0 {
		return auth.Principal{}, unauth("missing Authorization: Bearer <API key>")
	}
	scheme, token, ok := strings.Cut(hdr[0], " ")
	token = strings.TrimSpace(token)
	if len(hdr) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > maxTokenBytes {
		return auth.Principal{}, unauth("malformed Authorization header; want: Bearer <API key>")
	}
	p, err := h.authn.Authenticate(r.Context(), token)
	if err != nil {
		for _, class := range []error{errdefs.ErrUnavailable, errdefs.ErrTimeout, errdefs.ErrInternal, errdefs.ErrCanceled} {
			if errors.Is(err, class) {
				return auth.Principal{}, fmt.Errorf("authenticate: %w", err)
			}
		}
		return auth.Principal{}, unauth("invalid API key")
	}
	if p.TenantID == "" || p.KeyID == "" {
		return auth.Principal{}, fmt.Errorf("authenticator returned a principal without tenant or key: %w", errdefs.ErrInternal)
	}
	return p, nil
}

// json writes v as a JSON response with status. A client that does not
// take the response within Limits.WriteIdleTimeout loses it (a response
// larger than the socket's buffers would otherwise hold the handler).
func (c *call) json(status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode response: %w: %v", errdefs.ErrInternal, err)
	}
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	c.w.WriteHeader(status)
	if len(b) < smallResponse {
		_, _ = c.w.Write(append(b, '\n'))
		return nil
	}
	rc := http.NewResponseController(c.w)
	_ = rc.SetWriteDeadline(time.Now().Add(c.h.lim.WriteIdleTimeout))
	if _, err := c.w.Write(append(b, '\n')); err != nil {
		abortConn(rc)
	}
	if err := rc.Flush(); err != nil {
		abortConn(rc)
	}
	_ = rc.SetWriteDeadline(time.Time{})
	return nil
}

// aLongTimeAgo is a deadline that has passed.
var aLongTimeAgo = time.Unix(1, 0)

// abortConn gives up on a response whose client does not take it: the
// connection is closed without net/http trying to write any more of it.
func abortConn(rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(aLongTimeAgo)
	panic(http.ErrAbortHandler)
}

// smallResponse is a response size that the socket's buffers take at
// once unless the client has left earlier responses unread; net/http's
// final flush of it is bounded by ServeHTTP.
const smallResponse = 32 << 10

// headerBytes is the size of r's request line and headers as they came
// in (close enough: each line's separators are counted as 4 bytes).
func headerBytes(r *http.Request) int {
	n := len(r.Method) + len(r.RequestURI) + len(r.Proto) + 4 + len("Host: ") + len(r.Host) + 4
	for k, vs := range r.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}

// eofBody records whether a request body was read to its end, or failed.
type eofBody struct {
	io.ReadCloser
	eof, failed bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.eof = true
	case err != nil:
		b.failed = true
	}
	return n, err
}

// decodeJSON reads the request body as one JSON value into v: at most
// Limits.MaxJSONBytes, no unknown fields, nothing after the value. An
// empty body is an error unless allowEmpty (then v keeps its zero value).
func (c *call) decodeJSON(v any, allowEmpty bool) error {
	if ct := c.r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
				msg: "request body must be application/json"}
		}
	}
	if c.r.ContentLength > c.h.lim.MaxJSONBytes {
		return &http.MaxBytesError{Limit: c.h.lim.MaxJSONBytes}
	}
	body := c.idleBody(http.MaxBytesReader(c.w, c.r.Body, c.h.lim.MaxJSONBytes))
	defer body.done()
	data, err := io.ReadAll(body)
	if err != nil {
		return bodyErr(err)
	}
	return decodeJSONBytes(data, v, allowEmpty)
}

// decodeJSONBytes is the pure part of decodeJSON (fuzzed).
func decodeJSONBytes(data []byte, v any, allowEmpty bool) error {
	if len(bytes.TrimSpace(data)) == 0 {
		if allowEmpty {
			return nil
		}
		return invalidf("request body is empty; a JSON object is required")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return invalidf("malformed JSON body: %s", jsonErrText(err))
	}
	if _, err := dec.Token(); err != io.EOF {
		return invalidf("malformed JSON body: unexpected data after the JSON object")
	}
	return nil
}

// jsonErrText describes a decoding error without Go type names.
func jsonErrText(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return fmt.Sprintf("field %q has the wrong type (got %s)", te.Field, te.Value)
		}
		return fmt.Sprintf("expected a JSON object (got %s)", te.Value)
	}
	msg := strings.TrimPrefix(err.Error(), "json: ")
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "unexpected end of input"
	}
	return msg
}

// bodyErr maps a failure reading a request body.
func bodyErr(err error) error {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return err
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return &apiError{status: http.StatusRequestTimeout, code: CodeTimeout, msg: "the request body stalled or arrived too slowly"}
	}
	return &apiError{status: http.StatusBadRequest, code: CodeInvalidArgument, msg: "could not read the request body"}
}

// idleReader fails a body that sends nothing for Limits.BodyIdleTimeout,
// or that falls below Limits.MinBodyRate on average once Limits.BodyGrace
// has passed (a client trickling its body). done must be called once the
// body is consumed: it clears the deadline, which would otherwise also end
// net/http's background read and with it the request's context.
type idleReader struct {
	r     io.Reader
	hdr   http.Header // the response's
	rc    *http.ResponseController
	idle  time.Duration
	start time.Time
	grace time.Duration
	rate  int64 // bytes per second
	n     int64 // bytes read so far
	ok    bool  // the deadline can be set
}

func (c *call) idleBody(r io.Reader) *idleReader {
	lim := c.h.lim
	return &idleReader{r: r, hdr: c.w.Header(), rc: http.NewResponseController(c.w), idle: lim.BodyIdleTimeout,
		start: time.Now(), grace: lim.BodyGrace, rate: lim.MinBodyRate, ok: true}
}

// deadline is when the next read must have returned: the idle limit, or
// when the bytes read so far stop covering the minimum rate.
func (b *idleReader) deadline(now time.Time) time.Time {
	d := now.Add(b.idle)
	if b.rate > 0 {
		earned := time.Duration(b.n/b.rate)*time.Second + time.Duration(b.n%b.rate)*time.Second/time.Duration(b.rate)
		if r := b.start.Add(b.grace + earned); r.Before(d) {
			d = r
		}
	}
	return d
}

func (b *idleReader) Read(p []byte) (int, error) {
	if b.ok {
		if err := b.rc.SetReadDeadline(b.deadline(time.Now())); err != nil {
			b.ok = false
		}
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	var ne interface{ Timeout() bool }
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		// Answer at once and close: net/http would otherwise read on
		// from this client before it sends the response.
		b.hdr.Set("Connection", "close")
	}
	return n, err
}

func (b *idleReader) done() {
	if b.ok {
		_ = b.rc.SetReadDeadline(time.Time{})
	}
}
