package api

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// serveReal serves e's handler with the server NewServer builds (its
// timeouts and header limits), on loopback, and returns the address. The
// server counts the connections it closed in closedConns.
func serveReal(t *testing.T, e *testEnv) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(ln.Addr().String(), e.h, nil)
	srv.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			closedConns.Add(1)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	t.Cleanup(func() {
		_ = srv.Close()
		<-done
	})
	return ln.Addr().String()
}

// closedConns counts the connections the servers of serveReal closed.
var closedConns atomic.Int64

// rawConn opens a TCP connection to addr, bounded by the test.
func rawConn(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readResponse reads one response from conn within d.
func readResponse(t *testing.T, conn net.Conn, d time.Duration) (*http.Response, []byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp, b
}

// TestHeaderLimits: headers over MaxHeaderBytes get a JSON 431, headers
// over the server's hard cap net/http's own 431, and the server goes on.
func TestHeaderLimits(t *testing.T) {
	e := newTestEnv(t)
	addr := serveReal(t, e)
	hc := &http.Client{Timeout: 10 * time.Second}
	send := func(size int) (*http.Response, []byte) {
		req, _ := http.NewRequest("GET", "http://"+addr+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("X-Pad", strings.Repeat("p", size))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("header of %d bytes: %v", size, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	if resp, b := send(MaxHeaderBytes - 1024); resp.StatusCode != 200 {
		t.Errorf("headers just under the limit: %d %s", resp.StatusCode, b)
	}
	resp, b := send(MaxHeaderBytes + 1024)
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || errCode(t, b) != CodeRequestTooLarge ||
		!strings.Contains(string(b), "headers") {
		t.Errorf("headers over the limit: %d %s, want 431 request_too_large", resp.StatusCode, b)
	}
	if resp, _ := send(serverMaxHeaderBytes + 8192); resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("headers over the hard cap: %d, want 431", resp.StatusCode)
	}
	if resp, b := send(10); resp.StatusCode != 200 {
		t.Errorf("after huge headers: %d %s", resp.StatusCode, b)
	}
	if NewServer("x", e.h, nil).ReadHeaderTimeout != ReadHeaderTimeout {
		t.Error("NewServer does not bound the time headers take")
	}
}

// TestTrickledBody: a client that sends its body slower than
// Limits.MinBodyRate is cut off with 408 once Limits.BodyGrace has passed,
// on JSON and file routes, while other clients are served; a body the
// route does not read cannot hold the connection either.
func TestTrickledBody(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, func(c *Config) {
		c.Limits.BodyGrace = 300 * time.Millisecond
		c.Limits.MinBodyRate = 1000
	})
	addr := serveReal(t, e)
	sb := e.sandbox(ctx)
	c, err := client.New("http://"+addr, keyA)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, method, path string }{
		{"json", "POST", "/v1/sandboxes/" + sb.ID + "/exec"},
		{"file", "PUT", "/v1/sandboxes/" + sb.ID + "/files?path=slow.txt"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := rawConn(t, addr)
			fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 10000\r\n\r\n{",
				tt.method, tt.path, keyA)
			start := time.Now()
			stop := make(chan struct{})
			go func() { // one byte every 100 ms: 10 B/s
				for i := 0; i < 100; i++ {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					if _, err := conn.Write([]byte(" ")); err != nil {
						return
					}
				}
			}()
			defer close(stop)
			// Others are served meanwhile.
			if _, err := c.GetSandbox(ctx, sb.ID); err != nil {
				t.Errorf("another client during the trickle: %v", err)
			}
			resp, b := readResponse(t, conn, 10*time.Second)
			if resp.StatusCode != http.StatusRequestTimeout || errCode(t, b) != CodeTimeout {
				t.Errorf("trickled body: %d %s, want 408 timeout", resp.StatusCode, b)
			}
			if el := time.Since(start); el > 5*time.Second {
				t.Errorf("trickled body cut off after %v", el)
			}
		})
	}
	if _, err := c.ReadFile(ctx, sb.ID, "slow.txt"); err == nil {
		t.Error("the trickled upload was written")
	}

	// GET with a body the route never reads: answered, then the
	// connection is closed within bodyDrainTimeout, not held.
	conn := rawConn(t, addr)
	fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
	start := time.Now()
	br := bufio.NewReader(conn)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("healthz with an unread body: %v %v", resp, err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if _, err := br.ReadByte(); err == nil {
		t.Error("the server sent more after the response")
	}
	if el := time.Since(start); el > bodyDrainTimeout+3*time.Second {
		t.Errorf("connection with an unsent body held for %v", el)
	}
}

// TestStalledStreamReader: a client that stops reading a streamed exec
// does not hold the daemon: within Limits.WriteIdleTimeout the process is
// killed and the stream's outcome recorded, and other clients are served
// meanwhile.
func TestStalledStreamReader(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, func(c *Config) { c.Limits.WriteIdleTimeout = 500 * time.Millisecond })
	addr := serveReal(t, e)
	sb := e.sandbox(ctx)
	c, err := client.New("http://"+addr, keyA)
	if err != nil {
		t.Fatal(err)
	}
	e.audit.take()
	conn := rawConn(t, addr)
	// A small receive buffer, so that the server's writes block soon.
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4096)
	}
	body := `{"command":"yes airlock-output-line","timeout_s":120}`
	fmt.Fprintf(conn, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Accept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		sb.ID, keyA, len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReaderSize(conn, 1024)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "200") {
		t.Fatalf("status line %q, %v", line, err)
	}
	// Stop reading. Others go on being served.
	start := time.Now()
	closedBefore := closedConns.Load()
	for range 3 {
		if res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}}); err != nil || res.ExitCode != 0 {
			t.Errorf("another client while a reader stalls: %+v, %v", res, err)
		}
	}
	// The stalled exec ends: its outcome is recorded, not ok.
	var out *struct{ outcome string }
	deadline := time.Now().Add(15 * time.Second)
	for out == nil && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		for _, ev := range outcomes(e.audit.take()) {
			if ev.Action == ActionSandboxExec && ev.Details["command"] == "yes airlock-output-line" {
				out = &struct{ outcome string }{ev.Outcome}
			}
		}
	}
	switch {
	case out == nil:
		t.Fatal("the stalled stream's exec did not end")
	case out.outcome == "ok":
		t.Errorf("the stalled stream's exec ended %q", out.outcome)
	}
	t.Logf("stalled reader cut after %v (outcome %s)", time.Since(start).Round(time.Millisecond), out.outcome)
	// The server closed the connection (this client keeps the others
	// open).
	waitUntil(t, 5*time.Second, "the server to close the stalled stream's connection",
		func() bool { return closedConns.Load() > closedBefore })
	// The process is gone: nothing of it runs in the sandbox.
	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "pgrep -f 'airlock-output-lin[e]' || true"})
	if err != nil || strings.TrimSpace(string(res.Stdout)) != "" {
		t.Errorf("the stalled exec's process still runs: %q, %v", res.Stdout, err)
	}
}
