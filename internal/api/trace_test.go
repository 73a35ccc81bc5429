package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// The caller's trace: an agent with tracing of its own calls the API
// with this traceparent.
const (
	callerTrace = "4bf92f3577b34da6a3ce929d0e0736ff"
	callerSpan  = "00f067aa0ba902b7"
)

// newTracedEnv is newTestEnv with every span recorded in memory.
func newTracedEnv(t *testing.T, tune ...func(*Config)) (*testEnv, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "test")
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	e := newTestEnv(t, append([]func(*Config){func(c *Config) { c.Tracer = tp }}, tune...)...)
	return e, exp
}

// callerCtx is a context carrying the caller's span, which a client over
// tracing.Transport sends as traceparent.
func callerCtx(t *testing.T) context.Context {
	tid, _ := trace.TraceIDFromHex(callerTrace)
	sid, _ := trace.SpanIDFromHex(callerSpan)
	sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true})
	return trace.ContextWithRemoteSpanContext(context.Background(), sc)
}

func spanAttrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestTraceRequests: create, exec, file upload and download with the
// caller's traceparent are each a server span named by the route,
// children of the caller's span in its trace, with the work beneath
// them: sandbox.create (sandbox.rootfs, runtime.create), sandbox.exec,
// sandbox.file.upload, sandbox.file.download, with their attributes and
// never the command's text; responses carry the server span's
// traceparent and log lines its trace ID.
func TestTraceRequests(t *testing.T) {
	var logBuf syncBuffer
	e, exp := newTracedEnv(t, func(c *Config) { c.Log = slog.New(slog.NewJSONHandler(&logBuf, nil)) })
	c, err := client.New(e.srv.URL, keyA, client.WithHTTPClient(&http.Client{Transport: tracing.Transport(e.srv.Client().Transport)}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := callerCtx(t)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	const secretCmd = "echo hello # TOKEN=sk-live-abc"
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c", secretCmd}})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/f.txt", strings.NewReader("12345")); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "/tmp/f.txt")
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := io.ReadAll(rc); string(b) != "12345" {
		t.Fatalf("read %q", b)
	}
	rc.Close()

	spans := exp.GetSpans()
	byID := map[trace.SpanID]tracetest.SpanStub{}
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		if s.SpanContext.TraceID().String() != callerTrace {
			t.Errorf("span %s is in trace %s, not the caller's", s.Name, s.SpanContext.TraceID())
		}
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "sk-live") || strings.Contains(kv.Value.String(), "echo hello") {
				t.Errorf("span %s attribute %s carries the command: %q", s.Name, kv.Key, kv.Value.String())
			}
		}
		byID[s.SpanContext.SpanID()] = s
		byName[s.Name] = s
	}
	parentName := func(name string) string {
		s, ok := byName[name]
		if !ok {
			t.Errorf("no span %s (spans: %v)", name, names(spans))
			return ""
		}
		if s.Parent.SpanID().String() == callerSpan {
			return "caller"
		}
		return byID[s.Parent.SpanID()].Name
	}
	for child, parent := range map[string]string{
		"POST /v1/sandboxes":           "caller",
		"sandbox.create":               "POST /v1/sandboxes",
		"sandbox.rootfs":               "sandbox.create",
		"runtime.create":               "sandbox.create",
		"POST /v1/sandboxes/{id}/exec": "caller",
		"sandbox.exec":                 "POST /v1/sandboxes/{id}/exec",
		"PUT /v1/sandboxes/{id}/files": "caller",
		"sandbox.file.upload":          "PUT /v1/sandboxes/{id}/files",
		"GET /v1/sandboxes/{id}/files": "caller",
		"sandbox.file.download":        "GET /v1/sandboxes/{id}/files",
	} {
		if got := parentName(child); got != parent {
			t.Errorf("span %s has parent %q, want %q", child, got, parent)
		}
	}
	req := spanAttrs(byName["POST /v1/sandboxes/{id}/exec"])
	if byName["POST /v1/sandboxes/{id}/exec"].SpanKind != trace.SpanKindServer || req[tracing.KeyHTTPRoute].AsString() != "POST /v1/sandboxes/{id}/exec" ||
		req[tracing.KeyHTTPStatus].AsInt64() != 200 || req[tracing.KeySandbox].AsString() != sb.ID || req[tracing.KeyTenant].AsString() != tenantA {
		t.Errorf("exec request span attributes %v", byName["POST /v1/sandboxes/{id}/exec"].Attributes)
	}
	cmd := "sh\x00-c\x00" + secretCmd
	sum := sha256.Sum256([]byte(cmd))
	ex := spanAttrs(byName["sandbox.exec"])
	if ex[tracing.KeyCommandSHA256].AsString() != hex.EncodeToString(sum[:]) || ex[tracing.KeyCommandBytes].AsInt64() != int64(len(cmd)) ||
		ex[tracing.KeyExecStatus].AsString() != "success" || ex[tracing.KeyExitCode].AsInt64() != 0 || ex[tracing.KeyExecMode].AsString() != "buffered" {
		t.Errorf("sandbox.exec attributes %v", byName["sandbox.exec"].Attributes)
	}
	cr := spanAttrs(byName["sandbox.create"])
	if cr[tracing.KeySandbox].AsString() != sb.ID || cr[tracing.KeyOrigin].AsString() != "cold" || cr[tracing.KeyTemplate].AsString() != sb.Template {
		t.Errorf("sandbox.create attributes %v", byName["sandbox.create"].Attributes)
	}
	if n := spanAttrs(byName["sandbox.file.upload"])[tracing.KeyFileBytes].AsInt64(); n != 5 {
		t.Errorf("upload bytes %d", n)
	}
	if n := spanAttrs(byName["sandbox.file.download"])[tracing.KeyFileBytes].AsInt64(); n != 5 {
		t.Errorf("download bytes %d", n)
	}

	// The response's traceparent is the server span's; the log line's
	// trace ID its trace's.
	r, _ := e.do("GET", "/v1/sandboxes/"+sb.ID, keyA, "", nil)
	tp := r.Header.Get("Traceparent")
	var get tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == "GET /v1/sandboxes/{id}" {
			get = s
		}
	}
	if want := "00-" + get.SpanContext.TraceID().String() + "-" + get.SpanContext.SpanID().String() + "-01"; tp != want || get.Parent.IsValid() {
		t.Errorf("response traceparent %q, want %q (a new trace: the request had none)", tp, want)
	}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(logBuf.String()), "\n") {
		var l map[string]any
		if json.Unmarshal([]byte(line), &l) != nil || l["msg"] != "request" {
			continue
		}
		if l["route"] == "GET /v1/sandboxes/{id}" {
			found = true
			if l["trace_id"] != get.SpanContext.TraceID().String() || l["request_id"] != nil {
				t.Errorf("log line %s, want trace_id %s", line, get.SpanContext.TraceID())
			}
		}
	}
	if !found {
		t.Errorf("no request line in %s", logBuf.String())
	}
}

// TestTraceOff: without a tracer no response carries a traceparent, and
// the log line reads the request's traceparent as before.
func TestTraceOff(t *testing.T) {
	var logBuf syncBuffer
	e := newTestEnv(t, func(c *Config) { c.Log = slog.New(slog.NewJSONHandler(&logBuf, nil)) })
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/sandboxes", nil)
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Traceparent", "00-"+callerTrace+"-"+callerSpan+"-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if tp := resp.Header.Get("Traceparent"); tp != "" {
		t.Errorf("response traceparent %q with tracing off", tp)
	}
	if !strings.Contains(logBuf.String(), `"trace_id":"`+callerTrace+`"`) {
		t.Errorf("log %s lacks the caller's trace ID", logBuf.String())
	}
}

// TestTraceFailedRequest: an unmatched route and a refused request are
// spans too, named and statused.
func TestTraceFailedRequest(t *testing.T) {
	e, exp := newTracedEnv(t)
	e.do("GET", "/v1/nowhere", keyA, "", nil)
	e.do("GET", "/v1/sandboxes", "bad-key", "", nil)
	e.do("BREW", "/v1/nowhere", keyA, "", nil)
	got := map[string]int64{}
	for _, s := range exp.GetSpans() {
		got[s.Name] = spanAttrs(s)[tracing.KeyHTTPStatus].AsInt64()
	}
	if got["GET unmatched"] != 404 || got["GET /v1/sandboxes"] != 401 || got["_OTHER unmatched"] != 404 || len(got) != 3 {
		t.Errorf("spans %v", got)
	}
}

func names(spans tracetest.SpanStubs) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name)
	}
	return out
}

// syncBuffer is a bytes.Buffer safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestTraceProxiedAnswer: an answer of a sandbox's port is the app's:
// when the app sets its own traceparent the response carries that one
// alone, not Airlock's beside it (two traceparent headers, which a
// client reads as either); an app that sets none gets Airlock's.
func TestTraceProxiedAnswer(t *testing.T) {
	e, _ := newTracedEnv(t)
	sb := e.sandbox(context.Background())
	const appTP = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/own" {
			w.Header().Set("Traceparent", appTP)
		}
		fmt.Fprint(w, "ok")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := ln.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		path string
		own  bool
	}{{"/own", true}, {"/none", false}} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+"/v1/sandboxes/"+sb.ID+"/ports/"+strconv.Itoa(port)+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+keyA)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		got := resp.Header.Values("Traceparent")
		switch {
		case resp.StatusCode != http.StatusOK:
			t.Errorf("%s: %s", tc.path, resp.Status)
		case tc.own && (len(got) != 1 || got[0] != appTP):
			t.Errorf("%s: traceparent %q, want the app's alone", tc.path, got)
		case !tc.own && (len(got) != 1 || got[0] == appTP):
			t.Errorf("%s: traceparent %q, want Airlock's", tc.path, got)
		}
	}
}
