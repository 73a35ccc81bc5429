package secrets

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

var t0 = time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC)

// openDB opens a fresh database with tenants t1 and t2.
func openDB(t *testing.T) *sqlitestore.Store {
	t.Helper()
	db, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, id := range []string{"t1", "t2"} {
		if err := db.CreateTenant(context.Background(), store.Tenant{ID: id, CreatedAt: t0}); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

func newKey(t *testing.T) *Key {
	t.Helper()
	k, text, err := GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	clear(text)
	return k
}

func newStore(t *testing.T, db store.SecretStore, opts Options) (*Store, *Reader) {
	t.Helper()
	if opts.Key == nil {
		opts.Key = newKey(t)
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return t0 }
	}
	s, err := New(db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return s, NewReader(s)
}

func val(s string) Value { return NewValue([]byte(s)) }

func reveal(t *testing.T, r *Reader, tenant, name string) string {
	t.Helper()
	v, err := r.Reveal(context.Background(), tenant, name)
	if err != nil {
		t.Fatalf("reveal %s/%s: %v", tenant, name, err)
	}
	defer v.Wipe()
	return string(v.Bytes())
}

func wantClass(t *testing.T, what string, err, class error) {
	t.Helper()
	if !errors.Is(err, class) {
		t.Errorf("%s: err = %v, want class %v", what, err, class)
	}
}

func TestRoundTrip(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	clock := t0
	s, r := newStore(t, db, Options{Now: func() time.Time { return clock }})

	m, err := s.Put(ctx, "t1", "GITHUB_TOKEN", "CI token", val("ghp_first"))
	if err != nil {
		t.Fatal(err)
	}
	want := Metadata{TenantID: "t1", Name: "GITHUB_TOKEN", Description: "CI token", KeyID: s.key.ID(), Version: 1, CreatedAt: t0, UpdatedAt: t0}
	if m != want {
		t.Errorf("put = %+v, want %+v", m, want)
	}
	if got := reveal(t, r, "t1", "GITHUB_TOKEN"); got != "ghp_first" {
		t.Errorf("reveal = %q", got)
	}

	clock = t0.Add(time.Hour)
	m, err = s.Put(ctx, "t1", "GITHUB_TOKEN", "", val("ghp_second"))
	if err != nil {
		t.Fatal(err)
	}
	if m.Version != 2 || !m.CreatedAt.Equal(t0) || !m.UpdatedAt.Equal(clock) || m.Description != "" {
		t.Errorf("replace = %+v", m)
	}
	if got := reveal(t, r, "t1", "GITHUB_TOKEN"); got != "ghp_second" {
		t.Errorf("reveal after replace = %q", got)
	}
	if g, err := s.Get(ctx, "t1", "GITHUB_TOKEN"); err != nil || g != m {
		t.Errorf("get = %+v, %v; want %+v", g, err, m)
	}

	// Binary values and the largest one round-trip.
	bin := make([]byte, MaxValueBytes)
	for i := range bin {
		bin[i] = byte(i)
	}
	if _, err := s.Put(ctx, "t1", "blob", "", NewValue(bytes.Clone(bin))); err != nil {
		t.Fatal(err)
	}
	if got := reveal(t, r, "t1", "blob"); got != string(bin) {
		t.Errorf("binary value did not round-trip (%d bytes)", len(got))
	}

	// Tenants are separate namespaces.
	if _, err := s.Put(ctx, "t2", "GITHUB_TOKEN", "", val("other tenant")); err != nil {
		t.Fatal(err)
	}
	if got := reveal(t, r, "t1", "GITHUB_TOKEN"); got != "ghp_second" {
		t.Errorf("t1 after t2's put = %q", got)
	}
	_, err = r.Reveal(ctx, "t2", "blob")
	wantClass(t, "reveal another tenant's name", err, errdefs.ErrNotFound)

	list, err := s.List(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != "GITHUB_TOKEN" || list[1].Name != "blob" {
		t.Errorf("list = %+v", list)
	}

	if err := s.Delete(ctx, "t1", "GITHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
	_, err = r.Reveal(ctx, "t1", "GITHUB_TOKEN")
	wantClass(t, "reveal deleted", err, errdefs.ErrNotFound)
	wantClass(t, "delete again", s.Delete(ctx, "t1", "GITHUB_TOKEN"), errdefs.ErrNotFound)
	_, err = s.Put(ctx, "nope", "x", "", val("v"))
	wantClass(t, "put in unknown tenant", err, errdefs.ErrNotFound)
}

// TestSealedAtRest: the stored ciphertext holds neither the value nor
// anything equal across two writes of the same value (random nonces).
func TestSealedAtRest(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s, _ := newStore(t, db, Options{})
	const v = "plain-value-plain-value"
	var seen [][]byte
	for _, name := range []string{"a", "b", "a"} {
		if _, err := s.Put(ctx, "t1", name, "", val(v)); err != nil {
			t.Fatal(err)
		}
		rec, err := db.GetSecret(ctx, "t1", name)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(rec.Ciphertext, []byte("plain-value")) {
			t.Fatalf("the stored ciphertext contains the value")
		}
		if len(rec.Ciphertext) != len(v)+overhead || rec.Ciphertext[0] != formatV1 || rec.KeyID != s.key.ID() {
			t.Errorf("row = key %s, %d bytes; want key %s, %d bytes of format 1", rec.KeyID, len(rec.Ciphertext), s.key.ID(), len(v)+overhead)
		}
		for _, c := range seen {
			if bytes.Equal(c[1:1+nonceSize], rec.Ciphertext[1:1+nonceSize]) || bytes.Equal(c, rec.Ciphertext) {
				t.Errorf("two writes share a nonce or a ciphertext")
			}
		}
		seen = append(seen, rec.Ciphertext)
	}
}

func TestWrongKey(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	old := newKey(t)
	s1, _ := newStore(t, db, Options{Key: old})
	if _, err := s1.Put(ctx, "t1", "token", "", val("sealed-by-old")); err != nil {
		t.Fatal(err)
	}

	// Another key: a clear error naming both keys, never bytes.
	cur := newKey(t)
	s2, r2 := newStore(t, db, Options{Key: cur})
	v, err := r2.Reveal(ctx, "t1", "token")
	wantClass(t, "reveal with another key", err, errdefs.ErrFailedPrecondition)
	if v.Len() != 0 || err == nil || !strings.Contains(err.Error(), old.ID()) || !strings.Contains(err.Error(), cur.ID()) ||
		!strings.Contains(err.Error(), "not loaded") {
		t.Errorf("reveal with another key = %d bytes, %v; want an error naming keys %s and %s", v.Len(), err, old.ID(), cur.ID())
	}
	err = s2.CheckKeys(ctx)
	wantClass(t, "check keys", err, errdefs.ErrFailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "1 sealed by key "+old.ID()) {
		t.Errorf("check keys = %v", err)
	}
	// Listing and metadata need no key.
	if l, err := s2.List(ctx, "t1"); err != nil || len(l) != 1 {
		t.Errorf("list with another key = %v, %v", l, err)
	}

	// The old key kept as an old key opens it; a Put reseals it under
	// the current key.
	s3, r3 := newStore(t, db, Options{Key: cur, OldKeys: []*Key{old}})
	if err := s3.CheckKeys(ctx); err != nil {
		t.Errorf("check keys with the old key loaded: %v", err)
	}
	if got := reveal(t, r3, "t1", "token"); got != "sealed-by-old" {
		t.Errorf("reveal with the old key loaded = %q", got)
	}
	m, err := s3.Put(ctx, "t1", "token", "", val("resealed"))
	if err != nil || m.KeyID != cur.ID() {
		t.Fatalf("reseal = %+v, %v; want key %s", m, err, cur.ID())
	}
	if got := reveal(t, r2, "t1", "token"); got != "resealed" {
		t.Errorf("after resealing, the current key alone reveals %q", got)
	}
	if err := s2.CheckKeys(ctx); err != nil {
		t.Errorf("check keys after resealing: %v", err)
	}
}

// TestWrongKeySameID: a row that claims the loaded key's ID but was
// sealed by another key does not open (the tag fails), never garbage.
func TestWrongKeySameID(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	a, b := newKey(t), newKey(t)
	sa, _ := newStore(t, db, Options{Key: a})
	if _, err := sa.Put(ctx, "t1", "x", "", val("value-x")); err != nil {
		t.Fatal(err)
	}
	rec, _ := db.GetSecret(ctx, "t1", "x")
	forged := &Key{id: a.id, aead: b.aead} // b's cipher under a's ID
	_, err := open(forged, "t1", "x", rec.Ciphertext)
	wantClass(t, "open with another key under the same ID", err, errdefs.ErrFailedPrecondition)
}

// TestTampered: flipping any single byte of a stored ciphertext makes
// Reveal fail, and a truncated or empty-format row fails too.
func TestTampered(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s, r := newStore(t, db, Options{})
	if _, err := s.Put(ctx, "t1", "x", "", val("tamper-me")); err != nil {
		t.Fatal(err)
	}
	orig, _ := db.GetSecret(ctx, "t1", "x")
	write := func(c []byte) {
		t.Helper()
		rec := orig
		rec.Ciphertext = c
		if _, err := db.PutSecret(ctx, rec, 10); err != nil {
			t.Fatal(err)
		}
	}
	for i := range orig.Ciphertext {
		c := bytes.Clone(orig.Ciphertext)
		c[i] ^= 0x01
		write(c)
		v, err := r.Reveal(ctx, "t1", "x")
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || v.Len() != 0 {
			t.Fatalf("byte %d flipped: %d bytes, %v; want failed precondition", i, v.Len(), err)
		}
	}
	for _, c := range [][]byte{orig.Ciphertext[:overhead-1], orig.Ciphertext[:len(orig.Ciphertext)-1], append(bytes.Clone(orig.Ciphertext), 0)} {
		write(c)
		_, err := r.Reveal(ctx, "t1", "x")
		wantClass(t, fmt.Sprintf("%d-byte ciphertext", len(c)), err, errdefs.ErrFailedPrecondition)
	}
	write(orig.Ciphertext)
	if got := reveal(t, r, "t1", "x"); got != "tamper-me" {
		t.Errorf("restored row reveals %q", got)
	}
}

// TestBoundToRow: a ciphertext copied to another name, another tenant,
// or a row that claims another loaded key does not open.
func TestBoundToRow(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	other, cur := newKey(t), newKey(t)
	// alias is the current key under another ID: only the ID in the
	// additional data tells a row relabelled with it apart.
	alias := &Key{id: "k1-00000000000a11a5", aead: cur.aead}
	s, r := newStore(t, db, Options{Key: cur, OldKeys: []*Key{other, alias}})
	if _, err := s.Put(ctx, "t1", "victim", "", val("victim-value")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "t2", "mine", "", val("mine")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "t1", "relabelled", "", val("relabelled")); err != nil {
		t.Fatal(err)
	}
	src, _ := db.GetSecret(ctx, "t1", "victim")
	relabel, _ := db.GetSecret(ctx, "t1", "relabelled")
	relabel.KeyID = alias.ID()
	moves := []struct {
		what string
		mut  func(*store.SecretRecord)
	}{
		{"another name", func(rec *store.SecretRecord) { rec.Name = "copy" }},
		{"another tenant, same name", func(rec *store.SecretRecord) { rec.TenantID = "t2" }},
		{"over another tenant's secret", func(rec *store.SecretRecord) { rec.TenantID, rec.Name = "t2", "mine" }},
		{"another loaded key's ID", func(rec *store.SecretRecord) { rec.Name, rec.KeyID = "rekeyed", other.ID() }},
		{"the same key under another ID", func(rec *store.SecretRecord) { *rec = relabel }},
	}
	for _, m := range moves {
		rec := src
		m.mut(&rec)
		if _, err := db.PutSecret(ctx, rec, 10); err != nil {
			t.Fatalf("%s: %v", m.what, err)
		}
		v, err := r.Reveal(ctx, rec.TenantID, rec.Name)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || v.Len() != 0 {
			t.Errorf("%s: %d bytes, %v; want failed precondition", m.what, v.Len(), err)
		}
	}
	if got := reveal(t, r, "t1", "victim"); got != "victim-value" {
		t.Errorf("the source row reveals %q", got)
	}
}

func TestCaps(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s, _ := newStore(t, db, Options{MaxPerTenant: 3})
	_, err := s.Put(ctx, "t1", "empty", "", val(""))
	wantClass(t, "empty value", err, errdefs.ErrInvalidArgument)
	_, err = s.Put(ctx, "t1", "big", "", NewValue(make([]byte, MaxValueBytes+1)))
	wantClass(t, "value over the cap", err, errdefs.ErrInvalidArgument)
	_, err = s.Put(ctx, "t1", "desc", strings.Repeat("d", MaxDescriptionBytes+1), val("v"))
	wantClass(t, "description over the cap", err, errdefs.ErrInvalidArgument)
	_, err = s.Put(ctx, "t1", "desc", "bad\x00", val("v"))
	wantClass(t, "description with NUL", err, errdefs.ErrInvalidArgument)
	if _, err := s.Put(ctx, "t1", "desc", strings.Repeat("d", MaxDescriptionBytes), val("v")); err != nil {
		t.Errorf("description at the cap: %v", err)
	}
	for _, n := range []string{"b", "c"} {
		if _, err := s.Put(ctx, "t1", n, "", val("v")); err != nil {
			t.Fatal(err)
		}
	}
	_, err = s.Put(ctx, "t1", "d", "", val("v"))
	wantClass(t, "fourth secret", err, errdefs.ErrResourceExhausted)
	if _, err := s.Put(ctx, "t1", "c", "", val("replaced")); err != nil {
		t.Errorf("replacing at the cap: %v", err)
	}
	if _, err := s.Put(ctx, "t2", "d", "", val("v")); err != nil {
		t.Errorf("another tenant at t1's cap: %v", err)
	}
	if l, _ := s.List(ctx, "t1"); len(l) != 3 {
		t.Errorf("t1 has %d secrets, want 3", len(l))
	}

	for _, n := range []int{-1, store.MaxSecretsPerTenant + 1} {
		if _, err := New(db, Options{Key: newKey(t), MaxPerTenant: n}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("New with cap %d: %v", n, err)
		}
	}
	if _, err := New(db, Options{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New without a key: %v", err)
	}
	if _, err := New(db, Options{Key: newKey(t), OldKeys: []*Key{nil}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("New with a nil old key: %v", err)
	}
}

func TestNames(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s, r := newStore(t, db, Options{})
	good := []string{"a", "_", "A_B", "api.key", "x-1", "Z9", "_x.y-z", "a" + strings.Repeat("b", 127)}
	for _, n := range good {
		if _, err := s.Put(ctx, "t1", n, "", val("v-"+n)); err != nil {
			t.Errorf("put %q: %v", n, err)
		} else if got := reveal(t, r, "t1", n); got != "v-"+n {
			t.Errorf("reveal %q = %q", n, got)
		}
	}
	bad := []string{"", "1a", "-a", ".a", "a b", "a/b", "../x", "a\x00", "é", "a:b", "a\n", "a" + strings.Repeat("b", 128)}
	for _, n := range bad {
		_, err := s.Put(ctx, "t1", n, "", val("v"))
		wantClass(t, fmt.Sprintf("put %q", n), err, errdefs.ErrInvalidArgument)
		_, err = r.Reveal(ctx, "t1", n)
		wantClass(t, fmt.Sprintf("reveal %q", n), err, errdefs.ErrInvalidArgument)
		_, err = s.Get(ctx, "t1", n)
		wantClass(t, fmt.Sprintf("get %q", n), err, errdefs.ErrInvalidArgument)
		wantClass(t, fmt.Sprintf("delete %q", n), s.Delete(ctx, "t1", n), errdefs.ErrInvalidArgument)
	}
}

// TestConcurrent: concurrent puts, reveals and lists on shared and
// separate names; every reveal yields a value that was written whole,
// and no version is lost.
func TestConcurrent(t *testing.T) {
	ctx := context.Background()
	db := openDB(t)
	s, r := newStore(t, db, Options{MaxPerTenant: 50})
	if _, err := s.Put(ctx, "t1", "shared", "", val("shared-0-0")); err != nil {
		t.Fatal(err)
	}
	const workers, each = 8, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			own := fmt.Sprintf("own%d", w)
			for i := range each {
				want := fmt.Sprintf("%s-%d", own, i)
				if _, err := s.Put(ctx, "t1", own, "", val(want)); err != nil {
					t.Errorf("put %s: %v", own, err)
					return
				}
				if _, err := s.Put(ctx, "t1", "shared", "", val(fmt.Sprintf("shared-%d-%d", w, i))); err != nil {
					t.Errorf("put shared: %v", err)
					return
				}
				if got := reveal(t, r, "t1", own); got != want {
					t.Errorf("reveal %s = %q, want %q", own, got, want)
				}
				v, err := r.Reveal(ctx, "t1", "shared")
				if err != nil {
					t.Errorf("reveal shared: %v", err)
					return
				}
				var ww, ii int
				if n, _ := fmt.Sscanf(string(v.Bytes()), "shared-%d-%d", &ww, &ii); n != 2 {
					t.Errorf("reveal shared = a value nobody wrote (%d bytes)", v.Len())
				}
				v.Wipe()
				if _, err := s.List(ctx, "t1"); err != nil {
					t.Errorf("list: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if m, err := s.Get(ctx, "t1", "shared"); err != nil || m.Version != 1+workers*each {
		t.Errorf("shared = version %d, %v; want %d", m.Version, err, 1+workers*each)
	}
	if l, _ := s.List(ctx, "t1"); len(l) != workers+1 {
		t.Errorf("%d secrets, want %d", len(l), workers+1)
	}
}

func TestParseKey(t *testing.T) {
	raw := bytes.Repeat([]byte{0xfb}, KeySize) // encodes differently in the two alphabets
	var ids []string
	for _, text := range []string{
		base64.StdEncoding.EncodeToString(raw), base64.RawStdEncoding.EncodeToString(raw),
		base64.URLEncoding.EncodeToString(raw), " " + base64.RawURLEncoding.EncodeToString(raw) + "\n",
	} {
		k, err := ParseKey([]byte(text))
		if err != nil {
			t.Fatalf("parse %q: %v", text, err)
		}
		ids = append(ids, k.ID())
	}
	for _, id := range ids {
		if id != ids[0] || !strings.HasPrefix(id, "k1-") || len(id) != 19 {
			t.Errorf("ids = %v, want one k1-<16 hex> for one key", ids)
		}
	}
	for _, text := range []string{"", "not base64!", base64.StdEncoding.EncodeToString(raw[:31]), base64.StdEncoding.EncodeToString(append(raw, 1))} {
		if _, err := ParseKey([]byte(text)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parse %q: %v, want invalid argument", text, err)
		}
	}
	in := bytes.Clone(raw)
	if _, err := NewKey(in); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(in, make([]byte, KeySize)) {
		t.Errorf("NewKey left the raw key in its argument")
	}
	k1, _ := NewKey(bytes.Clone(raw))
	raw[0] ^= 1
	k2, _ := NewKey(raw)
	if k1.ID() == k2.ID() {
		t.Errorf("two keys share the ID %s", k1.ID())
	}
	if s := fmt.Sprint(k1); s != "secrets key "+k1.ID() {
		t.Errorf("a key prints as %q", s)
	}
}
