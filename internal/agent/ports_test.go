package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// listenLoopback serves handle for each connection on network's loopback
// and returns the port.
func listenLoopback(t *testing.T, network, addr string, handle func(net.Conn)) int {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

// echoThenBye echoes until EOF, then writes "bye" and closes.
func echoThenBye(c net.Conn) {
	_, _ = io.Copy(c, c)
	_, _ = c.Write([]byte("bye"))
}

func TestDialPortEchoAndHalfClose(t *testing.T) {
	h := newHarness(t, nil)
	port := listenLoopback(t, "tcp4", "127.0.0.1:0", echoThenBye)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := h.c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// 1 MiB of random bytes one way while they echo back the other:
	// larger than one message and than the flow-control windows.
	payload := make([]byte, 1<<20)
	_, _ = rand.Read(payload)
	werr := make(chan error, 1)
	go func() {
		_, err := conn.Write(payload)
		if err == nil {
			err = conn.CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
	want := append(append([]byte{}, payload...), "bye"...)
	if !bytes.Equal(got, want) {
		t.Fatalf("got %d bytes back, want %d (the echo and bye after the half-close)", len(got), len(want))
	}
	if _, err := conn.Write([]byte("x")); err == nil {
		t.Fatal("write after CloseWrite succeeded")
	}
}

func TestDialPortIPv6Loopback(t *testing.T) {
	h := newHarness(t, nil)
	port := listenLoopback(t, "tcp6", "[::1]:0", echoThenBye)
	// Only ::1 listens there (unless another test process holds the same
	// port on 127.0.0.1, which the echo would not tell apart: fine).
	conn, err := h.c.DialPort(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("hi")); err != nil {
		t.Fatal(err)
	}
	_ = conn.CloseWrite()
	got, _ := io.ReadAll(conn)
	if string(got) != "hibye" {
		t.Fatalf("got %q", got)
	}
}

func TestDialPortRefused(t *testing.T) {
	h := newHarness(t, nil)
	// A port that was just free.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	_, err = h.c.DialPort(context.Background(), port)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "nothing listens on port") {
		t.Fatalf("err = %v, want failed precondition, nothing listens", err)
	}
	if n := h.a.ports.inFlight(); n != 0 {
		t.Fatalf("%d streams counted after a refused dial", n)
	}
}

// TestDialPortValidates sends what the typed client refuses to build.
func TestDialPortValidates(t *testing.T) {
	h := newHarness(t, nil)
	raw := agentv1connect.NewPortServiceClient(h.srv.http, "http://agent")
	for _, port := range []uint32{0, 65536, 1 << 31} {
		stream := raw.Dial(context.Background())
		_ = stream.Send(&agentv1.DialRequest{Port: port})
		_, err := stream.Receive()
		if !errors.Is(agentwire.FromConnect(err), errdefs.ErrInvalidArgument) {
			t.Errorf("port %d: err = %v, want invalid argument", port, err)
		}
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
	}
	for _, port := range []int{0, -1, 65536} {
		if _, err := h.c.DialPort(context.Background(), port); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("client, port %d: err = %v, want invalid argument", port, err)
		}
	}
	// A stream that ends before naming a port.
	stream := raw.Dial(context.Background())
	_ = stream.CloseRequest()
	if _, err := stream.Receive(); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("empty stream: err = %v, want invalid argument", err)
	}
	_ = stream.CloseResponse()
}

func TestDialPortCapAndRelease(t *testing.T) {
	h := newHarness(t, nil)
	h.a.ports.max = 2
	port := listenLoopback(t, "tcp4", "127.0.0.1:0", echoThenBye)
	ctx := context.Background()
	c1, err := h.c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := h.c.DialPort(ctx, port)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if _, err := h.c.DialPort(ctx, port); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("third stream: err = %v, want resource exhausted", err)
	}
	c1.Close()
	deadline := time.Now().Add(5 * time.Second)
	for h.a.ports.inFlight() > 1 {
		if time.Now().After(deadline) {
			t.Fatalf("a closed stream still counts: %d in flight", h.a.ports.inFlight())
		}
		time.Sleep(10 * time.Millisecond)
	}
	c3, err := h.c.DialPort(ctx, port)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	c3.Close()
}

func TestDialPortIdleTimeout(t *testing.T) {
	h := newHarness(t, nil)
	h.a.ports.idle = 200 * time.Millisecond
	port := listenLoopback(t, "tcp4", "127.0.0.1:0", echoThenBye)
	conn, err := h.c.DialPort(context.Background(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// Traffic keeps it: three round trips spaced under the timeout.
	buf := make([]byte, 1)
	for range 3 {
		time.Sleep(120 * time.Millisecond)
		if _, err := conn.Write([]byte("x")); err != nil {
			t.Fatalf("write while active: %v", err)
		}
		if _, err := io.ReadFull(conn, buf); err != nil {
			t.Fatalf("read while active: %v", err)
		}
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(conn); done <- err }()
	select {
	case <-done:
		if d := time.Since(start); d < 150*time.Millisecond {
			t.Fatalf("ended after %v, before the idle timeout", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a quiet connection outlived the idle timeout")
	}
}
