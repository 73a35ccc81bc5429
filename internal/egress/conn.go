package egress

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"
)

// errIdle ends a connection on which nothing moved for the idle timeout.
var errIdle = errors.New("idle timeout")

// activity is when a byte last moved on a connection, either way: the
// two directions of a tunnel share one, so that a quiet direction does
// not end a connection whose other direction is busy.
type activity struct{ last atomic.Int64 }

func newActivity() *activity {
	a := &activity{}
	a.touch()
	return a
}

func (a *activity) touch() { a.last.Store(time.Now().UnixNano()) }

func (a *activity) lastTime() time.Time { return time.Unix(0, a.last.Load()) }

// idleReader reads from r, whose bytes come from conn c, under the idle
// rule: a read that waits past the idle timeout fails with errIdle,
// unless the connection's other direction moved bytes in the meantime.
// The read deadline is re-armed only when less than half of it is left,
// so a busy connection rarely pays for it.
type idleReader struct {
	r    io.Reader
	c    net.Conn
	idle time.Duration
	act  *activity
	dl   time.Time
}

func (ir *idleReader) Read(b []byte) (int, error) {
	if now := time.Now(); ir.dl.Sub(now) < ir.idle/2 {
		ir.dl = now.Add(ir.idle)
		ir.c.SetReadDeadline(ir.dl)
	}
	for {
		n, err := ir.r.Read(b)
		if n > 0 {
			ir.act.touch()
			if isTimeout(err) {
				err = nil
			}
			return n, err
		}
		if !isTimeout(err) {
			return n, err
		}
		if next := ir.act.lastTime().Add(ir.idle); time.Until(next) > 0 {
			ir.dl = next
			ir.c.SetReadDeadline(next)
			continue
		}
		return 0, errIdle
	}
}

// meteredWriter writes to w, whose bytes go to conn c: it waits for the
// bandwidth limiter, counts the bytes into the connection's and the
// proxy's counters, and fails a write that makes no progress for the
// idle timeout.
type meteredWriter struct {
	ctx   context.Context
	w     io.Writer
	c     net.Conn
	idle  time.Duration
	act   *activity
	lim   *rate.Limiter // nil: no cap
	n     *atomic.Int64 // this connection's count
	total *atomic.Int64 // the proxy's count
	dl    time.Time
}

func (mw *meteredWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		chunk := b
		if mw.lim != nil {
			chunk = b[:min(len(b), mw.lim.Burst())]
			if err := mw.lim.WaitN(mw.ctx, len(chunk)); err != nil {
				return written, err
			}
		}
		if now := time.Now(); mw.dl.Sub(now) < mw.idle/2 {
			mw.dl = now.Add(mw.idle)
			mw.c.SetWriteDeadline(mw.dl)
		}
		n, err := mw.w.Write(chunk)
		written += n
		mw.n.Add(int64(n))
		mw.total.Add(int64(n))
		if n > 0 {
			mw.act.touch()
		}
		if err != nil {
			if isTimeout(err) {
				err = errIdle
			}
			return written, err
		}
		b = b[len(chunk):]
	}
	return written, nil
}

// isTimeout reports whether err is a deadline passing.
func isTimeout(err error) bool {
	return err != nil && errors.Is(err, os.ErrDeadlineExceeded)
}

// Copy buffers: a tunnel direction starts with a small one and takes a
// large one from the pool once a read fills the small one (a bulk
// transfer), so that idle and interactive connections hold little.
const smallCopyBufferSize = 16 << 10

var (
	smallBufs = sync.Pool{New: func() any { b := make([]byte, smallCopyBufferSize); return &b }}
	largeBufs = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
)

// pump copies src to dst until src ends or either fails. A clean end of
// src returns nil.
func pump(dst io.Writer, src io.Reader) error {
	small := smallBufs.Get().(*[]byte)
	defer smallBufs.Put(small)
	var large *[]byte
	defer func() {
		if large != nil {
			largeBufs.Put(large)
		}
	}()
	buf := *small
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if n == len(buf) && large == nil {
			large = largeBufs.Get().(*[]byte)
			buf = *large
		}
	}
}

// closeWrite half-closes c where it can (TCP and unix sockets), telling
// the peer no more bytes come while the other direction goes on; other
// conns are closed.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// endOf classifies the error that ended an allowed connection; stopped
// is whether the proxy's context had ended by then.
func endOf(err error, stopped bool) EndReason {
	switch {
	case stopped:
		return EndShutdown
	case err == nil:
		return EndClosed
	case errors.Is(err, errIdle) || isTimeout(err):
		return EndIdle
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		return EndClosed
	}
	return EndError
}
