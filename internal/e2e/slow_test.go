package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// The daemon's limits on slow and oversized requests that these tests
// rely on (internal/api's defaults).
const (
	readHeaderTimeout = 10 * time.Second // api.ReadHeaderTimeout
	bodyGrace         = 10 * time.Second // api.Limits.BodyGrace, at 1 KiB/s
	writeIdleTimeout  = 30 * time.Second // api.Limits.WriteIdleTimeout
	maxHeaderBytes    = 64 << 10         // api.MaxHeaderBytes
)

// TestSlowClients attacks a real daemon with slow and oversized requests,
// all at once, while a well-behaved client keeps working: slowloris
// connections (headers a byte at a time) are cut at the header timeout, a
// trickled JSON body and a trickled upload get 408, oversized headers get
// 431, and a client that stops reading a streamed exec has it killed
// after the write timeout without the daemon buffering its output. The
// well-behaved client sees no error and no long stall throughout.
func TestSlowClients(t *testing.T) {
	e := newEnv(t, "--rate-limit", "100000", "--rate-burst", "100000")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	addr := strings.TrimPrefix(d.URL, "http://")

	// The well-behaved client, until the attacks are over.
	stopGood := make(chan struct{})
	var good struct {
		n, errs atomic.Int64
		maxNS   atomic.Int64
		first   atomic.Value
	}
	var goodWG sync.WaitGroup
	goodWG.Go(func() {
		for {
			select {
			case <-stopGood:
				return
			case <-time.After(100 * time.Millisecond):
			}
			t0 := time.Now()
			rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			res, err := d.C.Exec(rctx, sb.ID, client.ExecRequest{Cmd: []string{"echo", "fine"}})
			cancel()
			el := time.Since(t0)
			good.n.Add(1)
			if el.Nanoseconds() > good.maxNS.Load() {
				good.maxNS.Store(el.Nanoseconds())
			}
			if err == nil && string(res.Stdout) != "fine\n" {
				err = fmt.Errorf("result %+v", res)
			}
			if err != nil {
				good.errs.Add(1)
				good.first.CompareAndSwap(nil, err.Error())
			}
		}
	})

	var wg sync.WaitGroup
	wg.Go(func() { slowloris(t, d, addr) })
	wg.Go(func() { trickledJSON(t, addr, d.Key, sb.ID) })
	wg.Go(func() { trickledUpload(t, addr, d.Key, sb.ID) })
	wg.Go(func() { hugeHeaders(t, addr, d.Key) })
	wg.Go(func() { stalledReader(t, d, addr, sb.ID) })
	wg.Wait()
	close(stopGood)
	goodWG.Wait()

	maxLat := time.Duration(good.maxNS.Load())
	t.Logf("well-behaved client during the attacks: %d execs, %d errors, slowest %v", good.n.Load(), good.errs.Load(), maxLat.Round(time.Millisecond))
	if good.errs.Load() > 0 {
		t.Errorf("the well-behaved client failed %d times, first: %v", good.errs.Load(), good.first.Load())
	}
	if good.n.Load() < 20 || maxLat > 5*time.Second {
		t.Errorf("the well-behaved client was held up: %d execs, slowest %v", good.n.Load(), maxLat)
	}
	if !d.Alive() {
		t.Fatal("the daemon died")
	}
}

// dialRaw opens a TCP connection to the daemon.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Errorf("dial: %v", err)
		return nil
	}
	return conn
}

// closedWithin reports whether the server closes conn (a read ends with
// EOF or an error other than our own deadline) within d, and when.
func closedWithin(conn net.Conn, d time.Duration) (bool, time.Duration) {
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false, time.Since(start)
	}
	return true, time.Since(start)
}

// slowloris opens 32 connections that send their headers a byte every
// 500 ms: each is closed once the header timeout passes.
func slowloris(t *testing.T, d *daemon, addr string) {
	const conns = 32
	var wg sync.WaitGroup
	results := make([]time.Duration, conns)
	closed := make([]bool, conns)
	for i := range conns {
		wg.Go(func() {
			conn := dialRaw(t, addr)
			if conn == nil {
				return
			}
			defer conn.Close()
			start := time.Now()
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: "); err != nil {
				t.Errorf("slowloris %d: %v", i, err)
				return
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for time.Since(start) < readHeaderTimeout+10*time.Second {
					time.Sleep(500 * time.Millisecond)
					if _, err := conn.Write([]byte("a")); err != nil {
						return
					}
				}
			}()
			ok, _ := closedWithin(conn, readHeaderTimeout+8*time.Second)
			closed[i], results[i] = ok, time.Since(start)
			_ = conn.Close()
			<-done
		})
	}
	wg.Wait()
	slowest := time.Duration(0)
	for i := range conns {
		if !closed[i] {
			t.Errorf("slowloris connection %d still open after %v", i, results[i].Round(time.Millisecond))
		}
		if results[i] < readHeaderTimeout-time.Second {
			t.Errorf("slowloris connection %d closed after %v, before the header timeout", i, results[i])
		}
		slowest = max(slowest, results[i])
	}
	t.Logf("slowloris: %d connections cut, the last after %v", conns, slowest.Round(time.Millisecond))
}

// trickle writes prefix, then one byte every interval until stop or an
// error, on conn.
func trickle(conn net.Conn, prefix string, interval time.Duration, stop <-chan struct{}) {
	if _, err := io.WriteString(conn, prefix); err != nil {
		return
	}
	for {
		select {
		case <-stop:
			return
		case <-time.After(interval):
		}
		if _, err := conn.Write([]byte(" ")); err != nil {
			return
		}
	}
}

// expectStatus reads a response from conn within d and checks its status
// and JSON error code.
func expectStatus(t *testing.T, what string, conn net.Conn, d time.Duration, status int, code string) time.Duration {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(d))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Errorf("%s: no response within %v: %v", what, d, err)
		return time.Since(start)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var eb struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	if resp.StatusCode != status || json.Unmarshal(b, &eb) != nil || eb.Error.Code != code || eb.Error.Message == "" {
		t.Errorf("%s: %d %s, want %d %s", what, resp.StatusCode, b, status, code)
	}
	return time.Since(start)
}

// trickledJSON sends an exec body at 2 bytes a second: 408 after the
// body grace period.
func trickledJSON(t *testing.T, addr, key, id string) {
	conn := dialRaw(t, addr)
	if conn == nil {
		return
	}
	defer conn.Close()
	stop := make(chan struct{})
	defer close(stop)
	go trickle(conn, fmt.Sprintf("POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"command\":", id, key), 500*time.Millisecond, stop)
	el := expectStatus(t, "trickled exec body", conn, bodyGrace+15*time.Second, http.StatusRequestTimeout, "timeout")
	t.Logf("trickled JSON body: 408 after %v", el.Round(time.Millisecond))
}

// trickledUpload sends 4 KiB of a file at once, then a byte a second:
// 408 once the bytes no longer cover the minimum rate; the file is not
// written.
func trickledUpload(t *testing.T, addr, key, id string) {
	conn := dialRaw(t, addr)
	if conn == nil {
		return
	}
	defer conn.Close()
	stop := make(chan struct{})
	defer close(stop)
	go trickle(conn, fmt.Sprintf("PUT /v1/sandboxes/%s/files?path=trickled.bin HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/octet-stream\r\nContent-Length: 1048576\r\n\r\n%s", id, key, strings.Repeat("x", 4096)), time.Second, stop)
	el := expectStatus(t, "trickled upload", conn, bodyGrace+20*time.Second, http.StatusRequestTimeout, "timeout")
	t.Logf("trickled upload: 408 after %v", el.Round(time.Millisecond))
}

// hugeHeaders: a header block over the limit gets the JSON 431; one far
// over it a 431 from the HTTP server (or a closed connection).
func hugeHeaders(t *testing.T, addr, key string) {
	for _, size := range []int{maxHeaderBytes + 4096, 4 * maxHeaderBytes, 2 << 20} {
		conn := dialRaw(t, addr)
		if conn == nil {
			return
		}
		req := fmt.Sprintf("GET /v1/sandboxes HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Pad: %s\r\n\r\n", key, strings.Repeat("p", size))
		go func() {
			_ = conn.SetWriteDeadline(time.Now().Add(20 * time.Second))
			_, _ = io.WriteString(conn, req)
		}()
		_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		switch {
		case size <= 4*maxHeaderBytes && err != nil:
			t.Errorf("headers of %d bytes: %v", size, err)
		case size <= 2*maxHeaderBytes:
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge || !strings.Contains(string(b), `"code":"request_too_large"`) {
				t.Errorf("headers of %d bytes: %d %s, want 431 with the JSON error", size, resp.StatusCode, b)
			}
		case err == nil && resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge:
			t.Errorf("headers of %d bytes: %d, want 431", size, resp.StatusCode)
		}
		conn.Close()
	}
}

// stalledReader starts a streamed exec of an endless writer, reads its
// first line and stops reading. The daemon must not buffer the output
// (its memory stays put), must serve others meanwhile (the well-behaved
// client), and once the write timeout passes must kill the process and
// record the exec's outcome.
func stalledReader(t *testing.T, d *daemon, addr, id string) {
	conn := dialRaw(t, addr)
	if conn == nil {
		return
	}
	defer conn.Close()
	const marker = "airlock-stalled-reader"
	body := fmt.Sprintf(`{"command":"yes %s","timeout_s":600}`, marker)
	fmt.Fprintf(conn, "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Accept: application/x-ndjson\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", id, d.Key, len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	br := bufio.NewReaderSize(conn, 1024)
	if line, err := br.ReadString('\n'); err != nil || !strings.Contains(line, " 200 ") {
		t.Errorf("stalled reader: status line %q, %v", line, err)
		return
	}
	before, _ := procStatusKB(d.Pid(), "VmRSS")
	sampler := sampleRSS(d.Pid(), 100*time.Millisecond)
	start := time.Now()
	ctx := ctxT(t, 2*time.Minute)
	// The process runs until the daemon gives up on this reader.
	running := func() bool {
		res, err := d.C.Exec(ctx, id, client.ExecRequest{Command: "pgrep -f '" + marker[:len(marker)-1] + "[r]' >/dev/null && echo yes || echo no"})
		return err == nil && strings.TrimSpace(string(res.Stdout)) == "yes"
	}
	if !running() {
		t.Error("stalled reader: the process is not running")
	}
	gone := waitFor(writeIdleTimeout+30*time.Second, func() bool { time.Sleep(500 * time.Millisecond); return !running() })
	el := time.Since(start)
	peak, _ := sampler.Stop()
	switch {
	case !gone:
		t.Errorf("stalled reader: the process still runs %v after the client stopped reading", el.Round(time.Second))
	case el < writeIdleTimeout-5*time.Second:
		t.Errorf("stalled reader: the process was killed after %v, before the write timeout", el)
	}
	if growth := (peak - before) >> 10; growth > 64 {
		t.Errorf("stalled reader: the daemon's RSS grew by %d MiB while the client did not read", growth)
	}
	// The exec's outcome is recorded, and it is not a success.
	var outcome string
	waitFor(10*time.Second, func() bool {
		recs, _, err := d.C.AuditList(ctx, client.AuditQuery{Action: "sandbox.exec", Target: id, Phase: client.PhaseOutcome, Limit: 1000})
		for _, r := range recs {
			if err == nil && strings.Contains(string(r.Details), marker) {
				outcome = r.Outcome
			}
		}
		return outcome != ""
	})
	if outcome == "" || outcome == "ok" {
		t.Errorf("stalled reader: the exec's outcome is %q", outcome)
	}
	if ok, _ := closedWithin(conn, 10*time.Second); !ok {
		t.Error("stalled reader: the connection is still open")
	}
	t.Logf("stalled reader: process killed after %v, outcome %q, daemon VmRSS %d MiB before, %d MiB peak",
		el.Round(time.Millisecond), outcome, before>>10, peak>>10)
}
