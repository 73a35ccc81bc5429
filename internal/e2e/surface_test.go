package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"hash"
	"io"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

var idRE = regexp.MustCompile(`^sb-[a-z2-7]{16}$`)

// unknownID is well formed but names no sandbox.
const unknownID = "sb-aaaaaaaaaaaaaaaa"

// TestSurface drives every public endpoint of a real daemon once, with the
// checks a client relies on.
func TestSurface(t *testing.T) {
	e := newEnv(t, "--pool-size", "1")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	t.Run("admin key", func(t *testing.T) {
		fi, err := os.Stat(filepath.Join(e.dir, "admin.key"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("admin.key mode = %v, want 0600", fi.Mode().Perm())
		}
		if d.AnnouncedKey == "" || d.AnnouncedKey != d.Key {
			t.Errorf("first start announced key %q, admin.key holds %q", d.AnnouncedKey, d.Key)
		}
	})

	// Let the warm pool fill, so that the plain create below is a claim.
	poolReady := waitFor(20*time.Second, func() bool {
		for _, id := range e.scanIDs() {
			if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", id, "state.json")); err == nil {
				return true
			}
		}
		return false
	})
	time.Sleep(300 * time.Millisecond) // the member joins the pool after a ping

	limits := client.Limits{CPUs: 1, MemoryMB: 384, Pids: 200, DiskMB: 512}
	t0 := time.Now()
	main, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Timeout:  5 * time.Minute,
		Limits:   &limits,
		Env:      map[string]string{"E2E_GREETING": "hello from env"},
		Metadata: map[string]string{"suite": "e2e", "role": "main"},
	})
	if err != nil {
		t.Fatalf("create with limits: %v", err)
	}
	track(main.ID)
	t.Logf("cold create (custom limits) took %v", time.Since(t0).Round(time.Millisecond))
	t0 = time.Now()
	other, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Metadata: map[string]string{"suite": "e2e", "role": "other"},
	})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	track(other.ID)
	t.Logf("create with default limits took %v (pool ready: %v)", time.Since(t0).Round(time.Millisecond), poolReady)

	t.Run("create", func(t *testing.T) {
		for _, sb := range []*client.Sandbox{main, other} {
			if !idRE.MatchString(sb.ID) || sb.State != client.StateRunning || sb.Template != "host" {
				t.Errorf("created sandbox: id %q state %q template %q", sb.ID, sb.State, sb.Template)
			}
			if d := time.Since(sb.CreatedAt); d < -time.Minute || d > time.Minute {
				t.Errorf("created_at %v is not now", sb.CreatedAt)
			}
		}
		if main.Limits != limits {
			t.Errorf("limits = %+v, want %+v", main.Limits, limits)
		}
		if got := main.ExpiresAt.Sub(main.CreatedAt); got < 5*time.Minute-2*time.Second || got > 5*time.Minute+2*time.Second {
			t.Errorf("expires_at - created_at = %v, want 5m", got)
		}
		if main.Metadata["role"] != "main" || main.Metadata["suite"] != "e2e" || len(main.Metadata) != 2 {
			t.Errorf("metadata = %v", main.Metadata)
		}
		if poolReady && !strings.Contains(readLog(e, e.n), "sandbox claimed from pool") {
			t.Errorf("the pool had a member, but the create with default limits was not a claim")
		}
		res := mustExec(t, d, main.ID, client.ExecRequest{Command: `echo "$E2E_GREETING"`})
		if string(res.Stdout) != "hello from env\n" {
			t.Errorf("sandbox env: stdout %q", res.Stdout)
		}
	})

	t.Run("list and get", func(t *testing.T) {
		ids := func(opts client.ListOptions) []string {
			sbs, err := d.C.ListSandboxes(ctx, opts)
			if err != nil {
				t.Fatalf("list %+v: %v", opts, err)
			}
			var out []string
			for _, sb := range sbs {
				out = append(out, sb.ID)
			}
			return out
		}
		for _, tc := range []struct {
			name string
			opts client.ListOptions
			want []string
		}{
			{"all", client.ListOptions{}, []string{main.ID, other.ID}},
			{"running", client.ListOptions{States: []client.State{client.StateRunning}}, []string{main.ID, other.ID}},
			{"stopped", client.ListOptions{States: []client.State{client.StateStopped}}, nil},
			{"role=main", client.ListOptions{Metadata: map[string]string{"role": "main"}}, []string{main.ID}},
			{"suite=e2e,role=other", client.ListOptions{Metadata: map[string]string{"suite": "e2e", "role": "other"}}, []string{other.ID}},
			{"role=none", client.ListOptions{Metadata: map[string]string{"role": "none"}}, nil},
			{"running,role=main", client.ListOptions{States: []client.State{client.StateRunning}, Metadata: map[string]string{"role": "main"}}, []string{main.ID}},
		} {
			if got := ids(tc.opts); !sameSet(got, tc.want) {
				t.Errorf("list %s = %v, want %v", tc.name, got, tc.want)
			}
		}
		got, err := d.C.GetSandbox(ctx, main.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID != main.ID || got.State != client.StateRunning || got.Limits != limits ||
			!got.ExpiresAt.Equal(main.ExpiresAt) || got.Metadata["role"] != "main" {
			t.Errorf("get = %+v, created %+v", got, main)
		}
	})

	t.Run("timeout", func(t *testing.T) {
		before := time.Now()
		sb, err := d.C.SetTimeout(ctx, main.ID, 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if lo, hi := before.Add(10*time.Minute-2*time.Second), time.Now().Add(10*time.Minute+2*time.Second); sb.ExpiresAt.Before(lo) || sb.ExpiresAt.After(hi) {
			t.Errorf("expires_at after extending to 10m: %v, want within [%v, %v]", sb.ExpiresAt, lo, hi)
		}
		got, err := d.C.GetSandbox(ctx, main.ID)
		if err != nil || !got.ExpiresAt.Equal(sb.ExpiresAt) {
			t.Errorf("get after extending: %v, %v; want expires_at %v", got, err, sb.ExpiresAt)
		}
	})

	t.Run("exec", func(t *testing.T) { testExec(t, d, main.ID) })
	t.Run("exec stream", func(t *testing.T) { testExecStream(t, d, main.ID) })
	t.Run("files", func(t *testing.T) { testFiles(t, d, main.ID) })
	t.Run("pty", func(t *testing.T) { testPTY(t, d, main.ID) })
	t.Run("errors", func(t *testing.T) { testErrors(t, d, main.ID) })

	t.Run("delete", func(t *testing.T) {
		if err := d.C.DeleteSandbox(ctx, other.ID); err != nil {
			t.Fatalf("delete: %v", err)
		}
		got, err := d.C.GetSandbox(ctx, other.ID)
		switch {
		case errors.Is(err, client.ErrNotFound):
		case err != nil:
			t.Errorf("get after delete: %v", err)
		case got.State != client.StateStopped:
			t.Errorf("get after delete: state %q, want stopped (or 404)", got.State)
		}
		if _, err := d.C.Exec(ctx, other.ID, client.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, client.ErrConflict) && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("exec in a deleted sandbox: %v, want 409 or 404", err)
		}
		if err := d.C.DeleteSandbox(ctx, other.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("second delete: %v, want success or 404", err)
		}
		if !waitFor(5*time.Second, func() bool { return len(sandboxCgroups(other.ID)) == 0 }) {
			t.Errorf("cgroups of the deleted sandbox remain: %v", sandboxCgroups(other.ID))
		}
		if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", other.ID)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("state dir of the deleted sandbox: %v, want gone", err)
		}
		sbs, err := d.C.ListSandboxes(ctx, client.ListOptions{States: []client.State{client.StateRunning}})
		if err != nil || len(sbs) != 1 || sbs[0].ID != main.ID {
			t.Errorf("running after delete: %v %v, want only %s", sbs, err, main.ID)
		}
	})

	// Every mutation above, refused ones included, is in a valid chain.
	if err := d.C.DeleteSandbox(ctx, main.ID); err != nil {
		t.Fatalf("delete: %v", err)
	}
	d.Stop()
	recs := verifyAudit(t, e)
	count := map[string]int{}
	for _, r := range recs {
		count[r.Action+" "+r.Outcome]++
	}
	t.Logf("audit records by action and outcome: %v", count)
	if open := checkIntents(t, recs); len(open) > 0 {
		t.Errorf("after a clean stop, %d intents have no outcome, e.g. %+v", len(open), open[0])
	}
	for _, want := range []string{
		"sandbox.create ok", "sandbox.create invalid_argument", "sandbox.exec ok", "sandbox.exec invalid_argument",
		"sandbox.exec not_found", "sandbox.timeout ok", "file.write ok", "file.delete ok", "file.mkdir ok", "sandbox.pty ok",
		"sandbox.delete ok", "sandbox.create intent", "sandbox.exec intent", "file.write intent",
	} {
		if count[want] == 0 {
			t.Errorf("no audit record %q", want)
		}
	}
	if count["sandbox.create ok"] != 2 || count["sandbox.delete ok"] < 2 {
		t.Errorf("want 2 successful creates and at least 2 deletes in the audit log, got %v", count)
	}
}

func testExec(t *testing.T, d *daemon, id string) {
	for _, tc := range []struct {
		name       string
		req        client.ExecRequest
		status     string
		code       int
		stdout     string
		stderr     string
		outTrunc   bool
		maxElapsed time.Duration
	}{
		{name: "argv", req: client.ExecRequest{Cmd: []string{"echo", "hello", "wo rld"}}, status: "success", stdout: "hello wo rld\n"},
		{name: "shell", req: client.ExecRequest{Command: "echo out; echo err >&2; exit 3"}, status: "error", code: 3, stdout: "out\n", stderr: "err\n"},
		{name: "argv exit code", req: client.ExecRequest{Cmd: []string{"sh", "-c", "exit 42"}}, status: "error", code: 42},
		{name: "stdin text", req: client.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte("line one\nline two\n")}, status: "success", stdout: "line one\nline two\n"},
		{name: "stdin binary", req: client.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte{0, 1, 0xff, 0xfe, 'x'}}, status: "success", stdout: "\x00\x01\xff\xfex"},
		{name: "cwd", req: client.ExecRequest{Cmd: []string{"pwd"}, Cwd: "/tmp"}, status: "success", stdout: "/tmp\n"},
		{name: "env", req: client.ExecRequest{Command: `echo "$E2E_X"`, Env: map[string]string{"E2E_X": "y z"}}, status: "success", stdout: "y z\n"},
		{name: "default user", req: client.ExecRequest{Cmd: []string{"id", "-u"}}, status: "success", stdout: "1000\n"},
		{name: "root", req: client.ExecRequest{Cmd: []string{"id", "-u"}, User: "root"}, status: "success", stdout: "0\n"},
		{name: "not found", req: client.ExecRequest{Cmd: []string{"/no/such/binary"}}, status: "error", code: 127},
		{name: "timeout", req: client.ExecRequest{Command: "echo before; sleep 30", Timeout: time.Second}, status: "timeout", code: -1, stdout: "before\n", maxElapsed: 10 * time.Second},
		// 1 GB without a newline: tail keeps it all, past the 384 MiB
		// limit; the OOM killer's SIGKILL makes the shell exit 128+9.
		{name: "memory limit", req: client.ExecRequest{Command: "head -c 1000000000 /dev/zero | tail", Timeout: 30 * time.Second}, status: "resource_exceeded", code: 137, maxElapsed: 20 * time.Second},
		{name: "truncated", req: client.ExecRequest{Command: "head -c 3000000 /dev/zero | tr '\\0' a; echo done >&2"}, status: "success", stdout: strings.Repeat("a", 1<<20), stderr: "done\n", outTrunc: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t, time.Minute)
			t0 := time.Now()
			res, err := d.C.Exec(ctx, id, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			elapsed := time.Since(t0)
			if res.Status != tc.status || res.ExitCode != tc.code {
				t.Errorf("status %q exit %d (error %q), want %q %d", res.Status, res.ExitCode, res.Error, tc.status, tc.code)
			}
			if string(res.Stdout) != tc.stdout {
				t.Errorf("stdout = %q (%d bytes), want %q", trunc(res.Stdout), len(res.Stdout), trunc([]byte(tc.stdout)))
			}
			if tc.name != "not found" && tc.name != "memory limit" && string(res.Stderr) != tc.stderr {
				t.Errorf("stderr = %q, want %q", trunc(res.Stderr), tc.stderr)
			}
			if res.StdoutTruncated != tc.outTrunc || res.StderrTruncated {
				t.Errorf("truncated: stdout %v stderr %v, want %v false", res.StdoutTruncated, res.StderrTruncated, tc.outTrunc)
			}
			if tc.maxElapsed > 0 && elapsed > tc.maxElapsed {
				t.Errorf("took %v, want under %v", elapsed, tc.maxElapsed)
			}
			if tc.status == "timeout" && (res.Duration < time.Second || res.Signal == 0) {
				t.Errorf("timed out after %v with signal %d; want >= 1s and a signal", res.Duration, res.Signal)
			}
		})
	}
}

// testExecStream checks that streamed output arrives while the command
// runs: the command prints, then waits for a file that the test writes
// only once it has received that output.
func testExecStream(t *testing.T, d *daemon, id string) {
	ctx := ctxT(t, time.Minute)
	var stdout, stderr bytes.Buffer
	var wroteAt time.Time
	var writeErr error
	res, err := d.C.ExecStream(ctx, id, client.ExecRequest{
		Command: `echo first; echo warn >&2; while [ ! -e e2e-go ]; do sleep 0.02; done; echo second`,
		Timeout: 20 * time.Second,
	}, func(s client.Stream, data []byte) error {
		if s == client.Stderr {
			stderr.Write(data)
			return nil
		}
		stdout.Write(data)
		if wroteAt.IsZero() && strings.Contains(stdout.String(), "first\n") {
			_, writeErr = d.C.WriteFile(ctx, id, "e2e-go", strings.NewReader("go"))
			wroteAt = time.Now()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if writeErr != nil {
		t.Fatalf("writing the file the command waits for: %v", writeErr)
	}
	if wroteAt.IsZero() {
		t.Fatalf("no output arrived before the command ended (status %q)", res.Status)
	}
	if res.Status != "success" || res.ExitCode != 0 {
		t.Errorf("status %q exit %d, want success", res.Status, res.ExitCode)
	}
	if stdout.String() != "first\nsecond\n" || stderr.String() != "warn\n" {
		t.Errorf("streamed stdout %q stderr %q", stdout.String(), stderr.String())
	}
	if len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Errorf("a streamed result carries output: %q %q", res.Stdout, res.Stderr)
	}
	if err := d.C.RemoveFile(ctx, id, "e2e-go", false); err != nil {
		t.Error(err)
	}
}

// genReader yields n deterministic pseudo-random bytes without holding
// them.
type genReader struct {
	rng  *mrand.ChaCha8
	left int64
}

func newGenReader(seed byte, n int64) *genReader {
	var s [32]byte
	s[0] = seed
	return &genReader{rng: mrand.NewChaCha8(s), left: n}
}

func (g *genReader) Read(p []byte) (int, error) {
	if g.left == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > g.left {
		p = p[:g.left]
	}
	n, _ := g.rng.Read(p)
	g.left -= int64(n)
	return n, nil
}

func testFiles(t *testing.T, d *daemon, id string) {
	ctx := ctxT(t, 2*time.Minute)

	// 10 MiB of random bytes, round trip.
	data := make([]byte, 10<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	info, err := d.C.WriteFile(ctx, id, "data/rand.bin", bytes.NewReader(data))
	if err != nil {
		t.Fatalf("write 10 MiB: %v", err)
	}
	if info.Size != int64(len(data)) || info.SHA256 != hex.EncodeToString(sum[:]) || info.Type != "file" || !strings.HasSuffix(info.Path, "/data/rand.bin") {
		t.Errorf("write answered %+v", info)
	}
	back := readAll(t, d, id, "data/rand.bin")
	if !bytes.Equal(back, data) {
		t.Errorf("10 MiB round trip: read %d bytes that differ from those written", len(back))
	}

	// 100 MiB streamed from a generator while the daemon's RSS is
	// sampled: the upload must not be buffered.
	const bigSize = 100 << 20
	pid := d.Pid()
	base, err := procStatusKB(pid, "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	sampler := sampleRSS(pid, 5*time.Millisecond)
	t0 := time.Now()
	info, err = d.C.WriteFile(ctx, id, "data/big.bin", io.TeeReader(newGenReader(7, bigSize), h))
	upTook := time.Since(t0)
	peak, samples := sampler.Stop()
	if err != nil {
		t.Fatalf("write 100 MiB: %v", err)
	}
	want := hex.EncodeToString(h.Sum(nil))
	if info.Size != bigSize || info.SHA256 != want {
		t.Errorf("100 MiB write answered size %d sha256 %s, want %d %s", info.Size, info.SHA256, bigSize, want)
	}
	growth := peak - base
	t.Logf("100 MiB upload: %v (%.0f MiB/s); daemon VmRSS %d MiB before, peak %d MiB, growth %.1f MiB (%d samples)",
		upTook.Round(time.Millisecond), 100/upTook.Seconds(), base>>10, peak>>10, float64(growth)/1024, samples)
	if growth > 48<<10 {
		t.Errorf("daemon VmRSS grew by %.1f MiB during a 100 MiB upload; want < 48 MiB (streamed, not buffered)", float64(growth)/1024)
	}

	base, _ = procStatusKB(pid, "VmRSS")
	sampler = sampleRSS(pid, 5*time.Millisecond)
	t0 = time.Now()
	got, n := hashFile(t, d, id, "data/big.bin")
	downTook := time.Since(t0)
	peak, _ = sampler.Stop()
	if n != bigSize || got != want {
		t.Errorf("100 MiB read back: %d bytes sha256 %s, want %d %s", n, got, bigSize, want)
	}
	t.Logf("100 MiB download: %v (%.0f MiB/s); daemon VmRSS growth %.1f MiB",
		downTook.Round(time.Millisecond), 100/downTook.Seconds(), float64(peak-base)/1024)
	if err := d.C.RemoveFile(ctx, id, "data/big.bin", false); err != nil {
		t.Fatal(err)
	}

	// Listing.
	if _, err := d.C.WriteFile(ctx, id, "data/sub/deep/f.txt", strings.NewReader("deep")); err != nil {
		t.Fatal(err)
	}
	ents, trunc, err := d.C.ListDir(ctx, id, "data", 1)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]client.FileInfo{}
	for _, en := range ents {
		names[en.Name] = en
	}
	if len(ents) != 2 || trunc || names["rand.bin"].Size != 10<<20 || names["rand.bin"].Type != "file" || names["sub"].Type != "dir" {
		t.Errorf("list data (depth 1) = %+v, truncated %v", ents, trunc)
	}
	ents, _, err = d.C.ListDir(ctx, id, "data", 3)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, en := range ents {
		found = found || (strings.HasSuffix(en.Path, "/data/sub/deep/f.txt") && en.Size == 4)
	}
	if !found {
		t.Errorf("list data (depth 3) lacks sub/deep/f.txt: %+v", ents)
	}
	if home, _, err := d.C.ListDir(ctx, id, "", 1); err != nil || !containsName(home, "data") {
		t.Errorf("list home: %v, %v; want it to hold data", home, err)
	}

	// mkdir makes parents, an existing directory is fine, a file in the
	// way is a client error.
	dir, err := d.C.MakeDir(ctx, id, "data/made/a/b")
	if err != nil || dir.Type != "dir" || !strings.HasSuffix(dir.Path, "/data/made/a/b") {
		t.Errorf("mkdir: %+v, %v", dir, err)
	}
	if _, err := d.C.MakeDir(ctx, id, "data/made/a/b"); err != nil {
		t.Errorf("mkdir of an existing directory: %v", err)
	}
	if ents, _, err := d.C.ListDir(ctx, id, "data/made/a/b", 1); err != nil || len(ents) != 0 {
		t.Errorf("list the new directory: %+v, %v", ents, err)
	}
	var mkErr *client.APIError
	if _, err := d.C.MakeDir(ctx, id, "data/sub/deep/f.txt/x"); !errors.As(err, &mkErr) || mkErr.Status/100 != 4 {
		t.Errorf("mkdir under a file: %v, want a 4xx", err)
	}

	// Deleting.
	if err := d.C.RemoveFile(ctx, id, "data/rand.bin", false); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.ReadFile(ctx, id, "data/rand.bin"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("read after delete: %v, want 404", err)
	}
	var ae *client.APIError
	if err := d.C.RemoveFile(ctx, id, "data", false); !errors.As(err, &ae) || ae.Status < 400 || ae.Status >= 500 {
		t.Errorf("non-recursive delete of a non-empty dir: %v, want a 4xx", err)
	}
	if err := d.C.RemoveFile(ctx, id, "data", true); err != nil {
		t.Errorf("recursive delete: %v", err)
	}
	if _, _, err := d.C.ListDir(ctx, id, "data", 1); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("list after recursive delete: %v, want 404", err)
	}
}

func readAll(t *testing.T, d *daemon, id, path string) []byte {
	t.Helper()
	rc, err := d.C.ReadFile(ctxT(t, time.Minute), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b
}

func hashFile(t *testing.T, d *daemon, id, path string) (string, int64) {
	t.Helper()
	rc, err := d.C.ReadFile(ctxT(t, time.Minute), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer rc.Close()
	var h hash.Hash = sha256.New()
	n, err := io.Copy(h, rc)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n
}

func containsName(ents []client.FileInfo, name string) bool {
	for _, e := range ents {
		if e.Name == name {
			return true
		}
	}
	return false
}

// ptyOutput collects a PTY's output.
type ptyOutput struct {
	mu  sync.Mutex
	buf bytes.Buffer
	eof chan struct{}
}

func (o *ptyOutput) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor polls until s appears after offset from, or the timeout.
func (o *ptyOutput) waitFor(s string, from int, timeout time.Duration) (int, bool) {
	ok := waitFor(timeout, func() bool { return strings.Contains(o.String()[from:], s) })
	return len(o.String()), ok
}

func testPTY(t *testing.T, d *daemon, id string) {
	ctx := ctxT(t, time.Minute)
	p, err := d.C.PTY(ctx, id, client.PTYOptions{Cols: 80, Rows: 24})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := &ptyOutput{eof: make(chan struct{})}
	go func() {
		defer close(out.eof)
		buf := make([]byte, 4096)
		for {
			n, err := p.Read(buf)
			out.mu.Lock()
			out.buf.Write(buf[:n])
			out.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	send := func(s string) {
		if _, err := p.Write([]byte(s)); err != nil {
			t.Fatalf("pty write: %v", err)
		}
	}
	send("echo pty-$((6*7))\n")
	pos, ok := out.waitFor("pty-42", 0, 10*time.Second)
	if !ok {
		t.Fatalf("no echo from the terminal; output %q", out.String())
	}
	send("stty size\n")
	if pos, ok = out.waitFor("24 80", pos, 10*time.Second); !ok {
		t.Errorf("stty size before resize: output %q", out.String())
	}
	if err := p.Resize(ctx, 100, 40); err != nil {
		t.Fatal(err)
	}
	send("stty size\n")
	if _, ok = out.waitFor("40 100", pos, 10*time.Second); !ok {
		t.Errorf("stty size after resize to 100x40: output %q", out.String())
	}
	send("exit 7\n")
	ex, err := p.Wait(ctx)
	if err != nil {
		t.Fatalf("pty wait: %v", err)
	}
	if ex.ExitCode != 7 || ex.Status != "error" {
		t.Errorf("pty exit = %+v, want code 7", ex)
	}
	select {
	case <-out.eof:
	case <-time.After(10 * time.Second):
		t.Errorf("the terminal output did not end after the exit")
	}
}

func testErrors(t *testing.T, d *daemon, id string) {
	ctx := ctxT(t, time.Minute)
	before, err := d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("404", func(t *testing.T) {
		var ae *client.APIError
		if _, err := d.C.GetSandbox(ctx, unknownID); !errors.As(err, &ae) || ae.Status != 404 || ae.Code != "not_found" {
			t.Errorf("get unknown: %v, want 404 not_found", err)
		}
		if _, err := d.C.Exec(ctx, unknownID, client.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("exec in unknown: %v, want 404", err)
		}
		if err := d.C.DeleteSandbox(ctx, unknownID); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("delete unknown: %v, want 404", err)
		}
		if _, err := d.C.ReadFile(ctx, id, "no/such/file"); !errors.Is(err, client.ErrNotFound) {
			t.Errorf("read missing file: %v, want 404", err)
		}
		if r := raw(t, d, "GET", "/v1/nope", d.Key, ""); r.Status != 404 || r.Code != "not_found" {
			t.Errorf("unknown route: %d %q", r.Status, r.Code)
		}
	})

	t.Run("401", func(t *testing.T) {
		bad, err := client.New(d.URL, "al_notakey_0000000000000000")
		if err != nil {
			t.Fatal(err)
		}
		var ae *client.APIError
		if _, err := bad.ListSandboxes(ctx, client.ListOptions{}); !errors.As(err, &ae) || ae.Status != 401 || ae.Code != "unauthenticated" {
			t.Errorf("list with a bad key: %v, want 401 unauthenticated", err)
		}
		if _, err := bad.Exec(ctx, id, client.ExecRequest{Cmd: []string{"true"}}); !errors.Is(err, client.ErrUnauthorized) {
			t.Errorf("exec with a bad key: %v, want 401", err)
		}
		if r := raw(t, d, "GET", "/v1/sandboxes", "", ""); r.Status != 401 || r.Code != "unauthenticated" {
			t.Errorf("no key: %d %q", r.Status, r.Code)
		}
		if r := raw(t, d, "POST", "/v1/sandboxes", d.Key+"x", "{}"); r.Status != 401 {
			t.Errorf("altered key: %d %q", r.Status, r.Code)
		}
	})

	t.Run("400", func(t *testing.T) {
		sb := "/v1/sandboxes/" + id
		for _, tc := range []struct{ method, path, body string }{
			{"POST", "/v1/sandboxes", `{"limits":{"cpus":-1}}`},
			{"POST", "/v1/sandboxes", `{"limits":{"memory_mb":-5}}`},
			{"POST", "/v1/sandboxes", `{"timeout_s":-1}`},
			{"POST", "/v1/sandboxes", `{"bogus":1}`},
			{"POST", "/v1/sandboxes", `{"template":`},
			{"POST", "/v1/sandboxes", `{"env":{"1BAD":"x"}}`},
			{"GET", "/v1/sandboxes?state=bogus", ""},
			{"GET", "/v1/sandboxes?color=red", ""},
			{"GET", "/v1/sandboxes/not-an-id", ""},
			{"POST", sb + "/exec", `{}`},
			{"POST", sb + "/exec", `{"cmd":["true"],"command":"true"}`},
			{"POST", sb + "/exec", `{"cmd":["true"],"timeout_s":-1}`},
			{"POST", sb + "/exec", `{"cmd":["true"],"user":"admin"}`},
			{"POST", sb + "/exec", `{"cmd":[""]}`},
			{"POST", sb + "/timeout", `{"timeout_s":0}`},
			{"GET", sb + "/files", ""},
			{"GET", sb + "/files?path=/etc&path=/tmp", ""},
			{"GET", sb + "/files?path=/etc", ""}, // a directory
			{"GET", sb + "/files/list?path=/etc&depth=99", ""},
		} {
			if r := raw(t, d, tc.method, tc.path, d.Key, tc.body); r.Status != 400 || r.Code != "invalid_argument" {
				t.Errorf("%s %s %s: %d %q %s, want 400 invalid_argument", tc.method, tc.path, tc.body, r.Status, r.Code, trunc(r.Body))
			}
		}
		after, err := d.C.ListSandboxes(ctx, client.ListOptions{})
		if err != nil || len(after) != len(before) {
			t.Errorf("refused creates changed the sandboxes: %d before, %d after (%v)", len(before), len(after), err)
		}
	})
}

// verifyAudit opens the stopped (or killed) daemon's store, checks the
// audit chain and returns every record.
func verifyAudit(t *testing.T, e *env) []store.AuditRecord {
	t.Helper()
	ctx := ctxT(t, time.Minute)
	st, err := sqlitestore.Open(ctx, filepath.Join(e.dir, "airlock.db"), sqlitestore.Options{})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	defer st.Close()
	rep, err := audit.Verify(ctx, st)
	if err != nil {
		t.Fatalf("audit verify: %v", err)
	}
	if !rep.OK {
		t.Errorf("audit chain: %v", rep.Err())
	}
	var recs []store.AuditRecord
	var after uint64
	for {
		page, err := st.ListAudit(ctx, store.AuditQuery{AfterSeq: after, Limit: store.MaxListLimit})
		if err != nil {
			t.Fatalf("list audit: %v", err)
		}
		recs = append(recs, page...)
		if len(page) < store.MaxListLimit {
			break
		}
		after = page[len(page)-1].Seq
	}
	if uint64(len(recs)) != rep.Checked {
		t.Errorf("audit: %d records stored, %d verified", len(recs), rep.Checked)
	}
	return recs
}

// readLog returns daemon n's log.
func readLog(e *env, n int) string {
	b, _ := os.ReadFile(e.logPath(n))
	return string(b)
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustExec runs req and fails the test unless it ran (any exit).
func mustExec(t *testing.T, d *daemon, id string, req client.ExecRequest) *client.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := d.C.Exec(ctx, id, req)
	if err != nil {
		t.Fatalf("exec %v%s in %s: %v", req.Cmd, req.Command, id, err)
	}
	return res
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	m := map[string]int{}
	for _, s := range a {
		m[s]++
	}
	for _, s := range b {
		m[s]--
	}
	for _, v := range m {
		if v != 0 {
			return false
		}
	}
	return true
}

// trunc shortens b for messages.
func trunc(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}
