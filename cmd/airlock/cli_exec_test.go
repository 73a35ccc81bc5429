package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

func TestCLIExecExitCodes(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stdout string
		errHas string
	}{
		{"success", []string{"--", "echo", "hi"}, "", 0, "hi\n", ""},
		{"exit 3", []string{"--", "sh", "-c", "exit 3"}, "", 3, "", ""},
		{"no --", []string{"sh", "-c", "exit 4"}, "", 4, "", ""},
		{"signal", []string{"--", "sh", "-c", "kill -TERM $$"}, "", 128 + 15, "", ""},
		{"kill -9", []string{"--", "sh", "-c", "kill -KILL $$"}, "", 128 + 9, "", ""},
		{"not found", []string{"--", "no-such-command-xyz"}, "", 125, "", "no-such-command-xyz"},
		{"stdin", []string{"--", "cat"}, "piped\x00input", 0, "piped\x00input", ""},
		{"no stdin", []string{"-n", id, "--", "cat"}, "ignored", 0, "", ""},
		{"env", []string{"-e", "FOO=bar", id, "--", "sh", "-c", "echo $FOO"}, "", 0, "bar\n", ""},
		{"flags after id", []string{"-e", "FOO=x", "--", "sh", "-c", "echo $FOO"}, "", 0, "x\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"exec", id}, tt.args...)
			if tt.args[0] == "-n" || (tt.args[0] == "-e" && tt.args[2] == id) {
				args = append([]string{"exec"}, tt.args...)
			}
			r := e.run(tt.stdin, args...)
			if r.code != tt.code || r.stdout != tt.stdout {
				t.Errorf("code %d stdout %q (err %v), want %d %q", r.code, r.stdout, r.err, tt.code, tt.stdout)
			}
			if tt.errHas != "" && (r.err == nil || !strings.Contains(r.err.Error(), tt.errHas)) {
				t.Errorf("err %v, want one naming %q", r.err, tt.errHas)
			}
		})
	}
	// A timeout is 124, with a message.
	start := time.Now()
	r := e.run("", "exec", "--timeout", "1", id, "--", "sleep", "30")
	if r.code != 124 || r.err == nil || !strings.Contains(r.err.Error(), "timed out") || time.Since(start) > 20*time.Second {
		t.Errorf("timeout: %+v after %v", r, time.Since(start))
	}
	// The working directory and stdin over the cap.
	if r := e.ok("", "exec", "-w", "/tmp", id, "--", "pwd"); !strings.HasSuffix(strings.TrimSpace(r.stdout), "/tmp") {
		t.Errorf("-w /tmp: pwd is %q", r.stdout)
	}
	if r := e.run(strings.Repeat("x", maxStdinBytes+1), "exec", id, "--", "cat"); r.code != 125 || !strings.Contains(r.err.Error(), "512 KiB") {
		t.Errorf("oversized stdin: code %d err %v", r.code, r.err)
	}
	// A missing sandbox cannot run anything: 125.
	if r := e.run("", "exec", "sb-aaaaaaaaaaaaaaaa", "--", "true"); r.code != 125 || !strings.Contains(r.err.Error(), "not found") {
		t.Errorf("exec in a missing sandbox: %+v", r)
	}
}

// timedWriter records when it was first written to.
type timedWriter struct {
	syncBuffer
	first time.Time
}

func (w *timedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	if w.first.IsZero() {
		w.first = time.Now()
	}
	w.mu.Unlock()
	return w.syncBuffer.Write(p)
}

func TestCLIExecStreams(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	// stdout and stderr into one writer keep their order, and output
	// arrives while the command still runs.
	var out timedWriter
	c := &cli{stdout: &out, stderr: &out, getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client()}
	code, err := c.main(context.Background(), []string{"exec", "-n", id, "--", "sh", "-c",
		"echo one; sleep 0.2; echo two >&2; sleep 0.2; echo three; sleep 1"})
	end := time.Now()
	if code != 0 || err != nil {
		t.Fatalf("code %d, err %v", code, err)
	}
	if got := out.String(); got != "one\ntwo\nthree\n" {
		t.Errorf("combined output %q", got)
	}
	if end.Sub(out.first) < 800*time.Millisecond {
		t.Errorf("first output came %v before the end; want it streamed", end.Sub(out.first))
	}
	// Binary output passes unchanged.
	r := e.ok("", "exec", id, "--", "printf", `\377\000\001`)
	if r.stdout != "\xff\x00\x01" {
		t.Errorf("binary output %q", r.stdout)
	}
}

// live returns the sandboxes that are not stopped.
func (e *cliEnv) live() []sandbox.Sandbox {
	return e.mgr.List(sandbox.Filter{States: []sandbox.State{sandbox.StateCreating, sandbox.StateRunning, sandbox.StateStopping, sandbox.StateFailed}})
}

func TestCLIRun(t *testing.T) {
	e := newCLIEnv(t)
	r := e.run("", "run", "-t", "host", "-e", "X=5", "--", "sh", "-c", "echo out $X; echo err >&2; exit 5")
	if r.code != 5 || r.stdout != "out 5\n" || r.stderr != "err\n" {
		t.Errorf("run: %+v", r)
	}
	if n := len(e.live()); n != 0 {
		t.Errorf("%d sandboxes left after run", n)
	}
	if r := e.run("", "run", "no-such-command-xyz"); r.code != 125 || len(e.live()) != 0 {
		t.Errorf("run of a missing command: code %d, %d sandboxes left", r.code, len(e.live()))
	}
	if r := e.run("data", "run", "--", "cat"); r.code != 0 || r.stdout != "data" {
		t.Errorf("run with stdin: %+v", r)
	}
	// Interrupted: the command is killed and the sandbox destroyed.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	start := time.Now()
	r = e.runCtx(ctx, strings.NewReader(""), "run", "--", "sleep", "30")
	if r.code != exitInterrupted || time.Since(start) > 15*time.Second {
		t.Errorf("interrupted run: %+v after %v", r, time.Since(start))
	}
	if n := len(e.live()); n != 0 {
		t.Errorf("%d sandboxes left after an interrupted run", n)
	}
	if len(e.mgr.List(sandbox.Filter{})) == 0 {
		t.Error("no sandbox was ever created")
	}
}

func TestCLICopy(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	dir := t.TempDir()
	blob := make([]byte, 300<<10)
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	for i := range 256 {
		blob[i] = byte(i)
	}
	src := filepath.Join(dir, "blob.bin")
	if err := os.WriteFile(src, blob, 0o600); err != nil {
		t.Fatal(err)
	}

	// Host to sandbox and back, a file.
	e.ok("", "cp", src, id+":/data/blob.bin")
	back := filepath.Join(dir, "back.bin")
	e.ok("", "cp", id+":/data/blob.bin", back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, blob) {
		t.Errorf("round trip changed the file (%d bytes back)", len(got))
	}
	// Into an existing directory, both ways.
	e.ok("", "cp", src, id+":/data/")
	e.ok("", "cp", src, id+":/tmp")
	outDir := filepath.Join(dir, "out")
	if err := os.Mkdir(outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.ok("", "cp", id+":/tmp/blob.bin", outDir)
	if got, _ := os.ReadFile(filepath.Join(outDir, "blob.bin")); !bytes.Equal(got, blob) {
		t.Errorf("download into a directory: %d bytes", len(got))
	}
	// Standard input and output.
	e.ok(string(blob), "cp", "-", id+":rel/stdin.bin")
	if r := e.ok("", "cp", id+":rel/stdin.bin", "-"); r.stdout != string(blob) {
		t.Errorf("stdin to stdout: %d bytes", len(r.stdout))
	}
	// A missing file fails and leaves nothing behind.
	r := e.run("", "cp", id+":/nope", filepath.Join(dir, "nope"))
	if r.code != 1 || r.err == nil || !strings.Contains(r.err.Error(), "nope") {
		t.Errorf("download of a missing file: %+v", r)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 3 {
		t.Errorf("host dir after a failed download: %v", entries)
	}

	// A directory tree, up and down again.
	tree := filepath.Join(dir, "tree")
	for p, content := range map[string]string{"a.txt": "A", "sub/b.bin": "\x00\xffB", "sub/deep/c": "C"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(tree, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tree, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(tree, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	r = e.ok("", "cp", tree, id+":/up")
	if !strings.Contains(r.stderr, "copied 3 files") || !strings.Contains(r.stderr, "1 empty directories") || !strings.Contains(r.stderr, "skipped") {
		t.Errorf("upload of a tree: stderr %q", r.stderr)
	}
	if r := e.ok("", "cp", id+":/up/sub/b.bin", "-"); r.stdout != "\x00\xffB" {
		t.Errorf("uploaded tree content %q", r.stdout)
	}
	down := filepath.Join(dir, "down")
	e.ok("", "cp", id+":/up", down)
	for p, want := range map[string]string{"a.txt": "A", "sub/b.bin": "\x00\xffB", "sub/deep/c": "C"} {
		if got, err := os.ReadFile(filepath.Join(down, p)); err != nil || string(got) != want {
			t.Errorf("downloaded %s: %q, %v", p, got, err)
		}
	}
	// Into an existing directory: the tree goes under its own name.
	e.ok("", "cp", tree, id+":/up")
	if r := e.ok("", "cp", id+":/up/tree/a.txt", "-"); r.stdout != "A" {
		t.Errorf("upload into an existing directory: %q", r.stdout)
	}
}

func TestCLIShell(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	var out syncBuffer
	c := &cli{stdin: strings.NewReader("echo hi-$((6*7))\nexit 7\n"), stdout: &out, stderr: io.Discard,
		getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := c.main(ctx, []string{"shell", id})
	if code != 7 || err != nil || !strings.Contains(out.String(), "hi-42") {
		t.Errorf("shell: code %d, err %v, output %q", code, err, out.String())
	}
	// Input that ends without exit: end of file ends the shell.
	c.stdin, out = strings.NewReader("true\n"), syncBuffer{}
	c.stdout = &out
	if code, err := c.main(ctx, []string{"shell", id}); code != 0 || err != nil {
		t.Errorf("shell ended by EOF: code %d, err %v", code, err)
	}
	if code, err := c.main(ctx, []string{"shell", "sb-aaaaaaaaaaaaaaaa"}); code != 125 || err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("shell in a missing sandbox: %d %v", code, err)
	}
}

// A listing that names paths outside the copied directory is refused
// before anything is written.
func TestCLIDownloadTreeStaysInside(t *testing.T) {
	for _, entries := range [][]client.FileInfo{
		{{Path: "/up/a", Type: "file"}, {Path: "/up/../../escaped", Type: "file"}},
		{{Path: "/up/a", Type: "file"}, {Path: "/elsewhere/b", Type: "file"}},
		{{Path: "/up/a", Type: "dir"}, {Path: "/up/", Type: "file"}},
	} {
		dst := filepath.Join(t.TempDir(), "dst")
		c := &cli{stdout: io.Discard, stderr: io.Discard}
		// A nil client: any download would panic.
		if err := c.downloadTree(context.Background(), nil, "sb-x", entries, dst, nil); err == nil {
			t.Errorf("listing %+v was accepted", entries)
		}
		if got, _ := os.ReadDir(dst); len(got) != 0 {
			t.Errorf("listing %+v wrote %v", entries, got)
		}
	}
}
