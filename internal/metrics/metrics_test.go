package metrics

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// scrape serves m's handler once and parses the answer with
// Prometheus's own text parser.
func scrape(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parse: %v\n%s", err, rec.Body)
	}
	return fams
}

// value is the value of the counter or gauge of fam with exactly labels
// (name=value pairs); ok is false when there is none.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	fam := fams[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if !hasLabels(m, labels) {
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

func hasLabels(m *dto.Metric, labels []string) bool {
	if len(m.GetLabel()) != len(labels)/2 {
		return false
	}
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestNilRecordsNothing(t *testing.T) {
	var m *Metrics
	m.Request("GET /healthz", 200, time.Millisecond)
	m.Created("host", OriginCold, time.Millisecond, "")
	m.Claimed("host", ClaimEmpty)
	m.Destroyed("deleted", false)
	m.Exec(ExecBuffered, "success", time.Millisecond)
	m.AuditAppend(time.Millisecond, nil)
	m.TemplateBuild("build", "ok")
	m.CodeContext("ok")
	m.CodeCell("ok")
	m.ToolCall("t", "ok", "", time.Millisecond)
	m.EgressEnded("connect", 1, 2)
	m.EgressRefused("not_listed")
	m.Watch(Sources{})
}

func TestRecorded(t *testing.T) {
	m := New()
	m.Request("POST /v1/sandboxes", 201, time.Millisecond)
	m.Request("POST /v1/sandboxes", 201, time.Millisecond)
	m.Request("", 404, time.Millisecond)
	m.Request("GET /x", 1000, time.Millisecond)
	m.Created("host", OriginCold, time.Millisecond, "")
	m.Created("", OriginCold, time.Millisecond, "not_found")
	m.Destroyed("expired", true)
	m.AuditAppend(time.Millisecond, errors.New("disk full"))
	m.EgressEnded("connect", 10, 20)
	m.EgressEnded("http", 0, 5)
	fams := scrape(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_http_requests_total", []string{"route", "POST /v1/sandboxes", "code", "201"}, 2},
		{"airlock_http_requests_total", []string{"route", "unmatched", "code", "404"}, 1},
		{"airlock_http_requests_total", []string{"route", "GET /x", "code", "other"}, 1},
		{"airlock_http_request_duration_seconds", []string{"route", "POST /v1/sandboxes"}, 2},
		{"airlock_sandbox_creates_total", []string{"template", "host", "origin", "cold"}, 1},
		{"airlock_sandbox_create_failures_total", []string{"reason", "not_found"}, 1},
		{"airlock_sandbox_create_duration_seconds", []string{"origin", "cold"}, 1},
		{"airlock_sandbox_destroy_failures_total", []string{"reason", "expired"}, 1},
		{"airlock_audit_appends_total", []string{"result", "error"}, 1},
		{"airlock_audit_append_duration_seconds", nil, 1},
		{"airlock_egress_bytes_total", []string{"direction", "up"}, 10},
		{"airlock_egress_bytes_total", []string{"direction", "down"}, 25},
		{"airlock_egress_connections_total", []string{"protocol", "http"}, 1},
	} {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	// The runtime's and the process's collectors are on the registry.
	if fams["go_goroutines"] == nil || fams["process_cpu_seconds_total"] == nil {
		t.Errorf("no Go or process collector")
	}
}

// TestNamesBounded: past MaxNames distinct template or tool names, the
// rest are counted as "other", in the counters and in the gauges.
func TestNamesBounded(t *testing.T) {
	m := New()
	for i := range MaxNames + 10 {
		m.ToolCall(fmt.Sprintf("tool_%d", i), "ok", "", time.Millisecond)
	}
	var counts []SandboxCount
	for i := range MaxNames + 3 {
		counts = append(counts, SandboxCount{State: "running", Template: fmt.Sprintf("t%d", i), N: 2})
	}
	m.Watch(Sources{
		Sandboxes:        func() []SandboxCount { return counts },
		Pools:            func() []PoolState { return []PoolState{{Template: "host", Target: 2, Ready: 1, Filling: 1}} },
		AuditQueue:       func() int { return 7 },
		ApprovalsPending: func() int { return 3 },
	})
	fams := scrape(t, m)
	if n := len(fams["airlock_tool_calls_total"].GetMetric()); n != MaxNames+1 {
		t.Errorf("%d tool call series, want %d", n, MaxNames+1)
	}
	if got, _ := value(fams, "airlock_tool_calls_total", "tool", OtherName, "outcome", "ok", "stage", ""); got != 10 {
		t.Errorf("other tools = %v, want 10", got)
	}
	if got, _ := value(fams, "airlock_sandboxes", "state", "running", "template", OtherName); got != 6 {
		t.Errorf("sandboxes of other templates = %v, want 6 (3 templates of 2)", got)
	}
	if got, _ := value(fams, "airlock_sandboxes", "state", "running", "template", "t0"); got != 2 {
		t.Errorf("sandboxes of t0 = %v, want 2", got)
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_pool_target_size", []string{"template", "host"}, 2},
		{"airlock_pool_ready", []string{"template", "host"}, 1},
		{"airlock_pool_filling", []string{"template", "host"}, 1},
		{"airlock_pool_fill_failures", []string{"template", "host"}, 0},
		{"airlock_audit_queue_depth", nil, 7},
		{"airlock_approvals_pending", nil, 3},
	} {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (found %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}

func TestStatusText(t *testing.T) {
	for code, want := range map[int]string{200: "200", 201: "201", 204: "204", 101: "101", 404: "404", 499: "499", 503: "503", 0: "other", 1000: "other"} {
		if got := statusText(code); got != want {
			t.Errorf("statusText(%d) = %q, want %q", code, got, want)
		}
	}
}
