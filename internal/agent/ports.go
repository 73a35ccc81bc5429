package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The port service: TCP connections from the daemon to ports on the
// sandbox's own loopback, each carried by one Dial stream. The agent is
// PID 1 in the sandbox's network namespace, so the only addresses it
// dials, 127.0.0.1 and then ::1, are the sandbox's; no request names an
// address, only a port.

// Limits of the port service.
const (
	// MaxPortStreams caps the connections in flight in one sandbox (one
	// agent); the next Dial fails with resource exhausted.
	MaxPortStreams = 256
	// PortIdleTimeout ends a connection that carried no byte either way
	// for this long.
	PortIdleTimeout = 10 * time.Minute
	// portDialTimeout bounds the dial itself.
	portDialTimeout = 5 * time.Second
	// portChunk is the most bytes one response carries.
	portChunk = 32 << 10
)

type portService struct {
	idle time.Duration
	max  int

	mu    sync.Mutex
	count int
}

func newPortService() *portService {
	return &portService{idle: PortIdleTimeout, max: MaxPortStreams}
}

// validPort checks a requested port.
func validPort(p uint32) (int, error) {
	if p < 1 || p > 65535 {
		return 0, invalidf("port %d is out of range 1-65535", p)
	}
	return int(p), nil
}

func (s *portService) enter() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.count >= s.max {
		return false
	}
	s.count++
	return true
}

func (s *portService) leave() {
	s.mu.Lock()
	s.count--
	s.mu.Unlock()
}

// inFlight returns how many connections are open.
func (s *portService) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count
}

// dialLoopback connects to port on the loopback: 127.0.0.1, and ::1 when
// nothing listens on the first (a server bound to "localhost" may have
// taken only ::1).
func dialLoopback(ctx context.Context, port int) (*net.TCPConn, error) {
	d := net.Dialer{Timeout: portDialTimeout}
	p := strconv.Itoa(port)
	c, err := d.DialContext(ctx, "tcp4", net.JoinHostPort("127.0.0.1", p))
	if errors.Is(err, syscall.ECONNREFUSED) {
		if c6, err6 := d.DialContext(ctx, "tcp6", net.JoinHostPort("::1", p)); err6 == nil {
			c, err = c6, nil
		}
	}
	switch {
	case err == nil:
		return c.(*net.TCPConn), nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("nothing listens on port %d in the sandbox (connection refused): %w", port, errdefs.ErrFailedPrecondition)
	case ctx.Err() != nil:
		return nil, fmt.Errorf("dial port %d: %w", port, errdefs.ErrCanceled)
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("port %d in the sandbox did not accept within %v: %w", port, portDialTimeout, errdefs.ErrTimeout)
		}
		return nil, fmt.Errorf("dial port %d in the sandbox: %v: %w", port, errors.Unwrap(err), errdefs.ErrUnavailable)
	}
}

// Dial serves one connection; see PortService.Dial in the protocol.
func (s *portService) Dial(ctx context.Context, stream *connect.BidiStream[agentv1.DialRequest, agentv1.DialResponse]) error {
	first, err := stream.Receive()
	if err != nil {
		return agentwire.ToConnect(fmt.Errorf("dial: no first message: %v: %w", err, errdefs.ErrInvalidArgument))
	}
	port, err := validPort(first.GetPort())
	if err != nil {
		return agentwire.ToConnect(err)
	}
	if !s.enter() {
		return agentwire.ToConnect(fmt.Errorf("the sandbox has %d port connections open, the limit: %w", s.max, errdefs.ErrResourceExhausted))
	}
	defer s.leave()
	conn, err := dialLoopback(ctx, port)
	if err != nil {
		return agentwire.ToConnect(err)
	}
	defer conn.Close()
	if err := stream.Send(&agentv1.DialResponse{Connected: true}); err != nil {
		return err
	}

	// Either direction's bytes keep the connection; none for s.idle ends
	// it (closing conn ends both loops).
	idle := time.AfterFunc(s.idle, func() { conn.Close() })
	defer idle.Stop()

	// The daemon's bytes, written to conn. This loop ends with the
	// request stream, which ends when the handler returns.
	go func() {
		if len(first.Data) > 0 {
			if _, err := conn.Write(first.Data); err != nil {
				conn.Close()
				return
			}
		}
		for {
			msg, err := stream.Receive()
			if errors.Is(err, io.EOF) {
				_ = conn.CloseWrite()
				return
			}
			if err != nil {
				conn.Close()
				return
			}
			idle.Reset(s.idle)
			if _, err := conn.Write(msg.Data); err != nil {
				conn.Close()
				return
			}
		}
	}()

	buf := make([]byte, portChunk)
	var sendErr error
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			idle.Reset(s.idle)
			if sendErr = stream.Send(&agentv1.DialResponse{Data: buf[:n]}); sendErr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	// The sandbox's side is done (or the idle timeout closed conn): the
	// stream ends here, and with it the loop above.
	return sendErr
}
