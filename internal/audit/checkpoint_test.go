package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/store"
)

// testSigner is a signer with a fixed key and clock.
func testSigner(seed byte) *Signer {
	return NewSigner(ed25519.NewKeyFromSeed(bytes.Repeat([]byte{seed}, ed25519.SeedSize)),
		func() time.Time { return time.Date(2026, 1, 2, 15, 4, 5, 999, time.FixedZone("x", 3600)) })
}

func TestCheckpointSignVerify(t *testing.T) {
	s := testSigner(1)
	head := store.AuditHead{Seq: 42, Hash: strings.Repeat("ab", 32)}
	cp, err := s.Sign(head)
	if err != nil {
		t.Fatal(err)
	}
	// The documented message, byte for byte.
	want := "airlock-audit-checkpoint-v1\nseq 42\nhash " + head.Hash + "\ntime 2026-01-02T14:04:05Z\nkey " + s.Public().ID() + "\n"
	if string(cp.Message()) != want || cp.Head() != head || len(cp.KeyID) != 16 {
		t.Errorf("checkpoint %+v, message %q", cp, cp.Message())
	}
	if err := s.Public().Verify(cp); err != nil {
		t.Fatalf("own checkpoint: %v", err)
	}
	// The exported key verifies it as well.
	pub, err := ParsePublicKey(s.Public().PEM())
	if err != nil || pub.ID() != s.Public().ID() {
		t.Fatalf("parse exported key: %v, %v", pub, err)
	}
	if err := pub.Verify(cp); err != nil {
		t.Errorf("exported key: %v", err)
	}

	other := testSigner(2)
	cp2, _ := other.Sign(head)
	forged := cp2
	forged.KeyID = cp.KeyID // claims our key, signed by another
	sig, _ := base64.StdEncoding.DecodeString(cp.Signature)
	tests := []struct {
		name   string
		cp     Checkpoint
		wantIn string
	}{
		{"another key", cp2, "signed by key " + cp2.KeyID},
		{"another key claiming ours", forged, "does not match"},
		{"seq edited", with(cp, func(c *Checkpoint) { c.Seq++ }), "does not match"},
		{"hash edited", with(cp, func(c *Checkpoint) { c.Hash = strings.Repeat("cd", 32) }), "does not match"},
		{"time edited", with(cp, func(c *Checkpoint) { c.Time = c.Time.Add(time.Second) }), "does not match"},
		{"signature flipped", with(cp, func(c *Checkpoint) {
			b := bytes.Clone(sig)
			b[0] ^= 1
			c.Signature = base64.StdEncoding.EncodeToString(b)
		}), "does not match"},
		{"no signature", with(cp, func(c *Checkpoint) { c.Signature = "" }), "signature"},
		{"short signature", with(cp, func(c *Checkpoint) { c.Signature = "AAAA" }), "signature"},
		{"bad hash", with(cp, func(c *Checkpoint) { c.Hash = strings.ToUpper(c.Hash) }), "hash"},
		{"bad key id", with(cp, func(c *Checkpoint) { c.KeyID = "xyz" }), "key_id"},
		{"sub-second time", with(cp, func(c *Checkpoint) { c.Time = c.Time.Add(time.Millisecond) }), "time"},
		{"seq 0 with a hash", with(cp, func(c *Checkpoint) { c.Seq = 0 }), "genesis"},
	}
	for _, tt := range tests {
		err := s.Public().Verify(tt.cp)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tt.wantIn) ||
			!strings.Contains(err.Error(), fmt.Sprint("seq ", tt.cp.Seq)) {
			t.Errorf("%s: %v, want invalid argument naming the checkpoint and %q", tt.name, err, tt.wantIn)
		}
	}
	if err := (PublicKey{}).Verify(cp); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("zero key: %v", err)
	}
	for _, text := range []string{"", "not pem", string(privatePEM(t))} {
		if _, err := ParsePublicKey([]byte(text)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParsePublicKey(%.20q): %v", text, err)
		}
	}
}

func with(c Checkpoint, f func(*Checkpoint)) Checkpoint {
	f(&c)
	return c
}

// privatePEM returns the PEM of a fresh signing key file.
func privatePEM(t *testing.T) []byte {
	path := filepath.Join(t.TempDir(), "k")
	if _, _, err := LoadSigner(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCheckpointOpenSSL runs the offline check the package documentation
// gives, so that it stays true.
func TestCheckpointOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl is not installed")
	}
	dir := t.TempDir()
	s, _, err := LoadSigner(filepath.Join(dir, "checkpoint.key"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit.pub"), s.Public().PEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	cp, err := s.Sign(store.AuditHead{Seq: 7, Hash: strings.Repeat("0f", 32)})
	if err != nil {
		t.Fatal(err)
	}
	script := `set -e
printf 'airlock-audit-checkpoint-v1\nseq %s\nhash %s\ntime %s\nkey %s\n' "$seq" "$hash" "$time" "$key_id" > msg
printf %s "$signature" | base64 -d > sig
openssl pkey -pubin -in audit.pub -outform DER | tail -c 32 | sha256sum | cut -c1-16
openssl pkeyutl -verify -pubin -inkey audit.pub -rawin -in msg -sigfile sig`
	run := func(c Checkpoint) (string, error) {
		cmd := exec.Command("sh", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "seq="+fmt.Sprint(c.Seq), "hash="+c.Hash, "time="+c.Time.Format(time.RFC3339),
			"key_id="+c.KeyID, "signature="+c.Signature)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run(cp)
	if err != nil || !strings.HasPrefix(out, cp.KeyID+"\n") || !strings.Contains(out, "Signature Verified Successfully") {
		t.Fatalf("openssl check of a good checkpoint: %v\n%s", err, out)
	}
	if out, err := run(with(cp, func(c *Checkpoint) { c.Seq = 8 })); err == nil {
		t.Errorf("openssl accepted an edited checkpoint:\n%s", out)
	}
}

func TestLoadSigner(t *testing.T) {
	for _, umask := range []int{0o022, 0o000} {
		t.Run(fmt.Sprintf("umask %03o", umask), func(t *testing.T) {
			old := syscall.Umask(umask)
			defer syscall.Umask(old)
			path := filepath.Join(t.TempDir(), "checkpoint.key")
			s, created, err := LoadSigner(path)
			if err != nil || !created {
				t.Fatalf("first load: %v, created %v", err, created)
			}
			checkMode(t, path, 0o600)
			s2, created, err := LoadSigner(path)
			if err != nil || created || s2.Public().ID() != s.Public().ID() {
				t.Fatalf("second load: %v, created %v, key %s vs %s", err, created, s2.Public().ID(), s.Public().ID())
			}
			// An existing key readable by others is made private.
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, _, err := LoadSigner(path); err != nil {
				t.Fatal(err)
			}
			checkMode(t, path, 0o600)
			if m, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".*")); len(m) != 0 {
				t.Errorf("temporary files left: %v", m)
			}
		})
	}
	dir := t.TempDir()
	for name, setup := range map[string]func(p string) error{
		"garbage": func(p string) error { return os.WriteFile(p, []byte("not a key"), 0o600) },
		"public":  func(p string) error { return os.WriteFile(p, testSigner(1).Public().PEM(), 0o600) },
		"symlink": func(p string) error { return os.Symlink(filepath.Join(dir, "elsewhere"), p) },
		"dir":     func(p string) error { return os.Mkdir(p, 0o700) },
	} {
		p := filepath.Join(dir, name)
		if err := setup(p); err != nil {
			t.Fatal(err)
		}
		if _, _, err := LoadSigner(p); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s: %v, want failed precondition", name, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(dir, "elsewhere")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a key was written through the symlink: %v", err)
	}
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != want {
		t.Errorf("%s has mode %v, want %v", filepath.Base(path), fi.Mode().Perm(), want)
	}
}

func TestCheckpointFile(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	s := testSigner(3)
	path := filepath.Join(t.TempDir(), "checkpoints.jsonl")
	var want []Checkpoint
	for i := range 3 {
		cp, err := s.Sign(store.AuditHead{Seq: uint64(i + 1), Hash: strings.Repeat(fmt.Sprintf("%02x", i), 32)})
		if err != nil {
			t.Fatal(err)
		}
		if err := AppendCheckpoint(path, cp); err != nil {
			t.Fatal(err)
		}
		want = append(want, cp)
	}
	checkMode(t, path, 0o600)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadCheckpoints(f, 10)
	f.Close()
	if err != nil || len(got) != 3 {
		t.Fatalf("read back: %v, %v", got, err)
	}
	for i := range got {
		if !got[i].Time.Equal(want[i].Time) || got[i].Head() != want[i].Head() || got[i].Signature != want[i].Signature {
			t.Errorf("line %d: %+v, want %+v", i+1, got[i], want[i])
		}
		if err := s.Public().Verify(got[i]); err != nil {
			t.Errorf("line %d: %v", i+1, err)
		}
	}
	b, _ := os.ReadFile(path)
	if _, err := ReadCheckpoints(bytes.NewReader(b), 2); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("more than max: %v", err)
	}
	for _, bad := range []string{strings.Repeat(" ", MaxCheckpointLine+1) + "{}", `{"seq":1}`, `{"seq":1,"hash":"` + want[0].Hash + `","extra":1}`, "nope", `{} {}`} {
		if _, err := ReadCheckpoints(strings.NewReader(bad), 10); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if got, err := ReadCheckpoints(strings.NewReader("\n \n"), 10); err != nil || len(got) != 0 {
		t.Errorf("blank lines: %v, %v", got, err)
	}
	// A file replaced by a symlink is not followed.
	link := filepath.Join(t.TempDir(), "link.jsonl")
	if err := os.Symlink(path, link); err != nil {
		t.Fatal(err)
	}
	if err := AppendCheckpoint(link, want[0]); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("append through a symlink: %v", err)
	}
}

// signedTampered builds a log of 10 records, signs a checkpoint when the
// head is at seq 8, applies stmts to the database file (with the
// append-only triggers dropped, as an attacker would) and, if rewrite is
// set, rewrites the chain from its record on with recomputed hashes. It
// returns Verify's report without checkpoints and with the signed one.
func signedTampered(t *testing.T, rewrite uint64, stmts ...string) (plain, checked Report, cp Checkpoint) {
	t.Helper()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	st := openStore(t, path)
	l := newLog(t, st, Options{})
	s := testSigner(4)
	for i := 1; i <= 10; i++ {
		if err := l.Append(ctx, ev(i)); err != nil {
			t.Fatal(err)
		}
		if i == 8 {
			var err error
			if cp, err = s.Sign(l.Head()); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rep, err := l.VerifyCheckpoints(ctx, cp); err != nil || !rep.OK {
		t.Fatalf("untouched log against its checkpoint: %+v, %v", rep, err)
	}
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
	if rewrite > 0 {
		rewriteChain(t, ctx, st, db, rewrite)
	}
	if plain, err = Verify(ctx, st); err != nil {
		t.Fatal(err)
	}
	if checked, err = VerifyCheckpoints(ctx, st, cp); err != nil {
		t.Fatal(err)
	}
	return plain, checked, cp
}

// rewriteChain changes the outcome of record from and recomputes the hash
// of every record after it and the head anchor, as someone who can write
// the database file can.
func rewriteChain(t *testing.T, ctx context.Context, st store.AuditStore, db *sql.DB, from uint64) {
	t.Helper()
	recs, err := st.ListAudit(ctx, store.AuditQuery{Limit: store.MaxListLimit})
	if err != nil {
		t.Fatal(err)
	}
	prev := store.GenesisHash
	for _, r := range recs {
		if r.Seq == from {
			r.Outcome = "denied"
		}
		if r.Seq >= from {
			r.PrevHash = prev
			if r.Hash, err = Hash(r); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("UPDATE audit_records SET outcome = ?, prev_hash = ?, hash = ? WHERE seq = ?",
				r.Outcome, r.PrevHash, r.Hash, int64(r.Seq)); err != nil {
				t.Fatal(err)
			}
			if _, err := db.Exec("UPDATE audit_head SET seq = ?, hash = ?", int64(r.Seq), r.Hash); err != nil {
				t.Fatal(err)
			}
		}
		prev = r.Hash
	}
}

// TestCheckpointCatchesTampering: each of these leaves a chain that
// verifies on its own; a signed checkpoint taken before the tampering
// catches it, and the report names the checkpoint.
func TestCheckpointCatchesTampering(t *testing.T) {
	headAt := func(seq int) string {
		return fmt.Sprintf("UPDATE audit_head SET seq = %d, hash = (SELECT hash FROM audit_records WHERE seq = %d)", seq, seq)
	}
	tests := []struct {
		name    string
		rewrite uint64
		stmts   []string
		wantSeq uint64
		wantIn  string
	}{
		{name: "truncated before the checkpoint", stmts: []string{`DELETE FROM audit_records WHERE seq > 5`, headAt(5)},
			wantSeq: 6, wantIn: "log ends at seq 5"},
		{name: "head pointed at an earlier record, the tail gone", stmts: []string{`DELETE FROM audit_records WHERE seq > 7`, headAt(7)},
			wantSeq: 8, wantIn: "log ends at seq 7"},
		{name: "wiped", stmts: []string{`DELETE FROM audit_records`, `DELETE FROM audit_head`},
			wantSeq: 1, wantIn: "log ends at seq 0"},
		{name: "rewritten", rewrite: 3, wantSeq: 8, wantIn: "the chain was rewritten"},
		{name: "rewritten and truncated", rewrite: 2, stmts: []string{`DELETE FROM audit_records WHERE seq > 6`, headAt(6)},
			wantSeq: 7, wantIn: "log ends at seq 6"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plain, rep, cp := signedTampered(t, tt.rewrite, tt.stmts...)
			if !plain.OK {
				t.Fatalf("the tampered chain does not verify on its own (%+v): this case needs no checkpoint", plain)
			}
			if rep.OK || rep.BadSeq != tt.wantSeq || !strings.Contains(rep.Problem, tt.wantIn) ||
				!strings.Contains(rep.Problem, cp.String()) {
				t.Errorf("report %+v, want bad seq %d (%q) naming %s", rep, tt.wantSeq, tt.wantIn, cp)
			}
		})
	}
}

// TestCheckpointOfEmptyLog: a checkpoint of the empty log (seq 0) says
// nothing and is accepted by every log.
func TestCheckpointOfEmptyLog(t *testing.T) {
	ctx := context.Background()
	l, _, _ := tempLog(t)
	s := testSigner(5)
	cp, err := s.Sign(l.Head())
	if err != nil || cp.Seq != 0 || cp.Hash != store.GenesisHash {
		t.Fatalf("checkpoint of the empty log: %+v, %v", cp, err)
	}
	if err := s.Public().Verify(cp); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(ctx, ev(1)); err != nil {
		t.Fatal(err)
	}
	if rep, err := l.VerifyCheckpoints(ctx, cp); err != nil || !rep.OK {
		t.Errorf("verify against the empty checkpoint: %+v, %v", rep, err)
	}
}

// FuzzReadCheckpoints: whatever the checkpoint file reader accepts is
// valid, and a signature over it is checked, never trusted.
func FuzzReadCheckpoints(f *testing.F) {
	s := testSigner(6)
	cp, _ := s.Sign(store.AuditHead{Seq: 3, Hash: strings.Repeat("0a", 32)})
	line, _ := marshalCompact(cp)
	f.Add(string(line) + "\n")
	f.Add(string(line) + "\n\n" + string(line))
	f.Add(`{"seq":1,"hash":"` + strings.Repeat("0", 64) + `"}`)
	f.Add(`{"seq":0,"hash":"` + store.GenesisHash + `","time":"2026-01-02T15:04:05Z","key_id":"0123456789abcdef","signature":"` +
		base64.StdEncoding.EncodeToString(make([]byte, 64)) + `"}`)
	f.Fuzz(func(t *testing.T, text string) {
		cps, err := ReadCheckpoints(strings.NewReader(text), 8)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not invalid argument", err)
			}
			return
		}
		if len(cps) > 8 {
			t.Fatalf("%d checkpoints, max 8", len(cps))
		}
		for _, c := range cps {
			if err := c.Validate(); err != nil {
				t.Fatalf("accepted %+v: %v", c, err)
			}
			if err := s.Public().Verify(c); err == nil && (c.Seq != cp.Seq || c.Hash != cp.Hash || !c.Time.Equal(cp.Time)) {
				t.Fatalf("a checkpoint %+v not signed by the key verifies", c)
			}
		}
	})
}
