package tracing

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

const callerTP = "00-4bf92f3577b34da6a3ce929d0e0736ff-00f067aa0ba902b7-01"

func TestEndpointURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"},
		{"http://collector:4318/", "http://collector:4318/v1/traces"},
		{"https://otel.example.com/custom/traces", "https://otel.example.com/custom/traces"},
		{"ftp://x:1", ""},
		{"127.0.0.1:4318", ""},
		{"http://", ""},
		{"http://u:p@x:4318", ""},
		{"http://x:4318/?a=b", ""},
		{"http://x:4318/#f", ""},
	} {
		got, err := EndpointURL(c.in)
		if c.want == "" {
			if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("EndpointURL(%q) = %q, %v; want an invalid_argument error", c.in, got, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("EndpointURL(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestNewOff: no endpoint, in the flag or the environment, is tracing
// off: New returns nil, whose Provider is nil and Shutdown a no-op.
func TestNewOff(t *testing.T) {
	tr, err := New(context.Background(), Config{SampleRatio: 1, LookupEnv: env(map[string]string{EnvEndpoint: " "})})
	if err != nil || tr != nil {
		t.Fatalf("New = %v, %v; want nil, nil", tr, err)
	}
	if tr.Provider() != nil || tr.Shutdown(context.Background()) != nil {
		t.Error("a nil Tracing is not off")
	}
	for _, cfg := range []Config{
		{SampleRatio: 1.5, Endpoint: "http://x:4318"},
		{SampleRatio: -0.1, Endpoint: "http://x:4318"},
		{SampleRatio: 1, Endpoint: "x:4318"},
	} {
		if _, err := New(context.Background(), cfg); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want invalid_argument", cfg, err)
		}
	}
}

// receiver is an OTLP/HTTP collector on loopback: it decodes each
// ExportTraceServiceRequest.
type receiver struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []*coltrace.ExportTraceServiceRequest
	path string
	got  chan struct{}
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{got: make(chan struct{}, 16)}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		m := &coltrace.ExportTraceServiceRequest{}
		if req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, m) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		r.reqs = append(r.reqs, m)
		r.path = req.URL.Path
		r.mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
		r.got <- struct{}{}
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// TestExport: with an endpoint, spans go out over OTLP/HTTP (protobuf)
// to its /v1/traces at Shutdown at the latest, with service.name airlock
// and the version; the environment's endpoint works as the flag does.
func TestExport(t *testing.T) {
	for _, viaEnv := range []bool{false, true} {
		t.Run(fmt.Sprint("env=", viaEnv), func(t *testing.T) {
			rcv := newReceiver(t)
			cfg := Config{SampleRatio: 1, Version: "v9.9.9", LookupEnv: env(nil)}
			if viaEnv {
				t.Setenv(EnvEndpoint, rcv.srv.URL)
				cfg.LookupEnv = env(map[string]string{EnvEndpoint: rcv.srv.URL})
			} else {
				cfg.Endpoint = rcv.srv.URL
			}
			tr, err := New(context.Background(), cfg)
			if err != nil || tr == nil {
				t.Fatalf("New = %v, %v", tr, err)
			}
			ctx, span := tr.Provider().Tracer("t").Start(context.Background(), "parent")
			_, child := Start(ctx, "child")
			child.End()
			span.End()
			if err := tr.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-rcv.got:
			case <-time.After(5 * time.Second):
				t.Fatal("no export")
			}
			rcv.mu.Lock()
			defer rcv.mu.Unlock()
			if rcv.path != "/v1/traces" {
				t.Errorf("exported to %q", rcv.path)
			}
			var names []string
			for _, req := range rcv.reqs {
				for _, rs := range req.ResourceSpans {
					res := map[string]string{}
					for _, kv := range rs.Resource.Attributes {
						res[kv.Key] = kv.Value.GetStringValue()
					}
					if res["service.name"] != "airlock" || res["service.version"] != "v9.9.9" {
						t.Errorf("resource %v", res)
					}
					for _, ss := range rs.ScopeSpans {
						for _, s := range ss.Spans {
							names = append(names, s.Name)
						}
					}
				}
			}
			if strings.Join(names, ",") != "child,parent" {
				t.Errorf("exported spans %v", names)
			}
		})
	}
}

// TestSampler: parent-based: a caller's sampled flag is followed
// whatever the ratio; the ratio decides the traces started here.
func TestSampler(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 0, "")
	defer tp.Shutdown(context.Background())
	tr := tp.Tracer("t")
	h := http.Header{"Traceparent": {callerTP}}
	_, s1 := tr.Start(Extract(context.Background(), h), "continued")
	s1.End()
	_, s2 := tr.Start(context.Background(), "new")
	s2.End()
	h.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0736ff-00f067aa0ba902b7-00")
	_, s3 := tr.Start(Extract(context.Background(), h), "unsampled caller")
	s3.End()
	spans := exp.GetSpans()
	if len(spans) != 1 || spans[0].Name != "continued" || spans[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0736ff" {
		t.Fatalf("exported %v, want the continued span only", spans)
	}
}

// TestStart: without a span in the context Start is a no-op and returns
// the same context; with one, a child with that span's provider.
func TestStart(t *testing.T) {
	ctx := context.Background()
	got, span := Start(ctx, "x")
	if got != ctx || span.IsRecording() {
		t.Error("Start without a span made one")
	}
	if _, span := StartRoot(ctx, nil, "x"); span.IsRecording() {
		t.Error("StartRoot without a provider made a span")
	}
	exp := tracetest.NewInMemoryExporter()
	tp := NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "")
	defer tp.Shutdown(context.Background())
	pctx, parent := tp.Tracer("t").Start(ctx, "parent")
	_, child := Start(pctx, "child")
	End(child, fmt.Errorf("sandbox sb-x: secret path /home/x: %w", errdefs.ErrNotFound))
	// A root span with the provider, continuing a remote parent.
	_, root := StartRoot(Extract(ctx, http.Header{"Traceparent": {callerTP}}), tp, "root")
	End(root, nil)
	parent.End()
	spans := exp.GetSpans()
	if len(spans) != 3 {
		t.Fatalf("%d spans", len(spans))
	}
	c := spans[0]
	if c.Name != "child" || c.Parent.SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("child %s has parent %v", c.Name, c.Parent.SpanID())
	}
	if c.Status.Code != codes.Error || c.Status.Description != "not_found" {
		t.Errorf("child status %+v, want Error not_found", c.Status)
	}
	for _, kv := range c.Attributes {
		if strings.Contains(kv.Value.String(), "/home/x") {
			t.Errorf("the error's message is in attribute %s", kv.Key)
		}
	}
	if r := spans[1]; r.Name != "root" || r.SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0736ff" || r.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("root span %s trace %s parent %s", r.Name, r.SpanContext.TraceID(), r.Parent.SpanID())
	}
}

// TestIncomingTransport: a request's traceparent, taken by Incoming,
// goes out on the calls the handler makes through Transport (with the
// same trace and parent); a call whose context has none goes out as it
// is, and the caller's request is not changed.
func TestIncomingTransport(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Traceparent"))
		mu.Unlock()
	}))
	defer api.Close()
	hc := &http.Client{Transport: Transport(nil)}
	edge := httptest.NewServer(Incoming(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), "GET", api.URL, nil)
		resp, err := hc.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
		if req.Header.Get("Traceparent") != "" {
			t.Error("Transport changed the caller's request")
		}
	})))
	defer edge.Close()
	for _, tp := range []string{callerTP, "", "00-zz"} {
		req, _ := http.NewRequest("GET", edge.URL, nil)
		if tp != "" {
			req.Header.Set("Traceparent", tp)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 3 || seen[0] != callerTP || seen[1] != "" || seen[2] != "" {
		t.Errorf("the API saw traceparents %q, want %q, none, none", seen, callerTP)
	}
	// A span in the context: its own context goes out.
	exp := tracetest.NewInMemoryExporter()
	tp := NewProvider(sdktrace.NewSimpleSpanProcessor(exp), 1, "")
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("t").Start(context.Background(), "s")
	defer span.End()
	h := http.Header{}
	Inject(ctx, h)
	if want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"; h.Get("Traceparent") != want {
		t.Errorf("Inject: %q, want %q", h.Get("Traceparent"), want)
	}
	if trace.SpanContextFromContext(Extract(context.Background(), h)).TraceID() != span.SpanContext().TraceID() {
		t.Error("Extract does not read what Inject wrote")
	}
}

// TestCommand: a command's attributes are its digest and size only.
func TestCommand(t *testing.T) {
	attrs := Command("echo $API_KEY")
	sum := sha256.Sum256([]byte("echo $API_KEY"))
	if len(attrs) != 2 || attrs[0].Value.AsString() != hex.EncodeToString(sum[:]) || attrs[1].Value.AsInt64() != 13 {
		t.Errorf("attributes %v", attrs)
	}
	for _, a := range attrs {
		if strings.Contains(a.Value.String(), "API_KEY") {
			t.Errorf("attribute %s carries the command", a.Key)
		}
	}
}
