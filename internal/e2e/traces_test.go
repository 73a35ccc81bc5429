package e2e

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/airlock-sandbox/airlock/client"
)

// otlpReceiver is an OTLP/HTTP collector on loopback: it decodes the
// ExportTraceServiceRequests the daemon sends to /v1/traces.
type otlpReceiver struct {
	srv      *httptest.Server
	mu       sync.Mutex
	spans    []*tracepb.Span
	resource map[string]string
	bad      []string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{resource: map[string]string{}}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(io.LimitReader(req.Body, 64<<20))
		m := &coltrace.ExportTraceServiceRequest{}
		r.mu.Lock()
		defer r.mu.Unlock()
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, m) != nil {
			r.bad = append(r.bad, req.Method+" "+req.URL.Path+" "+req.Header.Get("Content-Type"))
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		for _, rs := range m.ResourceSpans {
			for _, kv := range rs.Resource.GetAttributes() {
				r.resource[kv.Key] = kv.Value.GetStringValue()
			}
			for _, ss := range rs.ScopeSpans {
				r.spans = append(r.spans, ss.Spans...)
			}
		}
		out, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// traceparent adds a traceparent to every request: a caller whose own
// span calls the daemon. The value may change between requests.
type traceparent struct {
	value *atomic.Value // string
	next  http.RoundTripper
}

func newTraceparent(v string, next http.RoundTripper) traceparent {
	tp := traceparent{value: &atomic.Value{}, next: next}
	tp.value.Store(v)
	return tp
}

func (tp traceparent) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Traceparent", tp.value.Load().(string))
	return tp.next.RoundTrip(r)
}

func hexID(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 2*len(b))
	for i, c := range b {
		out[2*i], out[2*i+1] = digits[c>>4], digits[c&15]
	}
	return string(out)
}

// strAttr is a span attribute's value as text ("" if absent).
func strAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key != key {
			continue
		}
		switch v := kv.Value.GetValue().(type) {
		case *commonpb.AnyValue_StringValue:
			return v.StringValue
		case *commonpb.AnyValue_IntValue:
			return strconv.FormatInt(v.IntValue, 10)
		case *commonpb.AnyValue_BoolValue:
			return strconv.FormatBool(v.BoolValue)
		}
	}
	return ""
}

// TestTraces: a real daemon with --otlp-endpoint exports, over OTLP/HTTP
// to a receiver on loopback, the spans of a caller's create → exec →
// file upload → code cell sequence in the caller's trace (its
// traceparent), as a tree: each request's server span (named by its
// route) a child of the caller's span, the work beneath it (the cold
// create's rootfs and runtime steps down to the agent's start, the
// exec, the upload, the cell); an MCP tool call with another
// traceparent (than the request that started its session) crosses the
// edge: the API request it makes is a child of that caller's span. No
// attribute carries the command's text.
func TestTraces(t *testing.T) {
	rcv := newOTLPReceiver(t)
	e := newEnv(t, "--otlp-endpoint", rcv.srv.URL, "--pool-size", "0")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	const (
		trace1, span1 = "4bf92f3577b34da6a3ce929d0e0736ff", "00f067aa0ba902b7"
		trace2, span2 = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
		trace3, span3 = "5c1d0e7a2b3f49c8a1d2e3f405162738", "1a2b3c4d5e6f7081"
		secretCmd     = "echo traced # TOKEN=sk-live-trace"
	)
	hc := &http.Client{Transport: newTraceparent("00-"+trace1+"-"+span1+"-01", http.DefaultTransport)}
	c, err := client.New(d.URL, d.Key, client.WithHTTPClient(hc))
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"sh", "-c", secretCmd}}); err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/traced.txt", strings.NewReader("hello")); err != nil {
		t.Fatal(err)
	}
	x, err := c.RunCode(ctx, sb.ID, client.RunCodeRequest{Language: client.LangBash, Code: "echo cell"})
	if err != nil || x.Status != client.CodeStatusOK {
		t.Fatal(x, err)
	}

	// Through the MCP edge: the session starts in a third trace, the tool
	// call is made in a second caller's: its API request is in that one
	// (a tool runs on the session's context, not its request's).
	mc := sdk.NewClient(&sdk.Implementation{Name: "e2e", Version: "v1"}, nil)
	mtp := newTraceparent("00-"+trace3+"-"+span3+"-01", http.DefaultTransport)
	mhc := &http.Client{Transport: bearer{d.Key, mtp}}
	cs, err := mc.Connect(ctx, &sdk.StreamableClientTransport{Endpoint: d.URL + "/mcp", HTTPClient: mhc, MaxRetries: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	mtp.value.Store("00-" + trace2 + "-" + span2 + "-01")
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"sandbox_id": sb.ID, "command": "true"}})
	if err != nil || res.IsError {
		t.Fatal(res, err)
	}
	_ = cs.Close()
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	d.Stop() // flushes the batch of spans

	rcv.mu.Lock()
	defer rcv.mu.Unlock()
	if len(rcv.bad) > 0 {
		t.Errorf("bad exports: %v", rcv.bad)
	}
	if rcv.resource["service.name"] != "airlock" || rcv.resource["service.version"] == "" {
		t.Errorf("resource %v", rcv.resource)
	}
	byID := map[string]*tracepb.Span{}
	for _, s := range rcv.spans {
		byID[hexID(s.SpanId)] = s
	}
	var names1 []string
	first := map[string]*tracepb.Span{} // by name, in trace 1
	var mcpExec *tracepb.Span
	for _, s := range rcv.spans {
		tid := hexID(s.TraceId)
		if tid != trace1 && tid != trace2 && tid != trace3 {
			t.Errorf("span %s is in trace %s, not a caller's", s.Name, tid)
			continue
		}
		if len(s.ParentSpanId) == 0 {
			t.Errorf("span %s is a root span; the callers' spans are its parents", s.Name)
		}
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "sk-live") || strings.Contains(kv.Value.String(), "echo traced") {
				t.Errorf("span %s attribute %s carries the command", s.Name, kv.Key)
			}
		}
		if tid == trace1 {
			names1 = append(names1, s.Name)
			if first[s.Name] == nil {
				first[s.Name] = s
			}
		} else if s.Name == "POST /v1/sandboxes/{id}/exec" {
			if tid == trace3 {
				t.Errorf("the MCP call's exec is in the trace of the request that started the session, not of the call's")
			}
			mcpExec = s
		}
	}
	parentOf := func(name string) string {
		s := first[name]
		if s == nil {
			t.Errorf("no span %s in the caller's trace (spans: %v)", name, names1)
			return ""
		}
		p := hexID(s.ParentSpanId)
		if p == span1 {
			return "caller"
		}
		if ps := byID[p]; ps != nil {
			return ps.Name
		}
		return "?" + p
	}
	for child, parent := range map[string]string{
		"POST /v1/sandboxes":           "caller",
		"sandbox.create":               "POST /v1/sandboxes",
		"sandbox.rootfs":               "sandbox.create",
		"runtime.create":               "sandbox.create",
		"runtime.cgroup":               "runtime.create",
		"runtime.agent_start":          "runtime.create",
		"runtime.layers":               "runtime.agent_start",
		"POST /v1/sandboxes/{id}/exec": "caller",
		"sandbox.exec":                 "POST /v1/sandboxes/{id}/exec",
		"PUT /v1/sandboxes/{id}/files": "caller",
		"sandbox.file.upload":          "PUT /v1/sandboxes/{id}/files",
		"POST /v1/sandboxes/{id}/code": "caller",
		"code.cell":                    "POST /v1/sandboxes/{id}/code",
		"DELETE /v1/sandboxes/{id}":    "caller",
	} {
		if got := parentOf(child); got != parent {
			t.Errorf("span %s has parent %q, want %q", child, got, parent)
		}
	}
	if s := first["POST /v1/sandboxes/{id}/exec"]; s != nil {
		if s.Kind != tracepb.Span_SPAN_KIND_SERVER || strAttr(s, "http.route") != "POST /v1/sandboxes/{id}/exec" ||
			strAttr(s, "airlock.sandbox.id") != sb.ID || strAttr(s, "http.response.status_code") != "200" {
			t.Errorf("exec request span: kind %v attributes %v", s.Kind, s.Attributes)
		}
	}
	if s := first["sandbox.exec"]; s != nil {
		if len(strAttr(s, "airlock.exec.command.sha256")) != 64 || strAttr(s, "airlock.exec.status") != "success" {
			t.Errorf("sandbox.exec attributes %v", s.Attributes)
		}
	}
	if s := first["code.cell"]; s != nil && (strAttr(s, "airlock.code.status") != "ok" || strAttr(s, "airlock.code.language") != "bash") {
		t.Errorf("code.cell attributes %v", s.Attributes)
	}
	if s := first["sandbox.create"]; s != nil && (strAttr(s, "airlock.sandbox.id") != sb.ID || strAttr(s, "airlock.create.origin") != "cold") {
		t.Errorf("sandbox.create attributes %v", s.Attributes)
	}
	if mcpExec == nil {
		t.Errorf("the MCP call's exec is not in the MCP caller's trace")
	} else if hexID(mcpExec.ParentSpanId) != span2 {
		t.Errorf("the MCP call's exec has parent %s, want the MCP caller's span %s", hexID(mcpExec.ParentSpanId), span2)
	}
}
