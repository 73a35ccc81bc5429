package agent

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Every test here stays on loopback: the bridge listens on 127.0.0.1
// and its "proxy" is a test server on 127.0.0.1 or a real egress.Proxy
// whose resolver is a map and whose dialer is never used.

// dnsQuery builds a query for name of type qt, with an EDNS0 OPT record
// announcing ednsSize when it is not 0.
func dnsQuery(t testing.TB, id uint16, name string, qt dnsmessage.Type, ednsSize int) []byte {
	t.Helper()
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: id, RecursionDesired: true})
	b.StartQuestions()
	if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qt, Class: dnsmessage.ClassINET}); err != nil {
		t.Fatal(err)
	}
	if ednsSize != 0 {
		b.StartAdditionals()
		var rh dnsmessage.ResourceHeader
		rh.SetEDNS0(ednsSize, dnsmessage.RCodeSuccess, false)
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	q, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// parsedAnswer is what a test reads of an answer.
type parsedAnswer struct {
	h     dnsmessage.Header
	qs    []dnsmessage.Question
	addrs []netip.Addr
}

func parseAnswer(t testing.TB, a []byte) parsedAnswer {
	t.Helper()
	var p dnsmessage.Parser
	var out parsedAnswer
	var err error
	if out.h, err = p.Start(a); err != nil {
		t.Fatalf("answer %x: %v", a, err)
	}
	if out.qs, err = p.AllQuestions(); err != nil {
		t.Fatal(err)
	}
	rs, err := p.AllAnswers()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			out.addrs = append(out.addrs, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			out.addrs = append(out.addrs, netip.AddrFrom16(b.AAAA))
		}
	}
	return out
}

// fakeDNSProxy is a stand-in for the egress proxy's DNS endpoint: it
// checks each request is the one the proxy expects and answers a
// question for "nN.test" with N A records (192.0.2.1); hold makes it
// wait before answering until released.
type fakeDNSProxy struct {
	t        *testing.T
	addr     string
	requests atomic.Int64
	inFlight atomic.Int64
	hold     chan struct{} // nil: answer at once
}

func newFakeDNSProxy(t *testing.T, hold bool) *fakeDNSProxy {
	t.Helper()
	f := &fakeDNSProxy{t: t}
	if hold {
		f.hold = make(chan struct{})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	srv := &http.Server{Handler: http.HandlerFunc(f.serve), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() {
		if f.hold != nil {
			select {
			case <-f.hold:
			default:
				close(f.hold)
			}
		}
		srv.Close()
	})
	return f
}

func (f *fakeDNSProxy) serve(w http.ResponseWriter, r *http.Request) {
	f.requests.Add(1)
	f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	if r.Method != http.MethodPost || r.RequestURI != "http://"+egress.DNSHost+egress.DNSPath ||
		r.Header.Get("Content-Type") != egress.DNSContentType {
		f.t.Errorf("request %s %s %q: not what the proxy's DNS endpoint takes", r.Method, r.RequestURI, r.Header.Get("Content-Type"))
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	q, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-r.Context().Done():
			return
		}
	}
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		http.Error(w, "bad", http.StatusBadRequest)
		return
	}
	qs, _ := p.AllQuestions()
	h.Response = true
	b := dnsmessage.NewBuilder(nil, h)
	b.StartQuestions()
	for _, q := range qs {
		b.Question(q)
	}
	b.StartAnswers()
	if len(qs) == 1 {
		label, _, _ := strings.Cut(qs[0].Name.String(), ".")
		n, _ := strconv.Atoi(strings.TrimPrefix(label, "n"))
		for range n {
			b.AResource(dnsmessage.ResourceHeader{Name: qs[0].Name, Class: dnsmessage.ClassINET, TTL: 30}, dnsmessage.AResource{A: [4]byte{192, 0, 2, 1}})
		}
	}
	a, _ := b.Finish()
	w.Header().Set("Content-Type", egress.DNSContentType)
	w.Write(a)
}

func (f *fakeDNSProxy) dial(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", f.addr)
}

// startDNSBridge serves b on fresh loopback sockets and returns their
// addresses; the bridge stops, and must return nil, when the test ends.
func startDNSBridge(t *testing.T, b *dnsBridge) (udpAddr, tcpAddr string) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.serve(ctx, pc, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ServeDNSBridge: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("ServeDNSBridge did not return after its context ended")
		}
	})
	return pc.LocalAddr().String(), ln.Addr().String()
}

// askUDP sends q and waits up to wait for an answer; nil when none came.
func askUDP(t testing.TB, addr string, q []byte, wait time.Duration) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(q); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65536)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

// writeTCPMsg writes one length-prefixed message.
func writeTCPMsg(t testing.TB, c net.Conn, m []byte) {
	t.Helper()
	if _, err := c.Write(binary.BigEndian.AppendUint16(nil, uint16(len(m)))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(m); err != nil {
		t.Fatal(err)
	}
}

// readTCPMsg reads one length-prefixed message.
func readTCPMsg(t testing.TB, c net.Conn) ([]byte, error) {
	t.Helper()
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	m := make([]byte, binary.BigEndian.Uint16(hdr[:]))
	_, err := io.ReadFull(c, m)
	return m, err
}

// TestDNSBridgeUDPAndTCP: a UDP query and several queries on one TCP
// connection (one of them written a byte at a time) each become one
// request to the proxy's DNS endpoint, and its answer comes back to the
// right query.
func TestDNSBridgeUDPAndTCP(t *testing.T) {
	f := newFakeDNSProxy(t, false)
	udpAddr, tcpAddr := startDNSBridge(t, newDNSBridge(f.dial))

	a := askUDP(t, udpAddr, dnsQuery(t, 0xbeef, "n2.test.", dnsmessage.TypeA, 0), 5*time.Second)
	if a == nil {
		t.Fatal("no UDP answer")
	}
	if p := parseAnswer(t, a); p.h.ID != 0xbeef || !p.h.Response || len(p.addrs) != 2 || p.h.Truncated {
		t.Errorf("UDP answer %+v", p)
	}

	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	for i := range 3 {
		q := dnsQuery(t, uint16(100+i), "n1.test.", dnsmessage.TypeA, 0)
		if i == 1 {
			m := binary.BigEndian.AppendUint16(nil, uint16(len(q)))
			for _, b := range append(m, q...) {
				c.Write([]byte{b})
				time.Sleep(time.Millisecond)
			}
		} else {
			writeTCPMsg(t, c, q)
		}
		a, err := readTCPMsg(t, c)
		if err != nil {
			t.Fatalf("TCP query %d: %v", i, err)
		}
		if p := parseAnswer(t, a); p.h.ID != uint16(100+i) || len(p.addrs) != 1 {
			t.Errorf("TCP answer %d: %+v", i, p)
		}
	}
	if n := f.requests.Load(); n != 4 {
		t.Errorf("%d requests to the proxy, want 4", n)
	}
}

// TestDNSBridgeTruncation: a UDP answer larger than the query allows
// (512 bytes, or its EDNS0 size) comes back as its header and question
// with TC set; one that fits, or any over TCP, whole.
func TestDNSBridgeTruncation(t *testing.T) {
	f := newFakeDNSProxy(t, false)
	udpAddr, tcpAddr := startDNSBridge(t, newDNSBridge(f.dial))
	const big = "n40.test." // 40 A records: over 512 bytes
	for _, tt := range []struct {
		edns  int
		trunc bool
	}{{0, true}, {512, true}, {1232, false}, {100, true}} {
		a := askUDP(t, udpAddr, dnsQuery(t, 9, big, dnsmessage.TypeA, tt.edns), 5*time.Second)
		if a == nil {
			t.Fatalf("edns %d: no answer", tt.edns)
		}
		p := parseAnswer(t, a)
		if p.h.Truncated != tt.trunc || p.h.ID != 9 || len(p.qs) != 1 {
			t.Errorf("edns %d: header %+v, %d questions; want TC %v", tt.edns, p.h, len(p.qs), tt.trunc)
		}
		if tt.trunc && (len(p.addrs) != 0 || len(a) > dnsUDPSize) {
			t.Errorf("edns %d: truncated answer of %d bytes with %d records", tt.edns, len(a), len(p.addrs))
		}
		if !tt.trunc && len(p.addrs) != 40 {
			t.Errorf("edns %d: %d records, want 40", tt.edns, len(p.addrs))
		}
	}
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	writeTCPMsg(t, c, dnsQuery(t, 10, big, dnsmessage.TypeA, 0))
	a, err := readTCPMsg(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if p := parseAnswer(t, a); p.h.Truncated || len(p.addrs) != 40 {
		t.Errorf("TCP: %+v with %d records", p.h, len(p.addrs))
	}
}

// TestDNSBridgeNoProxy: with no proxy to ask (the sandbox's mode is
// none: no socket to dial), every query gets SERVFAIL at once, over UDP
// and TCP, so that resolvers fail fast instead of timing out.
func TestDNSBridgeNoProxy(t *testing.T) {
	var dials atomic.Int64
	udpAddr, tcpAddr := startDNSBridge(t, newDNSBridge(func(context.Context) (net.Conn, error) {
		dials.Add(1)
		return nil, errors.New("no egress socket")
	}))
	start := time.Now()
	a := askUDP(t, udpAddr, dnsQuery(t, 5, "example.test.", dnsmessage.TypeAAAA, 0), 2*time.Second)
	if a == nil {
		t.Fatal("no UDP answer")
	}
	p := parseAnswer(t, a)
	if p.h.RCode != dnsmessage.RCodeServerFailure || p.h.ID != 5 || !p.h.Response || len(p.qs) != 1 || p.qs[0].Name.String() != "example.test." {
		t.Errorf("UDP: %+v %+v", p.h, p.qs)
	}
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	writeTCPMsg(t, c, dnsQuery(t, 6, "example.test.", dnsmessage.TypeA, 0))
	a, err = readTCPMsg(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if p := parseAnswer(t, a); p.h.RCode != dnsmessage.RCodeServerFailure || p.h.ID != 6 {
		t.Errorf("TCP: %+v", p.h)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("failures took %v", d)
	}
	if dials.Load() != 2 {
		t.Errorf("%d dials, want 2", dials.Load())
	}
}

// TestDNSBridgeBounds: a datagram over the size cap or not a query gets
// no answer and no request; a TCP message over the cap ends its
// connection; queries past the in-flight bound are dropped while the
// proxy holds the others; a proxy that does not answer in time gets the
// query a SERVFAIL.
func TestDNSBridgeBounds(t *testing.T) {
	f := newFakeDNSProxy(t, true)
	b := newDNSBridge(f.dial)
	b.timeout = 3 * time.Second
	udpAddr, tcpAddr := startDNSBridge(t, b)

	if a := askUDP(t, udpAddr, make([]byte, maxDNSQuery+1), 300*time.Millisecond); a != nil {
		t.Errorf("oversized datagram answered: %x", a)
	}
	if a := askUDP(t, udpAddr, []byte("short"), 300*time.Millisecond); a != nil {
		t.Errorf("short datagram answered: %x", a)
	}
	c, err := net.Dial("tcp", tcpAddr)
	if err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write(binary.BigEndian.AppendUint16(nil, maxDNSQuery+1))
	if _, err := readTCPMsg(t, c); err == nil {
		t.Error("a TCP message over the cap was answered")
	}
	c.Close()
	if n := f.requests.Load(); n != 0 {
		t.Fatalf("%d requests for messages out of bounds", n)
	}

	// The in-flight bound: the proxy holds every request.
	pc, err := net.Dial("udp", udpAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	for i := range maxDNSInFlight + 20 {
		pc.Write(dnsQuery(t, uint16(i), "n1.test.", dnsmessage.TypeA, 0))
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.inFlight.Load() < maxDNSInFlight && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if n := f.inFlight.Load(); n != maxDNSInFlight {
		t.Fatalf("%d queries at the proxy at once, want the bound %d", n, maxDNSInFlight)
	}
	// Held past the bridge's timeout: SERVFAIL for each.
	pc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 4096)
	got := map[uint16]bool{}
	for range maxDNSInFlight {
		n, err := pc.Read(buf)
		if err != nil {
			t.Fatalf("after %d answers: %v", len(got), err)
		}
		p := parseAnswer(t, buf[:n])
		if p.h.RCode != dnsmessage.RCodeServerFailure {
			t.Errorf("held query %d: %+v, want SERVFAIL", p.h.ID, p.h)
		}
		got[p.h.ID] = true
	}
	if len(got) != maxDNSInFlight {
		t.Errorf("%d distinct answers, want %d", len(got), maxDNSInFlight)
	}
	pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if n, err := pc.Read(buf); err == nil {
		t.Errorf("a dropped query was answered: %x", buf[:n])
	}
}

// mapResolver resolves names from a map.
type mapResolver map[string][]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// noDialer fails its test when the proxy dials: DNS never connects
// anywhere.
type noDialer struct{ t *testing.T }

func (d noDialer) DialContext(_ context.Context, network, addr string) (net.Conn, error) {
	d.t.Errorf("the proxy dialled %s %s", network, addr)
	return nil, errors.New("no dialling here")
}

// TestDNSBridgeProxy: the bridge and the real egress proxy agree on the
// endpoint: an allowed name is answered with its address, a denied one
// REFUSED with a refusal event.
func TestDNSBridgeProxy(t *testing.T) {
	pol, err := egress.ParsePolicy([]string{"allowed.test"})
	if err != nil {
		t.Fatal(err)
	}
	evs := make(chan egress.Event, 10)
	px, err := egress.New(egress.Config{
		Policy:   pol,
		Resolver: mapResolver{"allowed.test": {netip.MustParseAddr("192.0.2.7")}, "denied.test": {netip.MustParseAddr("192.0.2.8")}},
		Dialer:   noDialer{t},
		OnEvent:  func(ev egress.Event) { evs <- ev },
	})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- px.Serve(ctx, ln) }()
	defer func() {
		cancel()
		<-served
	}()
	udpAddr, _ := startDNSBridge(t, newDNSBridge(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", ln.Addr().String())
	}))
	a := askUDP(t, udpAddr, dnsQuery(t, 1, "allowed.test.", dnsmessage.TypeA, 0), 5*time.Second)
	if a == nil {
		t.Fatal("no answer for the allowed name")
	}
	if p := parseAnswer(t, a); p.h.RCode != dnsmessage.RCodeSuccess || len(p.addrs) != 1 || p.addrs[0].String() != "192.0.2.7" {
		t.Errorf("allowed name: %+v %v", p.h, p.addrs)
	}
	a = askUDP(t, udpAddr, dnsQuery(t, 2, "denied.test.", dnsmessage.TypeA, 0), 5*time.Second)
	if a == nil {
		t.Fatal("no answer for the denied name")
	}
	if p := parseAnswer(t, a); p.h.RCode != dnsmessage.RCodeRefused || len(p.addrs) != 0 {
		t.Errorf("denied name: %+v %v", p.h, p.addrs)
	}
	select {
	case ev := <-evs:
		if ev.Allowed || ev.Protocol != egress.ProtoDNS || ev.Host != "denied.test" {
			t.Errorf("event %+v", ev)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event for the denied name")
	}
	if st := px.Stats(); st.DNSQueries != 2 || st.Refused != 1 {
		t.Errorf("proxy stats %+v", st)
	}
}
