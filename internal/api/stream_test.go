package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

func TestExecStreamDeliversBeforeExit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	// The command waits for a file that the test writes only after it
	// received the first line: it cannot exit before its first output
	// has been delivered.
	var mu sync.Mutex
	var stdout, stderr bytes.Buffer
	gotFirst := false
	res, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{
		Command: `echo first; while [ ! -e /tmp/go-` + sb.ID + ` ]; do sleep 0.02; done; echo second; echo err >&2`,
		Timeout: 20 * time.Second,
	}, func(s client.Stream, data []byte) error {
		mu.Lock()
		defer mu.Unlock()
		if s == client.Stdout {
			stdout.Write(data)
		} else {
			stderr.Write(data)
		}
		if !gotFirst && strings.Contains(stdout.String(), "first\n") {
			gotFirst = true
			// The fake runtime runs processes on the host: /tmp is the
			// host's.
			if _, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"touch", "/tmp/go-" + sb.ID}}); err != nil {
				return err
			}
		}
		return nil
	})
	t.Cleanup(func() { _, _ = e.mgr.Exec(context.Background(), sb.ID, execRm("/tmp/go-"+sb.ID)) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != client.StatusSuccess || res.Stdout != nil {
		t.Errorf("result %+v", res)
	}
	if stdout.String() != "first\nsecond\n" || stderr.String() != "err\n" {
		t.Errorf("stdout %q stderr %q", stdout.String(), stderr.String())
	}
}

func TestExecStreamEncoding(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	// Binary output, and a UTF-8 character split across two writes.
	var out bytes.Buffer
	res, err := c.ExecStream(ctx, sb.ID, client.ExecRequest{
		Command: `printf '\377\000'; printf 'a\303'; sleep 0.1; printf '\251b'`,
	}, func(s client.Stream, data []byte) error {
		out.Write(data)
		return nil
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatal(res, err)
	}
	if want := "\xff\x00aéb"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}

	// The raw lines: the pid first, text in data, the rest in data_b64,
	// exit last; a character split between writes stays text.
	resp, body := e.doAccept(sb.ID, `{"command":"printf 'a\\303'; sleep 0.1; printf '\\251'; sleep 0.1; printf '\\377'"}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ndjsonType {
		t.Fatalf("status %d type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var start struct {
		Type string `json:"type"`
		PID  int    `json:"pid"`
	}
	if err := json.Unmarshal([]byte(lines[0]), &start); err != nil || start.Type != "start" || start.PID <= 0 {
		t.Fatalf("first line %q: %v", lines[0], err)
	}
	var text, raw []byte
	for _, l := range lines[1 : len(lines)-1] {
		var ev struct {
			Type    string `json:"type"`
			Data    string `json:"data"`
			DataB64 []byte `json:"data_b64"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Type != "stdout" {
			t.Fatalf("line %q: %v", l, err)
		}
		text = append(text, ev.Data...)
		raw = append(raw, ev.DataB64...)
	}
	if string(text) != "aé" || string(raw) != "\xff" || !strings.HasPrefix(lines[len(lines)-1], `{"type":"exit","status":"success"`) {
		t.Errorf("text %q, base64 part %q, lines:\n%s", text, raw, body)
	}

	// Errors before the stream starts are plain JSON errors.
	resp, body = e.doAccept("sb-aaaaaaaaaaaaaaaa", `{"command":"true"}`)
	if resp.StatusCode != 404 || errCode(t, body) != CodeNotFound {
		t.Errorf("missing sandbox: %d %s", resp.StatusCode, body)
	}
}

// doAccept posts an exec asking for NDJSON.
func (e *testEnv) doAccept(id, body string) (*http.Response, []byte) {
	e.t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/sandboxes/"+id+"/exec", strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+keyA)
	req.Header.Set("Accept", "application/json;q=0.5, application/x-ndjson")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func TestBinaryFileRoundTrip(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	data := make([]byte, 12<<20+12345)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	// A plain io.Reader: sent chunked, without a length.
	info, err := c.WriteFile(ctx, sb.ID, "blob.bin", struct{ io.Reader }{bytes.NewReader(data)})
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(data)) || info.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("write info %+v", info)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "blob.bin")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("round trip changed the file: %d bytes back, %d sent", len(got), len(data))
	}
}

func TestUploadLimits(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, func(c *Config) { c.Limits.MaxFileBytes = 1 << 20 })
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	if _, err := c.WriteFile(ctx, sb.ID, "f", strings.NewReader("original")); err != nil {
		t.Fatal(err)
	}
	// Too large with a declared length, and streamed without one.
	for _, r := range []io.Reader{bytes.NewReader(make([]byte, 2<<20)), struct{ io.Reader }{bytes.NewReader(make([]byte, 2<<20))}} {
		if _, err := c.WriteFile(ctx, sb.ID, "f", r); !errors.Is(err, client.ErrTooLarge) {
			t.Errorf("oversize upload = %v, want ErrTooLarge", err)
		}
	}
	// A body that fails midway.
	failing := io.MultiReader(bytes.NewReader(make([]byte, 300<<10)), errReader{})
	if _, err := c.WriteFile(ctx, sb.ID, "f", failing); err == nil {
		t.Error("an upload whose body failed succeeded")
	}
	rc, err := c.ReadFile(ctx, sb.ID, "f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "original" {
		t.Errorf("after failed uploads the file holds %d bytes, want the original", len(b))
	}
	if ev := e.audit.take(); len(ev) < 3 || ev[len(ev)-1].Outcome == "ok" {
		t.Errorf("failed uploads audited as %+v", ev)
	}
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

// TestUploadMemory checks that an upload is streamed: 100 MiB through the
// API must not grow the heap by anything near 100 MiB.
func TestUploadMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 100 MiB")
	}
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	})
	const size = 100 << 20
	h := sha256.New()
	src := io.TeeReader(io.LimitReader(zeroishReader{}, size), h)
	info, err := c.WriteFile(ctx, sb.ID, "big.bin", struct{ io.Reader }{src})
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != size || info.SHA256 != hex.EncodeToString(h.Sum(nil)) {
		t.Errorf("info %+v", info)
	}
	growth := int64(peak.Load()) - int64(base.HeapInuse)
	t.Logf("heap in use grew by %d MiB at most during a 100 MiB upload", growth>>20)
	if growth > 40<<20 {
		t.Errorf("heap grew by %d MiB during a 100 MiB upload: the body is being buffered", growth>>20)
	}
}

// zeroishReader yields a repeating non-zero pattern without allocating.
type zeroishReader struct{}

func (zeroishReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + 1)
	}
	return len(p), nil
}

func TestPTY(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)

	p, err := c.PTY(ctx, sb.ID, client.PTYOptions{Cols: 80, Rows: 24,
		Command: `stty size; read a; stty size; read b; echo "done-$b"; exit 7`})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	out := newScreen(p)
	out.waitFor(t, "24 80")
	if err := p.Resize(ctx, 100, 40); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond) // the resize frame and the input travel separately
	if _, err := p.Write([]byte("x\n")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "40 100")
	if _, err := p.Write([]byte("bye\n")); err != nil {
		t.Fatal(err)
	}
	out.waitFor(t, "bye") // the terminal echoes the input
	out.waitFor(t, "done-bye")
	exit, err := p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 7 || exit.Status != client.StatusError {
		t.Errorf("exit %+v, want code 7", exit)
	}
	ev := e.audit.take()
	last := ev[len(ev)-1]
	if last.Action != ActionSandboxPTY || last.Outcome != "ok" || last.Details["exit_code"] != 7 || last.Target != sb.ID {
		t.Errorf("pty audit event %+v", last)
	}

	// Closing the session kills the process.
	p2, err := c.PTY(ctx, sb.ID, client.PTYOptions{Command: "echo ready; sleep 60"})
	if err != nil {
		t.Fatal(err)
	}
	newScreen(p2).waitFor(t, "ready")
	start := time.Now()
	if err := p2.Close(); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 10*time.Second, "the pty process to be killed", func() bool {
		for _, ev := range outcomes(e.audit.take()) {
			if ev.Action == ActionSandboxPTY {
				return true
			}
		}
		return false
	})
	if time.Since(start) > 10*time.Second {
		t.Error("closing the session did not end the process")
	}

	// Errors before the upgrade are JSON errors.
	if _, err := c.PTY(ctx, sb.ID, client.PTYOptions{Cols: 0, Rows: 0, Command: " "}); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("blank command: %v, want ErrInvalid", err)
	}
	if _, err := e.client(keyB).PTY(ctx, sb.ID, client.PTYOptions{}); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("other tenant's pty: %v, want ErrNotFound", err)
	}
}

// screen accumulates a PTY's output in the background.
type screen struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func newScreen(r io.Reader) *screen {
	s := &screen{ch: make(chan struct{}, 1)}
	go func() {
		br := bufio.NewReader(r)
		b := make([]byte, 4096)
		for {
			n, err := br.Read(b)
			s.mu.Lock()
			s.buf.Write(b[:n])
			s.mu.Unlock()
			select {
			case s.ch <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return s
}

// waitFor waits until want has appeared, then forgets the output up to
// and including it.
func (s *screen) waitFor(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		s.mu.Lock()
		cur := s.buf.String()
		if i := strings.Index(cur, want); i >= 0 {
			s.buf.Next(i + len(want))
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		select {
		case <-s.ch:
		case <-deadline:
			t.Fatalf("timed out waiting for %q; screen: %q", want, cur)
		}
	}
}

func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func execRm(path string) agentclient.ExecRequest {
	return agentclient.ExecRequest{Argv: []string{"rm", "-f", path}}
}

// TestReadFileBrokenTransfer checks that a download that fails midway is
// a read error for the client, never a short file that looks whole.
func TestReadFileBrokenTransfer(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	const size = 32 << 20
	if _, err := c.WriteFile(ctx, sb.ID, "big", io.LimitReader(zeroishReader{}, size)); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "big")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadFull(rc, make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Crash(sb.ID); err != nil { // the agent dies mid-transfer
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, rc)
	if err == nil {
		t.Fatalf("a broken transfer read as complete (%d of %d bytes)", n+1<<20, size)
	}
	t.Logf("read %d more bytes, then %v", n, err)
}
