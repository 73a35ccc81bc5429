package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// TestAuditEnds checks that a sandbox the manager ends is on the audit
// record: an intent naming the sandbox, its tenant and reason, then an
// outcome naming the intent, "ok" or the failure's class.
func TestAuditEnds(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log, err := audit.New(ctx, st, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close(ctx)
	rec := auditEnds{log: log, timeout: 5 * time.Second, logger: slog.New(slog.DiscardHandler)}
	for _, tc := range []struct {
		id  string
		err error
		out string
	}{{"sb-a", nil, "ok"}, {"sb-b", fmt.Errorf("x: %w", errdefs.ErrUnavailable), "unavailable"}} {
		finish, err := rec.BeginEnd(ctx, sandbox.End{ID: tc.id, Owner: "tenant", Template: "host", Reason: sandbox.EndCreateInterrupted, Origin: "7"})
		if err != nil {
			t.Fatal(err)
		}
		finish(tc.err)
	}
	recs, err := st.ListAudit(ctx, store.AuditQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 4 {
		t.Fatalf("%d records, want 4", len(recs))
	}
	for i, want := range []string{"ok", "unavailable"} {
		intent, outcome := recs[2*i], recs[2*i+1]
		phase, _ := audit.PhaseOf(intent.Outcome, intent.Details)
		ophase, named := audit.PhaseOf(outcome.Outcome, outcome.Details)
		if phase != audit.PhaseIntent || ophase != audit.PhaseOutcome || named != intent.Seq || outcome.Outcome != want ||
			intent.Action != ActionSandboxEnd || intent.TenantID != "tenant" || intent.KeyID != "" ||
			string(intent.Details) != `{"origin":"7","reason":"create_interrupted","template":"host"}` {
			t.Errorf("records %+v / %+v", intent, outcome)
		}
	}
	if rep, err := log.Verify(ctx); err != nil || !rep.OK || rep.OpenIntents != 0 {
		t.Errorf("verify: %+v %v", rep, err)
	}
}

// TestAuditHealth checks that a change of a sandbox's health is one
// sandbox.health record in its owner's tenant, with status, missed and
// the probe's error.
func TestAuditHealth(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "a.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	log, err := audit.New(ctx, st, audit.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close(ctx)
	rec := auditEnds{log: log, timeout: 5 * time.Second, logger: slog.New(slog.DiscardHandler)}
	rec.HealthChanged(ctx, sandbox.HealthChange{ID: "sb-a", Owner: "tenant", Status: sandbox.HealthUnhealthy, Missed: 1, Error: "its agent did not answer in time"})
	rec.HealthChanged(ctx, sandbox.HealthChange{ID: "sb-a", Owner: "tenant", Status: sandbox.HealthHealthy})
	recs, err := st.ListAudit(ctx, store.AuditQuery{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	for i, want := range []string{`{"error":"its agent did not answer in time","missed":1,"status":"unhealthy"}`, `{"missed":0,"status":"healthy"}`} {
		r := recs[i]
		if r.Action != ActionSandboxHealth || r.TenantID != "tenant" || r.Target != "sb-a" || r.Outcome != audit.OutcomeOK || string(r.Details) != want {
			t.Errorf("record %d: %+v, details %s", i, r, r.Details)
		}
	}
	if healthInterval(0) >= 0 || healthInterval(Duration(time.Second)) != time.Second {
		t.Error("healthInterval: 0 must turn the probes off")
	}
}
