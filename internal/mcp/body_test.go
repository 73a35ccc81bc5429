package mcp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// TestBodyDeadline: a request whose body stalls is cut off after
// bodyTimeout (without the guard it held its connection until the
// client gave up); a body that arrives in time does not bound the
// request: its context lives on while the handler works past
// bodyTimeout (a long tool call or an SSE stream).
func TestBodyDeadline(t *testing.T) {
	old := bodyTimeout
	bodyTimeout = 300 * time.Millisecond
	defer func() { bodyTimeout = old }()
	srv := httptest.NewServer(bodyDeadline(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "read: "+err.Error(), http.StatusRequestTimeout)
			return
		}
		select {
		case <-time.After(3 * bodyTimeout):
			fmt.Fprintf(w, "got %d bytes, context alive", len(b))
		case <-r.Context().Done():
			fmt.Fprint(w, "context ended")
		}
	})))
	defer srv.Close()

	// A stalled body: headers promise 100 bytes, 5 come.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /mcp HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"a\":")
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	if took := time.Since(start); res.StatusCode != http.StatusRequestTimeout || took > 5*time.Second {
		t.Errorf("stalled body: %s after %v, want 408 soon after %v", res.Status, took, bodyTimeout)
	}

	// A whole body, then work past the deadline.
	res, err = http.Post(srv.URL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(b) != "got 17 bytes, context alive" {
		t.Errorf("a body read in time: %q, want the context to outlive the body's deadline", b)
	}
}
