package egress

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestSetLimits: a running proxy's connection cap and bandwidth cap
// change in place (the cap refuses the next connection at once, the
// bandwidth shows in Limits and the limiter), and a change of a fixed
// limit is refused and changes nothing.
func TestSetLimits(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	target := fmt.Sprintf("allowed.test:%d", echo.port())
	if l := h.proxy.Limits(); l.MaxConns != DefaultMaxConns || l.BandwidthBytesPerSec != 0 || l.IdleTimeout != DefaultIdleTimeout {
		t.Fatalf("limits at start %+v", l)
	}
	if err := h.proxy.SetLimits(Limits{MaxConns: 1, BandwidthBytesPerSec: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if l := h.proxy.Limits(); l.MaxConns != 1 || l.BandwidthBytesPerSec != 1<<20 {
		t.Errorf("limits after SetLimits %+v", l)
	}
	c, br, code, _ := h.connect(target)
	if code != 200 {
		t.Fatal(code)
	}
	io.WriteString(c, "x")
	if _, err := br.ReadByte(); err != nil {
		t.Fatal(err)
	}
	second := h.dialProxy()
	fmt.Fprintf(second, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	second.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := second.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("second connection under a cap of 1: read %d %v, want it closed", n, err)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonConnLimit {
		t.Errorf("event %+v, want a conn_limit refusal", ev)
	}
	// Raised again: the next connection passes while the first is open.
	if err := h.proxy.SetLimits(Limits{MaxConns: 2}); err != nil {
		t.Fatal(err)
	}
	if _, _, code, _ := h.connect(target); code != 200 {
		t.Errorf("CONNECT under a raised cap: %d", code)
	}
	if l := h.proxy.Limits(); l.BandwidthBytesPerSec != 0 || h.proxy.up.Limit() != h.proxy.down.Limit() || h.proxy.up.Burst() < burstFor(1<<20) {
		t.Errorf("bandwidth after removing the cap: %+v, up %v down %v", l, h.proxy.up.Limit(), h.proxy.down.Limit())
	}
	if err := h.proxy.SetLimits(Limits{MaxConns: 2, IdleTimeout: time.Second}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("changing the idle timeout: %v, want failed precondition", err)
	}
	if err := h.proxy.SetLimits(Limits{MaxConns: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a negative cap: %v", err)
	}
	if l := h.proxy.Limits(); l.MaxConns != 2 || l.IdleTimeout != DefaultIdleTimeout {
		t.Errorf("refused changes changed the limits: %+v", l)
	}
}

// TestSetBandwidthThrottles: a cap set on a running proxy started
// without one slows a transfer already open to about the cap.
func TestSetBandwidthThrottles(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", echo.port()))
	if code != 200 {
		t.Fatal(code)
	}
	const bw = 64 << 10
	if err := h.proxy.SetLimits(Limits{BandwidthBytesPerSec: bw}); err != nil {
		t.Fatal(err)
	}
	// The burst stays at the copy buffer (128 KiB): after it, 128 KiB
	// more take about 2 s at 64 KiB/s.
	const n = 256 << 10
	go func() { c.Write(make([]byte, n)) }()
	start := time.Now()
	if _, err := io.ReadFull(br, make([]byte, n)); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("%d bytes echoed in %v under a cap of %d bytes/s set on the open connection", n, d, bw)
	}
}
