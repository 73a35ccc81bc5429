package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/interp"
)

// countingAudit takes every event (the CLI tests do not read the log).
type countingAudit struct{ n atomic.Uint64 }

func (a *countingAudit) AppendRecord(ctx context.Context, ev audit.Event) (audit.Record, error) {
	return audit.Record{Seq: a.n.Add(1)}, nil
}

// newCodeCLIEnv is the CLI environment with the code interpreter on.
func newCodeCLIEnv(t *testing.T) *cliEnv {
	t.Helper()
	for _, bin := range []string{"python3", "bash"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed", bin)
		}
	}
	e := newCLIEnv(t)
	m, err := interp.New(interp.Config{Sandboxes: e.mgr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	h, err := api.New(api.Config{Sandboxes: e.mgr, Auth: e.auth, Audit: &countingAudit{}, Code: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	e.srv = srv
	e.env[envURL] = srv.URL
	return e
}

func TestCLICode(t *testing.T) {
	e := newCodeCLIEnv(t)
	id := e.create()
	e.ok("", "code", id, "-c", "x = 41")
	if r := e.ok("", "code", id, "-c", "print('out'); x + 1"); r.stdout != "out\n42\n" {
		t.Errorf("python: %q", r.stdout)
	}
	// Code from standard input and from a file; flags before the ID.
	if r := e.ok("print(x * 2)\n", "code", id); r.stdout != "82\n" {
		t.Errorf("stdin: %q", r.stdout)
	}
	f := filepath.Join(t.TempDir(), "cell.py")
	if err := os.WriteFile(f, []byte("x - 1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.ok("", "code", "-f", f, id); r.stdout != "40\n" {
		t.Errorf("file: %q", r.stdout)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{"exception", []string{"-c", "1/0"}, 1, "", "ZeroDivisionError: division by zero"},
		{"bash exit status", []string{"--lang", "bash", "-c", "echo hi; exit 3"}, 3, "hi\n", "exit status 3"},
		{"bash ok", []string{"-l", "sh", "-e", "V=v", "-c", "echo $V"}, 0, "v\n", ""},
		{"timeout", []string{"--timeout", "1s", "-c", "while True: pass"}, 124, "", "KeyboardInterrupt"},
		{"x survived", []string{"-c", "x"}, 0, "41\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.run("", append([]string{"code", id}, tt.args...)...)
			if r.code != tt.code || r.stdout != tt.stdout || !strings.Contains(r.stderr, tt.stderr) {
				t.Errorf("code %d stdout %q stderr %q (err %v), want %d %q %q", r.code, r.stdout, r.stderr, r.err, tt.code, tt.stdout, tt.stderr)
			}
		})
	}
	// --json.
	r := e.ok("", "code", id, "--json", "-c", "display('a')\nx")
	var doc struct {
		Status  string `json:"status"`
		Results []struct {
			IsMain bool   `json:"is_main_result"`
			Text   string `json:"text"`
		} `json:"results"`
		Error *struct{} `json:"error"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || doc.Status != "ok" || len(doc.Results) != 2 ||
		doc.Results[1].Text != "41" || !doc.Results[1].IsMain || doc.Error != nil {
		t.Errorf("--json: %s (%v)", r.stdout, err)
	}
	if r := e.run("", "code", id, "--json", "-c", "raise ValueError('v')"); r.code != 1 || !strings.Contains(r.stdout, `"name": "ValueError"`) {
		t.Errorf("--json error: %d %s", r.code, r.stdout)
	}
	// Ctrl-C: 130, as the help says.
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(500*time.Millisecond, cancel)
	if r := e.runCtx(ctx, strings.NewReader(""), "code", id, "-c", "import time; time.sleep(30)"); r.code != exitInterrupted {
		t.Errorf("interrupted cell: code %d (%v), want %d", r.code, r.err, exitInterrupted)
	}
	// Usage errors and a missing sandbox.
	for _, args := range [][]string{{"code"}, {"code", id, "-c", "1", "-f", f}, {"code", id, "other"}} {
		if r := e.run("", args...); r.code != 2 {
			t.Errorf("%v: code %d, want 2", args, r.code)
		}
	}
	if r := e.run("", "code", "sb-aaaaaaaaaaaaaaaa", "-c", "1"); r.code != 125 || !strings.Contains(r.err.Error(), "not found") {
		t.Errorf("missing sandbox: %+v", r)
	}
	if r := e.run("", "code", id, "--context", "ctx-aaaaaaaaaaaaaaaa", "-c", "1"); r.code != 125 {
		t.Errorf("missing context: %+v", r)
	}
}

func TestCLICodeREPL(t *testing.T) {
	e := newCodeCLIEnv(t)
	id := e.create()
	cl := func() *cli {
		return &cli{getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client(), url: e.env[envURL]}
	}
	c := cl()
	var out, errb bytes.Buffer
	c.stdin = strings.NewReader("y = 2\n\ndef f(a):\n    return a * y\n\nf(21)\n1/0\nprint('end')\n")
	c.stdout, c.stderr = &out, &errb
	cl2, err := c.client()
	if err != nil {
		t.Fatal(err)
	}
	code, err := c.codeREPL(context.Background(), cl2, id, client.RunCodeRequest{Language: client.LangPython})
	if code != 0 || err != nil {
		t.Fatalf("repl: %d %v; stderr %s", code, err, errb.String())
	}
	if out.String() != "42\nend\n" || !strings.Contains(errb.String(), "ZeroDivisionError") || !strings.Contains(errb.String(), ">>> ") {
		t.Errorf("repl stdout %q stderr %q", out.String(), errb.String())
	}
	if !opensBlock("for i in x:") || !opensBlock("function f() {") || opensBlock("x = 1") {
		t.Error("opensBlock")
	}
}

func TestCLICodeImages(t *testing.T) {
	// A sandbox's PATH, whose python3 is the host template's
	// /usr/bin/python3, where this machine's PATH puts another one first
	// (pyenv's): the fake runtime runs kernels with the test's PATH.
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		t.Setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
	}
	if exec.Command("python3", "-c", "import matplotlib").Run() != nil {
		t.Skip("python3-matplotlib is not installed")
	}
	e := newCodeCLIEnv(t)
	id := e.create()
	r := e.ok("", "code", id, "-c", "import matplotlib.pyplot as plt\nplt.figure(figsize=(3, 2), dpi=100)\nplt.plot([1, 2])")
	if !strings.Contains(r.stdout, "[image/png, 300x200, ") {
		t.Errorf("figure: %q", r.stdout)
	}
}
