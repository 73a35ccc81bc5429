package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// missingID has a sandbox ID's syntax but names none.
const missingID = sandbox.IDPrefix + "aaaaaaaaaaaaaaaa"

// keyOperator is the operator's key in the metrics tests.
const keyOperator = "secret-key-operator"

// newMetricsEnv is newTestEnv with metrics recorded by the API and the
// manager (which keeps a warm pool of one "other" sandbox) and, when log
// is set, the API's log going there.
func newMetricsEnv(t *testing.T, log *slog.Logger) (*testEnv, *metrics.Metrics) {
	t.Helper()
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	reg, err := template.NewRegistry(staticSource{"host"}, staticSource{"other"})
	if err != nil {
		t.Fatal(err)
	}
	met := metrics.New()
	mgr, err := sandbox.New(rt, reg, sandbox.Config{
		StateDir:       filepath.Join(t.TempDir(), "state"),
		HealthInterval: -1,
		PoolSize:       map[string]int{"other": 1},
		Metrics:        met,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mgr.Close(context.Background()) })
	met.Watch(metrics.Sources{Sandboxes: mgr.Counts, Pools: mgr.PoolGauges})
	e := &testEnv{t: t, rt: rt, mgr: mgr, audit: &fakeAudit{}, reg: reg, auth: &fakeAuth{keys: map[string]auth.Principal{
		keyA:        {TenantID: tenantA, KeyID: "ka", Scopes: apiScopes},
		keyOperator: {TenantID: "operator", KeyID: "kop", Scopes: []auth.Scope{auth.ScopeOperator}},
	}}}
	e.h, err = New(Config{Sandboxes: mgr, Auth: e.auth, Audit: e.audit, Metrics: met, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	e.srv = httptest.NewServer(e.h)
	t.Cleanup(e.srv.Close)
	return e, met
}

// scrapeMetrics gets GET /metrics with the operator's key and parses it
// with Prometheus's own text parser.
func scrapeMetrics(t *testing.T, e *testEnv) map[string]*dto.MetricFamily {
	t.Helper()
	resp, body := e.do("GET", "/metrics", keyOperator, "", nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, body)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Errorf("Content-Type %q, want the text format", ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, body)
	}
	return fams
}

// metricValue is the value of the series of family name with exactly
// labels (name, value pairs): a counter's or gauge's value, a
// histogram's sample count. ok is false when there is no such series.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	for _, m := range fams[name].GetMetric() {
		if len(m.GetLabel()) != len(labels)/2 {
			continue
		}
		match := true
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.GetCounter().GetValue(), true
		case m.Gauge != nil:
			return m.GetGauge().GetValue(), true
		case m.Histogram != nil:
			return float64(m.GetHistogram().GetSampleCount()), true
		}
	}
	return 0, false
}

// TestMetrics runs a scripted workload through the API over a real
// manager on the fake runtime, then scrapes /metrics and checks the
// counters, gauges and histogram counts it must have produced.
func TestMetrics(t *testing.T) {
	ctx := context.Background()
	e, _ := newMetricsEnv(t, nil)
	c := e.client(keyA)
	deadline := time.Now().Add(10 * time.Second)
	for e.mgr.PoolStats()[0].Ready != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("the pool did not fill: %+v", e.mgr.PoolStats())
		}
		time.Sleep(10 * time.Millisecond)
	}

	// 3 cold creates, 1 claimed from the pool, 1 that the runtime fails.
	var ids []string
	for range 3 {
		sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	if _, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: "other"}); err != nil {
		t.Fatal(err)
	}
	e.rt.SetCreateError(fmt.Errorf("injected: %w", errdefs.ErrResourceExhausted))
	resp, body := e.do("POST", "/v1/sandboxes", keyA, "application/json", []byte(`{}`))
	e.rt.SetCreateError(nil)
	if resp.StatusCode != http.StatusTooManyRequests || errCode(t, body) != "resource_exhausted" {
		t.Fatalf("failed create: %d %s", resp.StatusCode, body)
	}
	// 5 execs: 4 succeed, 1 exits 1.
	for i := range 5 {
		cmd := []string{"true"}
		if i == 2 {
			cmd = []string{"false"}
		}
		if _, err := c.Exec(ctx, ids[0], client.ExecRequest{Cmd: cmd}); err != nil {
			t.Fatal(err)
		}
	}
	// 1 streamed exec.
	if res, err := c.ExecStream(ctx, ids[0], client.ExecRequest{Cmd: []string{"true"}}, func(client.Stream, []byte) error { return nil }); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if err := c.DeleteSandbox(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	if resp, _ := e.do("GET", "/v1/sandboxes/"+missingID, keyA, "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET a missing sandbox: %d", resp.StatusCode)
	}
	if resp, _ := e.do("GET", "/no/such/route", "", "", nil); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /no/such/route: %d", resp.StatusCode)
	}
	// The counts cross tenants: a tenant's key gets none.
	if resp, _ := e.do("GET", "/metrics", keyA, "", nil); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("GET /metrics with a tenant's key: %d, want 403", resp.StatusCode)
	}

	fams := scrapeMetrics(t, e)
	for _, want := range []struct {
		name   string
		labels []string
		value  float64
	}{
		{"airlock_sandbox_creates_total", []string{"template", "host", "origin", "cold"}, 3},
		{"airlock_sandbox_creates_total", []string{"template", "other", "origin", "pool"}, 1},
		{"airlock_sandbox_create_failures_total", []string{"reason", "resource_exhausted"}, 1},
		{"airlock_sandbox_create_duration_seconds", []string{"origin", "cold"}, 3},
		{"airlock_sandbox_create_duration_seconds", []string{"origin", "pool"}, 1},
		{"airlock_pool_claims_total", []string{"template", "other", "result", "claimed"}, 1},
		{"airlock_pool_target_size", []string{"template", "other"}, 1},
		{"airlock_sandbox_destroys_total", []string{"reason", "deleted"}, 1},
		{"airlock_execs_total", []string{"mode", "buffered", "status", "success"}, 4},
		{"airlock_execs_total", []string{"mode", "buffered", "status", "error"}, 1},
		{"airlock_exec_duration_seconds", []string{"mode", "buffered"}, 5},
		{"airlock_execs_total", []string{"mode", "stream", "status", "success"}, 1},
		{"airlock_exec_duration_seconds", []string{"mode", "stream"}, 1},
		{"airlock_sandboxes", []string{"state", "running", "template", "host"}, 2},
		{"airlock_sandboxes", []string{"state", "stopped", "template", "host"}, 1},
		{"airlock_sandboxes", []string{"state", "running", "template", "other"}, 1},
		{"airlock_http_requests_total", []string{"route", "POST /v1/sandboxes", "code", "201"}, 4},
		{"airlock_http_requests_total", []string{"route", "POST /v1/sandboxes", "code", "429"}, 1},
		{"airlock_http_requests_total", []string{"route", "POST /v1/sandboxes/{id}/exec", "code", "200"}, 6},
		{"airlock_http_requests_total", []string{"route", "DELETE /v1/sandboxes/{id}", "code", "204"}, 1},
		{"airlock_http_requests_total", []string{"route", "GET /v1/sandboxes/{id}", "code", "404"}, 1},
		{"airlock_http_requests_total", []string{"route", "unmatched", "code", "404"}, 1},
		{"airlock_http_requests_total", []string{"route", "GET /metrics", "code", "403"}, 1},
		{"airlock_http_request_duration_seconds", []string{"route", "POST /v1/sandboxes/{id}/exec"}, 6},
		{"airlock_http_request_duration_seconds", []string{"route", "POST /v1/sandboxes"}, 5},
	} {
		got, ok := metricValue(fams, want.name, want.labels...)
		if !ok || got != want.value {
			t.Errorf("%s%v = %v (found %v), want %v", want.name, want.labels, got, ok, want.value)
		}
	}
	// No sandbox ID is a label value anywhere.
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				for _, id := range ids {
					if strings.Contains(l.GetValue(), id) {
						t.Errorf("%s has label %s=%q: a sandbox ID", name, l.GetName(), l.GetValue())
					}
				}
			}
		}
	}
}

// TestMetricsNotServed: without Config.Metrics, /metrics answers 501.
func TestMetricsNotServed(t *testing.T) {
	e := newTestEnv(t)
	e.auth.keys[keyOperator] = auth.Principal{TenantID: "operator", KeyID: "kop", Scopes: []auth.Scope{auth.ScopeOperator}}
	resp, body := e.do("GET", "/metrics", keyOperator, "", nil)
	if resp.StatusCode != http.StatusNotImplemented || errCode(t, body) != CodeNotSupported {
		t.Fatalf("GET /metrics: %d %s, want 501 not_supported", resp.StatusCode, body)
	}
}

// logBuffer is a bytes.Buffer safe for the server's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// requestLines returns the "request" lines of the log, each decoded.
func (b *logBuffer) requestLines(t *testing.T) []map[string]any {
	t.Helper()
	b.mu.Lock()
	data := bytes.Clone(b.b.Bytes())
	b.mu.Unlock()
	var out []map[string]any
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %v: %s", err, sc.Bytes())
		}
		if line["msg"] == "request" {
			out = append(out, line)
		}
	}
	return out
}

// TestRequestLogJSON: with a JSON logger, each request is one JSON line
// with its method, route, status, duration and the trace ID of its
// traceparent header, or a generated request ID without a valid one.
func TestRequestLogJSON(t *testing.T) {
	var buf logBuffer
	e, _ := newMetricsEnv(t, slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	const trace = "4bf92f3577b34da6a3ce929d0e0736ff"
	send := func(method, path, token, traceparent string, body string) *http.Response {
		req, err := http.NewRequest(method, e.srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if traceparent != "" {
			req.Header.Set("traceparent", traceparent)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	send("POST", "/v1/sandboxes", keyA, "00-"+trace+"-00f067aa0ba902b7-01", "{}")
	send("GET", "/healthz", "", "", "")
	send("GET", "/v1/sandboxes/"+missingID, keyA, "ff-"+trace+"-00f067aa0ba902b7-01", "") // version ff: invalid
	send("GET", "/nowhere", "", "", "")

	var lines []map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for {
		// A line is written as its handler returns, which may be just
		// after the client has its answer.
		if lines = buf.requestLines(t); len(lines) >= 4 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if len(lines) != 4 {
		t.Fatalf("%d request lines, want 4: %v", len(lines), lines)
	}
	hexID := regexp.MustCompile(`^[0-9a-f]{32}$`)
	for i, want := range []struct {
		method, route string
		status        float64
		level         string
		traceID       string // "" for a generated request_id
		key           string
	}{
		{"POST", "POST /v1/sandboxes", 201, "INFO", trace, "ka"},
		{"GET", "GET /healthz", 200, "DEBUG", "", ""},
		{"GET", "GET /v1/sandboxes/{id}", 404, "INFO", "", "ka"},
		{"GET", "unmatched", 404, "INFO", "", ""},
	} {
		l := lines[i]
		if l["method"] != want.method || l["route"] != want.route || l["status"] != want.status || l["level"] != want.level {
			t.Errorf("line %d = %v, want method %s route %s status %v level %s", i, l, want.method, want.route, want.status, want.level)
		}
		if d, ok := l["duration_ms"].(float64); !ok || d < 0 {
			t.Errorf("line %d: duration_ms %v", i, l["duration_ms"])
		}
		if want.traceID != "" {
			if l["trace_id"] != want.traceID || l["request_id"] != nil {
				t.Errorf("line %d: trace_id %v request_id %v, want trace_id %s", i, l["trace_id"], l["request_id"], want.traceID)
			}
		} else if id, _ := l["request_id"].(string); !hexID.MatchString(id) || l["trace_id"] != nil {
			t.Errorf("line %d: request_id %v trace_id %v, want a generated request_id", i, l["request_id"], l["trace_id"])
		}
		if key, _ := l["key"].(string); key != want.key {
			t.Errorf("line %d: key %q, want %q", i, key, want.key)
		}
	}
}

func TestTraceID(t *testing.T) {
	const trace = "4bf92f3577b34da6a3ce929d0e0736ff"
	for _, c := range []struct {
		values []string
		want   string
	}{
		{[]string{"00-" + trace + "-00f067aa0ba902b7-01"}, trace},
		{[]string{"00-" + trace + "-00f067aa0ba902b7-00"}, trace},
		{[]string{"01-" + trace + "-00f067aa0ba902b7-01-more"}, trace}, // a later version may add fields
		{[]string{"01-" + trace + "-00f067aa0ba902b7-01x"}, ""},
		{[]string{"00-" + trace + "-00f067aa0ba902b7-01-more"}, ""}, // version 00 has none
		{[]string{"ff-" + trace + "-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-" + strings.ToUpper(trace) + "-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-" + trace + "-0000000000000000-01"}, ""},
		{[]string{"00-" + trace + "-00f067aa0ba902b7"}, ""},
		{[]string{"00_" + trace + "-00f067aa0ba902b7-01"}, ""},
		{[]string{"00-" + trace + "-00f067aa0ba902b7-01", "00-" + trace + "-00f067aa0ba902b7-01"}, ""},
		{nil, ""},
	} {
		h := http.Header{}
		for _, v := range c.values {
			h.Add("traceparent", v)
		}
		got, ok := traceID(h)
		if got != c.want || ok != (c.want != "") {
			t.Errorf("traceID(%q) = %q, %v; want %q", c.values, got, ok, c.want)
		}
	}
}
