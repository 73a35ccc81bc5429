package opennet

import (
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
)

// sink collects the events a ledger emits.
type sink struct {
	mu  sync.Mutex
	evs []sunk
}

type sunk struct {
	id string
	ev egress.Event
}

func (s *sink) f(id string, ev egress.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.evs = append(s.evs, sunk{id, ev})
}

func (s *sink) take() []sunk {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.evs
	s.evs = nil
	return out
}

func testLedger(t *testing.T, maxFlows, perSandbox int) (*ledger, *sink) {
	t.Helper()
	l := newLedger(slog.New(slog.NewTextHandler(io.Discard, nil)), maxFlows, perSandbox)
	s := &sink{}
	l.setSink(s.f)
	return l, s
}

var (
	addrOne = netip.MustParseAddr("100.96.0.2")
	addrTwo = netip.MustParseAddr("100.96.0.6")
	web     = netip.MustParseAddrPort("198.51.100.2:8080")
	t0      = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func key(id uint32, src netip.Addr, sport uint16) flowKey {
	return flowKey{id: id, proto: 6, src: netip.AddrPortFrom(src, sport), dst: web}
}

// TestLedgerFlow: a flow of a sandbox's address is counted when it
// begins and reported once when it ends, with its sandbox, destination,
// bytes and duration, whether its end is seen first as a TCP close or as
// the tracker's DESTROY; a flow of another address is not reported.
func TestLedgerFlow(t *testing.T) {
	l, s := testLedger(t, 0, 0)
	l.attach("one", addrOne, 11)
	k := key(1, addrOne, 40000)
	l.begun(k, t0)
	l.begun(key(2, netip.MustParseAddr("100.96.9.9"), 1), t0) // no sandbox's
	if st, _ := l.stats("one"); st.Conns != 1 || st.Active != 1 {
		t.Fatalf("stats after the flow began: %+v", st)
	}
	// Closing (TIME_WAIT), then its DESTROY minutes later: one event.
	l.ended(k, flowEnd{up: 1200, down: 64000, stop: t0.Add(1500 * time.Millisecond), end: egress.EndClosed})
	l.ended(k, flowEnd{up: 1300, down: 64100, stop: t0.Add(2 * time.Minute), end: egress.EndClosed, destroyed: true})
	l.ended(key(2, netip.MustParseAddr("100.96.9.9"), 1), flowEnd{up: 1, stop: t0, destroyed: true})
	evs := s.take()
	if len(evs) != 1 {
		t.Fatalf("%d events; want 1: %+v", len(evs), evs)
	}
	ev := evs[0]
	want := egress.Event{Start: t0, Protocol: egress.ProtoOpen, Host: "198.51.100.2", Port: 8080, Addr: web.Addr(),
		Allowed: true, Reason: egress.ReasonAllowed, BytesUp: 1200, BytesDown: 64000, Duration: 1500 * time.Millisecond, End: egress.EndClosed}
	detail := ev.ev.Detail
	ev.ev.Detail = ""
	if ev.id != "one" || ev.ev != want {
		t.Fatalf("event %s %+v;\nwant one %+v", ev.id, ev.ev, want)
	}
	if !strings.HasPrefix(detail, "tcp;") || !strings.Contains(detail, "no name") {
		t.Errorf("detail %q: want the protocol and that no name is seen", detail)
	}
	st, _ := l.stats("one")
	if (st != egress.Stats{Conns: 1, Allowed: 1, BytesUp: 1200, BytesDown: 64000}) {
		t.Errorf("stats %+v", st)
	}
	// The done entry went with the DESTROY.
	if len(l.done) != 0 {
		t.Errorf("%d flows still remembered as reported", len(l.done))
	}
}

// TestLedgerCaps: flows over the per-sandbox or the overall cap are
// counted but not tracked, and their end is still reported; the table
// never holds more than the caps.
func TestLedgerCaps(t *testing.T) {
	l, s := testLedger(t, 3, 2)
	l.attach("one", addrOne, 11)
	l.attach("two", addrTwo, 12)
	for i := range 4 {
		l.begun(key(uint32(i), addrOne, uint16(1000+i)), t0)
	}
	for i := range 2 {
		l.begun(key(uint32(10+i), addrTwo, uint16(2000+i)), t0)
	}
	if n := len(l.flows); n != 3 {
		t.Fatalf("%d flows tracked; want 3 (the overall cap)", n)
	}
	one, _ := l.stats("one")
	two, _ := l.stats("two")
	if one.Conns != 4 || one.Active != 2 || two.Conns != 2 || two.Active != 1 {
		t.Fatalf("stats one %+v two %+v; want 4 flows, 2 tracked (per-sandbox cap) and 2 flows, 1 tracked", one, two)
	}
	if n := l.untracked.Load(); n != 3 {
		t.Errorf("untracked %d; want 3", n)
	}
	// An untracked flow's end is reported, its start from the kernel.
	l.ended(key(3, addrOne, 1003), flowEnd{up: 5, stop: t0.Add(time.Second), start: t0.Add(-time.Second), destroyed: true})
	evs := s.take()
	if len(evs) != 1 || evs[0].id != "one" || evs[0].ev.Duration != 2*time.Second {
		t.Fatalf("events %+v; want one for sandbox one lasting 2s", evs)
	}
}

// TestLedgerDetach: a sandbox's open flows come back at its end (to be
// reported) and their later DESTROY is not reported again; its counters
// are gone, and its address no longer maps to it.
func TestLedgerDetach(t *testing.T) {
	l, s := testLedger(t, 0, 0)
	l.attach("one", addrOne, 11)
	k := key(7, addrOne, 3000)
	l.begun(k, t0)
	open := l.detach("one", t0.Add(time.Second))
	if len(open) != 1 || open[0].key != k || open[0].sandbox != "one" || !open[0].start.Equal(t0) {
		t.Fatalf("open flows at the end: %+v", open)
	}
	l.attach("new", addrOne, 13) // the address, reused
	l.ended(k, flowEnd{up: 9, stop: t0.Add(time.Minute), destroyed: true})
	if evs := s.take(); len(evs) != 0 {
		t.Fatalf("a flow reported at its sandbox's end was reported again: %+v", evs)
	}
	if _, ok := l.stats("one"); ok {
		t.Error("the detached sandbox still has counters")
	}
	if st, _ := l.stats("new"); st.BytesUp != 0 {
		t.Errorf("the old flow's bytes went to the address's new sandbox: %+v", st)
	}
}

// TestLedgerRefusals: a refusal is counted against the sandbox whose
// interface it came in on and recorded, at most refusalBurst at once and
// refusalRate a second; the next one recorded says how many were not.
func TestLedgerRefusals(t *testing.T) {
	l, s := testLedger(t, 0, 0)
	l.attach("one", addrOne, 11)
	r := refusal{code: refusedBlocked, index: 11, proto: 17, src: addrOne, dst: netip.MustParseAddr("10.77.0.1"), port: 53}
	for range 1000 {
		l.refused(r, t0)
	}
	l.refused(refusal{code: refusedHost, index: 99}, t0) // no sandbox's interface
	evs := s.take()
	if len(evs) != refusalBurst {
		t.Fatalf("%d refusals recorded at once; want %d (the burst)", len(evs), refusalBurst)
	}
	ev := evs[0].ev
	if evs[0].id != "one" || ev.Allowed || ev.Reason != egress.ReasonBlockedAddress || ev.Class != egress.ClassPrivate ||
		ev.Addr != r.dst || ev.Host != "10.77.0.1" || ev.Port != 53 || ev.Protocol != egress.ProtoOpen {
		t.Fatalf("refusal event %s %+v", evs[0].id, ev)
	}
	if st, _ := l.stats("one"); st.Refused != 1000 {
		t.Fatalf("refused %d; want 1000 (the unrecorded counted)", st.Refused)
	}
	// A second later: refusalRate more, the first saying how many went
	// unrecorded.
	for range 100 {
		l.refused(r, t0.Add(time.Second))
	}
	evs = s.take()
	if len(evs) != refusalRate {
		t.Fatalf("%d recorded a second later; want %d", len(evs), refusalRate)
	}
	if want := "980 refusals before this one were not recorded"; !strings.Contains(evs[0].ev.Detail, want) {
		t.Errorf("detail %q; want %q", evs[0].ev.Detail, want)
	}
}

// TestLedgerNoSink: evidence with no sink is counted, not lost silently.
func TestLedgerNoSink(t *testing.T) {
	l := newLedger(slog.New(slog.NewTextHandler(io.Discard, nil)), 0, 0)
	l.attach("one", addrOne, 11)
	l.refused(refusal{code: refusedSandbox, index: 11}, t0)
	if n := l.unsunk.Load(); n != 1 {
		t.Fatalf("unsunk %d; want 1", n)
	}
}

func TestRefusalReasons(t *testing.T) {
	for _, c := range refusalCodes {
		reason, detail := c.reason()
		if reason == "" || detail == "" || strings.Contains(detail, "refused by the open network's table") {
			t.Errorf("refusal %q has no reason of its own (%q, %q)", c, reason, detail)
		}
	}
}
