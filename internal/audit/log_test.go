package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

func openStore(t testing.TB, path string) *sqlitestore.Store {
	t.Helper()
	st, err := sqlitestore.Open(context.Background(), path, sqlitestore.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func newLog(t testing.TB, st store.AuditStore, opts Options) *Log {
	t.Helper()
	l, err := New(context.Background(), st, opts)
	if err != nil {
		t.Fatalf("new log: %v", err)
	}
	t.Cleanup(func() { l.Close(context.Background()) })
	return l
}

func tempLog(t testing.TB) (*Log, *sqlitestore.Store, string) {
	path := filepath.Join(t.TempDir(), "airlock.db")
	st := openStore(t, path)
	return newLog(t, st, Options{}), st, path
}

func ev(i int) Event {
	return Event{TenantID: "t1", KeyID: "k1", Action: "sandbox.exec", Target: fmt.Sprintf("sb-%d", i), Outcome: "ok",
		Details: map[string]any{"cmd": []string{"echo", "hi"}, "exit_code": i}}
}

func mustVerify(t *testing.T, l *Log) Report {
	t.Helper()
	rep, err := l.Verify(context.Background())
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !rep.OK {
		t.Fatalf("verify: %+v", rep)
	}
	return rep
}

func TestAppendRoundTrip(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	at := time.Date(2026, 5, 6, 7, 8, 9, 987654321, time.FixedZone("x", 3600))
	rec, err := l.AppendRecord(ctx, Event{Time: at, TenantID: "t1", KeyID: "k1", Action: "file.write", Target: "/tmp/a",
		Outcome: "ok", Details: map[string]any{"path": "/tmp/a", "size": 12, "html": "<&>"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Seq != 1 || rec.PrevHash != store.GenesisHash || len(rec.Hash) != 64 || !rec.Time.Equal(at) || rec.Time.Location() != time.UTC {
		t.Errorf("first record = %+v", rec)
	}
	if string(rec.Details) != `{"html":"<&>","path":"/tmp/a","size":12}` {
		t.Errorf("details = %s", rec.Details)
	}
	rec2, err := l.AppendRecord(ctx, Event{Action: "key.create", Outcome: "ok"})
	if err != nil {
		t.Fatal(err)
	}
	if rec2.Seq != 2 || rec2.PrevHash != rec.Hash || rec2.Time.IsZero() || rec2.Details != nil {
		t.Errorf("second record = %+v", rec2)
	}
	got, err := l.List(ctx, Query{})
	if err != nil || len(got) != 2 {
		t.Fatalf("list = %v, %v", got, err)
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(rec) {
		t.Errorf("listed %+v, appended %+v", got[0], rec)
	}
	e, err := got[0].Event()
	if err != nil || e.Details["size"] != json.Number("12") || e.Action != "file.write" {
		t.Errorf("Event() = %+v, %v", e, err)
	}
	if h := l.Head(); h.Seq != 2 || h.Hash != rec2.Hash {
		t.Errorf("head = %+v", h)
	}
	mustVerify(t, l)

	// The head survives a reopen.
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	l2 := newLog(t, l.st, Options{})
	rec3, err := l2.AppendRecord(ctx, ev(3))
	if err != nil || rec3.Seq != 3 || rec3.PrevHash != rec2.Hash {
		t.Errorf("after reopen: %+v, %v", rec3, err)
	}
	mustVerify(t, l2)
}

// TestHashVector pins the hash format the package documentation gives to
// outside verifiers.
func TestHashVector(t *testing.T) {
	r := store.AuditRecord{Seq: 1, Time: time.Unix(0, 1700000000123456789), TenantID: "t", KeyID: "k",
		Action: "a", Target: "x", Outcome: "ok", Details: []byte(`{"n":1}`), PrevHash: store.GenesisHash}
	h, err := Hash(r)
	if err != nil {
		t.Fatal(err)
	}
	// Computed independently with the Python snippet in doc.go.
	const want = "b153b3a4f75bd7e89e7387553d8ade2aa73803742f4494e09f6e78bf986871ab"
	if h != want {
		t.Errorf("hash = %s, want %s", h, want)
	}
	// Every field is covered.
	mutations := []func(*store.AuditRecord){
		func(r *store.AuditRecord) { r.Seq = 2 },
		func(r *store.AuditRecord) { r.Time = r.Time.Add(1) },
		func(r *store.AuditRecord) { r.TenantID = "u" },
		func(r *store.AuditRecord) { r.KeyID = "" },
		func(r *store.AuditRecord) { r.Action = "b" },
		func(r *store.AuditRecord) { r.Target = "y" },
		func(r *store.AuditRecord) { r.Outcome = "no" },
		func(r *store.AuditRecord) { r.Details = []byte(`{"n":2}`) },
		func(r *store.AuditRecord) { r.PrevHash = strings.Repeat("1", 64) },
		// Field boundaries are unambiguous.
		func(r *store.AuditRecord) { r.TenantID, r.KeyID = "tk", "" },
	}
	for i, m := range mutations {
		c := r
		m(&c)
		if h2, _ := Hash(c); h2 == h {
			t.Errorf("mutation %d does not change the hash", i)
		}
	}
	if _, err := Hash(store.AuditRecord{PrevHash: "zz"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad prev hash: %v", err)
	}
}

func TestAppendValidation(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	bad := []Event{
		{Outcome: "ok"},
		{Action: "Sandbox.Create", Outcome: "ok"},
		{Action: "a b", Outcome: "ok"},
		{Action: strings.Repeat("a", 65), Outcome: "ok"},
		{Action: "x"},
		{Action: "x", Outcome: "not ok"},
		{Action: "x", Outcome: "ok", TenantID: "a\nb"},
		{Action: "x", Outcome: "ok", KeyID: string([]byte{0xff})},
		{Action: "x", Outcome: "ok", KeyID: strings.Repeat("k", 65)},
		{Action: "x", Outcome: "ok", Time: time.Date(1969, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Action: "x", Outcome: "ok", Time: time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, e := range bad {
		if err := l.Append(ctx, e); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Append(%+v) = %v, want invalid argument", e, err)
		}
	}
	if h := l.Head(); h.Seq != 0 {
		t.Errorf("refused events were stored: head %+v", h)
	}
	// An odd target is cleaned, not refused.
	rec, err := l.AppendRecord(ctx, Event{Action: "file.write", Outcome: "ok", Target: "a\x00b" + string([]byte{0xff}) + strings.Repeat("é", 400)})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Target) > MaxTargetBytes || !utf8.ValidString(rec.Target) || strings.Contains(rec.Target, "\x00") ||
		!strings.HasPrefix(rec.Target, "a\uFFFDb\uFFFD") || !strings.HasSuffix(rec.Target, "...") {
		t.Errorf("target = %q (%d bytes)", rec.Target, len(rec.Target))
	}
	mustVerify(t, l)
}

func TestDetailsCap(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	l := newLog(t, openStore(t, path), Options{MaxDetailsBytes: 1024})
	tests := []struct {
		name    string
		details map[string]any
		check   func(m map[string]any) bool
	}{
		{"fits", map[string]any{"a": strings.Repeat("x", 900)}, func(m map[string]any) bool { return len(m["a"].(string)) == 900 }},
		{"too big", map[string]any{"stdout": strings.Repeat("x", 5000)}, func(m map[string]any) bool {
			return m["_truncated"] == true && m["_bytes"] == float64(5000+len(`{"stdout":""}`)) &&
				strings.HasPrefix(m["_head"].(string), `{"stdout":"xxx`)
		}},
		{"escapes expand", map[string]any{"q": strings.Repeat(`"`, 3000)}, func(m map[string]any) bool {
			return m["_truncated"] == true && strings.HasPrefix(m["_head"].(string), `{"q":"\"`)
		}},
		{"control chars", map[string]any{"c": strings.Repeat("\x01", 3000)}, func(m map[string]any) bool { return m["_truncated"] == true }},
		{"multibyte", map[string]any{"u": strings.Repeat("日本", 2000)}, func(m map[string]any) bool {
			return m["_truncated"] == true && utf8.ValidString(m["_head"].(string))
		}},
		{"not encodable", map[string]any{"f": math.NaN()}, func(m map[string]any) bool { return m["_error"] != nil }},
		{"channel", map[string]any{"c": make(chan int)}, func(m map[string]any) bool { return m["_error"] != nil }},
	}
	for _, tt := range tests {
		rec, err := l.AppendRecord(ctx, Event{Action: "x", Outcome: "ok", Details: tt.details})
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		var m map[string]any
		if len(rec.Details) > 1024 || json.Unmarshal(rec.Details, &m) != nil || !tt.check(m) {
			t.Errorf("%s: details (%d bytes) = %.200s", tt.name, len(rec.Details), rec.Details)
		}
	}
	mustVerify(t, l)
}

func TestOptionsValidation(t *testing.T) {
	st := openStore(t, filepath.Join(t.TempDir(), "a.db"))
	for _, o := range []Options{{MaxBatch: -1}, {MaxBatch: 5000}, {QueueSize: -1}, {MaxDetailsBytes: 10}, {MaxDetailsBytes: 1 << 20}, {CommitTimeout: -1}} {
		if _, err := New(context.Background(), st, o); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New(%+v) = %v, want invalid argument", o, err)
		}
	}
}

// TestConcurrentAppends has many goroutines append at once: every append
// gets a distinct seq, the stored record is the one appended, and the
// chain verifies.
func TestConcurrentAppends(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	const workers, each = 64, 60
	var mu sync.Mutex
	bySeq := map[uint64]string{}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				target := fmt.Sprintf("w%d-%d", w, i)
				rec, err := l.AppendRecord(ctx, Event{Action: "sandbox.exec", Outcome: "ok", Target: target})
				if err != nil {
					t.Errorf("append: %v", err)
					return
				}
				mu.Lock()
				if prev, dup := bySeq[rec.Seq]; dup {
					t.Errorf("seq %d given to %s and %s", rec.Seq, prev, target)
				}
				bySeq[rec.Seq] = target
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	rep := mustVerify(t, l)
	if rep.Checked != workers*each || rep.Head.Seq != workers*each {
		t.Errorf("report = %+v, want %d records", rep, workers*each)
	}
	var after uint64
	for {
		page, err := l.List(ctx, Query{AfterSeq: after, Limit: store.MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		for _, r := range page {
			if bySeq[r.Seq] != r.Target {
				t.Fatalf("seq %d holds %q, appender was told %q", r.Seq, r.Target, bySeq[r.Seq])
			}
		}
		after = page[len(page)-1].Seq
	}
}

func TestListTenantScoping(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	for i := range 9 {
		e := ev(i)
		e.TenantID = []string{"a", "b", "c"}[i%3]
		if err := l.Append(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := l.List(ctx, Query{TenantID: "b"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 3 {
		t.Fatalf("tenant b sees %d records, want 3", len(recs))
	}
	for _, r := range recs {
		if r.TenantID != "b" {
			t.Errorf("tenant b sees a record of %q", r.TenantID)
		}
	}
	if _, err := l.List(ctx, Query{Limit: -5}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad limit: %v", err)
	}
}

func TestClose(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := range 200 {
		wg.Go(func() { errs <- l.Append(ctx, ev(i)) })
	}
	time.Sleep(5 * time.Millisecond)
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	close(errs)
	ok := 0
	for err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, errdefs.ErrUnavailable):
			t.Errorf("append during close: %v", err)
		}
	}
	// Every append that succeeded is stored, none other.
	if h := l.Head(); h.Seq != uint64(ok) {
		t.Errorf("head %d, %d appends succeeded", h.Seq, ok)
	}
	if err := l.Append(ctx, ev(0)); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("append after close = %v, want unavailable", err)
	}
	if err := l.Close(ctx); err != nil {
		t.Errorf("second close: %v", err)
	}
	mustVerify(t, l)
}

func TestAppendContext(t *testing.T) {
	l, _, _ := tempLog(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// With a dead context the append either never starts or reports an
	// unknown outcome; it must not hang or report success falsely.
	err := l.Append(ctx, ev(1))
	if err != nil && !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("append with canceled ctx = %v", err)
	}
}
