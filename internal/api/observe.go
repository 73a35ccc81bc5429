package api

import (
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/interp"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Each request the Handler answers is observed once it ends: counted
// and timed in Config.Metrics by route (the mux's pattern, so that the
// label set is the route table's) and status, and logged as one line
// (message "request"; at debug level for the probes and /metrics, at
// info for the rest) with its method, route, path, status, bytes,
// duration, the key's tenant and ID when one authenticated it, and an ID
// that ties it to the caller: the trace ID of a valid W3C traceparent
// header (trace_id), else one generated here (request_id).
//
// With Config.Tracer each request is also a server span (startSpan):
// it continues the trace of the request's traceparent header (or starts
// one), is named by the route pattern once the mux has matched it, and
// carries the method, route, status, sandbox ID and tenant; the work the
// handler does (a create, an exec, a file transfer, a code cell, a
// build, a tool call) is traced beneath it through the request's
// context. The response carries the span's own traceparent header, and
// the request's log line the span's trace ID, so that a caller without
// tracing of its own can still find its trace.

// maxLoggedPath caps the path a request line carries.
const maxLoggedPath = 256

// recordWriter is the response writer of an observed request: it keeps
// the status and the bytes written, and the principal wrap resolved.
// Unwrap keeps http.ResponseController and hijacking working.
type recordWriter struct {
	http.ResponseWriter
	status      int
	bytes       int64
	tenant, key string
	span        trace.Span // the request's server span; nil: tracing off
}

func (w *recordWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(b)
	w.bytes += int64(n)
	return n, err
}

func (w *recordWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// setPrincipal records who the request is from, for its log line; rw is
// the writer wrap got (a recordWriter, unless the handler is used
// without ServeHTTP).
func setPrincipal(rw http.ResponseWriter, tenant, key string) {
	if w, ok := rw.(*recordWriter); ok {
		w.tenant, w.key = tenant, key
	}
}

// probeRoutes are logged at debug level: probes and scrapers ask them
// every few seconds.
var probeRoutes = map[string]bool{"GET /healthz": true, "GET /readyz": true, "GET /metrics": true}

// observed records the request r answered through w, started at start.
// r is the request the mux served (its Pattern set).
func (h *Handler) observed(w *recordWriter, r *http.Request, start time.Time) {
	took := time.Since(start)
	status := w.status
	if status == 0 {
		status = http.StatusOK // net/http's answer to a handler that wrote nothing
	}
	route := r.Pattern
	if route == "/" {
		route = "" // the 404 of no route: "unmatched"
	}
	h.metrics.Request(route, status, took)
	if w.span != nil {
		endSpan(w, r, route, status)
	}
	level := slog.LevelInfo
	if probeRoutes[r.Pattern] {
		level = slog.LevelDebug
	}
	ctx := r.Context()
	if !h.log.Enabled(ctx, level) {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	path := r.URL.Path
	if len(path) > maxLoggedPath {
		path = path[:maxLoggedPath] + "..."
	}
	idKey, id := "request_id", ""
	if w.span != nil {
		idKey, id = "trace_id", w.span.SpanContext().TraceID().String()
	} else if tid, ok := traceID(r.Header); ok {
		idKey, id = "trace_id", tid
	} else {
		id = newRequestID()
	}
	attrs := []slog.Attr{
		slog.String("method", r.Method),
		slog.String("route", route),
		slog.String("path", path),
		slog.Int("status", status),
		slog.Int64("bytes", w.bytes),
		slog.Float64("duration_ms", float64(took.Microseconds())/1000),
		slog.String(idKey, id),
	}
	if w.key != "" {
		attrs = append(attrs, slog.String("tenant", w.tenant), slog.String("key", w.key))
	}
	h.log.LogAttrs(ctx, level, "request", attrs...)
}

// startSpan starts r's server span when tracing is on, continuing the
// trace of r's traceparent header, and returns r with the span in its
// context; the span is named by the route and ended by observed. The
// response carries the span's traceparent.
func (h *Handler) startSpan(w *recordWriter, r *http.Request) *http.Request {
	if h.tracer == nil {
		return r
	}
	ctx := tracing.Extract(r.Context(), r.Header)
	method := spanMethod(r.Method)
	ctx, span := h.tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(tracing.KeyHTTPMethod.String(method)))
	w.span = span
	tracing.Inject(ctx, w.Header())
	return r.WithContext(ctx)
}

// endSpan names the request's span by its route ("unmatched" for none),
// records the status, the sandbox and the tenant, and ends it; a 5xx is
// an error.
func endSpan(w *recordWriter, r *http.Request, route string, status int) {
	span := w.span
	if span.IsRecording() {
		name := route
		if name == "" {
			name = spanMethod(r.Method) + " unmatched"
		}
		span.SetName(name)
		attrs := []attribute.KeyValue{tracing.KeyHTTPStatus.Int(status)}
		if route != "" {
			attrs = append(attrs, tracing.KeyHTTPRoute.String(route))
		}
		if id := r.PathValue("id"); id != "" && strings.Contains(route, "/sandboxes/{id}") {
			attrs = append(attrs, tracing.KeySandbox.String(id))
		}
		if w.tenant != "" {
			attrs = append(attrs, tracing.KeyTenant.String(w.tenant))
		}
		span.SetAttributes(attrs...)
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
}

// spanMethod is the method a span names: a standard one, else _OTHER
// (OpenTelemetry's convention), so that a client cannot put what it
// likes in a span's name.
func spanMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "_OTHER"
}

// traceID returns the trace ID of h's traceparent header (W3C Trace
// Context, level 1) when there is exactly one and it is valid: version
// 2 hex digits but not ff, a trace ID of 32 lowercase hex digits not all
// zero, a parent ID of 16 not all zero, 2 of flags; version 00 is exactly
// that, a later version may add fields after a dash.
func traceID(h http.Header) (string, bool) {
	vs := h.Values("Traceparent")
	if len(vs) != 1 {
		return "", false
	}
	v := vs[0]
	if len(v) < 55 || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return "", false
	}
	version, trace, parent, flags := v[0:2], v[3:35], v[36:52], v[53:55]
	if !lowerHex(version) || version == "ff" || !lowerHex(trace) || !lowerHex(parent) || !lowerHex(flags) {
		return "", false
	}
	if allZero(trace) || allZero(parent) {
		return "", false
	}
	if len(v) > 55 && (version == "00" || v[55] != '-') {
		return "", false
	}
	return trace, true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// newRequestID returns 16 random bytes in hex: the shape of a trace ID,
// so that a tracer can adopt it later.
func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}

// serveMetrics serves GET /metrics: the daemon's metrics in the
// Prometheus exposition format, to a key with the operator scope (the
// counts cross tenants). `airlock serve --metrics-listen` serves the
// same without a key on an address of its own.
func (h *Handler) serveMetrics(c *call) error {
	if h.metrics == nil {
		return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not serve metrics"}
	}
	h.metrics.Handler().ServeHTTP(c.w, c.r)
	return nil
}

// resultCode is the result label of an operation: "ok", or the error
// code err answers with.
func resultCode(err error) string {
	if err == nil {
		return "ok"
	}
	_, code, _ := errdefs.HTTP(err)
	return code
}

// cellStatus is the status label of a code cell: how it ended
// (interp's statuses), or "failed" when it did not run to an end.
func cellStatus(ended bool, status string) string {
	switch {
	case !ended || status == "":
		return "failed"
	case status == string(interp.StatusOK), status == string(interp.StatusError), status == string(interp.StatusTimeout),
		status == string(interp.StatusInterrupted), status == string(interp.StatusDied):
		return status
	}
	return "other"
}
