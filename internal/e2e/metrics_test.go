package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/client"
)

// TestMetricsLive: a real daemon with --metrics-listen and --log-format
// json serves its metrics without a key on that listener and to the
// operator's key on the API; after a create, two execs and a delete they
// count those, the audit log's appends, and the sandboxes by state; each
// request is one JSON log line carrying its traceparent's trace ID.
func TestMetricsLive(t *testing.T) {
	e := newEnv(t, "--metrics-listen", "127.0.0.1:0", "--log-format", "json")
	d := e.start()
	var metricsURL string
	for _, l := range strings.Split(d.Stdout(), "\n") {
		if rest, ok := strings.CutPrefix(l, "Metrics on "); ok {
			metricsURL, _, _ = strings.Cut(rest, " ")
		}
	}
	if metricsURL == "" {
		t.Fatalf("no metrics address announced: %q", d.Stdout())
	}
	ctx := ctxT(t, 2*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	if _, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil {
		t.Fatal(err)
	}
	// An exec carrying the caller's trace context.
	const trace = "0af7651916cd43dd8448eb211c80319c"
	req, err := http.NewRequestWithContext(ctx, "POST", d.URL+"/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"cmd":["false"]}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+d.Key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("traceparent", "00-"+trace+"-b7ad6b7169203331-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("exec: %d", resp.StatusCode)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if r := raw(t, d, "GET", "/metrics", "", ""); r.Status != http.StatusUnauthorized {
		t.Errorf("GET /metrics on the API without a key: %d, want 401", r.Status)
	}
	if r := raw(t, d, "GET", "/metrics", d.Key, ""); r.Status != http.StatusOK || !bytes.Contains(r.Body, []byte("airlock_sandbox_creates_total")) {
		t.Errorf("GET /metrics on the API with the operator key: %d", r.Status)
	}

	mresp, err := http.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mresp.Body)
	mresp.Body.Close()
	if mresp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", metricsURL, mresp.StatusCode, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	get := func(name string, labels ...string) float64 {
		t.Helper()
		for _, m := range fams[name].GetMetric() {
			if labelsAre(m, labels) {
				switch {
				case m.Counter != nil:
					return m.GetCounter().GetValue()
				case m.Gauge != nil:
					return m.GetGauge().GetValue()
				case m.Histogram != nil:
					return float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		t.Errorf("no series %s%v", name, labels)
		return -1
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_sandbox_creates_total", []string{"template", "host", "origin", "cold"}, 1},
		{"airlock_sandbox_destroys_total", []string{"reason", "deleted"}, 1},
		{"airlock_execs_total", []string{"mode", "buffered", "status", "success"}, 1},
		{"airlock_execs_total", []string{"mode", "buffered", "status", "error"}, 1},
		{"airlock_sandboxes", []string{"state", "stopped", "template", "host"}, 1},
		{"airlock_http_requests_total", []string{"route", "POST /v1/sandboxes/{id}/exec", "code", "200"}, 2},
		{"airlock_audit_queue_depth", nil, 0},
		{"airlock_approvals_pending", nil, 0},
	} {
		if got := get(c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	// Every mutation wrote an intent and an outcome (create, 2 execs,
	// delete), each timed.
	if ok, n := get("airlock_audit_appends_total", "result", "ok"), get("airlock_audit_append_duration_seconds"); ok < 8 || n < ok {
		t.Errorf("audit appends ok %v, timed %v; want at least 8, all timed", ok, n)
	}

	var found bool
	for _, l := range strings.Split(readLog(e, 1), "\n") {
		if !strings.Contains(l, `"msg":"request"`) {
			continue
		}
		var line map[string]any
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("request log line is not JSON: %v: %s", err, l)
		}
		if line["trace_id"] == trace {
			found = true
			if line["route"] != "POST /v1/sandboxes/{id}/exec" || line["status"] != float64(200) || line["method"] != "POST" {
				t.Errorf("traced request line %s", l)
			}
		}
	}
	if !found {
		t.Errorf("no request line with trace_id %s", trace)
	}
}

// labelsAre reports whether m's labels are exactly labels (name, value
// pairs).
func labelsAre(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel()) != len(labels)/2 {
		return false
	}
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
		}
		if !found {
			return false
		}
	}
	return true
}
