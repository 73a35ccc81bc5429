// Package tracing holds the daemon's OpenTelemetry traces: the tracer
// provider that exports spans over OTLP/HTTP when an endpoint is
// configured, and the few helpers the rest of the daemon starts and ends
// spans with.
//
// Spans are started where a context already flows. Start makes a child
// of the span in ctx with that span's own provider, so that only the
// API (the server span of each request) and the tool gateway (calls that
// arrive without one) hold a provider; everything below them — the
// sandbox manager, the runtime — needs nothing but ctx. With tracing off
// there is no span in any context, and Start returns at once with a
// no-op span.
//
// No span attribute carries a secret, a key, a request or response body
// or a command's text: callers add IDs, names, sizes, statuses and
// digests only, and End records an error by its class code (not_found,
// unavailable...), never by its message.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Instrumentation is the instrumentation scope of every span the daemon
// makes.
const Instrumentation = "github.com/airlock-sandbox/airlock"

// ServiceName is the service.name of the daemon's spans.
const ServiceName = "airlock"

// The environment variables of the OTLP exporter's endpoint, as the
// OpenTelemetry SDK reads them.
const (
	EnvEndpoint       = "OTEL_EXPORTER_OTLP_ENDPOINT"
	EnvTracesEndpoint = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
)

// shutdownTimeout bounds the last export at Shutdown.
const shutdownTimeout = 5 * time.Second

// Config configures the tracer provider.
type Config struct {
	// Endpoint is the OTLP/HTTP collector's URL (--otlp-endpoint): a URL
	// with no path or "/" gets the traces path /v1/traces, as
	// OTEL_EXPORTER_OTLP_ENDPOINT does; a URL with another path is used
	// as it is, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is. Empty: the
	// exporter reads those variables (and OTEL_EXPORTER_OTLP_HEADERS,
	// _TIMEOUT and _COMPRESSION, and their TRACES_ forms; see
	// otlphttp.go), and without either tracing is off.
	Endpoint string
	// SampleRatio is the share of traces started here that are sampled,
	// 0 to 1; a trace continued from a caller follows the caller's
	// sampled flag (parent-based).
	SampleRatio float64
	// Version is service.version.
	Version string
	// LookupEnv reads the environment (default os.LookupEnv).
	LookupEnv func(string) (string, bool)
	// Log receives export failures; nil discards.
	Log *slog.Logger
}

// Tracing is the daemon's tracer provider. A nil *Tracing is tracing
// off: Provider returns nil and Shutdown does nothing.
type Tracing struct {
	tp *sdktrace.TracerProvider
}

// New returns the tracer provider cfg describes, exporting over OTLP/HTTP
// through a batch span processor, or nil when no endpoint is configured
// (neither cfg.Endpoint nor the environment's).
func New(ctx context.Context, cfg Config) (*Tracing, error) {
	if cfg.LookupEnv == nil {
		cfg.LookupEnv = os.LookupEnv
	}
	if cfg.SampleRatio < 0 || cfg.SampleRatio > 1 {
		return nil, fmt.Errorf("trace sample ratio %g must be between 0 and 1: %w", cfg.SampleRatio, errdefs.ErrInvalidArgument)
	}
	var u string
	switch {
	case cfg.Endpoint != "":
		var err error
		if u, err = EndpointURL(cfg.Endpoint); err != nil {
			return nil, err
		}
	case envSet(cfg.LookupEnv, EnvTracesEndpoint):
		// The traces variable is the URL itself, path included.
		v, _ := cfg.LookupEnv(EnvTracesEndpoint)
		if _, err := EndpointURL(strings.TrimSpace(v)); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvTracesEndpoint, err)
		}
		u = strings.TrimSpace(v)
	case envSet(cfg.LookupEnv, EnvEndpoint):
		// The general one is a base URL the signal's path is added to.
		v, _ := cfg.LookupEnv(EnvEndpoint)
		base := strings.TrimRight(strings.TrimSpace(v), "/")
		if _, err := EndpointURL(base); err != nil {
			return nil, fmt.Errorf("%s: %w", EnvEndpoint, err)
		}
		u = base + "/v1/traces"
	default:
		return nil, nil
	}
	client, err := newOTLPClient(u, cfg.LookupEnv)
	if err != nil {
		return nil, err
	}
	exp, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("otlp exporter: %w", err)
	}
	if cfg.Log != nil {
		log := cfg.Log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
			log.Warn("tracing", "err", err)
		}))
	}
	return &Tracing{tp: NewProvider(sdktrace.NewBatchSpanProcessor(exp), cfg.SampleRatio, cfg.Version)}, nil
}

// NewProvider returns a tracer provider that hands its spans to sp, with
// a parent-based sampler of ratio and the daemon's resource (service.name
// airlock, service.version version). Tests build theirs with it over an
// in-memory exporter.
func NewProvider(sp sdktrace.SpanProcessor, ratio float64, version string) *sdktrace.TracerProvider {
	if version == "" {
		version = "dev"
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", ServiceName),
		attribute.String("service.version", version),
	)
	return sdktrace.NewTracerProvider(
		sdktrace.WithSpanProcessor(sp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(ratio))),
		sdktrace.WithResource(res),
	)
}

func envSet(lookup func(string) (string, bool), name string) bool {
	v, ok := lookup(name)
	return ok && strings.TrimSpace(v) != ""
}

// EndpointURL returns the traces URL of endpoint (see Config.Endpoint):
// an absolute http or https URL with a host and no credentials, query or
// fragment.
func EndpointURL(endpoint string) (string, error) {
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("otlp endpoint %q must be an http or https URL with a host and no credentials, query or fragment: %w",
			endpoint, errdefs.ErrInvalidArgument)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// Provider returns the tracer provider, or nil when tracing is off.
func (t *Tracing) Provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t.tp
}

// Shutdown exports the spans still queued (within a few seconds) and
// stops the provider.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, shutdownTimeout)
	defer cancel()
	return t.tp.Shutdown(ctx)
}

// Start starts a span called name, a child of the span in ctx, with that
// span's provider. When ctx carries no span (tracing is off, or the work
// belongs to no trace) it returns ctx and a no-op span at once.
func Start(ctx context.Context, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if !parent.SpanContext().IsValid() {
		return ctx, parent
	}
	return parent.TracerProvider().Tracer(Instrumentation).Start(ctx, name, trace.WithAttributes(attrs...))
}

// StartRoot is Start, but when ctx carries no span it starts a root span
// (or continues a remote parent Extract put in ctx) with tp; a nil tp is
// tracing off.
func StartRoot(ctx context.Context, tp trace.TracerProvider, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	parent := trace.SpanFromContext(ctx)
	if parent.IsRecording() || tp == nil {
		return Start(ctx, name, attrs...)
	}
	return tp.Tracer(Instrumentation).Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span, marking it failed when err is not nil: status Error
// with the error's class code as its description and as error.type. The
// message is left out: it may name paths or what a caller sent.
func End(span trace.Span, err error) {
	if err != nil && span.IsRecording() {
		code := ErrorCode(err)
		span.SetAttributes(attribute.String("error.type", code))
		span.SetStatus(codes.Error, code)
	}
	span.End()
}

// ErrorCode is the API's error code of err's class ("internal" for an
// error of no class, "canceled" for a canceled context).
func ErrorCode(err error) string {
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	_, code, _ := errdefs.HTTP(err)
	return code
}

// propagator is W3C Trace Context: the traceparent and tracestate
// headers.
var propagator = propagation.TraceContext{}

// Extract returns ctx with the remote span context of h's W3C
// traceparent (and tracestate) header, when it carries a valid one;
// spans started under it continue the caller's trace.
func Extract(ctx context.Context, h http.Header) context.Context {
	return propagator.Extract(ctx, propagation.HeaderCarrier(h))
}

// Inject sets h's traceparent (and tracestate) header to the span
// context in ctx, when there is a valid one.
func Inject(ctx context.Context, h http.Header) {
	propagator.Inject(ctx, propagation.HeaderCarrier(h))
}

// Incoming puts the trace context of each request's headers in its
// context (Extract), for handlers that make no span themselves but call
// on with Transport, so that the trace crosses them.
func Incoming(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Traceparent") != "" {
			r = r.WithContext(Extract(r.Context(), r.Header))
		}
		next.ServeHTTP(w, r)
	})
}

// Transport wraps base (nil: http.DefaultTransport) so that each request
// carries the trace context of its own context as a traceparent header:
// the span in it, or the remote parent Incoming or Extract put there.
// A request whose context carries none is sent as it is.
func Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{base: base}
}

type transport struct{ base http.RoundTripper }

func (t *transport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !trace.SpanContextFromContext(r.Context()).IsValid() {
		return t.base.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not change its request
	Inject(r.Context(), r.Header)
	return t.base.RoundTrip(r)
}

// CloseIdleConnections closes base's idle connections.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}
