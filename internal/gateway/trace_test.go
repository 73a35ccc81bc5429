package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// newTracer returns a provider that samples every span into an
// in-memory exporter, synchronously.
func newTracer(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := tracing.NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "test")
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func attrsOf(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

// TestCallSpans: each call is one tool.call span with the tool, the
// outcome and the stage that decided it (a root span for a call from a
// sandbox, a child of the span in its context otherwise), its upstream a
// child span; no attribute carries the secret the call revealed, or its
// arguments.
func TestCallSpans(t *testing.T) {
	const canary = "sk-canary-5e1d0b"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]string{"auth": r.Header.Get("Authorization"), "tp": r.Header.Get("Traceparent")})
	}))
	defer srv.Close()
	tl := httpTool("api", srv.URL)
	tl.Upstream.HTTP.Headers = map[string]string{"Authorization": "Bearer {secret.api_key}"}
	tp, exp := newTracer(t)
	h := newHarness(t, func(c *Config) { c.Tracer = tp }, tl)
	h.sec.values["tenant-a/api_key"] = canary

	// From a sandbox: no span in the context.
	res, err := h.g.Call(context.Background(), caller("api"), "api", json.RawMessage(`{"guess":"`+canary+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	// The upstream is not told of the trace: a third party.
	if strings.Contains(string(res.Output), `"tp":"0`) {
		t.Errorf("the upstream got a traceparent: %s", res.Output)
	}
	// Within a request's span: a refusal at the grant stage.
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	_, err = h.g.Call(ctx, caller(), "api", nil)
	parent.End()
	if err == nil {
		t.Fatal("an ungranted call succeeded")
	}

	spans := exp.GetSpans()
	var calls, upstreams []tracetest.SpanStub
	for _, s := range spans {
		switch s.Name {
		case "tool.call":
			calls = append(calls, s)
		case "tool.upstream":
			upstreams = append(upstreams, s)
		}
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "sk-canary") {
				t.Errorf("span %s attribute %s carries the secret: %q", s.Name, kv.Key, kv.Value.String())
			}
		}
		if strings.Contains(s.Status.Description, "sk-canary") {
			t.Errorf("span %s status carries the secret", s.Name)
		}
	}
	if len(calls) != 2 || len(upstreams) != 1 {
		t.Fatalf("spans %d tool.call and %d tool.upstream, want 2 and 1", len(calls), len(upstreams))
	}
	ok, denied := calls[0], calls[1]
	if ok.Parent.IsValid() {
		t.Errorf("the sandbox's call has parent %v, want a root span", ok.Parent)
	}
	if upstreams[0].Parent.SpanID() != ok.SpanContext.SpanID() || upstreams[0].SpanContext.TraceID() != ok.SpanContext.TraceID() {
		t.Error("tool.upstream is not a child of its tool.call")
	}
	a := attrsOf(ok)
	if a[tracing.KeyToolName].AsString() != "api" || a[tracing.KeyToolOutcome].AsString() != OutcomeOK ||
		a[tracing.KeyToolStage].AsString() != "" || a[tracing.KeySandbox].AsString() != "sb-1" || a[tracing.KeyTenant].AsString() != "tenant-a" {
		t.Errorf("ok call attributes %v", ok.Attributes)
	}
	if denied.Parent.SpanID() != parent.SpanContext().SpanID() || denied.SpanContext.TraceID() != parent.SpanContext().TraceID() {
		t.Error("the call made within a span is not its child")
	}
	a = attrsOf(denied)
	if a[tracing.KeyToolOutcome].AsString() != OutcomeDenied || a[tracing.KeyToolStage].AsString() != StageGrant ||
		a["error.type"].AsString() != "permission_denied" {
		t.Errorf("denied call attributes %v", denied.Attributes)
	}
	if denied.Status.Description != "permission_denied" {
		t.Errorf("denied call status %+v, want the class code only", denied.Status)
	}
}
