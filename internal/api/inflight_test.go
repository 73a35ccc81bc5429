package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/interp"
)

func TestInflightAcquire(t *testing.T) {
	f := newInflight(Limits{MaxInflightPerSandbox: 2, MaxInflightPerKey: 3, InflightMemory: 100})
	var releases []func()
	take := func(sb, key string, cost int64, wantErr string) {
		t.Helper()
		rel, err := f.acquire(sb, key, cost)
		switch {
		case wantErr == "" && err != nil:
			t.Fatalf("acquire %s/%s/%d: %v", sb, key, cost, err)
		case wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr) || !errors.Is(err, errdefs.ErrResourceExhausted)):
			t.Fatalf("acquire %s/%s/%d = %v, want resource exhausted %q", sb, key, cost, err, wantErr)
		case err == nil:
			releases = append(releases, rel)
		}
	}
	take("s1", "k1", 10, "")
	take("s1", "k2", 10, "")
	take("s1", "k3", 10, "sandbox s1 already has 2")
	take("s2", "k1", 10, "")
	take("s3", "k1", 10, "")
	take("s4", "k1", 10, "this API key already has 3")
	take("s4", "k4", 61, "as much exec output in flight")
	take("s4", "k4", 60, "")
	if n, mem := f.usage(); n != 5 || mem != 100 {
		t.Fatalf("usage %d requests, %d bytes; want 5, 100", n, mem)
	}
	releases[0]() // s1/k1
	releases[0]() // a second call changes nothing
	if n, mem := f.usage(); n != 4 || mem != 90 {
		t.Fatalf("after one release: %d requests, %d bytes; want 4, 90", n, mem)
	}
	take("s1", "k1", 10, "") // both its sandbox and its key have room again
	for _, rel := range releases {
		rel()
	}
	if n, mem := f.usage(); n != 0 || mem != 0 || len(f.sandboxes) != 0 || len(f.keys) != 0 {
		t.Fatalf("after every release: %d requests, %d bytes, maps %v %v", n, mem, f.sandboxes, f.keys)
	}
}

// blockingRunner is a CodeRunner whose cells run until release is closed.
type blockingRunner struct {
	CodeRunner
	release chan struct{}
}

func (b *blockingRunner) Run(ctx context.Context, sandboxID string, req interp.RunRequest, emit func(interp.Event) error) error {
	select {
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return emit(interp.Event{Type: interp.EventEnd, End: &interp.End{ContextID: "ctx", Language: interp.Bash, Status: interp.StatusOK}})
}

// waitFile is a command that runs until the file path exists.
func waitFile(path string) string {
	return `while [ ! -e ` + path + ` ]; do sleep 0.02; done`
}

// TestInflightCaps checks the caps per sandbox and per key over every
// kind of request that holds an agent stream, the 429 they get, and that
// finished requests make room again.
func TestInflightCaps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runner := &blockingRunner{release: make(chan struct{})}
	e := newTestEnv(t, func(cfg *Config) {
		cfg.Limits.MaxInflightPerSandbox = 2
		cfg.Limits.MaxInflightPerKey = 3
		cfg.Code = runner
	})
	a := e.client(keyA)
	sb1, sb2 := e.sandbox(ctx), e.sandbox(ctx)
	flag := t.TempDir() + "/go" // the fake runtime runs commands on the host
	var wg sync.WaitGroup
	defer wg.Wait()
	defer os.WriteFile(flag, nil, 0o600)
	defer close(runner.release)
	hold := func(what func() error) {
		wg.Go(func() {
			if err := what(); err != nil {
				t.Errorf("a request holding a slot failed: %v", err)
			}
		})
	}
	waitInflight := func(n int) {
		t.Helper()
		waitUntil(t, 10*time.Second, "requests in flight", func() bool { got, _ := e.h.inflight.usage(); return got == n })
	}
	// sb1: a streamed exec and a code cell fill the sandbox.
	hold(func() error {
		_, err := a.ExecStream(ctx, sb1.ID, client.ExecRequest{Command: waitFile(flag)}, nil)
		return err
	})
	hold(func() error {
		_, err := a.RunCode(ctx, sb1.ID, client.RunCodeRequest{Language: "bash", Code: "true"})
		return err
	})
	waitInflight(2)
	e.audit.take()

	body := `{"command":"true","env":{"K":"v"}}`
	resp, b := e.do("POST", "/v1/sandboxes/"+sb1.ID+"/exec", keyA, "application/json", []byte(body))
	if resp.StatusCode != 429 || errCode(t, b) != CodeResourceExhausted || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(b), "sandbox "+sb1.ID+" already has 2 execs") {
		t.Errorf("exec over the sandbox's cap: %d %s %v", resp.StatusCode, b, resp.Header)
	}
	ev := oneEvent(t, e)
	checkEvent(t, ev, ActionSandboxExec, sb1.ID, CodeResourceExhausted, map[string]any{"command": "true", "env": "K"})
	if _, err := a.Exec(ctx, sb1.ID, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("buffered exec over the sandbox's cap: %v, want ErrQuotaExceeded", err)
	}
	if _, err := a.ExecStream(ctx, sb1.ID, client.ExecRequest{Command: "true"}, nil); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("streamed exec over the sandbox's cap: %v, want ErrQuotaExceeded", err)
	}
	if _, err := a.RunCode(ctx, sb1.ID, client.RunCodeRequest{Language: "bash", Code: "true"}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("code cell over the sandbox's cap: %v, want ErrQuotaExceeded", err)
	}
	if p, err := a.PTY(ctx, sb1.ID, client.PTYOptions{Command: "true"}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("PTY over the sandbox's cap: %v, want ErrQuotaExceeded", err)
		if p != nil {
			p.Close()
		}
	}

	// sb2: one more request fills the key.
	hold(func() error {
		_, err := a.Exec(ctx, sb2.ID, client.ExecRequest{Command: waitFile(flag)})
		return err
	})
	waitInflight(3)
	resp, b = e.do("POST", "/v1/sandboxes/"+sb2.ID+"/exec", keyA, "application/json", []byte(`{"command":"true"}`))
	if resp.StatusCode != 429 || errCode(t, b) != CodeResourceExhausted || resp.Header.Get("Retry-After") != "1" ||
		!strings.Contains(string(b), "this API key already has 3 execs") {
		t.Errorf("exec over the key's cap: %d %s %v", resp.StatusCode, b, resp.Header)
	}
	// Another key has room on sb2.
	if res, err := e.client(keyWithout(auth.ScopeFiles)).Exec(ctx, sb2.ID, client.ExecRequest{Command: "echo other"}); err != nil || string(res.Stdout) != "other\n" {
		t.Errorf("another key's exec: %+v, %v", res, err)
	}

	// Once they finish, their slots are free again.
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	runner.release <- struct{}{}
	waitInflight(0)
	if res, err := a.Exec(ctx, sb1.ID, client.ExecRequest{Command: "echo again"}); err != nil || string(res.Stdout) != "again\n" {
		t.Errorf("exec after the others finished: %+v, %v", res, err)
	}
}

// TestInflightMemory checks the daemon-wide reservation: a buffered exec
// reserves its two full output buffers, a stream its agent window, and a
// request that does not fit is refused.
func TestInflightMemory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const out = 64 << 10
	cost := 5*int64(out)/2 + requestOverhead
	e := newTestEnv(t, func(cfg *Config) {
		cfg.Limits.MaxOutputBytes = out
		cfg.Limits.InflightMemory = cost + cost/2
	})
	a := e.client(keyA)
	sb1, sb2 := e.sandbox(ctx), e.sandbox(ctx)
	flag := t.TempDir() + "/go"
	var wg sync.WaitGroup
	defer wg.Wait()
	defer os.WriteFile(flag, nil, 0o600)
	wg.Go(func() {
		res, err := a.Exec(ctx, sb1.ID, client.ExecRequest{Command: "head -c 200000 /dev/zero; " + waitFile(flag)})
		if err != nil || len(res.Stdout) != out || !res.StdoutTruncated {
			t.Errorf("the exec holding memory: %v, %d bytes of output", err, len(res.Stdout))
		}
	})
	waitUntil(t, 10*time.Second, "the exec to be admitted", func() bool {
		_, mem := e.h.inflight.usage()
		return mem > cost && mem < cost+1024 // its output and its request
	})

	for _, stream := range []bool{false, true} {
		accept := ""
		if stream {
			accept = ndjsonType
		}
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/sandboxes/"+sb2.ID+"/exec", strings.NewReader(`{"command":"true"}`))
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Accept", accept)
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body bytes.Buffer
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 429 || errCode(t, body.Bytes()) != CodeResourceExhausted ||
			!strings.Contains(body.String(), "exec output in flight") || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("stream=%v over the memory cap: %d %s", stream, resp.StatusCode, body.String())
		}
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the reservation to be released", func() bool { _, mem := e.h.inflight.usage(); return mem == 0 })
	if _, err := a.Exec(ctx, sb2.ID, client.ExecRequest{Command: "true"}); err != nil {
		t.Errorf("exec after the memory was released: %v", err)
	}
	// The request's own bytes count: a stdin that the budget's rest does
	// not hold is refused although the output buffers alone would fit.
	big := bytes.Repeat([]byte("y"), int(cost))
	if _, err := a.Exec(ctx, sb2.ID, client.ExecRequest{Command: "cat >/dev/null", Stdin: big}); !errors.Is(err, client.ErrQuotaExceeded) {
		t.Errorf("exec with %d bytes of stdin over a budget of %d: %v, want ErrQuotaExceeded", len(big), cost+cost/2, err)
	}
}

func TestCapBuffer(t *testing.T) {
	const max = 100 << 10
	b := &capBuffer{max: max}
	chunk := bytes.Repeat([]byte("0123456789abcdef"), 4096/16*3) // 12 KiB
	var want []byte
	for range 20 {
		if n, err := b.Write(chunk); n != len(chunk) || err != nil {
			t.Fatalf("Write = %d, %v", n, err)
		}
		want = append(want, chunk...)
		if cap(b.buf) > max {
			t.Fatalf("the buffer grew to %d bytes, past its cap of %d", cap(b.buf), max)
		}
	}
	if !b.truncated || !bytes.Equal(b.buf, want[:max]) {
		t.Fatalf("kept %d bytes (truncated %v), want the first %d", len(b.buf), b.truncated, max)
	}
	small := &capBuffer{max: max}
	_, _ = small.Write([]byte("hi"))
	if small.truncated || string(small.buf) != "hi" {
		t.Errorf("small output: %q truncated %v", small.buf, small.truncated)
	}
}

// TestWriteExecResult checks that the chunked encoding of a buffered
// exec's result decodes to the same document as encoding it whole.
func TestWriteExecResult(t *testing.T) {
	nasty := strings.Repeat("\x01<&>\"\\\u2028é日本🙂\t\n", 3000) // escapes and multi-byte characters across chunk ends
	tests := []struct {
		name           string
		stdout, stderr []byte
	}{
		{"empty", nil, nil},
		{"text", []byte("hello\n"), []byte("warn\n")},
		{"escapes across chunks", []byte(nasty), []byte(nasty[1:])},
		{"binary", []byte{0xff, 0xfe, 0, 1, 2}, bytes.Repeat([]byte{0x80, 'a'}, 40000)},
		{"text cut inside a character", []byte("ab\xe6\x97"), []byte("ok")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c := &call{h: &Handler{lim: Limits{}.withDefaults()}, w: &statusWriter{ResponseWriter: rec}}
			out := wire.ExecResult{Status: "success", DurationMS: 5, StdoutTruncated: true}
			if err := c.writeExecResult(out, tt.stdout, tt.stderr); err != nil {
				t.Fatal(err)
			}
			if rec.Code != 200 || rec.Header().Get("Content-Type") != "application/json" || !strings.HasSuffix(rec.Body.String(), "}\n") {
				t.Fatalf("response %d %v", rec.Code, rec.Header())
			}
			var got map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("not JSON: %v\n%.300s", err, rec.Body.String())
			}
			whole := out
			whole.Stdout, whole.StdoutB64 = encodeWhole(tt.stdout)
			whole.Stderr, whole.StderrB64 = encodeWhole(tt.stderr)
			wb, _ := json.Marshal(whole)
			var want map[string]any
			_ = json.Unmarshal(wb, &want)
			gb, _ := json.Marshal(got)
			wb, _ = json.Marshal(want)
			if !bytes.Equal(gb, wb) {
				t.Errorf("chunked encoding decodes to\n%.300s\nwant\n%.300s", gb, wb)
			}
		})
	}
}

// encodeWhole is the output's encoding as one string: text, or the
// bytes that encoding/json writes in standard base64.
func encodeWhole(b []byte) (text *string, b64 []byte) {
	if utf8.Valid(b) {
		s := string(b)
		return &s, nil
	}
	return nil, b
}

// TestExecAuditInput checks that an exec's audit record carries the
// digest and size of its stdin and its environment's names and digest,
// never the values.
func TestExecAuditInput(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	e.audit.take()

	const secret = "s3cr3t-token-value"
	payload := []byte("echo pwned > /tmp/x\n")
	sum := sha256.Sum256(payload)
	env := map[string]string{"TOKEN": secret, "A": "1"}
	envSum := sha256.Sum256([]byte("A=1\x00TOKEN=" + secret + "\x00"))
	want := map[string]any{
		"command":      `["sh","-c","cat"]`,
		"stdin_sha256": hex.EncodeToString(sum[:]),
		"stdin_bytes":  len(payload),
		"env":          "A,TOKEN",
		"env_sha256":   hex.EncodeToString(envSum[:]),
	}
	check := func(stream bool) {
		t.Helper()
		evs := e.audit.take()
		if len(evs) != 2 {
			t.Fatalf("stream=%v: %d events, want an intent and an outcome", stream, len(evs))
		}
		for _, ev := range evs {
			checkEvent(t, ev, ActionSandboxExec, sb.ID, ev.Outcome, want)
			if b, _ := json.Marshal(ev.Details); bytes.Contains(b, []byte(secret)) {
				t.Errorf("stream=%v: the audit record holds an environment value: %s", stream, b)
			}
		}
		if evs[0].Outcome != audit.OutcomeIntent || evs[1].Outcome != "ok" {
			t.Errorf("stream=%v: outcomes %q, %q", stream, evs[0].Outcome, evs[1].Outcome)
		}
	}
	// The fake runtime runs on the host: the "shell" only reads its stdin.
	req := client.ExecRequest{Cmd: []string{"sh", "-c", "cat"}, Stdin: payload, Env: env}
	if _, err := a.Exec(ctx, sb.ID, req); err != nil {
		t.Fatal(err)
	}
	check(false)
	if _, err := a.ExecStream(ctx, sb.ID, req, nil); err != nil {
		t.Fatal(err)
	}
	check(true)

	// Without stdin or env, no such details.
	if _, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range e.audit.take() {
		for _, k := range []string{"stdin_sha256", "stdin_bytes", "env", "env_sha256"} {
			if _, ok := ev.Details[k]; ok {
				t.Errorf("an exec without stdin or env recorded %s: %v", k, ev.Details)
			}
		}
	}
	// An empty stdin is still recorded: the process got a closed stdin,
	// not /dev/null.
	if _, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "cat", Stdin: []byte{}}); err != nil {
		t.Fatal(err)
	}
	empty := sha256.Sum256(nil)
	for _, ev := range e.audit.take() {
		if ev.Details["stdin_sha256"] != hex.EncodeToString(empty[:]) || ev.Details["stdin_bytes"] != 0 {
			t.Errorf("empty stdin recorded as %v", ev.Details)
		}
	}
}

// TestPTYAuditInput checks that a PTY session's outcome carries the
// digest and size of the input it passed to its process.
func TestPTYAuditInput(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t)
	sb := e.sandbox(ctx)
	e.audit.take()
	p, err := e.client(keyA).PTY(ctx, sb.ID, client.PTYOptions{Command: "head -c 6 >/dev/null"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	input := []byte("typed\n")
	if _, err := p.Write(input); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = io.Copy(io.Discard, p) }()
	exit, err := p.Wait(ctx)
	if err != nil || exit.ExitCode != 0 {
		t.Fatalf("pty: %+v, %v", exit, err)
	}
	evs := e.audit.take()
	if len(evs) != 2 {
		t.Fatalf("%d events, want an intent and an outcome", len(evs))
	}
	sum := sha256.Sum256(input)
	out := evs[1]
	if out.Action != ActionSandboxPTY || out.Outcome != "ok" || out.Details["stdin_sha256"] != hex.EncodeToString(sum[:]) ||
		out.Details["stdin_bytes"] != int64(len(input)) {
		t.Errorf("outcome %+v, want the input's digest and size", out)
	}
	if _, ok := evs[0].Details["stdin_sha256"]; ok {
		t.Errorf("the intent has an input digest before any input: %v", evs[0].Details)
	}
}

// TestCodeAuditEnv checks that a code cell and a new context record their
// environment's names and digest, never the values.
func TestCodeAuditEnv(t *testing.T) {
	ctx := context.Background()
	runner := &blockingRunner{release: make(chan struct{})}
	close(runner.release)
	e := newTestEnv(t, func(cfg *Config) { cfg.Code = runner })
	sb := e.sandbox(ctx)
	e.audit.take()
	sum := sha256.Sum256([]byte("API_KEY=hunter2\x00"))
	if _, err := e.client(keyA).RunCode(ctx, sb.ID, client.RunCodeRequest{Language: "bash", Code: "env", Env: map[string]string{"API_KEY": "hunter2"}}); err != nil {
		t.Fatal(err)
	}
	for _, ev := range e.audit.take() {
		checkEvent(t, ev, ActionSandboxCode, sb.ID, ev.Outcome, map[string]any{"env": "API_KEY", "env_sha256": hex.EncodeToString(sum[:])})
		if b, _ := json.Marshal(ev.Details); bytes.Contains(b, []byte("hunter2")) {
			t.Errorf("the audit record holds an environment value: %s", b)
		}
	}
}
