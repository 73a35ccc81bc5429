package opennet

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Config configures a Router.
type Config struct {
	// Uplink is the interface, in the router's namespace, through which
	// sandboxes' traffic leaves, masqueraded to its address. Required:
	// the Router never guesses it from the default route.
	Uplink string
	// Pool is the IPv4 prefix sandboxes' /30s come from; DefaultPool if
	// unset. It must not overlap an address of the router's namespace.
	Pool netip.Prefix
	// NetNS, if set, is the path of the network namespace (for example
	// /run/netns/airlock) that holds the host ends, the uplink and the
	// table; the daemon's own namespace if empty.
	NetNS string
	// LogGroup is the nflog group refused packets are logged to, read
	// by the Router only; DefaultLogGroup if zero.
	LogGroup uint16
	// MaxFlows and MaxFlowsPerSandbox cap the open flows the Router
	// tracks (see DefaultMaxFlows); the defaults if zero.
	MaxFlows, MaxFlowsPerSandbox int
}

// Router plugs open sandboxes into the router namespace. Its methods are
// safe for concurrent use.
type Router struct {
	cfg  Config
	log  *slog.Logger
	ns   netns.NsHandle // the router's namespace
	nl   *netlink.Handle
	nft  *nftables.Conn
	led  *ledger  // the evidence: counters, open flows
	mon  *monitor // reads the evidence from the kernel
	mu   sync.Mutex
	pool *Pool
	sbx  map[string]*attached // by sandbox ID
}

// attached is one sandbox's veth.
type attached struct {
	lease Lease
	link  string
	index int // the host end's interface index
	allow []netip.Prefix
}

// New checks cfg, opens the router namespace, enables forwarding on the
// uplink, learns the veths a previous daemon left (Prune removes those no
// sandbox claims), starts reading the evidence (connection tracking
// events, with accounting and timestamps turned on in the namespace, and
// the table's nflog group) and installs the table. It fails, and the
// open mode is then refused, when the uplink is missing, nftables cannot
// be programmed or the evidence cannot be read.
func New(cfg Config, log *slog.Logger) (*Router, error) {
	if cfg.Uplink == "" {
		return nil, fmt.Errorf("open network: no uplink interface is configured: %w", errdefs.ErrFailedPrecondition)
	}
	if cfg.LogGroup == 0 {
		cfg.LogGroup = DefaultLogGroup
	}
	if len(cfg.Uplink) >= unix.IFNAMSIZ || strings.HasPrefix(cfg.Uplink, linkPrefix) {
		return nil, fmt.Errorf("open network: uplink %q is not a usable interface name: %w", cfg.Uplink, errdefs.ErrInvalidArgument)
	}
	if !cfg.Pool.IsValid() {
		cfg.Pool = DefaultPool
	}
	pool, err := NewPool(cfg.Pool)
	if err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, log: log, pool: pool, sbx: map[string]*attached{},
		led: newLedger(log, cfg.MaxFlows, cfg.MaxFlowsPerSandbox)}
	if cfg.NetNS != "" {
		r.ns, err = netns.GetFromPath(cfg.NetNS)
	} else {
		r.ns, err = netns.Get()
	}
	if err != nil {
		return nil, fmt.Errorf("open network: router namespace: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			r.Close()
		}
	}()
	if r.nl, err = netlink.NewHandleAt(r.ns); err != nil {
		return nil, fmt.Errorf("open network: netlink: %w", err)
	}
	if r.nft, err = nftables.New(nftables.WithNetNSFd(int(r.ns))); err != nil {
		return nil, fmt.Errorf("open network: nftables: %w", err)
	}
	up, err := r.nl.LinkByName(cfg.Uplink)
	if err != nil {
		return nil, fmt.Errorf("open network: uplink %q: %w: %v", cfg.Uplink, errdefs.ErrFailedPrecondition, err)
	}
	if addrs, err := r.nl.AddrList(nil, netlink.FAMILY_V4); err == nil {
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && cfg.Pool.Contains(ip) && !strings.HasPrefix(a.Label, linkPrefix) {
				return nil, fmt.Errorf("open network: pool %s holds the router's address %s: %w", cfg.Pool, ip, errdefs.ErrInvalidArgument)
			}
		}
	}
	if err := r.forwarding(up.Attrs().Name); err != nil {
		return nil, err
	}
	if err := r.learn(); err != nil {
		return nil, err
	}
	for id, a := range r.sbx {
		r.led.attach(id, a.lease.Addr, a.index)
	}
	if err := r.evidence(); err != nil {
		return nil, err
	}
	if err := r.applyLocked(); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// evidence turns on the connection tracker's byte counters and
// timestamps in the router's namespace (for the flows that begin from
// now on) and starts the monitor.
func (r *Router) evidence() error {
	err := r.inNS(func() error {
		for _, k := range []string{"nf_conntrack_acct", "nf_conntrack_timestamp"} {
			if err := os.WriteFile("/proc/sys/net/netfilter/"+k, []byte("1"), 0); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("open network: connection tracking accounting: %w", err)
	}
	if r.mon, err = startMonitor(int(r.ns), r.cfg.LogGroup, r.led, r.log); err != nil {
		return fmt.Errorf("open network: evidence: %w", err)
	}
	return nil
}

// OnEvent makes f receive the evidence of every attached sandbox from now
// on: one egress.Event (Protocol egress.ProtoOpen) per flow when it ends
// and per refused packet recorded (see Sink).
func (r *Router) OnEvent(f Sink) { r.led.setSink(f) }

// Stats returns sandbox id's counters since it was attached (or adopted
// by this Router): flows begun (Conns, Allowed), flows open and tracked
// (Active), packets refused (Refused, the unrecorded included), and the
// IP bytes (headers included) of the flows ended, each way.
func (r *Router) Stats(id string) (egress.Stats, bool) { return r.led.stats(id) }

// Close releases the Router's handles; the veths and the table stay (the
// sandboxes keep their network across a daemon restart), and so do their
// flows: a flow open now is reported by the next Router when it ends.
func (r *Router) Close() {
	if r.mon != nil {
		r.mon.close()
	}
	if r.nl != nil {
		r.nl.Close()
	}
	if r.nft != nil {
		_ = r.nft.CloseLasting()
	}
	if r.ns.IsOpen() {
		_ = r.ns.Close()
	}
}

// Pool is the prefix sandbox addresses come from.
func (r *Router) Pool() netip.Prefix { return r.pool.Prefix() }

// learn records the host ends a previous daemon left: their alias is the
// sandbox ID, their address the router end of its lease. A host end it
// cannot read is removed.
func (r *Router) learn() error {
	links, err := r.nl.LinkList()
	if err != nil {
		return fmt.Errorf("open network: list links: %w", err)
	}
	for _, l := range links {
		name := l.Attrs().Name
		if !strings.HasPrefix(name, linkPrefix) {
			continue
		}
		id := l.Attrs().Alias
		lease, err := r.leaseOf(l)
		if err == nil && (id == "" || LinkName(id) != name) {
			err = fmt.Errorf("alias %q does not name it", id)
		}
		if err == nil {
			lease, err = r.pool.Reserve(id, lease.Gateway)
		}
		if err != nil {
			r.log.Warn("removing an open-network veth that cannot be adopted", "link", name, "err", err)
			if derr := r.nl.LinkDel(l); derr != nil {
				return fmt.Errorf("open network: remove %s: %w", name, derr)
			}
			continue
		}
		r.sbx[id] = &attached{lease: lease, link: name, index: l.Attrs().Index}
	}
	return nil
}

// leaseOf reads the lease from a host end's address.
func (r *Router) leaseOf(l netlink.Link) (Lease, error) {
	addrs, err := r.nl.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		return Lease{}, err
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && r.pool.Prefix().Contains(ip) {
			return Lease{Gateway: ip}, nil
		}
	}
	return Lease{}, errors.New("no address in the pool")
}

// Attach gives sandbox id, whose network namespace ns is, its veth and
// address and lets it out with allow (see ParseAllow) unblocked. A
// sandbox already attached (adopted after a restart) keeps its lease and
// gets allow. On error nothing of the sandbox is left in the router.
func (r *Router) Attach(id string, ns *os.File, allow []netip.Prefix) (Lease, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if a, ok := r.sbx[id]; ok {
		prev := a.allow
		a.allow = slices.Clone(allow)
		if err := r.applyLocked(); err != nil {
			a.allow = prev
			return Lease{}, err
		}
		r.led.attach(id, a.lease.Addr, a.index)
		return a.lease, nil
	}
	lease, err := r.pool.Allocate(id)
	if err != nil {
		return Lease{}, err
	}
	a := &attached{lease: lease, link: LinkName(id), allow: slices.Clone(allow)}
	if err := r.plug(id, a, ns); err != nil {
		r.unplug(a.link)
		r.pool.Release(id)
		return Lease{}, fmt.Errorf("open network: sandbox %s: %w", id, err)
	}
	r.sbx[id] = a
	if err := r.applyLocked(); err != nil {
		delete(r.sbx, id)
		r.unplug(a.link)
		r.pool.Release(id)
		return Lease{}, err
	}
	r.led.attach(id, lease.Addr, a.index)
	return lease, nil
}

// plug creates a's veth with its peer in ns and configures both ends.
func (r *Router) plug(id string, a *attached, ns *os.File) error {
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: a.link, Alias: id},
		PeerName:      "eth0",
		PeerNamespace: netlink.NsFd(int(ns.Fd())),
	}
	if err := r.nl.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth: %w", err)
	}
	host, err := r.nl.LinkByName(a.link)
	if err != nil {
		return err
	}
	if err := r.nl.LinkSetAlias(host, id); err != nil {
		return err
	}
	a.index = host.Attrs().Index
	if err := r.nl.AddrAdd(host, &netlink.Addr{IPNet: ipNet(a.lease.Gateway, 30)}); err != nil {
		return fmt.Errorf("host address: %w", err)
	}
	if err := r.forwarding(a.link); err != nil {
		return err
	}
	if err := r.nl.LinkSetUp(host); err != nil {
		return err
	}
	inner, err := netlink.NewHandleAt(netns.NsHandle(int(ns.Fd())))
	if err != nil {
		return fmt.Errorf("sandbox namespace: %w", err)
	}
	defer inner.Close()
	eth, err := inner.LinkByName("eth0")
	if err != nil {
		return err
	}
	if err := inner.AddrAdd(eth, &netlink.Addr{IPNet: ipNet(a.lease.Addr, 30)}); err != nil {
		return fmt.Errorf("sandbox address: %w", err)
	}
	if err := inner.LinkSetUp(eth); err != nil {
		return err
	}
	gw := a.lease.Gateway.As4()
	if err := inner.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: net.IP(gw[:])}); err != nil {
		return fmt.Errorf("default route: %w", err)
	}
	return nil
}

func ipNet(a netip.Addr, bits int) *net.IPNet {
	b := a.As4()
	return &net.IPNet{IP: net.IP(b[:]), Mask: net.CIDRMask(bits, 32)}
}

// unplug removes a host end (and with it its peer), if it exists.
func (r *Router) unplug(link string) error {
	l, err := r.nl.LinkByName(link)
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
		return err
	}
	return r.nl.LinkDel(l)
}

// Detach removes sandbox id's veth, rules and lease, and reports its
// flows still open (egress.EndShutdown, with the bytes they moved so far);
// its counters are gone. Detaching a sandbox that is not attached does
// nothing.
func (r *Router) Detach(id string) error {
	detached, err := r.detach(id)
	if err != nil || !detached {
		return err
	}
	now := time.Now()
	r.mon.report(r.led.detach(id, now), now)
	return nil
}

// detach is Detach but for the evidence.
func (r *Router) detach(id string) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.sbx[id]
	if !ok {
		return false, nil
	}
	// The rules go first: the address is not reused while they name it.
	delete(r.sbx, id)
	err := r.applyLocked()
	if uerr := r.unplug(a.link); uerr != nil {
		err = errors.Join(err, fmt.Errorf("open network: remove %s: %w", a.link, uerr))
	}
	if err != nil {
		r.sbx[id] = a
		return false, err
	}
	r.pool.Release(id)
	return true, nil
}

// Prune detaches every sandbox keep does not claim: what a previous
// daemon left for sandboxes that are gone.
func (r *Router) Prune(keep func(id string) bool) error {
	r.mu.Lock()
	var gone []string
	for id := range r.sbx {
		if !keep(id) {
			gone = append(gone, id)
		}
	}
	r.mu.Unlock()
	var errs []error
	for _, id := range gone {
		errs = append(errs, r.Detach(id))
	}
	return errors.Join(errs...)
}

// Attached reports sandbox id's lease, if it has one.
func (r *Router) Attached(id string) (Lease, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a, ok := r.sbx[id]
	if !ok {
		return Lease{}, false
	}
	return a.lease, true
}

// applyLocked rewrites the table for the sandboxes attached now.
func (r *Router) applyLocked() error {
	ids := make([]string, 0, len(r.sbx))
	for id := range r.sbx {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	members := make([]member, 0, len(ids))
	for _, id := range ids {
		a := r.sbx[id]
		members = append(members, member{link: a.link, addr: a.lease.Addr, allow: a.allow})
	}
	if err := program(r.nft, ruleset(r.cfg.Uplink, r.pool.Prefix(), r.cfg.LogGroup, members)); err != nil {
		return fmt.Errorf("open network: nftables: %w", err)
	}
	if err := r.nft.Flush(); err != nil {
		return fmt.Errorf("open network: nftables: %w: %v", errdefs.ErrUnavailable, err)
	}
	return nil
}

// forwarding enables IPv4 forwarding of the packets that link receives
// (net.ipv4.conf.<link>.forwarding in the router's namespace; the host's
// global ip_forward is left as it is).
func (r *Router) forwarding(link string) error {
	err := r.inNS(func() error {
		return os.WriteFile("/proc/sys/net/ipv4/conf/"+link+"/forwarding", []byte("1"), 0)
	})
	if err != nil {
		return fmt.Errorf("open network: enable forwarding on %s: %w", link, err)
	}
	return nil
}

// inNS runs f on a thread in the router's namespace. A thread that cannot
// return to the daemon's namespace is left locked, so that it ends with
// the goroutine.
func (r *Router) inNS(f func() error) error {
	if r.cfg.NetNS == "" {
		return f()
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(r.ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	ferr := f()
	if err := netns.Set(orig); err != nil {
		return errors.Join(ferr, err)
	}
	runtime.UnlockOSThread()
	return ferr
}
