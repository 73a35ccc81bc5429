package opennet

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/testns"
)

func handle(t *testing.T, ns *os.File) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(netns.NsHandle(int(ns.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

func mustAddr(t *testing.T, h *netlink.Handle, link, cidr string) {
	t.Helper()
	l, err := h.LinkByName(link)
	if err != nil {
		t.Fatal(err)
	}
	a, err := netlink.ParseAddr(cidr)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddrAdd(l, a); err != nil {
		t.Fatalf("addr %s on %s: %v", cidr, link, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		t.Fatal(err)
	}
}

// server is a TCP listener in a test namespace that answers each
// connection with the address it saw the connection come from, and
// counts them.
type server struct {
	ln       net.Listener
	accepted atomic.Int64
}

func listen(t *testing.T, ns *os.File, addr string) *server {
	t.Helper()
	s := &server{}
	if err := testns.In(ns, func() (err error) { s.ln, err = net.Listen("tcp4", addr); return err }); err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { s.ln.Close() })
	go func() {
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			fmt.Fprintf(c, "%s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	return s
}

// dial connects from ns to addr (from local, if set) and returns what the
// server said.
func dial(t *testing.T, ns *os.File, local, addr string) (string, error) {
	t.Helper()
	var c net.Conn
	err := testns.In(ns, func() error {
		d := net.Dialer{Timeout: 400 * time.Millisecond}
		if local != "" {
			d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
		}
		var err error
		c, err = d.Dial("tcp4", addr)
		return err
	})
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return "", err
	}
	return strings.TrimSpace(line), nil
}

// listenUDP counts the datagrams that reach addr in ns.
func listenUDP(t *testing.T, ns *os.File, addr string) *atomic.Int64 {
	t.Helper()
	var pc net.PacketConn
	if err := testns.In(ns, func() (err error) { pc, err = net.ListenPacket("udp4", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	n := new(atomic.Int64)
	go func() {
		buf := make([]byte, 64)
		for {
			if _, _, err := pc.ReadFrom(buf); err != nil {
				return
			}
			n.Add(1)
		}
	}()
	return n
}

// sendUDP sends one datagram from local, in ns, to addr.
func sendUDP(t *testing.T, ns *os.File, local, addr string) {
	t.Helper()
	err := testns.In(ns, func() error {
		c, err := net.DialUDP("udp4", &net.UDPAddr{IP: net.ParseIP(local)}, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("x"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// topology: a router namespace whose uplink (198.51.100.1/24) leads to an
// uplink namespace playing the outside world: a test host on
// 198.51.100.2 and a host of a blocked range, 10.77.0.1, behind it.
type topology struct {
	router, uplink *os.File
	cfg            Config
}

func newTopology(t *testing.T) topology {
	testutil.RequireRoot(t, "creates network namespaces, veths and nftables tables")
	tp := topology{router: testns.New(t), uplink: testns.New(t)}
	rh, uh := handle(t, tp.router), handle(t, tp.uplink)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "up0"}, PeerName: "up1",
		PeerNamespace: netlink.NsFd(int(tp.uplink.Fd()))}
	if err := rh.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	mustAddr(t, rh, "up0", "198.51.100.1/24")
	mustAddr(t, uh, "up1", "198.51.100.2/24")
	mustAddr(t, uh, "lo", "10.77.0.1/32")
	up0, _ := rh.LinkByName("up0")
	if err := rh.RouteAdd(&netlink.Route{LinkIndex: up0.Attrs().Index, Gw: net.ParseIP("198.51.100.2")}); err != nil {
		t.Fatal(err)
	}
	tp.cfg = Config{Uplink: "up0", NetNS: fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), tp.router.Fd())}
	return tp
}

func newRouter(t *testing.T, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

const blocked = "refused (no packet reached the host)"

// TestOpenNetwork is the open mode end to end on the router: two
// sandboxes get distinct addresses, reach the test host masqueraded,
// and cannot reach each other, the router's services, a blocked range
// (unless listed) or the outside with a spoofed source; detaching leaves
// no veth, no address and no rule.
func TestOpenNetwork(t *testing.T) {
	tp := newTopology(t)
	r := newRouter(t, tp.cfg)
	s1, s2 := testns.New(t), testns.New(t)
	l1, err := r.Attach("sandbox-one", s1, nil)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := r.Attach("sandbox-two", s2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l1.Addr == l2.Addr || !r.Pool().Contains(l1.Addr) || !r.Pool().Contains(l2.Addr) {
		t.Fatalf("leases %v and %v: want distinct addresses of %s", l1, l2, r.Pool())
	}

	web := listen(t, tp.uplink, "198.51.100.2:8080")
	private := listen(t, tp.uplink, "10.77.0.1:8080")
	hostSvc := listen(t, tp.router, "0.0.0.0:9090")
	peer := listen(t, s2, l2.Addr.String()+":7070")

	for _, s := range []*os.File{s1, s2} {
		got, err := dial(t, s, "", "198.51.100.2:8080")
		if err != nil {
			t.Fatalf("sandbox to the test host: %v", err)
		}
		if !strings.HasPrefix(got, "198.51.100.1:") {
			t.Errorf("the test host saw %s; want the uplink's address (masqueraded)", got)
		}
	}
	refused := []struct{ name, from, local, to string }{
		{"another sandbox", "s1", "", l2.Addr.String() + ":7070"},
		{"the router's uplink address", "s1", "", "198.51.100.1:9090"},
		{"its own gateway", "s1", "", l1.Gateway.String() + ":9090"},
		{"another sandbox's gateway", "s1", "", l2.Gateway.String() + ":9090"},
		{"a blocked range", "s2", "", "10.77.0.1:8080"},
		{"a spoofed source", "s1", l2.Addr.String(), "198.51.100.2:8080"},
	}
	// The spoofing sandbox holds the other's address too.
	mustAddr(t, handle(t, s1), "eth0", l2.Addr.String()+"/32")
	before := web.accepted.Load()
	for _, c := range refused {
		ns := map[string]*os.File{"s1": s1, "s2": s2}[c.from]
		if got, err := dial(t, ns, c.local, c.to); err == nil {
			t.Errorf("%s: reached %s (it answered %q); want %s", c.name, c.to, got, blocked)
		}
	}
	if n := peer.accepted.Load() + hostSvc.accepted.Load() + private.accepted.Load() + web.accepted.Load() - before; n != 0 {
		t.Errorf("%d refused connections reached a listener", n)
	}

	// Listing the blocked range opens it to that sandbox only, and from
	// its own address only; the pool stays closed though listed (an
	// address of it that the router would route out of the uplink).
	mustAddr(t, handle(t, tp.uplink), "lo", "100.96.255.253/32")
	poolHost := listen(t, tp.uplink, "100.96.255.253:8080")
	mustAddr(t, handle(t, s2), "eth0", l1.Addr.String()+"/32")
	listed := []netip.Prefix{netip.MustParsePrefix("10.77.0.0/24"), r.Pool()}
	if _, err := r.Attach("sandbox-two", s2, listed); err != nil {
		t.Fatal(err)
	}
	if _, err := dial(t, s2, "", "10.77.0.1:8080"); err != nil {
		t.Errorf("listed range: %v", err)
	}
	before = private.accepted.Load()
	if _, err := dial(t, s1, "", "10.77.0.1:8080"); err == nil {
		t.Errorf("sandbox one reached the range sandbox two listed")
	}
	// A spoofed source: the SYN would get out although its reply cannot
	// come back, so datagrams show it (one from the sandbox's own
	// address first, which must arrive).
	udp := listenUDP(t, tp.uplink, "10.77.0.1:8081")
	sendUDP(t, s2, l2.Addr.String(), "10.77.0.1:8081")
	sendUDP(t, s2, l1.Addr.String(), "10.77.0.1:8081")
	time.Sleep(300 * time.Millisecond)
	if got := udp.Load(); got != 1 {
		t.Errorf("the test host got %d datagrams; want 1 (the one from the sandbox's own address, not the spoofed one)", got)
	}
	if _, err := dial(t, s2, "", "100.96.255.253:8080"); err == nil {
		t.Errorf("the listed pool was reached")
	}
	if n := private.accepted.Load() - before + poolHost.accepted.Load(); n != 0 {
		t.Errorf("%d refused connections reached a listener", n)
	}

	// Detach: no veth on either side, no address, no rule.
	for _, id := range []string{"sandbox-one", "sandbox-two"} {
		if err := r.Detach(id); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, tp, r, s1, s2)
}

// assertEmpty checks that nothing of any sandbox is left in the router.
func assertEmpty(t *testing.T, tp topology, r *Router, sandboxes ...*os.File) {
	t.Helper()
	links, err := handle(t, tp.router).LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, linkPrefix) {
			t.Errorf("veth %s left in the router", l.Attrs().Name)
		}
	}
	for _, s := range sandboxes {
		if _, err := handle(t, s).LinkByName("eth0"); err == nil {
			t.Errorf("eth0 left in a sandbox")
		}
	}
	if n := r.pool.Len(); n != 0 {
		t.Errorf("%d leases left", n)
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(tp.router.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	tbl := &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}
	rules, err := c.GetRules(tbl, &nftables.Chain{Name: chainFrom, Table: tbl})
	if err != nil {
		t.Fatal(err)
	}
	if want := countChain(ruleset(tp.cfg.Uplink, r.Pool(), DefaultLogGroup, nil), chainFrom); len(rules) != want {
		t.Errorf("%s has %d rules; want %d (none for a sandbox)", chainFrom, len(rules), want)
	}
}

func countChain(rs []rule, chain string) int {
	n := 0
	for _, r := range rs {
		if r.chain == chain {
			n++
		}
	}
	return n
}

// TestRouterRestart: a new Router (a restarted daemon) learns the veths
// the previous one left, keeps the leases of the sandboxes claimed, and
// Prune removes the rest.
func TestRouterRestart(t *testing.T) {
	tp := newTopology(t)
	r := newRouter(t, tp.cfg)
	s1, s2 := testns.New(t), testns.New(t)
	l1, err := r.Attach("kept", s1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Attach("gone", s2, nil); err != nil {
		t.Fatal(err)
	}
	r.Close()

	r2 := newRouter(t, tp.cfg)
	if got, ok := r2.Attached("kept"); !ok || got.Addr != l1.Addr {
		t.Fatalf("relearned lease %v, %v; want %v", got, ok, l1)
	}
	if err := r2.Prune(func(id string) bool { return id == "kept" }); err != nil {
		t.Fatal(err)
	}
	if _, ok := r2.Attached("gone"); ok {
		t.Fatal("pruned sandbox still attached")
	}
	// The kept sandbox still gets out, under the new daemon's table.
	listen(t, tp.uplink, "198.51.100.2:8080")
	if _, err := dial(t, s1, "", "198.51.100.2:8080"); err != nil {
		t.Fatalf("adopted sandbox: %v", err)
	}
	// A new lease does not reuse the kept one.
	s3 := testns.New(t)
	l3, err := r2.Attach("new", s3, nil)
	if err != nil {
		t.Fatal(err)
	}
	if l3.Addr == l1.Addr {
		t.Fatalf("new sandbox got the adopted sandbox's address %s", l1.Addr)
	}
	for _, id := range []string{"kept", "new"} {
		if err := r2.Detach(id); err != nil {
			t.Fatal(err)
		}
	}
	assertEmpty(t, tp, r2, s1, s2, s3)
}

// TestRouterRefuses: no uplink, or an uplink that does not exist, and
// there is no Router (the open mode is refused, never unfiltered).
func TestRouterRefuses(t *testing.T) {
	tp := newTopology(t)
	for _, cfg := range []Config{
		{NetNS: tp.cfg.NetNS},
		{NetNS: tp.cfg.NetNS, Uplink: "nosuch0"},
		{NetNS: tp.cfg.NetNS, Uplink: "up0", Pool: netip.MustParsePrefix("198.51.100.0/24")},
	} {
		if r, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil {
			r.Close()
			t.Errorf("New(%+v) succeeded", cfg)
		}
	}
}
