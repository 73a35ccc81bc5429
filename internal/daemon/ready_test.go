package daemon

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimefake"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// fixedSource is a template of the fake runtime (which mounts nothing).
type fixedSource struct{}

func (fixedSource) Name() string { return template.HostName }
func (fixedSource) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	return runtime.Rootfs{Layers: []string{"/nonexistent"}}, nil
}

// TestReadinessRuntimeAndStore: /readyz's check fails until the sandbox
// manager (over the runtime) has started, passes while it runs with the
// store open, and fails once the store is closed or the manager is.
func TestReadinessRuntimeAndStore(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	st, err := sqlitestore.Open(ctx, filepath.Join(dir, dbFile), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	alog, err := audit.New(ctx, st, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer alog.Close(ctx)
	rt, err := runtimefake.New(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	reg, err := template.NewRegistry(fixedSource{})
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := sandbox.New(rt, reg, sandbox.Config{StateDir: filepath.Join(dir, recordsDir), HealthInterval: -1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := &readiness{runtime: mgr.Ready, dataDir: dir, head: st.AuditHead, writeErr: alog.WriteErr, now: time.Now}

	if err := r.check(ctx); err == nil || !strings.Contains(err.Error(), "not started") {
		t.Errorf("before the manager started: %v, want not ready", err)
	}
	if err := mgr.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.check(ctx); err != nil {
		t.Errorf("started: %v, want ready", err)
	}
	if err := mgr.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := r.check(ctx); err == nil || !strings.Contains(err.Error(), "shut down") {
		t.Errorf("after the manager closed: %v, want not ready", err)
	}
	r.runtime = func() error { return nil }
	if err := r.check(ctx); err != nil {
		t.Errorf("store open: %v, want ready", err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.check(ctx); err == nil || !strings.Contains(err.Error(), "store") {
		t.Errorf("after the store closed: %v, want not ready", err)
	}
}

// TestNewLoggerJSON: --log-format json gives one JSON object a line.
func TestNewLoggerJSON(t *testing.T) {
	var buf strings.Builder
	log, err := NewLogger(&buf, "info", "json")
	if err != nil {
		t.Fatal(err)
	}
	log.Info("request", "route", "GET /healthz")
	var line map[string]any
	if err := json.Unmarshal([]byte(buf.String()), &line); err != nil || line["msg"] != "request" || line["route"] != "GET /healthz" {
		t.Errorf("json log line %q: %v", buf.String(), err)
	}
	if _, err := NewLogger(&buf, "info", "xml"); err == nil {
		t.Error("log format xml accepted")
	}
}

// TestObserveWrappers: the gateway's call records and the egress events
// are counted on their way to the audit log, which still gets each.
func TestObserveWrappers(t *testing.T) {
	met := metrics.New()
	var calls, events int
	tool := observeTools(met, func(gateway.Record) { calls++ })
	tool(gateway.Record{Tool: "lookup", Outcome: "ok", Duration: time.Millisecond})
	tool(gateway.Record{Tool: "lookup", Outcome: "denied", Stage: "policy"})
	eg := observeEgress(met, func(sandbox.EgressEvent) { events++ })
	eg(sandbox.EgressEvent{Event: egress.Event{Allowed: true, Protocol: egress.ProtoConnect, BytesUp: 100, BytesDown: 2000}})
	eg(sandbox.EgressEvent{Event: egress.Event{Reason: egress.ReasonNotListed}})
	if calls != 2 || events != 2 {
		t.Fatalf("passed on %d calls and %d events, want 2 and 2", calls, events)
	}
	fams, err := met.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			key := f.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			got[key] = m.GetCounter().GetValue()
		}
	}
	for key, want := range map[string]float64{
		"airlock_tool_calls_total,outcome=ok,stage=,tool=lookup":           1,
		"airlock_tool_calls_total,outcome=denied,stage=policy,tool=lookup": 1,
		"airlock_egress_bytes_total,direction=up":                          100,
		"airlock_egress_bytes_total,direction=down":                        2000,
		"airlock_egress_connections_total,protocol=connect":                1,
		"airlock_egress_refusals_total,reason=not_listed":                  1,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
}
