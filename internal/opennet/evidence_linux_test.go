package opennet

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/testutil/testns"
)

// events collects a Router's evidence.
type events chan sunk

func collect(r *Router) events {
	ch := make(events, 4096)
	r.OnEvent(func(id string, ev egress.Event) {
		select {
		case ch <- sunk{id, ev}:
		default:
		}
	})
	return ch
}

// wait returns the first event that ok accepts, within 10 s.
func (ch events) wait(t *testing.T, what string, ok func(sunk) bool) sunk {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case e := <-ch:
			if ok(e) {
				return e
			}
		case <-deadline:
			t.Fatalf("no event for %s within 10 s", what)
			return sunk{}
		}
	}
}

// drain returns the events that come within d.
func (ch events) drain(d time.Duration) []sunk {
	var out []sunk
	deadline := time.After(d)
	for {
		select {
		case e := <-ch:
			out = append(out, e)
		case <-deadline:
			return out
		}
	}
}

// transfer is a test host's TCP server on addr in ns that reads what a
// client sends until it half-closes, then answers with reply bytes and
// closes.
func transfer(t *testing.T, ns *os.File, addr string, reply int) {
	t.Helper()
	var ln net.Listener
	if err := testns.In(ns, func() (err error) { ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatal(err)
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
				_ = c.SetDeadline(time.Now().Add(10 * time.Second))
				if _, err := io.Copy(io.Discard, c); err != nil {
					return
				}
				_, _ = c.Write(make([]byte, reply))
			}()
		}
	}()
}

// TestOpenNetworkEvidence: a TCP transfer from a sandbox to the test
// host is one flow event of that sandbox, with its destination, port and
// bytes each way, and counted in its Stats; a packet to a blocked range
// is a refusal event; a flood of them is recorded at most refusalBurst
// times, all counted; a flow open when its sandbox is detached is
// reported then.
func TestOpenNetworkEvidence(t *testing.T) {
	tp := newTopology(t)
	r := newRouter(t, tp.cfg)
	evs := collect(r)
	s1 := testns.New(t)
	l1, err := r.Attach("sandbox-one", s1, nil)
	if err != nil {
		t.Fatal(err)
	}
	const up, down = 20000, 300000
	transfer(t, tp.uplink, "198.51.100.2:8080", down)
	var got int64
	err = testns.In(s1, func() error {
		c, err := net.DialTimeout("tcp4", "198.51.100.2:8080", 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(make([]byte, up)); err != nil {
			return err
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			return err
		}
		got, err = io.Copy(io.Discard, c)
		return err
	})
	if err != nil || got != down {
		t.Fatalf("transfer: %v, %d bytes back; want %d", err, got, down)
	}
	e := evs.wait(t, "the transfer", func(e sunk) bool { return e.ev.Allowed && e.ev.Port == 8080 })
	ev := e.ev
	if e.id != "sandbox-one" || ev.Addr.String() != "198.51.100.2" || ev.Host != "198.51.100.2" || ev.Protocol != egress.ProtoOpen || ev.Reason != egress.ReasonAllowed {
		t.Fatalf("flow event %s %+v", e.id, ev)
	}
	// Bytes are IP bytes, headers included: a little over the payload.
	if ev.BytesUp < up || ev.BytesUp > up+up/4+4096 || ev.BytesDown < down || ev.BytesDown > down+down/4 {
		t.Errorf("flow bytes up %d down %d; want a little over %d and %d", ev.BytesUp, ev.BytesDown, up, down)
	}
	if ev.Start.IsZero() || ev.Duration <= 0 || ev.Duration > 10*time.Second || ev.End != egress.EndClosed {
		t.Errorf("flow start %v duration %v end %q", ev.Start, ev.Duration, ev.End)
	}
	st, ok := r.Stats("sandbox-one")
	if !ok || st.Conns != 1 || st.Active != 0 || st.BytesUp != ev.BytesUp || st.BytesDown != ev.BytesDown {
		t.Errorf("stats %+v, %v; want 1 flow, none open, its bytes", st, ok)
	}

	// One packet to a blocked range: a refusal, with its class.
	sendUDP(t, s1, l1.Addr.String(), "10.77.0.1:8081")
	e = evs.wait(t, "the refusal", func(e sunk) bool { return !e.ev.Allowed })
	if e.id != "sandbox-one" || e.ev.Reason != egress.ReasonBlockedAddress || e.ev.Class != egress.ClassPrivate ||
		e.ev.Addr.String() != "10.77.0.1" || e.ev.Port != 8081 || !strings.HasPrefix(e.ev.Detail, "udp;") {
		t.Fatalf("refusal event %s %+v", e.id, e.ev)
	}
	// To the host itself: refused as such.
	sendUDP(t, s1, l1.Addr.String(), l1.Gateway.String()+":9")
	e = evs.wait(t, "the refusal to the host", func(e sunk) bool { return !e.ev.Allowed })
	if e.ev.Port != 9 || !strings.Contains(e.ev.Detail, "the host") {
		t.Fatalf("refusal to the host %+v", e.ev)
	}

	// A flood: recorded within the burst, every logged packet counted.
	before, _ := r.Stats("sandbox-one")
	began := time.Now()
	err = testns.In(s1, func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: l1.Addr.AsSlice()}, &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1), Port: 8082})
		if err != nil {
			return err
		}
		defer c.Close()
		for range 300 {
			if _, err := c.Write([]byte("x")); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	flood := evs.drain(time.Second)
	after, _ := r.Stats("sandbox-one")
	// The tokens spent above were refilled; the flood may be recorded
	// up to the burst, and the rate for the time it took.
	if most := refusalBurst + int(time.Since(began).Seconds()*refusalRate) + 1; len(flood) == 0 || len(flood) > most {
		t.Fatalf("%d refusals recorded of a flood of 300; want 1 to %d", len(flood), most)
	}
	t.Logf("flood of 300: %d logged by the kernel (meter: %d/s, burst %d), %d recorded", after.Refused-before.Refused, refuseLogRate, refuseLogBurst, len(flood))
	if n := after.Refused - before.Refused; n < int64(len(flood))+20 {
		t.Fatalf("%d refusals counted of the flood, %d recorded; want the unrecorded counted too", n, len(flood))
	}

	// A flow open when the sandbox leaves is reported then.
	transfer(t, tp.uplink, "198.51.100.2:8090", 0) // holds until the client half-closes
	var open net.Conn
	if err := testns.In(s1, func() (err error) {
		open, err = net.DialTimeout("tcp4", "198.51.100.2:8090", 2*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	time.Sleep(200 * time.Millisecond)
	if st, _ := r.Stats("sandbox-one"); st.Active < 1 {
		t.Fatalf("stats %+v; want the open flow active", st)
	}
	if err := r.Detach("sandbox-one"); err != nil {
		t.Fatal(err)
	}
	e = evs.wait(t, "the flow open at the end", func(e sunk) bool { return e.ev.Port == 8090 && e.ev.End == egress.EndShutdown })
	if e.id != "sandbox-one" || e.ev.BytesUp == 0 {
		t.Fatalf("flow open at the end: %s %+v", e.id, e.ev)
	}
	if _, ok := r.Stats("sandbox-one"); ok {
		t.Error("a detached sandbox still has counters")
	}
}
