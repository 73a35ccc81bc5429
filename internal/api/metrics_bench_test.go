package api

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// The cost of metrics and request logs on the exec round trip: the same
// exec as BenchmarkExecAPI through three servers side by side, one
// exec on each in turn (so that the machine's load falls on all three
// alike), each over its own manager on the fake runtime: with neither
// metrics nor request lines (off), with the metrics recorded (metrics:
// the request's counter and histogram, the exec's), and with the metrics
// and a JSON line per request as well (to a discarded writer: the
// encoding, not the disk). It reports each one's median and the
// overheads against off:
//
//	CGO_ENABLED=0 go test ./internal/api -run '^$' -bench 'ExecObserved' -benchtime 3000x -count 3
func BenchmarkExecObserved(b *testing.B) {
	variants := []struct {
		name string
		tune func(*Config)
	}{
		{"off", func(*Config) {}},
		{"metrics", func(c *Config) { c.Metrics = metrics.New() }},
		{"metrics+jsonlog", func(c *Config) {
			c.Metrics = metrics.New()
			c.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
		}},
		{"metrics+tracing", func(c *Config) {
			c.Metrics = metrics.New()
			c.Tracer = discardTracing(b).Provider()
		}},
	}
	ctx := context.Background()
	type server struct {
		e    *testEnv
		c    *client.Client
		id   string
		took []time.Duration
	}
	servers := make([]*server, len(variants))
	for i, v := range variants {
		e := newTestEnv(b, v.tune)
		servers[i] = &server{e: e, c: e.client(keyA), id: e.sandbox(ctx).ID}
	}
	b.ResetTimer()
	n := 0
	for b.Loop() {
		s := servers[n%len(servers)]
		n++
		t0 := time.Now()
		res, err := s.c.Exec(ctx, s.id, client.ExecRequest{Cmd: benchCommand})
		s.took = append(s.took, time.Since(t0))
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
			b.Fatal(res, err)
		}
		s.e.audit.take()
	}
	b.StopTimer()
	median := func(d []time.Duration) float64 {
		if len(d) == 0 {
			return 0
		}
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	off := median(servers[0].took)
	for i, v := range variants {
		m := median(servers[i].took)
		b.ReportMetric(m, "us-p50-"+v.name)
		if i > 0 && off > 0 {
			b.ReportMetric(100*(m-off)/off, "%-"+v.name)
		}
	}
}

// BenchmarkRequestObserved is the per-request cost alone: GET
// /v1/sandboxes/{id} served in process (no socket, no agent), without
// and with metrics and the JSON request line.
//
//	CGO_ENABLED=0 go test ./internal/api -run '^$' -bench 'RequestObserved' -count 6
func BenchmarkRequestObserved(b *testing.B) {
	for _, c := range []struct {
		name string
		tune func(*Config)
	}{
		{"off", func(*Config) {}},
		{"metrics", func(c *Config) { c.Metrics = metrics.New() }},
		{"metrics+jsonlog", func(c *Config) {
			c.Metrics = metrics.New()
			c.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
		}},
		{"metrics+tracing", nil},
	} {
		b.Run(c.name, func(b *testing.B) {
			if c.tune == nil {
				tr := discardTracing(b)
				c.tune = func(c *Config) { c.Metrics = metrics.New(); c.Tracer = tr.Provider() }
			}
			e := newTestEnv(b, c.tune)
			sb := e.sandbox(context.Background())
			req := httptest.NewRequest("GET", "/v1/sandboxes/"+sb.ID, nil)
			req.Header.Set("Authorization", "Bearer "+keyA)
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				w := httptest.NewRecorder()
				e.h.ServeHTTP(w, req)
				if w.Code != 200 {
					b.Fatal(w.Code, w.Body)
				}
			}
		})
	}
}

// discardTracing is tracing on, every trace sampled, exporting over
// OTLP/HTTP to a loopback receiver that discards what it gets.
func discardTracing(b *testing.B) *tracing.Tracing {
	b.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	b.Cleanup(srv.Close)
	tr, err := tracing.New(context.Background(), tracing.Config{Endpoint: srv.URL, SampleRatio: 1, Version: "bench"})
	if err != nil || tr == nil {
		b.Fatal(tr, err)
	}
	b.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr
}
