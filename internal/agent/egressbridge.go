package agent

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// Limits of the egress bridge.
const (
	// maxBridgeConns caps the connections bridged at once; more are
	// closed at once (the host proxy has its own, lower cap).
	maxBridgeConns = 1024
	// bridgeDialTimeout bounds reaching the host's egress socket.
	bridgeDialTimeout = 5 * time.Second
)

// ServeEgressBridge is the sandbox's one way out in allowlist mode: it
// accepts connections on ln (a loopback port inside the sandbox, which
// the sandbox's proxy variables name) and joins each, byte for byte, to
// a new connection from dial (the host's egress proxy for this
// sandbox). It judges nothing: the proxy does. A connection dial cannot
// make (no proxy: the sandbox's mode is none) is closed at once. The
// tools bridge (the tool gateway's socket) is served by it too. It
// returns when ctx ends (closing ln and every bridged connection) or
// when ln fails.
func ServeEgressBridge(ctx context.Context, ln net.Listener, dial func(context.Context) (net.Conn, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		ln.Close()
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	return acceptEach(ctx, ln, &wg, maxBridgeConns, func(c net.Conn) { bridge(ctx, c, dial) })
}

// bridge joins c to a new upstream connection until both directions end
// or ctx does.
func bridge(ctx context.Context, c net.Conn, dial func(context.Context) (net.Conn, error)) {
	defer c.Close()
	dctx, cancel := context.WithTimeout(ctx, bridgeDialTimeout)
	up, err := dial(dctx)
	cancel()
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { c.Close(); up.Close() })
	defer stop()
	done := make(chan struct{}, 2)
	go func() { pipe(up, c); done <- struct{}{} }()
	go func() { pipe(c, up); done <- struct{}{} }()
	<-done
	<-done
}

// pipe copies src to dst, then half-closes dst (or closes it, when it
// cannot be half-closed) so that the far side sees the end of the
// stream.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		_ = cw.CloseWrite()
		return
	}
	// An error either way ends the whole connection.
	dst.Close()
	src.Close()
}
