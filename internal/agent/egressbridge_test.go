package agent

import (
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"
)

// TestEgressBridge: bytes go both ways between a client and the upstream
// the bridge dials, half-closes pass through, and a connection whose
// upstream cannot be dialled (no proxy: mode none) is closed at once.
func TestEgressBridge(t *testing.T) {
	up, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	go func() {
		for {
			c, err := up.Accept()
			if err != nil {
				return
			}
			go func() {
				b, _ := io.ReadAll(c)
				c.Write(append([]byte("echo:"), b...))
				c.Close()
			}()
		}
	}()
	for _, tt := range []struct {
		name string
		dial func(context.Context) (net.Conn, error)
		want string
	}{
		{"proxy", func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.Addr().String())
		}, "echo:hello"},
		{"no proxy", func(context.Context) (net.Conn, error) { return nil, errors.New("no socket") }, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- ServeEgressBridge(ctx, ln, tt.dial) }()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write([]byte("hello"))
			c.(*net.TCPConn).CloseWrite()
			got, _ := io.ReadAll(c)
			c.Close()
			if string(got) != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("ServeEgressBridge: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ServeEgressBridge did not return after its context ended")
			}
		})
	}
}
