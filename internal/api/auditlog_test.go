package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestAuditList(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	a, b := e.client(e.adminA), e.client(e.adminB)
	start := time.Now().Add(-time.Second)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "exit 3"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.WriteFile(ctx, sb.ID, "f.txt", strings.NewReader("x")); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	sbB, err := b.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}

	// Every mutation is an intent followed by its outcome.
	all, next, err := a.AuditList(ctx, client.AuditQuery{})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for i, r := range all {
		actions = append(actions, r.Action+"/"+r.Phase)
		if r.TenantID != tenantA || r.Target == sbB.ID {
			t.Errorf("tenant A sees %+v", r)
		}
		if len(r.Hash) != 64 || len(r.PrevHash) != 64 || r.Seq == 0 || r.Time.Before(start) {
			t.Errorf("malformed record %+v", r)
		}
		if r.Phase == client.PhaseOutcome && (i == 0 || r.IntentSeq != all[i-1].Seq || all[i-1].Phase != client.PhaseIntent ||
			all[i-1].Outcome != "intent" || r.Outcome != "ok") {
			t.Errorf("outcome %+v does not follow its intent", r)
		}
	}
	want := "sandbox.create/intent sandbox.create/outcome sandbox.exec/intent sandbox.exec/outcome " +
		"file.write/intent file.write/outcome sandbox.delete/intent sandbox.delete/outcome"
	if got := strings.Join(actions, " "); got != want || next != 0 {
		t.Errorf("tenant A's records %q (next %d), want %q (next 0)", got, next, want)
	}
	// The outcomes alone read as a list of what was done.
	recs, next, err := a.AuditList(ctx, client.AuditQuery{Phase: client.PhaseOutcome})
	if err != nil {
		t.Fatal(err)
	}
	actions = nil
	for _, r := range recs {
		actions = append(actions, r.Action)
	}
	if got, want := strings.Join(actions, " "), "sandbox.create sandbox.exec file.write sandbox.delete"; got != want || next != 0 {
		t.Errorf("tenant A's outcomes %q (next %d), want %q (next 0)", got, next, want)
	}
	if len(recs) == 4 && (!strings.Contains(string(recs[1].Details), `"exit_code":3`) ||
		!strings.Contains(string(recs[1].Details), `"command":"exit 3"`)) {
		t.Errorf("exec details %s", recs[1].Details)
	}
	if len(all) == 8 && (!strings.Contains(string(all[2].Details), `"command":"exit 3"`) || strings.Contains(string(all[2].Details), "exit_code")) {
		t.Errorf("exec intent details %s", all[2].Details)
	}
	intents, _, err := a.AuditList(ctx, client.AuditQuery{Phase: client.PhaseIntent})
	if err != nil || len(intents) != 4 || intents[0].Phase != client.PhaseIntent || intents[0].Target != "" {
		t.Errorf("tenant A's intents: %+v, %v", intents, err)
	}
	// Tenant B, admin too, sees only its own.
	recsB, _, err := b.AuditList(ctx, client.AuditQuery{Phase: client.PhaseOutcome})
	if err != nil || len(recsB) != 1 || recsB[0].Target != sbB.ID {
		t.Errorf("tenant B's records: %+v, %v", recsB, err)
	}

	// Filters.
	tests := []struct {
		name string
		q    client.AuditQuery
		want int
	}{
		{"action", client.AuditQuery{Action: "sandbox.exec"}, 2},
		{"action outcome", client.AuditQuery{Action: "sandbox.exec", Phase: client.PhaseOutcome}, 1},
		{"target", client.AuditQuery{Target: sb.ID}, 7}, // the create's intent has no target yet
		{"other target", client.AuditQuery{Target: sbB.ID}, 0},
		{"since future", client.AuditQuery{Since: time.Now().Add(time.Hour)}, 0},
		{"until past", client.AuditQuery{Until: start}, 0},
		{"window", client.AuditQuery{Since: start, Until: time.Now().Add(time.Minute)}, 8},
		{"after", client.AuditQuery{After: all[3].Seq}, 4},
		{"after outcomes", client.AuditQuery{After: all[3].Seq, Phase: client.PhaseOutcome}, 2},
	}
	for _, tt := range tests {
		got, _, err := a.AuditList(ctx, tt.q)
		if err != nil || len(got) != tt.want {
			t.Errorf("%s: %d records (%v), want %d", tt.name, len(got), err, tt.want)
		}
	}
	// Paging one record at a time walks all of them in order.
	var paged []uint64
	q := client.AuditQuery{Limit: 1, Phase: client.PhaseOutcome}
	for range 10 {
		page, next, err := a.AuditList(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range page {
			paged = append(paged, r.Seq)
		}
		if next == 0 {
			break
		}
		q.After = next
	}
	if len(paged) != 4 || paged[0] != recs[0].Seq || paged[3] != recs[3].Seq {
		t.Errorf("paged seqs %v, want those of %d records", paged, len(recs))
	}

	// A key with audit:read only may read; without it, not.
	if _, _, err := e.client(e.key(tenantA, auth.ScopeAuditRead)).AuditList(ctx, client.AuditQuery{}); err != nil {
		t.Errorf("audit:read key: %v", err)
	}
	if _, _, err := e.client(e.key(tenantA, auth.ScopeSandboxesRead)).AuditList(ctx, client.AuditQuery{}); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("key without audit:read: %v", err)
	}
}

func TestAuditListBadQuery(t *testing.T) {
	e := newRealEnv(t)
	for _, q := range []string{
		"limit=0", "limit=1001", "limit=x", "since=yesterday", "until=2026-13-01T00:00:00Z",
		"after=-1", "after=99999999999999999999", "nope=1", "action=a&action=b",
		"since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z", "action=" + url.QueryEscape("a\x00b"),
		"target=" + strings.Repeat("x", 2000), "phase=both", "phase=intent&phase=outcome",
	} {
		resp, body := e.do("GET", "/v1/audit?"+q, e.adminA)
		if resp != 400 || !strings.Contains(body, CodeInvalidArgument) {
			t.Errorf("GET /v1/audit?%s = %d %s, want 400", q, resp, body)
		}
	}
}

// do sends a raw request and returns the status and body.
func (e *realEnv) do(method, path, token string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestAuditVerify(t *testing.T) {
	ctx := context.Background()
	e := newRealEnv(t)
	a := e.client(e.adminA)
	for range 3 {
		if _, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := a.AuditVerify(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK || rep.Records != 6 || rep.Head.Seq != 6 || len(rep.Head.Hash) != 64 || rep.FirstBadSeq != 0 ||
		rep.OpenIntents != 0 || len(rep.OpenIntentSeqs) != 0 {
		t.Errorf("report %+v, want ok over 3 intents and their outcomes", rep)
	}
	// The verification itself is audited.
	recs, _, err := a.AuditList(ctx, client.AuditQuery{Action: ActionAuditVerify})
	if err != nil || len(recs) != 1 || recs[0].Outcome != "ok" {
		t.Errorf("audit.verify records: %+v, %v", recs, err)
	}
	// The saved head still matches; a forged one does not.
	rep2, err := a.AuditVerify(ctx, rep.Head)
	if err != nil || !rep2.OK || rep2.Records != 7 {
		t.Errorf("verify with the saved head: %+v, %v", rep2, err)
	}
	forged := client.AuditHead{Seq: 2, Hash: strings.Repeat("ab", 32)}
	rep3, err := a.AuditVerify(ctx, forged)
	if err != nil || rep3.OK || rep3.FirstBadSeq != 2 || rep3.Reason == "" {
		t.Errorf("verify with a forged checkpoint: %+v, %v", rep3, err)
	}
	// Bad checkpoints are refused.
	for _, cp := range []client.AuditHead{{Seq: 0, Hash: rep.Head.Hash}, {Seq: 1, Hash: "ABC"}} {
		if _, err := a.AuditVerify(ctx, cp); !errors.Is(err, client.ErrInvalid) {
			t.Errorf("checkpoint %+v: %v", cp, err)
		}
	}
	// Admin only.
	if _, err := e.client(e.key(tenantA, auth.ScopeAuditRead)).AuditVerify(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("verify without admin: %v", err)
	}

	// An action cut short by a crash (an intent without an outcome) is
	// reported, to its tenant only, and does not break the chain.
	in, err := e.log.AppendRecord(ctx, audit.Event{TenantID: tenantA, KeyID: "k", Action: ActionSandboxExec,
		Target: "sb-x", Outcome: audit.OutcomeIntent})
	if err != nil {
		t.Fatal(err)
	}
	rep4, err := a.AuditVerify(ctx)
	if err != nil || !rep4.OK || rep4.OpenIntents != 1 || len(rep4.OpenIntentSeqs) != 1 || rep4.OpenIntentSeqs[0] != in.Seq {
		t.Errorf("verify with an open intent: %+v, %v", rep4, err)
	}
	rep5, err := e.client(e.adminB).AuditVerify(ctx)
	if err != nil || !rep5.OK || rep5.OpenIntents != 1 || len(rep5.OpenIntentSeqs) != 0 {
		t.Errorf("tenant B's verify with tenant A's open intent: %+v, %v", rep5, err)
	}
}

// clientCheckpoint is cp as the client sends it.
func clientCheckpoint(cp audit.Checkpoint) client.AuditCheckpoint {
	return client.AuditCheckpoint{Seq: cp.Seq, Hash: cp.Hash, Time: cp.Time, KeyID: cp.KeyID, Signature: cp.Signature}
}

func TestAuditCheckpoint(t *testing.T) {
	ctx := context.Background()
	signer, _, err := audit.LoadSigner(filepath.Join(t.TempDir(), "checkpoint.key"))
	if err != nil {
		t.Fatal(err)
	}
	e := newRealEnv(t, func(c *Config) { c.AuditSigner = signer })
	a := e.client(e.adminA)
	for range 2 {
		if _, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := a.AuditCheckpoint(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := res.Checkpoint
	if got.Seq != 4 || got.Hash != e.log.Head().Hash || got.KeyID != signer.Public().ID() || time.Since(got.Time) > time.Minute {
		t.Errorf("checkpoint %+v, want seq 4 at head %s signed by %s", got, e.log.Head().Hash, signer.Public().ID())
	}
	// The exported public key verifies it offline.
	pub, err := audit.ParsePublicKey([]byte(res.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	cp := audit.Checkpoint{Seq: got.Seq, Hash: got.Hash, Time: got.Time, KeyID: got.KeyID, Signature: got.Signature}
	if err := pub.Verify(cp); err != nil {
		t.Errorf("offline verification: %v", err)
	}
	if e.log.Head().Seq != 4 {
		t.Errorf("a checkpoint was audited: head at %d", e.log.Head().Seq)
	}

	// The log still holds what the checkpoint vouches for.
	rep, err := a.AuditVerifyCheckpoints(ctx, got)
	if err != nil || !rep.OK || rep.Records != 4 {
		t.Errorf("verify with the daemon's checkpoint: %+v, %v", rep, err)
	}
	recs, _, err := a.AuditList(ctx, client.AuditQuery{Action: ActionAuditVerify})
	if err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Details), `"signed_checkpoints":1`) {
		t.Errorf("audit.verify records: %+v, %v", recs, err)
	}
	// Genuine checkpoints the log no longer matches: of records since cut
	// off (a truncated or wiped log), and of another record at seq 2 (a
	// rewritten chain).
	head := e.log.Head()
	beyond, err := signer.Sign(store.AuditHead{Seq: head.Seq + 3, Hash: strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	rewritten, err := signer.Sign(store.AuditHead{Seq: 2, Hash: strings.Repeat("cd", 32)})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		cp      audit.Checkpoint
		wantBad uint64
		wantIn  string
	}{
		{beyond, head.Seq + 1, "records were removed"},
		{rewritten, 2, "the chain was rewritten"},
	} {
		rep, err := a.AuditVerifyCheckpoints(ctx, got, clientCheckpoint(tt.cp))
		if err != nil || rep.OK || rep.FirstBadSeq != tt.wantBad || !strings.Contains(rep.Reason, tt.wantIn) ||
			!strings.Contains(rep.Reason, fmt.Sprintf("checkpoint seq %d", tt.cp.Seq)) {
			t.Errorf("verify with %s: %+v, %v; want bad seq %d naming it (%q)", tt.cp, rep, err, tt.wantBad, tt.wantIn)
		}
	}

	// Forged checkpoints are refused, whatever else is sent with them.
	edited := cp
	edited.Seq = 3
	other, _, err := audit.LoadSigner(filepath.Join(t.TempDir(), "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Sign(e.log.Head())
	unsignedTime := clientCheckpoint(cp)
	unsignedTime.Signature = ""
	for _, tt := range []struct {
		name   string
		cp     client.AuditCheckpoint
		wantIn string
	}{
		{"edited", clientCheckpoint(edited), "does not match"},
		{"another key", clientCheckpoint(foreign), "signed by key " + other.Public().ID()},
		{"signature removed", unsignedTime, "signature"},
	} {
		_, err := a.AuditVerifyCheckpoints(ctx, got, tt.cp)
		if !errors.Is(err, client.ErrInvalid) || !strings.Contains(err.Error(), "checkpoint 2") || !strings.Contains(err.Error(), tt.wantIn) {
			t.Errorf("%s checkpoint: %v, want invalid naming checkpoint 2 (%q)", tt.name, err, tt.wantIn)
		}
	}
	// Admin only, like verify.
	if _, err := e.client(e.key(tenantA, auth.ScopeAuditRead)).AuditCheckpoint(ctx); !errors.Is(err, client.ErrForbidden) {
		t.Errorf("checkpoint without admin: %v", err)
	}

	// A daemon without a signing key: no checkpoints, and signed ones
	// cannot be checked; bare heads still work.
	plain := newRealEnv(t)
	p := plain.client(plain.adminA)
	if _, err := p.AuditCheckpoint(ctx); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("checkpoint without a signer: %v", err)
	}
	if _, err := p.AuditVerifyCheckpoints(ctx, got); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("signed checkpoint without a signer: %v", err)
	}
	if rep, err := p.AuditVerify(ctx); err != nil || !rep.OK {
		t.Errorf("verify without a signer: %+v, %v", rep, err)
	}
}

func TestAuditNotServed(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyB) // admin of tenant B
	if _, _, err := c.AuditList(ctx, client.AuditQuery{}); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("list without an audit log: %v", err)
	}
	if _, err := c.AuditVerify(ctx); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("verify without an audit log: %v", err)
	}
	if _, err := c.AuditCheckpoint(ctx); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("checkpoint without an audit log: %v", err)
	}
	if _, err := c.ListKeys(ctx); !errors.Is(err, client.ErrNotSupported) {
		t.Errorf("keys without a key manager: %v", err)
	}
}

// FuzzAuditQuery checks the parser of GET /v1/audit queries: whatever it
// accepts keeps the caller's tenant and is a query the store takes.
func FuzzAuditQuery(f *testing.F) {
	for _, s := range []string{
		"", "action=sandbox.exec&target=sb-x&limit=5", "since=2026-01-02T00:00:00Z&until=2026-01-03T00:00:00.5%2B01:00",
		"after=18446744073709551615", "limit=1000", "limit=1001", "tenant=other", "action=%00", "since=0001-01-01T00:00:00Z",
		"phase=intent", "phase=outcome&limit=3", "phase=",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, phase, err := parseAuditQuery(s, tenantA)
		if err != nil {
			return
		}
		if phase != "" && phase != audit.PhaseIntent && phase != audit.PhaseOutcome {
			t.Fatalf("accepted phase %q", phase)
		}
		if q.TenantID != tenantA || q.Limit < 1 || q.Limit > 1000 || q.AfterSeq > maxAuditSeq {
			t.Fatalf("accepted %q as %+v", s, q)
		}
		if err := q.Validate(); err != nil {
			t.Fatalf("accepted %q, which the store refuses: %v", s, err)
		}
	})
}
