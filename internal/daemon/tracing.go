package daemon

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// The daemon's traces (internal/tracing): with an OTLP endpoint
// (--otlp-endpoint or the standard OTEL_EXPORTER_OTLP_* variables) the
// API makes a server span of each request and the work beneath it, and
// the tool gateway one of each call; spans go out through a batch
// processor, flushed when the daemon stops. The edges (MCP, E2B, the
// tool executors) make no spans: their listeners take the trace context
// of the requests they answer (traced) and their clients send it on to
// the API, so a caller's trace crosses them into the API's spans.

// startTracing returns the tracer provider cfg configures (nil: tracing
// off) and the function that flushes and stops it.
func startTracing(ctx context.Context, cfg Config, log *slog.Logger) (*tracing.Tracing, func(), error) {
	tr, err := tracing.New(ctx, tracing.Config{
		Endpoint:    cfg.OTLPEndpoint,
		SampleRatio: cfg.TraceSample,
		Version:     Version(),
		Log:         log,
	})
	if err != nil || tr == nil {
		return nil, func() {}, err
	}
	endpoint := cfg.OTLPEndpoint
	if endpoint == "" {
		endpoint = "from the environment (" + tracing.EnvTracesEndpoint + " or " + tracing.EnvEndpoint + ")"
	}
	log.Info("exporting traces", "otlp_endpoint", endpoint, "sample", cfg.TraceSample)
	return tr, func() {
		if err := tr.Shutdown(context.Background()); err != nil {
			log.Warn("tracing: the last spans were not exported", "err", err)
		}
	}, nil
}

// traced is h taking the trace context of each request's headers when
// tracing is on (tr not nil), for the edges; h itself otherwise.
func traced(tr *tracing.Tracing, h http.Handler) http.Handler {
	if tr == nil {
		return h
	}
	return tracing.Incoming(h)
}
