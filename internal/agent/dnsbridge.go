package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// Limits of the DNS bridge.
const (
	// maxDNSInFlight caps the queries being answered at once; a UDP query
	// past it is dropped (the resolver retries), a TCP connection whose
	// next query finds no room is closed.
	maxDNSInFlight = 64
	// maxDNSTCPConns caps the TCP connections open at once; more are
	// closed at once.
	maxDNSTCPConns = 64
	// dnsQueryTimeout bounds answering one query: reaching the proxy,
	// its answer, and reading the query's bytes over TCP.
	dnsQueryTimeout = 5 * time.Second
	// dnsTCPIdleTimeout ends a TCP connection that sends no next query.
	dnsTCPIdleTimeout = 10 * time.Second
	// maxDNSQuery is the largest query forwarded, as the proxy's cap
	// (egress.MaxDNSMessage); a bigger one is dropped.
	maxDNSQuery = 4096
	// maxDNSAnswer is the largest answer taken from the proxy (a TCP DNS
	// message's most).
	maxDNSAnswer = 65535
	// dnsUDPSize is the most a UDP answer may hold for a query that
	// announces no larger size (RFC 1035 4.2.1).
	dnsUDPSize = 512
	// dnsHeaderLen is a DNS message header's length.
	dnsHeaderLen = 12
)

// The proxy's DNS endpoint (egress.DNSHost, egress.DNSPath and
// egress.DNSContentType; TestDNSBridgeProxy checks they agree).
const (
	dnsQueryURL    = "http://dns.airlock.internal/dns-query"
	dnsContentType = "application/dns-message"
)

// ServeDNSBridge is the sandbox's DNS server: it answers each query that
// arrives on udp (a datagram) or on a connection of tcp (messages with a
// two-byte length prefix, RFC 1035 4.2.2, several per connection) by
// sending it to the egress proxy's DNS endpoint, as one RFC 8484 POST on
// a new connection from dial, and writing back what the proxy answers.
// It judges nothing: the proxy answers only the names the sandbox may
// reach. A query the proxy cannot be asked (dial fails: the sandbox's
// mode is none) or does not answer in time gets SERVFAIL, at once in
// the first case, so that resolvers fail fast; a UDP answer larger than
// the query allows is cut to its header and question with TC set, which
// sends the resolver to TCP. It returns when ctx ends (closing udp, tcp
// and every connection) or when either fails, with that error.
func ServeDNSBridge(ctx context.Context, udp net.PacketConn, tcp net.Listener, dial func(context.Context) (net.Conn, error)) error {
	return newDNSBridge(dial).serve(ctx, udp, tcp)
}

// dnsBridge is one DNS bridge's state.
type dnsBridge struct {
	dial    func(context.Context) (net.Conn, error)
	slots   chan struct{} // one per query being answered
	timeout time.Duration // dnsQueryTimeout, but in tests
	idle    time.Duration // dnsTCPIdleTimeout, but in tests
}

func newDNSBridge(dial func(context.Context) (net.Conn, error)) *dnsBridge {
	return &dnsBridge{dial: dial, slots: make(chan struct{}, maxDNSInFlight), timeout: dnsQueryTimeout, idle: dnsTCPIdleTimeout}
}

func (b *dnsBridge) serve(ctx context.Context, udp net.PacketConn, tcp net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { udp.Close(); tcp.Close() })
	defer stop()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		errs <- b.serveUDP(ctx, &wg, udp)
		cancel()
	}()
	go func() {
		defer wg.Done()
		errs <- b.serveTCP(ctx, &wg, tcp)
		cancel()
	}()
	wg.Wait()
	close(errs)
	var first error
	for err := range errs {
		if first == nil {
			first = err
		}
	}
	return first
}

// serveUDP answers datagrams until ctx ends (nil) or pc fails.
func (b *dnsBridge) serveUDP(ctx context.Context, wg *sync.WaitGroup, pc net.PacketConn) error {
	buf := make([]byte, maxDNSQuery+1)
	for {
		n, addr, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("dns bridge: udp: %w", err)
		}
		if n < dnsHeaderLen || n > maxDNSQuery {
			continue
		}
		select {
		case b.slots <- struct{}{}:
		default:
			continue // over the bound: dropped, the resolver retries
		}
		q := bytes.Clone(buf[:n])
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-b.slots }()
			if a := fitUDP(q, b.answer(ctx, q)); a != nil {
				pc.WriteTo(a, addr)
			}
		}()
	}
}

// serveTCP accepts connections until ctx ends (nil) or ln fails.
func (b *dnsBridge) serveTCP(ctx context.Context, wg *sync.WaitGroup, ln net.Listener) error {
	if err := acceptEach(ctx, ln, wg, maxDNSTCPConns, func(c net.Conn) { b.serveConn(ctx, c) }); err != nil {
		return fmt.Errorf("dns bridge: tcp: %w", err)
	}
	return nil
}

// serveConn answers the queries of one TCP connection, one at a time,
// until the client closes it, idles, sends a message out of bounds, or
// ctx ends.
func (b *dnsBridge) serveConn(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	br := bufio.NewReaderSize(c, 2+maxDNSQuery)
	for {
		c.SetReadDeadline(time.Now().Add(b.idle))
		var hdr [2]byte
		if _, err := io.ReadFull(br, hdr[:1]); err != nil {
			return
		}
		c.SetReadDeadline(time.Now().Add(b.timeout))
		if _, err := io.ReadFull(br, hdr[1:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(hdr[:]))
		if n < dnsHeaderLen || n > maxDNSQuery {
			return
		}
		q := make([]byte, n)
		if _, err := io.ReadFull(br, q); err != nil {
			return
		}
		select {
		case b.slots <- struct{}{}:
		default:
			return
		}
		a := b.answer(ctx, q)
		<-b.slots
		if a == nil {
			return
		}
		out := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(a)), uint16(len(a)))
		c.SetWriteDeadline(time.Now().Add(b.timeout))
		if _, err := c.Write(append(out, a...)); err != nil {
			return
		}
	}
}

// answer asks the proxy and returns its answer, a SERVFAIL when it
// gives none, or nil for a message that cannot be answered (not a
// query).
func (b *dnsBridge) answer(ctx context.Context, q []byte) []byte {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	a, err := b.ask(ctx, q)
	if err != nil {
		return dnsFailure(q, dnsmessage.RCodeServerFailure)
	}
	return a
}

// ask sends q to the proxy's DNS endpoint on a new connection and
// returns the answer, checked to be a response to q.
func (b *dnsBridge) ask(ctx context.Context, q []byte) ([]byte, error) {
	c, err := b.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	}
	req, err := http.NewRequest(http.MethodPost, dnsQueryURL, bytes.NewReader(q))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", dnsContentType)
	req.Header.Set("Accept", dnsContentType)
	req.Header.Set("User-Agent", "airlock-dns")
	req.Close = true
	if err := req.WriteProxy(c); err != nil {
		return nil, err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("dns bridge: proxy answered %s", resp.Status)
	}
	if mt, _, err := mime.ParseMediaType(resp.Header.Get("Content-Type")); err != nil || mt != dnsContentType {
		return nil, errors.New("dns bridge: proxy's answer is not a DNS message")
	}
	a, err := io.ReadAll(io.LimitReader(resp.Body, maxDNSAnswer+1))
	if err != nil {
		return nil, err
	}
	if len(a) > maxDNSAnswer || len(a) < dnsHeaderLen || a[0] != q[0] || a[1] != q[1] || a[2]&0x80 == 0 {
		return nil, errors.New("dns bridge: proxy's answer is not a response to the query")
	}
	return a, nil
}

// dnsFailure is the answer to q with rcode and q's question, or nil when
// q is not a query.
func dnsFailure(q []byte, rcode dnsmessage.RCode) []byte {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 {
		qs = nil
	}
	return dnsHeaderReply(dnsmessage.Header{
		ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RCode: rcode,
	}, qs)
}

// dnsHeaderReply is a message of header h and questions qs alone, or
// nil if it cannot be packed.
func dnsHeaderReply(h dnsmessage.Header, qs []dnsmessage.Question) []byte {
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
	if b.StartQuestions() != nil {
		return nil
	}
	for _, q := range qs {
		if b.Question(q) != nil {
			return nil
		}
	}
	msg, err := b.Finish()
	if err != nil {
		return nil
	}
	return msg
}

// fitUDP returns answer a to query q as it may go back over UDP: as it
// is when it fits the size q allows (512 bytes, or the EDNS0 size q
// announces, at most maxDNSQuery), else its header and question only,
// with TC set, so that the resolver asks again over TCP. nil stays nil.
func fitUDP(q, a []byte) []byte {
	if a == nil || len(a) <= udpLimit(q) {
		return a
	}
	var p dnsmessage.Parser
	h, err := p.Start(a)
	if err != nil {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil
	}
	h.Truncated = true
	return dnsHeaderReply(h, qs)
}

// udpLimit is the largest UDP answer query q allows: the EDNS0 payload
// size of its OPT record (RFC 6891 6.2.3), between 512 and maxDNSQuery,
// else 512.
func udpLimit(q []byte) int {
	var p dnsmessage.Parser
	if _, err := p.Start(q); err != nil {
		return dnsUDPSize
	}
	if p.SkipAllQuestions() != nil || p.SkipAllAnswers() != nil || p.SkipAllAuthorities() != nil {
		return dnsUDPSize
	}
	for {
		rh, err := p.AdditionalHeader()
		if err != nil {
			return dnsUDPSize
		}
		if rh.Type == dnsmessage.TypeOPT {
			return min(max(int(rh.Class), dnsUDPSize), maxDNSQuery)
		}
		if p.SkipAdditional() != nil {
			return dnsUDPSize
		}
	}
}
