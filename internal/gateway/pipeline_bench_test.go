package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"
)

// BenchmarkCall measures the gateway's overhead per call: each
// iteration calls a local echo tool once through Gateway.Call (grant,
// schema, a Cedar policy, budgets, circuit, upstream, output schema,
// record) and once directly with an HTTP client, and it reports both
// medians and their difference, so that both run under the same load.
func BenchmarkCall(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.Copy(w, r.Body)
	}))
	defer srv.Close()
	reg := &memRegistry{}
	tl := httpTool("echo", srv.URL)
	tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer"},"q":{"type":"string"}},"required":["id"]}`)
	tl.OutputSchema = json.RawMessage(`{"type":"object","required":["id"]}`)
	tl.Governance.Redact = []string{"q"}
	reg.put(tl)
	g, err := New(Config{
		Registry:      reg,
		AllowUpstream: allowLoopback,
		Policies: func(context.Context, string) (string, error) {
			return `permit(principal, action, resource) when { context.args.id < 1000000 };`, nil
		},
		Record: func(Record) {},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	direct := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer direct.CloseIdleConnections()
	args := json.RawMessage(`{"id":42,"q":"travel budget"}`)
	c := caller("echo")
	ctx := context.Background()

	callDirect := func() {
		resp, err := direct.Post(srv.URL, "application/json", bytes.NewReader(args))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	callGateway := func() {
		if _, err := g.Call(ctx, c, "echo", args); err != nil {
			b.Fatal(err)
		}
	}
	callDirect()
	callGateway()

	viaGateway := make([]time.Duration, 0, b.N)
	viaDirect := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for b.Loop() {
		t0 := time.Now()
		callDirect()
		t1 := time.Now()
		callGateway()
		viaDirect = append(viaDirect, t1.Sub(t0))
		viaGateway = append(viaGateway, time.Since(t1))
	}
	b.StopTimer()
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	pd, pg := p50(viaDirect), p50(viaGateway)
	b.ReportMetric(pd, "direct-p50-µs")
	b.ReportMetric(pg, "gateway-p50-µs")
	b.ReportMetric(pg-pd, "overhead-p50-µs")
}
