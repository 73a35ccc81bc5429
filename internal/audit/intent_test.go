package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestPhaseOf(t *testing.T) {
	tests := []struct {
		outcome, details string
		phase            Phase
		intent           uint64
	}{
		{"intent", `{"command":"true"}`, PhaseIntent, 0},
		{"intent", ``, PhaseIntent, 0},
		{"ok", ``, PhaseOutcome, 0},
		{"ok", `{"intent_seq":42,"exit_code":0}`, PhaseOutcome, 42},
		{"not_found", `{"intent_seq":7}`, PhaseOutcome, 7},
		{"ok", `{"path":"intent_seq"}`, PhaseOutcome, 0},
		{"ok", `{"intent_seq":"x"}`, PhaseOutcome, 0},
		{"ok", `{"intent_seq":-1}`, PhaseOutcome, 0},
		{"ok", `{"intent_seq":1.5}`, PhaseOutcome, 0},
		{"ok", `{"intent_seq":3`, PhaseOutcome, 0},
	}
	for _, tt := range tests {
		p, n := PhaseOf(tt.outcome, []byte(tt.details))
		if p != tt.phase || n != tt.intent {
			t.Errorf("PhaseOf(%q, %s) = %s %d, want %s %d", tt.outcome, tt.details, p, n, tt.phase, tt.intent)
		}
	}
}

// TestIntentOutcome appends an intent and its outcome: the outcome's
// details carry the intent's seq, the records read back with their phase,
// and the link survives truncated details.
func TestIntentOutcome(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	in, err := l.AppendRecord(ctx, Event{TenantID: "t1", KeyID: "k1", Action: "sandbox.exec", Target: "sb-1",
		Outcome: OutcomeIntent, Details: map[string]any{"command": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	if in.Phase != PhaseIntent || in.IntentSeq != 0 || string(in.Details) != `{"command":"true"}` {
		t.Errorf("intent = %+v", in)
	}
	det := map[string]any{"command": "true", "exit_code": 0}
	out, err := l.AppendRecord(ctx, Event{TenantID: "t1", KeyID: "k1", Action: "sandbox.exec", Target: "sb-1",
		Outcome: OutcomeOK, IntentSeq: in.Seq, Details: det})
	if err != nil {
		t.Fatal(err)
	}
	if out.Phase != PhaseOutcome || out.IntentSeq != in.Seq ||
		string(out.Details) != fmt.Sprintf(`{"command":"true","exit_code":0,"intent_seq":%d}`, in.Seq) {
		t.Errorf("outcome = %+v, details %s", out, out.Details)
	}
	if _, ok := det["intent_seq"]; ok {
		t.Error("the caller's details map was modified")
	}
	// An outcome without details still links to its intent.
	in2, _ := l.AppendRecord(ctx, Event{Action: "key.revoke", Outcome: OutcomeIntent})
	out2, err := l.AppendRecord(ctx, Event{Action: "key.revoke", Outcome: "not_found", IntentSeq: in2.Seq})
	if err != nil || out2.IntentSeq != in2.Seq || out2.Phase != PhaseOutcome {
		t.Errorf("outcome without details = %+v, %v", out2, err)
	}
	// Truncated details keep the link.
	in3, _ := l.AppendRecord(ctx, Event{Action: "sandbox.exec", Outcome: OutcomeIntent})
	out3, err := l.AppendRecord(ctx, Event{Action: "sandbox.exec", Outcome: OutcomeOK, IntentSeq: in3.Seq,
		Details: map[string]any{"command": strings.Repeat("x", 40<<10)}})
	if err != nil || out3.IntentSeq != in3.Seq || !strings.Contains(string(out3.Details), `"_truncated":true`) {
		t.Errorf("truncated outcome = %+v (%.100s), %v", out3, out3.Details, err)
	}
	ev, err := out.Event()
	if err != nil || ev.IntentSeq != in.Seq || ev.Details["exit_code"] != json.Number("0") {
		t.Errorf("Event() = %+v, %v", ev, err)
	}
	// Listed records carry their phase.
	recs, err := l.List(ctx, Query{})
	if err != nil || len(recs) != 6 {
		t.Fatalf("list: %d records, %v", len(recs), err)
	}
	for i, r := range recs {
		want := PhaseIntent
		if i%2 == 1 {
			want = PhaseOutcome
		}
		if r.Phase != want || (want == PhaseOutcome && r.IntentSeq != recs[i-1].Seq) {
			t.Errorf("record %d: phase %s intent_seq %d", r.Seq, r.Phase, r.IntentSeq)
		}
	}
	rep := mustVerify(t, l)
	if rep.OpenIntents != 0 || len(rep.Open) != 0 {
		t.Errorf("report = %+v, want no open intents", rep)
	}

	for _, bad := range []Event{
		{Action: "x", Outcome: OutcomeIntent, IntentSeq: 1},
		{Action: "x", Outcome: OutcomeOK, IntentSeq: 1 << 63},
	} {
		if err := l.Append(ctx, bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Append(%+v) = %v, want invalid argument", bad, err)
		}
	}
}

// TestVerifyOpenIntents: intents without an outcome are reported (oldest
// first, with tenant and action) without failing the chain.
func TestVerifyOpenIntents(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	var open []uint64
	for i := range 5 {
		in, err := l.AppendRecord(ctx, Event{TenantID: fmt.Sprint("t", i%2), Action: "file.write", Target: fmt.Sprint("sb-", i),
			Outcome: OutcomeIntent})
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 { // answered
			if err := l.Append(ctx, Event{Action: "file.write", Outcome: OutcomeOK, IntentSeq: in.Seq}); err != nil {
				t.Fatal(err)
			}
		} else {
			open = append(open, in.Seq)
		}
	}
	rep := mustVerify(t, l)
	if rep.OpenIntents != uint64(len(open)) || len(rep.Open) != len(open) {
		t.Fatalf("report = %+v, want open intents %v", rep, open)
	}
	for i, o := range rep.Open {
		if o.Seq != open[i] || o.TenantID != "t1" || o.Action != "file.write" || o.Target == "" {
			t.Errorf("open intent %d = %+v", i, o)
		}
	}
}

// TestSelectPhase pages through a log filtered by phase: every record of
// the phase comes exactly once, in order, and the last page says so.
func TestSelectPhase(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	var intents, outcomes []uint64
	for i := range 40 {
		in, err := l.AppendRecord(ctx, Event{TenantID: "t", Action: "sandbox.exec", Outcome: OutcomeIntent})
		if err != nil {
			t.Fatal(err)
		}
		intents = append(intents, in.Seq)
		if i%4 == 0 {
			continue // left open
		}
		out, err := l.AppendRecord(ctx, Event{TenantID: "t", Action: "sandbox.exec", Outcome: OutcomeOK, IntentSeq: in.Seq})
		if err != nil {
			t.Fatal(err)
		}
		outcomes = append(outcomes, out.Seq)
	}
	// A refused request: an outcome without an intent.
	r, err := l.AppendRecord(ctx, Event{TenantID: "t", Action: "sandbox.exec", Outcome: "invalid_argument"})
	if err != nil {
		t.Fatal(err)
	}
	outcomes = append(outcomes, r.Seq)
	for _, tt := range []struct {
		phase Phase
		want  []uint64
	}{{PhaseIntent, intents}, {PhaseOutcome, outcomes}} {
		for _, limit := range []int{1, 7, 1000} {
			var got []uint64
			q := Query{TenantID: "t", Limit: limit}
			for pages := 0; ; pages++ {
				if pages > 200 {
					t.Fatalf("%s limit %d: paging does not end", tt.phase, limit)
				}
				p, err := l.Select(ctx, q, tt.phase)
				if err != nil {
					t.Fatal(err)
				}
				if len(p.Records) > limit {
					t.Fatalf("%s: page of %d records, limit %d", tt.phase, len(p.Records), limit)
				}
				for _, r := range p.Records {
					if r.Phase != tt.phase {
						t.Errorf("%s page holds %+v", tt.phase, r)
					}
					got = append(got, r.Seq)
				}
				if p.NextAfter == 0 {
					break
				}
				q.AfterSeq = p.NextAfter
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("%s limit %d: got %v, want %v", tt.phase, limit, got, tt.want)
			}
		}
	}
	if _, err := l.Select(ctx, Query{}, "bogus"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("bad phase: %v", err)
	}
	p, err := l.Select(ctx, Query{TenantID: "other"}, PhaseIntent)
	if err != nil || len(p.Records) != 0 || p.NextAfter != 0 {
		t.Errorf("other tenant: %+v, %v", p, err)
	}
	// Without a phase, Select is List with a cursor.
	p, err = l.Select(ctx, Query{Limit: 5}, "")
	if err != nil || len(p.Records) != 5 || p.NextAfter != p.Records[4].Seq {
		t.Errorf("unfiltered page: %d records, next %d, %v", len(p.Records), p.NextAfter, err)
	}
}
