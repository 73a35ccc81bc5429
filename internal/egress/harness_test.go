package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// Every test here moves traffic only over loopback: test names resolve
// (fakeResolver) to 127.0.0.x, and the dialer refuses any other address
// (and fails the test) before a packet could leave.

// fakeResolver maps test names to addresses and counts lookups.
type fakeResolver struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	calls []string
}

func newFakeResolver(m map[string]string) *fakeResolver {
	r := &fakeResolver{names: map[string][]netip.Addr{}}
	for name, addrs := range m {
		for a := range strings.SplitSeq(addrs, ",") {
			r.names[name] = append(r.names[name], netip.MustParseAddr(a))
		}
	}
	return r
}

func (r *fakeResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, host)
	if a, ok := r.names[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// loopbackDialer dials loopback addresses only and records them. An
// address literal is all the proxy may give it; anything else fails the
// test. With failAll, any dial fails the test: refusals must come
// before dialling.
type loopbackDialer struct {
	t       testing.TB
	failAll bool
	mu      sync.Mutex
	dials   []string
}

func (d *loopbackDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	d.mu.Lock()
	d.dials = append(d.dials, address)
	failAll := d.failAll
	d.mu.Unlock()
	if failAll {
		d.t.Errorf("dial %s %s: no dial may happen in this test", network, address)
		return nil, errors.New("test: dialling forbidden")
	}
	ap, err := netip.ParseAddrPort(address)
	if err != nil || network != "tcp" {
		d.t.Errorf("dial %s %q: want tcp and an address literal", network, address)
		return nil, errors.New("test: not an address literal")
	}
	if !ap.Addr().IsLoopback() {
		d.t.Errorf("dial %s: not a loopback address", address)
		return nil, errors.New("test: not loopback")
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, address)
}

func (d *loopbackDialer) forbid(on bool) {
	d.mu.Lock()
	d.failAll = on
	d.mu.Unlock()
}

func (d *loopbackDialer) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.dials)
}

// events collects a proxy's events.
type events struct {
	mu  sync.Mutex
	evs []Event
	ch  chan Event
}

func newEvents() *events { return &events{ch: make(chan Event, 1000)} }

func (e *events) add(ev Event) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
	e.ch <- ev
}

// next waits for the next event.
func (e *events) next(t testing.TB) Event {
	t.Helper()
	select {
	case ev := <-e.ch:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
		return Event{}
	}
}

// none checks that no event comes within d.
func (e *events) none(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case ev := <-e.ch:
		t.Fatalf("unexpected event %+v", ev)
	case <-time.After(d):
	}
}

// harness is a proxy serving on a loopback listener.
type harness struct {
	t      testing.TB
	proxy  *Proxy
	addr   string // the proxy's listener
	res    *fakeResolver
	dialer *loopbackDialer
	events *events
	cancel context.CancelFunc
	done   chan error
}

type harnessOpt func(*Config)

func withLimits(l Limits) harnessOpt { return func(c *Config) { c.Limits = l } }

func newHarness(t testing.TB, entries []string, names map[string]string, opts ...harnessOpt) *harness {
	t.Helper()
	pol, err := ParsePolicy(entries)
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{t: t, res: newFakeResolver(names), dialer: &loopbackDialer{t: t}, events: newEvents(), done: make(chan error, 1)}
	cfg := Config{Policy: pol, Resolver: h.res, Dialer: h.dialer, OnEvent: h.events.add}
	for _, o := range opts {
		o(&cfg)
	}
	h.proxy, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() { h.done <- h.proxy.Serve(ctx, ln) }()
	t.Cleanup(h.stop)
	return h
}

// stop ends Serve and checks it returns nil, at most once.
func (h *harness) stop() {
	h.cancel()
	select {
	case err, ok := <-h.done:
		if ok && err != nil {
			h.t.Errorf("Serve: %v", err)
		}
		if ok {
			close(h.done)
		}
	case <-time.After(10 * time.Second):
		h.t.Error("Serve did not return within 10s of its context's end")
	}
}

func (h *harness) setPolicy(entries ...string) {
	h.t.Helper()
	pol, err := ParsePolicy(entries)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := h.proxy.SetPolicy(pol); err != nil {
		h.t.Fatal(err)
	}
}

// dialProxy opens a raw connection to the proxy.
func (h *harness) dialProxy() net.Conn {
	h.t.Helper()
	c, err := net.DialTimeout("tcp", h.addr, 5*time.Second)
	if err != nil {
		h.t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(20 * time.Second))
	h.t.Cleanup(func() { c.Close() })
	return c
}

// connect sends CONNECT target and returns the connection, its reader
// and the status line's code.
func (h *harness) connect(target string) (net.Conn, *bufio.Reader, int, string) {
	h.t.Helper()
	c := h.dialProxy()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	code, head := readHead(h.t, br)
	return c, br, code, head
}

// readHead reads an HTTP response head and returns its status code and
// the whole head.
func readHead(t testing.TB, br *bufio.Reader) (int, string) {
	t.Helper()
	var head strings.Builder
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("reading response head: %v (so far %q)", err, head.String())
		}
		head.WriteString(line)
		if line == "\r\n" {
			break
		}
	}
	var code int
	if _, err := fmt.Sscanf(head.String(), "HTTP/1.1 %d", &code); err != nil {
		t.Fatalf("status line of %q: %v", head.String(), err)
	}
	return code, head.String()
}

// echoServer is a loopback TCP server that echoes each connection and
// counts connections.
type echoServer struct {
	ln    net.Listener
	mu    sync.Mutex
	conns int
}

func newEchoServer(t testing.TB) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &echoServer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns++
			s.mu.Unlock()
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return s
}

func (s *echoServer) port() int { return s.ln.Addr().(*net.TCPAddr).Port }

func (s *echoServer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conns
}
