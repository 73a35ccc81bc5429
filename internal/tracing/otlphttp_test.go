package tracing

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestOTLPClient: the client's request is an ExportTraceServiceRequest
// the collector's own type decodes; it sends the environment's headers,
// gzips when asked, retries 503 (not 400) a bounded number of times, and
// the endpoints resolve as the specification says.
func TestOTLPClient(t *testing.T) {
	var (
		mu       sync.Mutex
		statuses []int // answers to give, in order; then 200
		got      []*http.Request
		bodies   [][]byte
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(bytes.NewReader(b))
			if err != nil {
				t.Errorf("gzip: %v", err)
				return
			}
			b, _ = io.ReadAll(zr)
		}
		mu.Lock()
		defer mu.Unlock()
		got, bodies = append(got, r), append(bodies, b)
		if len(statuses) > 0 {
			s := statuses[0]
			statuses = statuses[1:]
			w.WriteHeader(s)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	spans := []*tracepb.ResourceSpans{
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "a"}, {Name: "b"}}}}},
		{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "c"}}}}},
	}
	reset := func(s ...int) {
		mu.Lock()
		statuses, got, bodies = s, nil, nil
		mu.Unlock()
	}
	names := func(b []byte) string {
		m := &coltrace.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, m); err != nil {
			t.Fatalf("the collector's type does not decode the request: %v", err)
		}
		var n []string
		for _, rs := range m.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					n = append(n, s.Name)
				}
			}
		}
		return strings.Join(n, ",")
	}

	c, err := newOTLPClient(srv.URL+"/v1/traces", env(map[string]string{
		envHeaders:     "x-tenant=a%20b, authorization=Bearer%20tok",
		envCompression: "gzip",
	}))
	if err != nil {
		t.Fatal(err)
	}
	reset(http.StatusServiceUnavailable)
	if err := c.UploadTraces(context.Background(), spans); err != nil {
		t.Fatalf("a 503 then 200: %v", err)
	}
	if len(got) != 2 || names(bodies[1]) != "a,b,c" {
		t.Fatalf("%d requests; want 2 carrying a,b,c", len(got))
	}
	if h := got[1].Header; h.Get("X-Tenant") != "a b" || h.Get("Authorization") != "Bearer tok" || h.Get("Content-Type") != "application/x-protobuf" {
		t.Errorf("headers %v", h)
	}

	reset(http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	if err := c.UploadTraces(context.Background(), spans); err == nil || len(got) != maxExportAttempts {
		t.Errorf("always 503: %v after %d requests, want an error after %d", err, len(got), maxExportAttempts)
	}
	reset(http.StatusBadRequest)
	if err := c.UploadTraces(context.Background(), spans); err == nil || len(got) != 1 {
		t.Errorf("400: %v after %d requests, want an error after 1", err, len(got))
	}

	for _, bad := range []map[string]string{
		{envHeaders: "novalue"},
		{envHeaders: "k=a%0Ab"},
		{envTimeout: "soon"},
		{envTracesTimeout: "0"},
		{envCompression: "zstd"},
	} {
		if _, err := newOTLPClient(srv.URL, env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

// TestEnvEndpoints: OTEL_EXPORTER_OTLP_ENDPOINT is a base URL the traces
// path is added to (after its own path); the TRACES_ one is used as it
// is; the flag wins over both.
func TestEnvEndpoints(t *testing.T) {
	var mu sync.Mutex
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		paths = append(paths, r.URL.Path)
		mu.Unlock()
	}))
	defer srv.Close()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{LookupEnv: env(map[string]string{EnvEndpoint: srv.URL + "/otel/"})}, "/otel/v1/traces"},
		{Config{LookupEnv: env(map[string]string{EnvEndpoint: srv.URL + "/x", EnvTracesEndpoint: srv.URL + "/custom"})}, "/custom"},
		{Config{Endpoint: srv.URL, LookupEnv: env(map[string]string{EnvTracesEndpoint: srv.URL + "/custom"})}, "/v1/traces"},
	} {
		tc.cfg.SampleRatio = 1
		tr, err := New(context.Background(), tc.cfg)
		if err != nil || tr == nil {
			t.Fatalf("New: %v", err)
		}
		_, span := tr.Provider().Tracer("t").Start(context.Background(), "s")
		span.End()
		mu.Lock()
		paths = nil
		mu.Unlock()
		if err := tr.Shutdown(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		if len(paths) != 1 || paths[0] != tc.want {
			t.Errorf("exported to %v, want %s", paths, tc.want)
		}
		mu.Unlock()
	}
	if _, err := New(context.Background(), Config{SampleRatio: 1, LookupEnv: env(map[string]string{EnvTracesEndpoint: "ftp://x"})}); err == nil {
		t.Error("an ftp traces endpoint accepted")
	}
}
