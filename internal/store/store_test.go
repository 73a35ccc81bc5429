package store

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestClip(t *testing.T) {
	tests := map[string]string{
		"abc":                   "abc",
		"a\x00b\nc":             "a?b?c",
		string([]byte{0xff}):    "?",
		strings.Repeat("x", 40): strings.Repeat("x", 32) + "...",
	}
	for in, want := range tests {
		if got := Clip(in); got != want {
			t.Errorf("Clip(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEffectiveLimit(t *testing.T) {
	for in, want := range map[int]int{0: DefaultListLimit, -3: DefaultListLimit, 5: 5, MaxListLimit + 7: MaxListLimit} {
		if got := EffectiveLimit(in); got != want {
			t.Errorf("EffectiveLimit(%d) = %d, want %d", in, got, want)
		}
	}
}

func TestValidateAuditBatch(t *testing.T) {
	h := func(c string) string { return strings.Repeat(c, 64) }
	now := time.Now()
	ok := []AuditRecord{
		{Seq: 1, Time: now, Action: "a", PrevHash: GenesisHash, Hash: h("1")},
		{Seq: 2, Time: now, Action: "a", PrevHash: h("1"), Hash: h("2")},
	}
	if err := ValidateAuditBatch(ok); err != nil {
		t.Fatal(err)
	}
	mut := []func([]AuditRecord){
		func(r []AuditRecord) { r[1].Seq = 3 },
		func(r []AuditRecord) { r[1].PrevHash = h("3") },
		func(r []AuditRecord) { r[0].Seq = 0 },
		func(r []AuditRecord) { r[0].Action = "" },
		func(r []AuditRecord) { r[0].Hash = strings.ToUpper(h("a")) },
		func(r []AuditRecord) { r[0].Time = time.Time{} },
		func(r []AuditRecord) { r[0].Time = time.Date(1960, 1, 1, 0, 0, 0, 0, time.UTC) },
		func(r []AuditRecord) { r[0].Details = []byte("{") },
		func(r []AuditRecord) { r[0].Target = "a\x00" },
	}
	for i, m := range mut {
		recs := append([]AuditRecord(nil), ok...)
		m(recs)
		if err := ValidateAuditBatch(recs); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("mutation %d: %v", i, err)
		}
	}
}

func TestEncodeMetadata(t *testing.T) {
	if s, err := EncodeMetadata(nil); s != "" || err != nil {
		t.Errorf("nil: %q, %v", s, err)
	}
	if s, _ := EncodeMetadata(map[string]string{"b": "2", "a": "<1>"}); s != `{"a":"\u003c1\u003e","b":"2"}` {
		t.Errorf("encoded %s", s)
	}
	if _, err := EncodeMetadata(map[string]string{"k": string([]byte{0xff})}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("invalid UTF-8: %v", err)
	}
}
