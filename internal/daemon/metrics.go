package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// The daemon's metrics (internal/metrics): the API and the sandbox
// manager record theirs themselves (api.Config.Metrics,
// sandbox.Config.Metrics) and the audit log through audit.Options.Observe;
// the tool gateway's calls and the egress edge's connections are
// counted here, on their way to the audit log; the gauges are read from
// the manager, the audit log and the approval queue at each scrape
// (watchSources). They are served at GET /metrics on the API listener
// (operator scope) and, with --metrics-listen, without a key on a
// listener of their own.

// observeEgress counts each egress event before record takes it.
func observeEgress(met *metrics.Metrics, record func(sandbox.EgressEvent)) func(sandbox.EgressEvent) {
	return func(ev sandbox.EgressEvent) {
		if ev.Allowed {
			met.EgressEnded(string(ev.Protocol), ev.BytesUp, ev.BytesDown)
		} else {
			met.EgressRefused(string(ev.Reason))
		}
		record(ev)
	}
}

// observeTools counts each tool call before record takes it.
func observeTools(met *metrics.Metrics, record func(gateway.Record)) func(gateway.Record) {
	return func(r gateway.Record) {
		met.ToolCall(r.Tool, r.Outcome, r.Stage, r.Duration)
		record(r)
	}
}

// watchSources reads the gauges from mgr, the audit log and the approval
// queue at each scrape.
func watchSources(met *metrics.Metrics, mgr *sandbox.Manager, log *audit.Log, approvals *gateway.Approvals) {
	met.Watch(metrics.Sources{
		Sandboxes:        mgr.Counts,
		Pools:            mgr.PoolGauges,
		AuditQueue:       log.QueueDepth,
		ApprovalsPending: approvals.Pending,
	})
}

// listenMetrics listens on cfg.MetricsListen (nil, nil when it is empty)
// before anything is adopted or created, so that a busy port fails the
// start at once, as the API's does.
func listenMetrics(cfg Config) (net.Listener, error) {
	if cfg.MetricsListen == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", cfg.MetricsListen)
	if err != nil {
		return nil, fmt.Errorf("metrics listen: %w", err)
	}
	return ln, nil
}

// serveMetrics serves GET /metrics, and nothing else, on ln without a
// key until stop, which shuts it down (scrapes in flight get
// shutdownTimeout).
func serveMetrics(ln net.Listener, met *metrics.Metrics, log *slog.Logger) (stop func()) {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", met.Handler())
	srv := api.NewServer(ln.Addr().String(), mux, log)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener", "err", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}
}
