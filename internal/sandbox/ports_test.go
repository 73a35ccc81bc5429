package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestDialPort: a port connection goes through the manager's door: it
// reaches a server on the sandbox's loopback (the fake runtime's agent
// runs in the test process, so that is the host's here), keeps the
// sandbox from its idle timeout while open and no longer once closed, and
// is refused for an unknown sandbox.
func TestDialPort(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{ReapInterval: 10 * time.Millisecond})
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	sb, err := m.Create(ctx, Spec{IdleTimeout: 150 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := m.DialPort(ctx, sb.ID, port)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo: %q, %v", buf, err)
	}
	// Open, even quiet, it is activity: the sandbox outlives its idle
	// timeout.
	time.Sleep(500 * time.Millisecond)
	if s := stateOf(m, sb.ID); s != StateRunning {
		t.Fatalf("reaped with a port connection open: %q", s)
	}
	conn.Close()
	eventually(t, 5*time.Second, "idle reap after the close", func() bool { return stateOf(m, sb.ID) == StateStopped })

	if _, err := m.DialPort(ctx, sb.ID, port); err == nil {
		t.Fatal("a stopped sandbox's port was dialled")
	}
	if _, err := m.DialPort(ctx, "sb-aaaaaaaaaaaaaaaa", port); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("unknown sandbox: %v, want not found", err)
	}
}
