package audit

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// tampered builds a log of n records, closes it, applies the SQL
// statements directly to the database file (with the append-only triggers
// dropped, as an attacker would) and returns a fresh Verify report.
func tampered(t *testing.T, n int, checkpointSeq uint64, stmts ...string) Report {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	st := openStore(t, path)
	l := newLog(t, st, Options{})
	var cp []store.AuditHead
	for i := 1; i <= n; i++ {
		rec, err := l.AppendRecord(ctx, ev(i))
		if err != nil {
			t.Fatal(err)
		}
		if rec.Seq == checkpointSeq {
			cp = append(cp, store.AuditHead{Seq: rec.Seq, Hash: rec.Hash})
		}
	}
	mustVerify(t, l)
	l.Close(ctx)

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range append([]string{"DROP TRIGGER audit_records_no_update", "DROP TRIGGER audit_records_no_delete"}, stmts...) {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rep, err := Verify(ctx, st, cp...)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	return rep
}

func TestVerifyDetectsTampering(t *testing.T) {
	swapCols := "time, tenant_id, key_id, action, target, outcome, details, prev_hash, hash"
	tests := []struct {
		name       string
		stmts      []string
		checkpoint uint64
		wantSeq    uint64
		wantIn     string
	}{
		{name: "edit details", stmts: []string{`UPDATE audit_records SET details = '{"cmd":["rm","-rf"]}' WHERE seq = 5`}, wantSeq: 5, wantIn: "hash"},
		{name: "edit outcome", stmts: []string{`UPDATE audit_records SET outcome = 'denied' WHERE seq = 1`}, wantSeq: 1, wantIn: "hash"},
		{name: "edit time", stmts: []string{`UPDATE audit_records SET time = time + 1 WHERE seq = 10`}, wantSeq: 10, wantIn: "hash"},
		{name: "edit stored hash", stmts: []string{`UPDATE audit_records SET hash = '` + strings.Repeat("a", 64) + `' WHERE seq = 4`}, wantSeq: 4, wantIn: "hash"},
		{name: "edit prev hash", stmts: []string{`UPDATE audit_records SET prev_hash = '` + strings.Repeat("b", 64) + `' WHERE seq = 6`}, wantSeq: 6, wantIn: "prev_hash"},
		{name: "delete middle", stmts: []string{`DELETE FROM audit_records WHERE seq = 5`}, wantSeq: 5, wantIn: "missing"},
		{name: "delete first", stmts: []string{`DELETE FROM audit_records WHERE seq = 1`}, wantSeq: 1, wantIn: "missing"},
		{name: "delete middle and renumber", stmts: []string{
			`DELETE FROM audit_records WHERE seq = 5`,
			`UPDATE audit_records SET seq = seq - 1 WHERE seq > 5`,
			`UPDATE audit_head SET seq = seq - 1`,
		}, wantSeq: 5, wantIn: ""},
		{name: "swap seq of two rows", stmts: []string{
			`UPDATE audit_records SET seq = 1000 WHERE seq = 3`,
			`UPDATE audit_records SET seq = 3 WHERE seq = 7`,
			`UPDATE audit_records SET seq = 7 WHERE seq = 1000`,
		}, wantSeq: 3, wantIn: ""},
		{name: "swap content of two rows", stmts: []string{
			`CREATE TEMP TABLE r3 AS SELECT ` + swapCols + ` FROM audit_records WHERE seq = 3`,
			`UPDATE audit_records SET (` + swapCols + `) = (SELECT ` + swapCols + ` FROM audit_records WHERE seq = 7) WHERE seq = 3`,
			`UPDATE audit_records SET (` + swapCols + `) = (SELECT ` + swapCols + ` FROM r3) WHERE seq = 7`,
		}, wantSeq: 3, wantIn: "prev_hash"},
		{name: "swap content but keep hashes", stmts: []string{
			`CREATE TEMP TABLE r3 AS SELECT target FROM audit_records WHERE seq = 3`,
			`UPDATE audit_records SET target = (SELECT target FROM audit_records WHERE seq = 7) WHERE seq = 3`,
			`UPDATE audit_records SET target = (SELECT target FROM r3) WHERE seq = 7`,
		}, wantSeq: 3, wantIn: "hash"},
		{name: "delete tail", stmts: []string{`DELETE FROM audit_records WHERE seq >= 9`}, wantSeq: 9, wantIn: "missing"},
		{name: "delete head anchor", stmts: []string{`DELETE FROM audit_head`}, wantSeq: 1, wantIn: "beyond the head anchor"},
		{name: "insert after head", stmts: []string{
			`INSERT INTO audit_records SELECT seq + 1, time, tenant_id, key_id, action, target, outcome, details, hash, hash FROM audit_records WHERE seq = 10`,
		}, wantSeq: 11, wantIn: "beyond the head anchor"},
		{name: "delete tail and move anchor, caught by checkpoint", checkpoint: 9, stmts: []string{
			`DELETE FROM audit_records WHERE seq >= 8`,
			`UPDATE audit_head SET seq = 7, hash = (SELECT hash FROM audit_records WHERE seq = 7)`,
		}, wantSeq: 8, wantIn: "checkpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := tampered(t, 10, tt.checkpoint, tt.stmts...)
			if rep.OK || rep.BadSeq != tt.wantSeq || !strings.Contains(rep.Problem, tt.wantIn) {
				t.Errorf("report = %+v, want bad seq %d (%q)", rep, tt.wantSeq, tt.wantIn)
			}
			if err := rep.Err(); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), fmt.Sprint("seq ", tt.wantSeq)) {
				t.Errorf("Err() = %v", err)
			}
		})
	}
}

func TestVerifyCheckpoints(t *testing.T) {
	// An untouched log matches its checkpoints.
	if rep := tampered(t, 10, 4); !rep.OK || rep.Checked != 10 || rep.Err() != nil {
		t.Errorf("untouched log: %+v", rep)
	}
	// A rewritten history with recomputed hashes passes the chain check
	// but not a checkpoint taken before the rewrite.
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	st := openStore(t, path)
	l := newLog(t, st, Options{})
	var cp store.AuditHead
	for i := range 5 {
		rec, err := l.AppendRecord(ctx, ev(i))
		if err != nil {
			t.Fatal(err)
		}
		cp = store.AuditHead{Seq: rec.Seq, Hash: rec.Hash}
	}
	forged, _ := New(ctx, &memStore{}, Options{})
	defer forged.Close(ctx)
	for i := range 5 {
		e := ev(i)
		e.Outcome = "forged"
		forged.Append(ctx, e)
	}
	if rep, _ := forged.Verify(ctx); !rep.OK {
		t.Fatalf("forged chain does not verify on its own: %+v", rep)
	}
	if rep, _ := forged.Verify(ctx, cp); rep.OK || rep.BadSeq != 5 || !strings.Contains(rep.Problem, "checkpoint") {
		t.Errorf("forged chain against checkpoint: %+v", rep)
	}
	if rep, _ := l.Verify(ctx, cp, store.AuditHead{}); !rep.OK {
		t.Errorf("real chain against checkpoint: %+v", rep)
	}
}

func TestVerifyEmptyAndLarge(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	if rep := mustVerify(t, l); rep.Checked != 0 || rep.Head.Seq != 0 {
		t.Errorf("empty: %+v", rep)
	}
	// More than one page of records.
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 300 {
				if err := l.Append(ctx, ev(w*1000+i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if rep := mustVerify(t, l); rep.Checked != 2400 {
		t.Errorf("checked %d, want 2400", rep.Checked)
	}
}

// memStore is an in-memory store.AuditStore whose appends can be made to
// fail, before or after applying them.
type memStore struct {
	mu         sync.Mutex
	recs       []store.AuditRecord
	head       store.AuditHead
	failBefore int // next N appends fail without writing
	failAfter  int // next N appends write, then report failure
}

func (m *memStore) AppendAudit(_ context.Context, recs []store.AuditRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := store.ValidateAuditBatch(recs); err != nil {
		return err
	}
	if m.failBefore > 0 {
		m.failBefore--
		return fmt.Errorf("disk on fire: %w", errdefs.ErrUnavailable)
	}
	h := m.head
	if h.Hash == "" {
		h.Hash = store.GenesisHash
	}
	if recs[0].Seq != h.Seq+1 || recs[0].PrevHash != h.Hash {
		return fmt.Errorf("fork: %w", errdefs.ErrFailedPrecondition)
	}
	m.recs = append(m.recs, recs...)
	last := recs[len(recs)-1]
	m.head = store.AuditHead{Seq: last.Seq, Hash: last.Hash}
	if m.failAfter > 0 {
		m.failAfter--
		return fmt.Errorf("commit ack lost: %w", errdefs.ErrUnavailable)
	}
	return nil
}

func (m *memStore) AuditHead(context.Context) (store.AuditHead, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.head.Hash == "" {
		return store.AuditHead{Hash: store.GenesisHash}, nil
	}
	return m.head, nil
}

func (m *memStore) ListAudit(_ context.Context, q store.AuditQuery) ([]store.AuditRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []store.AuditRecord
	for _, r := range m.recs {
		if r.Seq > q.AfterSeq && len(out) < store.EffectiveLimit(q.Limit) {
			out = append(out, r)
		}
	}
	return out, nil
}

func TestCommitFailures(t *testing.T) {
	ctx := context.Background()
	m := &memStore{}
	l := newLog(t, m, Options{})
	if err := l.Append(ctx, ev(1)); err != nil {
		t.Fatal(err)
	}
	m.failBefore = 1
	if err := l.Append(ctx, ev(2)); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("failed commit = %v, want unavailable", err)
	}
	rec, err := l.AppendRecord(ctx, ev(3))
	if err != nil || rec.Seq != 2 {
		t.Errorf("after a failed commit: %+v, %v; want seq 2", rec, err)
	}
	// A commit that was applied but reported failure: the next append
	// continues from what the store really holds.
	m.failAfter = 1
	if err := l.Append(ctx, ev(4)); err == nil {
		t.Error("append with a lost ack succeeded")
	}
	rec, err = l.AppendRecord(ctx, ev(5))
	if err != nil || rec.Seq != 4 {
		t.Errorf("after a lost ack: %+v, %v; want seq 4", rec, err)
	}
	// A second writer appended behind this Log's back: refused, then the
	// Log resynchronizes.
	other, _ := New(ctx, m, Options{})
	if err := other.Append(ctx, ev(6)); err != nil {
		t.Fatal(err)
	}
	other.Close(ctx)
	if err := l.Append(ctx, ev(7)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("append after a foreign write = %v, want failed precondition", err)
	}
	if rec, err := l.AppendRecord(ctx, ev(8)); err != nil || rec.Seq != 6 {
		t.Errorf("after resync: %+v, %v", rec, err)
	}
	if rep, _ := l.Verify(ctx); !rep.OK || rep.Checked != 6 {
		t.Errorf("verify: %+v", rep)
	}
}

// TestWriteErr: the log reports the failure of its last commit until a
// commit succeeds (the daemon's readiness reads it), and a commit cut
// short by its caller does not count as the store's failure.
func TestWriteErr(t *testing.T) {
	ctx := context.Background()
	m := &memStore{}
	l := newLog(t, m, Options{})
	if err := l.WriteErr(); err != nil {
		t.Fatalf("WriteErr of a new log = %v", err)
	}
	m.mu.Lock()
	m.failBefore = 2
	m.mu.Unlock()
	for range 2 {
		if err := l.Append(ctx, ev(1)); err == nil {
			t.Fatal("append to a failing store succeeded")
		}
		if err := l.WriteErr(); err == nil || !strings.Contains(err.Error(), "disk on fire") {
			t.Fatalf("WriteErr after a failed commit = %v, want the store's error", err)
		}
	}
	if err := l.Append(ctx, ev(2)); err != nil {
		t.Fatal(err)
	}
	if err := l.WriteErr(); err != nil {
		t.Errorf("WriteErr after a good commit = %v, want nil", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_ = l.Append(cctx, ev(3))
	if err := l.WriteErr(); err != nil {
		t.Errorf("WriteErr after a cancelled append = %v, want nil", err)
	}
}
