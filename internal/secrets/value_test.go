package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/gob"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// canary is a value that must never be seen outside a Reveal.
const canary = "CANARY-7f3a9c-sk_live_do_not_leak"

// leaks reports whether out holds the canary in any usual spelling.
func leaks(out string) bool {
	for _, form := range []string{
		canary, "CANARY-7f3a9c", hex.EncodeToString([]byte(canary)), base64.StdEncoding.EncodeToString([]byte(canary)),
		fmt.Sprint([]byte(canary)[:8]), // [67 65 78 ...]: %v of the raw bytes
		"67 65 78 65 82 89",
	} {
		if strings.Contains(out, form) || strings.Contains(out, form[:len(form)-1]) {
			return true
		}
	}
	return false
}

// holder is a struct a caller might log or encode, with a Value both in
// an exported and in an unexported field.
type holder struct {
	Name   string
	Secret Value
	hidden Value
	ptr    *Value
}

func TestValueNeverShows(t *testing.T) {
	v := NewValue([]byte(canary))
	h := holder{Name: "n", Secret: v, hidden: v, ptr: &v}
	var out strings.Builder
	for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%T"} {
		fmt.Fprintf(&out, verb+"\n", v)
		fmt.Fprintf(&out, verb+"\n", &v)
		fmt.Fprintf(&out, verb+"\n", h)
		fmt.Fprintf(&out, verb+"\n", &h)
		fmt.Fprintf(&out, verb+"\n", []Value{v})
		fmt.Fprintf(&out, verb+"\n", map[string]any{"v": v})
	}
	fmt.Fprintln(&out, v, h, &h)
	for _, x := range []any{v, &v, h, &h, []Value{v}, map[string]Value{"k": v}} {
		b, err := json.Marshal(x)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(b)
	}
	if b, err := v.MarshalText(); err == nil {
		out.Write(b)
	}
	if err := gob.NewEncoder(&bytes.Buffer{}).Encode(h); err == nil {
		t.Errorf("gob encoded a struct holding a Value")
	}
	var logs bytes.Buffer
	for _, hd := range []slog.Handler{slog.NewJSONHandler(&logs, nil), slog.NewTextHandler(&logs, nil)} {
		l := slog.New(hd)
		l.Info("value", "v", v, "p", &v, "h", h, "hp", &h, slog.Any("any", v), slog.Group("g", "v", v))
	}
	out.Write(logs.Bytes())
	if leaks(out.String()) {
		t.Fatalf("the canary shows:\n%s", out.String())
	}
	if !strings.Contains(out.String(), Redacted) {
		t.Fatalf("no %q in the output: the test printed nothing of the value", Redacted)
	}
	if string(v.Bytes()) != canary || v.Len() != len(canary) {
		t.Fatalf("Bytes = %q", v.Bytes())
	}
}

func TestValueWipe(t *testing.T) {
	b := []byte(canary)
	v := NewValue(b)
	cp := v
	cp.Wipe()
	if !bytes.Equal(b, make([]byte, len(canary))) || !bytes.Equal(v.Bytes(), make([]byte, len(canary))) {
		t.Errorf("Wipe on a copy left the bytes: %q", b)
	}
	var zero Value
	zero.Wipe()
	if zero.Bytes() != nil || zero.Len() != 0 {
		t.Errorf("zero Value = %q", zero.Bytes())
	}
}

// TestCanary runs a canary secret through every path of the package,
// capturing what a caller would log, encode or return, and checks that
// it shows nowhere: not in errors (wrong key, tampered, too large,
// malformed name), metadata, lists or the stored row.
func TestCanary(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	key := newKey(t)
	s, r := newStore(t, db, Options{Key: key, MaxPerTenant: 2})
	record := func(what string, x any) {
		log.Info(what, "x", x)
		fmt.Fprintf(&logs, "%s: %v %+v %#v\n", what, x, x, x)
		if b, err := json.Marshal(x); err == nil {
			logs.Write(b)
		}
	}
	recordErr := func(what string, err error) {
		if err == nil {
			t.Errorf("%s: no error", what)
			return
		}
		log.Error(what, "err", err)
		fmt.Fprintf(&logs, "%s: %v %+v %#v\n", what, err, err, err)
		for e := err; e != nil; e = errors.Unwrap(e) {
			logs.WriteString(e.Error())
		}
	}

	m, err := s.Put(ctx, "t1", "API_KEY", "the canary", NewValue([]byte(canary)))
	if err != nil {
		t.Fatal(err)
	}
	record("put", m)
	l, _ := s.List(ctx, "t1")
	record("list", l)
	g, _ := s.Get(ctx, "t1", "API_KEY")
	record("get", g)
	record("store", s)
	record("reader", r)
	record("key", key)
	rec, _ := db.GetSecret(ctx, "t1", "API_KEY")
	record("row", rec)
	v, err := r.Reveal(ctx, "t1", "API_KEY")
	if err != nil || string(v.Bytes()) != canary {
		t.Fatalf("reveal = %v", err)
	}
	record("revealed", v)
	v.Wipe()

	_, err = s.Put(ctx, "t1", "big", "", NewValue([]byte(strings.Repeat(canary, MaxValueBytes/len(canary)+1))))
	recordErr("too large", err)
	_, err = s.Put(ctx, "t1", "bad name", "", NewValue([]byte(canary)))
	recordErr("name", err)
	_, err = s.Put(ctx, "t1", "second", "", NewValue([]byte(canary)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Put(ctx, "t1", "third", "", NewValue([]byte(canary)))
	recordErr("over the cap", err)
	wantClass(t, "over the cap", err, errdefs.ErrResourceExhausted)

	_, r2 := newStore(t, db, Options{})
	_, err = r2.Reveal(ctx, "t1", "API_KEY")
	recordErr("wrong key", err)
	rec.Ciphertext[len(rec.Ciphertext)-1] ^= 1
	if _, err := db.PutSecret(ctx, rec, 10); err != nil {
		t.Fatal(err)
	}
	_, err = r.Reveal(ctx, "t1", "API_KEY")
	recordErr("tampered", err)
	rec.Name = "moved"
	_, _ = db.PutSecret(ctx, rec, 10)
	_, err = r.Reveal(ctx, "t1", "moved")
	recordErr("moved", err)

	out := logs.String()
	if leaks(out) {
		t.Fatalf("the canary shows in what was logged:\n%s", out)
	}
	if !strings.Contains(out, "API_KEY") || !strings.Contains(out, "does not authenticate") || !strings.Contains(out, "not loaded") {
		t.Fatalf("the log lacks what the test meant to record:\n%s", out)
	}
}
