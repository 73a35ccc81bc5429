package agent

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

// testServer is an agent serving on a unix socket inside the test process.
type testServer struct {
	sock   string
	client *agentclient.Client
	// http reaches the socket over HTTP/2 for the generated clients, so
	// tests can send requests the typed client would refuse to build.
	http *http.Client
	stop func() (serveErr, closeErr error)
}

// serveAgent serves a on a fresh unix socket. The caller calls stop in its
// own cleanup, after whatever must happen while the agent still serves.
func serveAgent(tb testing.TB, a *Agent) *testServer {
	tb.Helper()
	// Socket paths are limited to 108 bytes; TempDir names can be long.
	sockDir, err := os.MkdirTemp("", "agt")
	if err != nil {
		tb.Fatal(err)
	}
	sock := filepath.Join(sockDir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- a.Serve(ctx, ln) }()
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		Protocols:   &protocols,
	}}
	s := &testServer{sock: sock, client: agentclient.New(dial), http: hc}
	s.stop = func() (error, error) {
		s.client.Close()
		hc.CloseIdleConnections()
		cancel()
		serveErr := <-served
		closeErr := a.Close()
		_ = os.RemoveAll(sockDir)
		return serveErr, closeErr
	}
	return s
}
