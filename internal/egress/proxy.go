package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/time/rate"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Resolver resolves host names on the host. *net.Resolver satisfies it;
// tests pass a fake that maps test names to loopback addresses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens connections to checked addresses. The proxy only ever
// dials "tcp" with an address literal ("192.0.2.7:443", "[2001:db8::1]:443"),
// never a name, so nothing resolves a second time. *net.Dialer satisfies
// it.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Limits bound what one proxy (one sandbox) may use. Zero fields take
// their defaults. SetLimits changes MaxConns and BandwidthBytesPerSec of
// a running proxy; the others are fixed when it is made.
type Limits struct {
	// MaxConns caps the client connections open at once; one more is
	// closed at once and reported as ReasonConnLimit. Default 256.
	MaxConns int
	// IdleTimeout ends a connection when no byte has moved either way
	// for this long, and an HTTP keep-alive connection that sends no
	// next request. Default 5 minutes.
	IdleTimeout time.Duration
	// HandshakeTimeout bounds reading a request: the HTTP request line
	// and headers, the SOCKS5 greeting and request, and, in a tunnel,
	// the TLS ClientHello or HTTP headers once their first byte came.
	// Default 10 seconds.
	HandshakeTimeout time.Duration
	// DialTimeout bounds resolving a name and connecting to it.
	// Default 10 seconds.
	DialTimeout time.Duration
	// MaxHeaderBytes caps an HTTP request's or response's line and
	// headers. Default 16 KiB, at most 32 KiB.
	MaxHeaderBytes int
	// BandwidthBytesPerSec caps the proxy's throughput in each direction
	// (token bucket, shared by all its connections); 0 is no cap.
	BandwidthBytesPerSec int64
}

// Default limits.
const (
	DefaultMaxConns         = 256
	DefaultIdleTimeout      = 5 * time.Minute
	DefaultHandshakeTimeout = 10 * time.Second
	DefaultDialTimeout      = 10 * time.Second
	DefaultMaxHeaderBytes   = 16 << 10
)

// Upper bounds of the limits, against configuration mistakes.
const (
	maxMaxConns       = 1 << 16
	maxMaxHeaderBytes = inspectBufferSize
)

// inspectBufferSize is the client-side read buffer of a connection: it
// holds what the proxy inspects without consuming (a tunnel's TLS
// ClientHello or HTTP headers), so it caps them.
const inspectBufferSize = 32 << 10

// copyBufferSize is the buffer of each direction of a tunnel during a
// bulk transfer (see pump).
const copyBufferSize = 128 << 10

func (l Limits) withDefaults() (Limits, error) {
	if l.MaxConns < 0 || l.IdleTimeout < 0 || l.HandshakeTimeout < 0 || l.DialTimeout < 0 ||
		l.MaxHeaderBytes < 0 || l.BandwidthBytesPerSec < 0 {
		return l, fmt.Errorf("egress limits: negative value: %w", errdefs.ErrInvalidArgument)
	}
	if l.MaxConns > maxMaxConns {
		return l, fmt.Errorf("egress limits: max conns %d, at most %d: %w", l.MaxConns, maxMaxConns, errdefs.ErrInvalidArgument)
	}
	if l.MaxHeaderBytes > maxMaxHeaderBytes {
		return l, fmt.Errorf("egress limits: max header bytes %d, at most %d: %w", l.MaxHeaderBytes, maxMaxHeaderBytes, errdefs.ErrInvalidArgument)
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = DefaultIdleTimeout
	}
	if l.HandshakeTimeout == 0 {
		l.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if l.DialTimeout == 0 {
		l.DialTimeout = DefaultDialTimeout
	}
	if l.MaxHeaderBytes == 0 {
		l.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	return l, nil
}

// Config configures a Proxy.
type Config struct {
	// Policy is the allowlist it starts with. Required.
	Policy *Policy
	// Limits bound the proxy; zero fields take defaults.
	Limits Limits
	// Resolver resolves names. Default net.DefaultResolver.
	Resolver Resolver
	// Dialer connects to checked addresses. Default a net.Dialer.
	Dialer Dialer
	// OnEvent receives every decision (see Event). Optional.
	OnEvent func(Event)
	// Logger logs what is not an event (accept errors). Default: none.
	Logger *slog.Logger
	// Intercept lets the proxy add credentials (see Credential); nil
	// leaves every destination untouched.
	Intercept *Interception
	// Credentials are the headers added to the requests to their
	// destinations; they need Intercept. Optional.
	Credentials *Credentials
	// AnyName makes the DNS endpoint (see DNSHost) answer every name,
	// not only those the policy lists; the resolved addresses are still
	// guarded (one the policy does not list explicitly refuses the
	// name). For a sandbox that reaches addresses itself (network mode
	// open), whose names come from here. Connections are judged by the
	// policy as ever.
	AnyName bool
}

// Proxy is one sandbox's egress proxy: it serves HTTP CONNECT, plain
// HTTP forwarding and SOCKS5 on the listeners given to Serve, and lets a
// client reach only what its Policy allows. One proxy serves one
// sandbox, so every event it reports is that sandbox's. It is safe for
// concurrent use; SetPolicy, SetCredentials and SetLimits may be called
// while it serves.
type Proxy struct {
	policy atomic.Pointer[Policy]
	creds  atomic.Pointer[Credentials]
	// intercept is nil when the proxy adds no credentials.
	intercept *Interception
	limits    Limits
	resolver  Resolver
	dialer    Dialer
	onEvent   func(Event)
	log       *slog.Logger
	anyName   bool // Config.AnyName
	// up limits sandbox-to-destination bytes, down the other way; their
	// rate is rate.Inf without a bandwidth cap (see setBandwidth).
	up, down *rate.Limiter
	// maxConns is the connection cap in force (limits.MaxConns until
	// SetLimits changes it); active counts the connections it admitted.
	maxConns atomic.Int64
	// limitsMu serialises SetLimits.
	limitsMu sync.Mutex

	conns, active, allowed, refusedN, bytesUp, bytesDown, dnsQueries atomic.Int64
}

// New returns a proxy, or an ErrInvalidArgument error for a bad Config.
func New(cfg Config) (*Proxy, error) {
	if cfg.Policy == nil {
		return nil, fmt.Errorf("egress proxy: no policy: %w", errdefs.ErrInvalidArgument)
	}
	lim, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		limits:   lim,
		resolver: cfg.Resolver,
		dialer:   cfg.Dialer,
		onEvent:  cfg.OnEvent,
		log:      cfg.Logger,
		up:       newLimiter(lim.BandwidthBytesPerSec),
		down:     newLimiter(lim.BandwidthBytesPerSec),
	}
	p.maxConns.Store(int64(lim.MaxConns))
	if p.resolver == nil {
		p.resolver = net.DefaultResolver
	}
	if p.dialer == nil {
		p.dialer = &net.Dialer{KeepAlive: 30 * time.Second}
	}
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	p.policy.Store(cfg.Policy)
	p.anyName = cfg.AnyName
	if cfg.Intercept != nil {
		if err := cfg.Intercept.validate(); err != nil {
			return nil, err
		}
		p.intercept = cfg.Intercept
	}
	if err := p.SetCredentials(cfg.Credentials); err != nil {
		return nil, err
	}
	return p, nil
}

// burstFor is the token bucket's depth for a rate: a tenth of a second's
// worth, at least 16 KiB and at most the copy buffer, so that waits are
// short and a buffer's worth is never more than two waits.
func burstFor(bw int64) int {
	return int(min(max(bw/10, 16<<10), copyBufferSize))
}

// newLimiter is a bandwidth limiter of bw bytes a second. Without a cap
// (0) it is one all the same, of rate rate.Inf, so that SetLimits can set
// a cap on connections already open; its burst is then the copy buffer,
// so that an uncapped write is never split.
func newLimiter(bw int64) *rate.Limiter {
	if bw == 0 {
		return rate.NewLimiter(rate.Inf, copyBufferSize)
	}
	return rate.NewLimiter(rate.Limit(bw), burstFor(bw))
}

// setBandwidth sets the rate of both limiters: bw bytes a second, or no
// cap when bw is 0. The burst only ever grows (to burstFor(bw)): a writer
// sizes its chunk to the burst before it waits, and a burst shrunk in
// between would fail that wait; so a cap lowered on a running proxy
// keeps the larger burst, at most the copy buffer (128 KiB).
func (p *Proxy) setBandwidth(bw int64) {
	r := rate.Inf
	if bw > 0 {
		r = rate.Limit(bw)
	}
	now := time.Now()
	for _, l := range []*rate.Limiter{p.up, p.down} {
		if l.Limit() == r {
			continue
		}
		// The rate first: advancing the bucket under rate.Inf with no
		// time passed would leave it without tokens to count from.
		l.SetLimitAt(now, r)
		if b := burstFor(bw); bw > 0 && b > l.Burst() {
			l.SetBurstAt(now, b)
		}
	}
}

// SetLimits changes the limits of a running proxy. MaxConns applies at
// once to the connections accepted afterwards (connections open above a
// lowered cap stay open) and BandwidthBytesPerSec at once to every
// connection, open ones included. The other limits are fixed when the
// proxy is made: l must keep them (zero fields taking their defaults as
// in New), else it fails with ErrFailedPrecondition and changes nothing.
func (p *Proxy) SetLimits(l Limits) error {
	lim, err := l.withDefaults()
	if err != nil {
		return err
	}
	fixed := p.limits
	if lim.IdleTimeout != fixed.IdleTimeout || lim.HandshakeTimeout != fixed.HandshakeTimeout ||
		lim.DialTimeout != fixed.DialTimeout || lim.MaxHeaderBytes != fixed.MaxHeaderBytes {
		return fmt.Errorf("egress limits: only the connection and bandwidth caps change on a running proxy: %w", errdefs.ErrFailedPrecondition)
	}
	p.limitsMu.Lock()
	defer p.limitsMu.Unlock()
	p.maxConns.Store(int64(lim.MaxConns))
	p.setBandwidth(lim.BandwidthBytesPerSec)
	return nil
}

// Limits returns the limits in force, defaults filled in.
func (p *Proxy) Limits() Limits {
	l := p.limits
	l.MaxConns = int(p.maxConns.Load())
	l.BandwidthBytesPerSec = 0
	if r := p.up.Limit(); r != rate.Inf {
		l.BandwidthBytesPerSec = int64(r)
	}
	return l
}

// takeSlot admits one more client connection, unless the cap in force
// is reached.
func (p *Proxy) takeSlot() bool {
	for {
		n := p.active.Load()
		if n >= p.maxConns.Load() {
			return false
		}
		if p.active.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// SetPolicy replaces the allowlist. It applies at once to every
// destination asked for afterwards (new tunnels, and each further HTTP
// request on a kept-alive connection); tunnels already open stay open.
func (p *Proxy) SetPolicy(pol *Policy) error {
	if pol == nil {
		return fmt.Errorf("egress proxy: no policy: %w", errdefs.ErrInvalidArgument)
	}
	p.policy.Store(pol)
	return nil
}

// Policy returns the allowlist in force.
func (p *Proxy) Policy() *Policy { return p.policy.Load() }

// Stats returns a snapshot of the counters.
func (p *Proxy) Stats() Stats {
	return Stats{
		Conns:      p.conns.Load(),
		Active:     p.active.Load(),
		Allowed:    p.allowed.Load(),
		Refused:    p.refusedN.Load(),
		BytesUp:    p.bytesUp.Load(),
		BytesDown:  p.bytesDown.Load(),
		DNSQueries: p.dnsQueries.Load(),
	}
}

// Serve accepts client connections on ln until ctx ends, then closes ln
// and every connection it accepted and returns nil once their
// goroutines have finished. An accept error other than a passing one
// (too many open files) ends it with that error, after the same
// clean-up. Serve may be called on several listeners at once; they
// share the limits and counters.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		ln.Close()
		wg.Wait()
	}()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				p.log.Warn("egress proxy: accept", "err", err, "retry_in", backoff)
				select {
				case <-time.After(backoff):
					continue
				case <-ctx.Done():
					return nil
				}
			}
			return fmt.Errorf("egress proxy: accept: %v: %w", err, errdefs.ErrUnavailable)
		}
		backoff = 0
		p.conns.Add(1)
		if !p.takeSlot() {
			c.Close()
			p.report(&Event{Start: time.Now(), Reason: ReasonConnLimit})
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer p.active.Add(-1)
			p.handle(ctx, c)
		}()
	}
}

// report finishes an event and hands it to the callback, counting it.
func (p *Proxy) report(ev *Event) {
	if ev.Allowed {
		ev.Reason = ReasonAllowed
		p.allowed.Add(1)
	} else {
		p.refusedN.Add(1)
		ev.End = ""
	}
	if ev.Duration == 0 && !ev.Start.IsZero() {
		ev.Duration = time.Since(ev.Start)
	}
	if p.onEvent != nil {
		p.onEvent(*ev)
	}
}

// session is one client connection being served.
type session struct {
	p  *Proxy
	c  net.Conn
	br *bufio.Reader // reads c; holds what is inspected
}

// handle serves one client connection: the first byte tells SOCKS5 from
// HTTP.
func (p *Proxy) handle(ctx context.Context, c net.Conn) {
	s := &session{p: p, c: c, br: bufio.NewReaderSize(c, inspectBufferSize)}
	// The connection's context ends when the proxy stops (then the
	// connection is closed at once, and what it carried ends as
	// EndShutdown) or when the connection is done.
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer c.Close()

	c.SetReadDeadline(time.Now().Add(p.limits.HandshakeTimeout))
	first, err := s.br.Peek(1)
	if err != nil {
		if !isEOF(err) {
			p.report(&Event{Start: time.Now(), Reason: ReasonBadRequest, Detail: "no request: " + err.Error()})
		}
		return
	}
	switch first[0] {
	case socks5Version:
		s.serveSOCKS5(ctx)
	case socks4Version:
		s.c.Write([]byte{0, 0x5b, 0, 0, 0, 0, 0, 0}) // SOCKS4 "request rejected"
		p.report(&Event{Start: time.Now(), Reason: ReasonUnsupported, Detail: "SOCKS4 (use SOCKS5)"})
	default:
		s.serveHTTP(ctx)
	}
}

// isEOF reports whether err is the client going away before sending
// anything, which is no decision to report.
func isEOF(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.ECONNRESET)
}

// resolved is the outcome of checking a destination: the addresses to
// try, all checked, or the refusal.
type resolved struct {
	host  host
	port  uint16
	addrs []netip.Addr
}

// check decides host:port under the policy in force and resolves it,
// checking every address. It fills ev (Host, Port, Rule, and on refusal
// Reason, Class, Addr, Detail) and returns false on refusal. Nothing is
// dialled here.
func (s *session) check(ctx context.Context, ev *Event, hostStr string, port uint16) (resolved, bool) {
	pol := s.p.policy.Load()
	h, err := parseHost(hostStr)
	if err != nil || port == 0 {
		ev.Reason = ReasonBadTarget
		return resolved{}, false
	}
	ev.Host, ev.Port = h.String(), port
	var d Decision
	if h.addr.IsValid() {
		d = pol.decideAddr(h.addr, port)
		if d.Reason == ReasonBlockedAddress || d.Allowed {
			ev.Addr = h.addr
		}
	} else {
		d = pol.decideName(h.name, port)
	}
	ev.Reason, ev.Class, ev.Rule = d.Reason, d.Class, d.Rule
	if !d.Allowed {
		return resolved{}, false
	}
	if h.addr.IsValid() {
		return resolved{host: h, port: port, addrs: []netip.Addr{h.addr}}, true
	}
	rctx, cancel := context.WithTimeout(ctx, s.p.limits.DialTimeout)
	defer cancel()
	addrs, err := s.p.resolver.LookupNetIP(rctx, "ip", h.name)
	if err != nil || len(addrs) == 0 {
		ev.Reason = ReasonResolveFailed
		if err != nil {
			ev.Detail = err.Error()
		}
		return resolved{}, false
	}
	const maxAddrs = 16
	if len(addrs) > maxAddrs {
		addrs = addrs[:maxAddrs]
	}
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		a = canonicalAddr(a)
		// Every address is checked: one guarded address refuses the
		// name, since a name mixing public and private addresses is a
		// rebinding attempt, not a configuration to half-honour.
		if ad := pol.CheckAddr(a, port); !ad.Allowed {
			ev.Reason, ev.Class, ev.Addr = ad.Reason, ad.Class, a
			ev.Detail = "resolved to a " + string(ad.Class) + " address"
			return resolved{}, false
		}
		out = append(out, a)
	}
	return resolved{host: h, port: port, addrs: out}, true
}

// dial connects to the first checked address that answers, trying at
// most four, within the dial timeout. It fills ev.Addr with the address
// connected to, or ev.Reason and ev.Detail on failure.
func (s *session) dial(ctx context.Context, ev *Event, r resolved) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, s.p.limits.DialTimeout)
	defer cancel()
	var last error
	for i, a := range r.addrs {
		if i == 4 {
			break
		}
		ap := netip.AddrPortFrom(a, r.port)
		c, err := s.p.dialer.DialContext(ctx, "tcp", ap.String())
		if err == nil {
			ev.Addr = a
			return c, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	ev.Reason, ev.Detail, ev.Addr = ReasonDialFailed, last.Error(), r.addrs[0]
	return nil, last
}
