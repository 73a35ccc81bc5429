package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/store"
)

func TestCLIAuditCheckpoint(t *testing.T) {
	e := newCLIEnv(t)
	dir := t.TempDir()
	e.create()

	// audit checkpoint prints one line, ready to append to a file.
	line := e.ok("", "audit", "checkpoint").stdout
	var cp audit.Checkpoint
	if err := json.Unmarshal([]byte(line), &cp); err != nil || strings.Count(line, "\n") != 1 {
		t.Fatalf("audit checkpoint printed %q: %v", line, err)
	}
	if err := e.signer.Public().Verify(cp); err != nil || cp.Seq != 2 {
		t.Errorf("checkpoint %+v: %v", cp, err)
	}
	pub := filepath.Join(dir, "audit.pub")
	if err := os.WriteFile(pub, []byte(e.ok("", "audit", "checkpoint", "--public-key").stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(dir, "checkpoints.jsonl")
	e.create()
	lines := line + e.ok("", "audit", "checkpoint").stdout
	if err := os.WriteFile(shipped, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}

	r := e.ok("", "audit", "verify", "--checkpoint", shipped, "--public-key", pub)
	if !strings.Contains(r.stdout, "ok: 4 records verified") || !strings.Contains(r.stdout, "2 checkpoints match (the latest at seq 4)") {
		t.Errorf("verify against the shipped checkpoints: %q", r.stdout)
	}
	// Offline: signatures only, no daemon.
	url := e.env[envURL]
	e.env[envURL] = "http://127.0.0.1:1"
	r = e.ok("", "audit", "verify", "--offline", "--checkpoint", shipped, "--public-key", pub)
	if !strings.Contains(r.stdout, "ok: 2 signed checkpoints verify") || !strings.Contains(r.stdout, "seq 4") {
		t.Errorf("offline verify: %q", r.stdout)
	}
	e.env[envURL] = url

	write := func(name string, cps ...audit.Checkpoint) string {
		t.Helper()
		var b strings.Builder
		for _, cp := range cps {
			j, _ := json.Marshal(cp)
			b.Write(append(j, '\n'))
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	sign := func(seq uint64, hash string) audit.Checkpoint {
		cp, err := e.signer.Sign(store.AuditHead{Seq: seq, Hash: hash})
		if err != nil {
			t.Fatal(err)
		}
		return cp
	}
	// Genuine checkpoints the log no longer matches: one past its end (the
	// log was truncated or wiped), one of another record 3 (rewritten).
	for _, tt := range []struct {
		cp      audit.Checkpoint
		wantOut string
	}{
		{sign(9, strings.Repeat("ab", 32)), "but checkpoint seq 9"}, // the first verify made record 5
		{sign(3, strings.Repeat("cd", 32)), "BROKEN: record 3: record differs from checkpoint seq 3"},
	} {
		r := e.run("", "audit", "verify", "--checkpoint", write("cp.jsonl", tt.cp), "--public-key", pub)
		if r.code != 1 || !strings.HasPrefix(r.stdout, "BROKEN: record") || !strings.Contains(r.stdout, tt.wantOut) {
			t.Errorf("verify against %s: code %d, stdout %q, err %v", tt.cp, r.code, r.stdout, r.err)
		}
	}

	// A forged checkpoint is refused: by the pinned key, or by the server.
	forged := cp
	forged.Seq = 1
	for _, args := range [][]string{
		{"--public-key", pub},
		{"--public-key", pub, "--offline"},
		nil,
	} {
		r := e.run("", append([]string{"audit", "verify", "--checkpoint", write("forged.jsonl", forged)}, args...)...)
		if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "does not match") || strings.Contains(r.stdout, "ok") {
			t.Errorf("forged checkpoint with %v: code %d, err %v, stdout %q", args, r.code, r.err, r.stdout)
		}
	}
	// A checkpoint of another key, against the pinned key.
	other, _, err := audit.LoadSigner(filepath.Join(dir, "other.key"))
	if err != nil {
		t.Fatal(err)
	}
	foreign, _ := other.Sign(store.AuditHead{Seq: cp.Seq, Hash: cp.Hash})
	r = e.run("", "audit", "verify", "--offline", "--checkpoint", write("foreign.jsonl", foreign), "--public-key", pub)
	if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "signed by key "+other.Public().ID()) {
		t.Errorf("another key's checkpoint: code %d, err %v", r.code, r.err)
	}

	for _, args := range [][]string{
		{"--offline", "--checkpoint", shipped},
		{"--offline", "--public-key", pub},
		{"--checkpoint", filepath.Join(dir, "missing.jsonl")},
		{"--checkpoint", write("bad.jsonl") + "x"},
		{"--checkpoint", pub}, // not a checkpoint file
		{"--checkpoint", shipped, "--public-key", shipped},
	} {
		if r := e.run("", append([]string{"audit", "verify"}, args...)...); r.code != 2 {
			t.Errorf("audit verify %v: code %d, err %v, want a usage error", args, r.code, r.err)
		}
	}
	if r := e.run("", "audit", "checkpoint", "extra"); r.code != 2 {
		t.Errorf("audit checkpoint extra: code %d", r.code)
	}
}

// TestAuditLast: the search for the latest records gives exactly what
// reading every record gives, with and without a filter, for counts
// around every boundary.
func TestAuditLast(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	for range 20 {
		e.ok("", "exec", id, "--", "true")
	}
	cl, err := (&cli{getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client(), url: e.srv.URL}).client()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, q := range []client.AuditQuery{{}, {Action: "sandbox.exec"}, {Action: "nothing.such"}} {
		all, _, err := auditFrom(ctx, cl, q, 0, maxAuditShown)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []int{1, 2, 5, 17, len(all) - 1, len(all), len(all) + 1, 100} {
			if n < 1 {
				continue
			}
			got, err := auditLast(ctx, cl, q, n)
			if err != nil {
				t.Fatal(err)
			}
			want := all[max(len(all)-n, 0):]
			if len(got) != len(want) || (len(got) > 0 && (got[0].Seq != want[0].Seq || got[len(got)-1].Seq != want[len(want)-1].Seq)) {
				t.Errorf("%+v: auditLast(%d) = %d records, want %d (of %d)", q, n, len(got), len(want), len(all))
			}
		}
	}
}

// TestAuditFollow: --follow prints the latest records, then the new ones
// as they are written, and ends with 0 when interrupted.
func TestAuditFollow(t *testing.T) {
	defer func(d time.Duration) { followEvery = d }(followEvery)
	followEvery = 20 * time.Millisecond
	e := newCLIEnv(t)
	id := e.create()
	ctx, cancel := context.WithCancel(context.Background())
	out := &syncBuffer{}
	done := make(chan result, 1)
	go func() {
		c := &cli{stdout: out, stderr: io.Discard, getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client()}
		code, err := c.main(ctx, []string{"audit", "--follow", "--tail", "1", "--json"})
		done <- result{code: code, err: err}
	}()
	waitFor := func(what string, cond func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond(out.String()) {
			if time.Now().After(deadline) {
				t.Fatalf("no %s in:\n%s", what, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("first record", func(s string) bool { return strings.Count(s, "\n") == 1 })
	e.ok("", "exec", id, "--", "true")
	waitFor("the exec's records", func(s string) bool { return strings.Count(s, `"action":"sandbox.exec"`) == 2 })
	cancel()
	select {
	case r := <-done:
		if r.code != 0 || r.err != nil {
			t.Errorf("follow ended with %d %v", r.code, r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end when interrupted")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || !strings.Contains(lines[0], `"action":"sandbox.create"`) {
		t.Errorf("follow printed:\n%s", out.String())
	}
}
