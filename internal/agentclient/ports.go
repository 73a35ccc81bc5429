package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxPortWrite is the most bytes one request of a port connection
// carries (the agent accepts messages up to 4 MiB).
const maxPortWrite = 64 << 10

// DialPort connects to TCP port (1..65535) on the sandbox's own loopback
// through the agent's PortService and returns the connection once the
// agent has made it. A port nothing listens on fails with
// errdefs.ErrFailedPrecondition. ctx bounds the dial only; the
// connection lasts until Close, the sandbox's side closing it, or the
// agent's idle timeout.
func (c *Client) DialPort(ctx context.Context, port int) (*PortConn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d is out of range 1-65535: %w", port, errdefs.ErrInvalidArgument)
	}
	// The stream outlives ctx: it has a context of its own, ended by Close.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, cancel)
	defer stop()
	ports := agentv1connect.NewPortServiceClient(c.httpc, baseURL, connect.WithAcceptCompression("gzip", nil, nil))
	stream := ports.Dial(sctx)
	fail := func(err error) (*PortConn, error) {
		cancel()
		_ = stream.CloseRequest()
		_ = stream.CloseResponse()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("dial port %d: %w", port, errdefs.ErrCanceled)
		}
		return nil, agentwire.FromConnect(err)
	}
	if err := stream.Send(&agentv1.DialRequest{Port: uint32(port)}); err != nil && !errors.Is(err, io.EOF) {
		return fail(err)
	}
	first, err := stream.Receive()
	if err != nil {
		return fail(err)
	}
	if !first.GetConnected() {
		return fail(fmt.Errorf("agent: dial port %d: no connection: %w", port, errdefs.ErrInternal))
	}
	if !stop() {
		// ctx ended just now: the stream's context is gone with it.
		return fail(ctx.Err())
	}
	return &PortConn{stream: stream, cancel: cancel, port: port}, nil
}

// PortConn is a connection to a port on the sandbox's loopback, carried
// by one agent stream. It is a net.Conn without deadlines (SetDeadline
// and its kind fail with errdefs.ErrNotSupported; the agent's idle
// timeout bounds a quiet connection). Read and Write may be called
// concurrently with each other and with Close.
type PortConn struct {
	stream *connect.BidiStreamForClient[agentv1.DialRequest, agentv1.DialResponse]
	cancel context.CancelFunc
	port   int

	rmu  sync.Mutex
	rbuf []byte
	rerr error

	wmu    sync.Mutex
	closed bool // guarded by wmu

	closeOnce sync.Once
	onClose   []func()
}

var _ net.Conn = (*PortConn)(nil)

// Read reads what the sandbox's side sent; io.EOF once it closed.
func (p *PortConn) Read(b []byte) (int, error) {
	p.rmu.Lock()
	defer p.rmu.Unlock()
	for len(p.rbuf) == 0 {
		if p.rerr != nil {
			return 0, p.rerr
		}
		msg, err := p.stream.Receive()
		if err != nil {
			if errors.Is(err, io.EOF) {
				p.rerr = io.EOF
			} else {
				p.rerr = fmt.Errorf("port %d: %w", p.port, agentwire.FromConnect(err))
			}
			continue
		}
		p.rbuf = msg.Data
	}
	n := copy(b, p.rbuf)
	p.rbuf = p.rbuf[n:]
	return n, nil
}

// Write sends b to the sandbox's side.
func (p *PortConn) Write(b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.closed {
		return 0, net.ErrClosed
	}
	n := 0
	for n < len(b) {
		chunk := b[n:min(len(b), n+maxPortWrite)]
		if err := p.stream.Send(&agentv1.DialRequest{Data: chunk}); err != nil {
			return n, fmt.Errorf("port %d: the connection is closed: %w", p.port, net.ErrClosed)
		}
		n += len(chunk)
	}
	return n, nil
}

// CloseWrite half-closes the connection: the sandbox's side reads EOF
// and may still answer.
func (p *PortConn) CloseWrite() error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.closed {
		return net.ErrClosed
	}
	p.closed = true
	return p.stream.CloseRequest()
}

// Close ends the connection both ways and runs the functions given to
// OnClose. It is idempotent.
func (p *PortConn) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		p.wmu.Lock()
		if !p.closed {
			p.closed = true
			_ = p.stream.CloseRequest()
		}
		p.wmu.Unlock()
		_ = p.stream.CloseResponse()
		for _, f := range p.onClose {
			f()
		}
	})
	return nil
}

// OnClose adds f to what Close runs. It is for the connection's owner
// before the connection is handed out (not safe concurrently with Close).
func (p *PortConn) OnClose(f func()) { p.onClose = append(p.onClose, f) }

// Port is the sandbox's port this connection reaches.
func (p *PortConn) Port() int { return p.port }

// portAddr is a PortConn's address.
type portAddr string

func (a portAddr) Network() string { return "airlock-port" }
func (a portAddr) String() string  { return string(a) }

// LocalAddr is the daemon's end.
func (p *PortConn) LocalAddr() net.Addr { return portAddr("daemon") }

// RemoteAddr is the sandbox's port.
func (p *PortConn) RemoteAddr() net.Addr { return portAddr(fmt.Sprintf("sandbox:%d", p.port)) }

var errNoDeadlines = fmt.Errorf("a sandbox port connection has no deadlines: %w", errdefs.ErrNotSupported)

// SetDeadline is not supported.
func (p *PortConn) SetDeadline(time.Time) error { return errNoDeadlines }

// SetReadDeadline is not supported.
func (p *PortConn) SetReadDeadline(time.Time) error { return errNoDeadlines }

// SetWriteDeadline is not supported.
func (p *PortConn) SetWriteDeadline(time.Time) error { return errNoDeadlines }
