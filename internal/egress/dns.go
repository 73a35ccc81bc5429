package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// DNS through the proxy.
//
// A sandbox in allowlist mode has only loopback, and its empty
// resolv.conf makes every resolver in it ask 127.0.0.1:53 (and ::1),
// where its agent forwards each query to the proxy as an RFC 8484
// request: "POST http://dns.airlock.internal/dns-query" with the DNS
// message as an application/dns-message body. The proxy answers it
// itself, never forwarding it: a name the policy lists (by an exact or a
// wildcard entry, whatever its ports) gets the addresses the proxy's own
// resolver gives it, checked by the resolved-address guard; any other
// name gets REFUSED and an Event, before anything is resolved. So no
// query for a name the sandbox may not reach leaves the host, and DNS is
// no way out.

// Names of the proxy's DNS endpoint.
const (
	// DNSHost is the reserved host of the proxy's DNS endpoint. It and
	// every name under reservedDomain are never a destination and cannot
	// be listed (ParsePolicy refuses them; wildcards do not match them).
	DNSHost = "dns." + reservedDomain
	// DNSPath is the endpoint's path (RFC 8484's customary one).
	DNSPath = "/dns-query"
	// DNSContentType is the media type of a DNS message over HTTP.
	DNSContentType = "application/dns-message"
	// MaxDNSMessage caps a query's size in bytes; a bigger body is
	// refused with 413.
	MaxDNSMessage = 4096
	// DNSTTL is the time to live of the proxy's answers, in seconds:
	// short, so that a changed policy or address applies soon in caches
	// inside the sandbox.
	DNSTTL = 30
)

// reservedDomain holds the runtime's own names.
const reservedDomain = "airlock.internal"

// maxDNSAddrs caps the addresses of one answer, as check caps those it
// tries.
const maxDNSAddrs = 16

// reservedName reports whether a canonical name is the runtime's own.
func reservedName(name string) bool {
	return name == reservedDomain || strings.HasSuffix(name, "."+reservedDomain)
}

// isDNSRequest reports whether a forwarded request names the proxy's
// DNS endpoint host, whatever else it says: such a request is answered
// by serveDNS, never forwarded.
func isDNSRequest(req *http.Request) bool {
	if req.URL == nil || req.URL.Host == "" {
		return false
	}
	h, _, ok := splitTarget(req.URL.Host, 80)
	return ok && strings.EqualFold(strings.TrimSuffix(h, "."), DNSHost)
}

// serveDNS answers one request to the DNS endpoint. It returns whether
// the client connection may carry another request.
func (s *session) serveDNS(ctx context.Context, req *http.Request, start time.Time) bool {
	ev := &Event{Start: start, Protocol: ProtoDNS}
	bad := func(status int, reason Reason, detail string) bool {
		ev.Reason, ev.Detail = reason, detail
		s.refuse(ev, status, "")
		return false
	}
	_, port, ok := splitTarget(req.URL.Host, 80)
	switch {
	case req.URL.Scheme != "http" || !ok || port != 80 || req.URL.Path != DNSPath || req.URL.RawQuery != "":
		return bad(http.StatusNotFound, ReasonBadRequest, "DNS endpoint: not http://"+DNSHost+DNSPath)
	case req.Method != http.MethodPost:
		return bad(http.StatusMethodNotAllowed, ReasonUnsupported, "DNS endpoint: method "+strconv.Quote(cut(req.Method, 16))+" (POST only)")
	}
	if mt, _, err := mime.ParseMediaType(req.Header.Get("Content-Type")); err != nil || mt != DNSContentType {
		return bad(http.StatusUnsupportedMediaType, ReasonBadRequest, "DNS endpoint: content type is not "+DNSContentType)
	}
	if req.ContentLength > MaxDNSMessage {
		return bad(http.StatusRequestEntityTooLarge, ReasonBadRequest, "DNS query over "+strconv.Itoa(MaxDNSMessage)+" bytes")
	}
	q, err := io.ReadAll(io.LimitReader(req.Body, MaxDNSMessage+1))
	if err != nil {
		return bad(http.StatusBadRequest, ReasonBadRequest, "DNS query: "+err.Error())
	}
	if len(q) > MaxDNSMessage {
		return bad(http.StatusRequestEntityTooLarge, ReasonBadRequest, "DNS query over "+strconv.Itoa(MaxDNSMessage)+" bytes")
	}
	answer := s.p.answerDNS(ctx, ev, q)
	if answer == nil {
		return bad(http.StatusBadRequest, ReasonBadRequest, "not a DNS query")
	}
	s.p.dnsQueries.Add(1)
	if ev.Reason != "" {
		s.p.report(ev)
	}
	keep := !req.Close && req.ProtoAtLeast(1, 1)
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP/1.1 200 OK\r\nContent-Type: %s\r\nCache-Control: max-age=%d\r\nContent-Length: %d\r\n", DNSContentType, DNSTTL, len(answer))
	if !keep {
		b.WriteString("Connection: close\r\n")
	}
	b.WriteString("\r\n")
	b.Write(answer)
	s.c.SetWriteDeadline(time.Now().Add(s.p.limits.HandshakeTimeout))
	if _, err := io.WriteString(s.c, b.String()); err != nil {
		return false
	}
	return keep
}

// cut shortens s to at most n bytes.
func cut(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// dnsQuery is a parsed query: its header, its one question, and whether
// it carried an EDNS0 OPT record.
type dnsQuery struct {
	h    dnsmessage.Header
	q    dnsmessage.Question
	edns bool
}

// parseDNSQuery parses a query. A message that is not a query at all
// (too short for a header, or a response) is errNotQuery, answered with
// an HTTP error since there is nothing to answer it with; anything else
// wrong returns the rcode to answer with and why.
func parseDNSQuery(msg []byte) (dq dnsQuery, rcode dnsmessage.RCode, why string, err error) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil {
		return dq, 0, "", errNotQuery
	}
	if h.Response {
		return dq, 0, "", errNotQuery
	}
	dq.h = h
	if h.OpCode != 0 {
		return dq, dnsmessage.RCodeNotImplemented, "opcode " + strconv.Itoa(int(h.OpCode)), nil
	}
	if dq.q, err = p.Question(); err != nil {
		return dq, dnsmessage.RCodeFormatError, "no question", nil
	}
	if _, err := p.Question(); !errors.Is(err, dnsmessage.ErrSectionDone) {
		return dq, dnsmessage.RCodeFormatError, "more than one question", nil
	}
	if err := p.SkipAllAnswers(); err != nil {
		return dq, dnsmessage.RCodeFormatError, "malformed answer section", nil
	}
	if err := p.SkipAllAuthorities(); err != nil {
		return dq, dnsmessage.RCodeFormatError, "malformed authority section", nil
	}
	for {
		rh, err := p.AdditionalHeader()
		if errors.Is(err, dnsmessage.ErrSectionDone) {
			break
		}
		if err != nil {
			return dq, dnsmessage.RCodeFormatError, "malformed additional section", nil
		}
		if rh.Type == dnsmessage.TypeOPT {
			if dq.edns {
				return dq, dnsmessage.RCodeFormatError, "more than one OPT record", nil
			}
			dq.edns = true
		}
		if err := p.SkipAdditional(); err != nil {
			return dq, dnsmessage.RCodeFormatError, "malformed additional section", nil
		}
	}
	return dq, dnsmessage.RCodeSuccess, "", nil
}

// errNotQuery is a message that cannot be answered in DNS.
var errNotQuery = errors.New("not a DNS query")

// answerDNS answers a query under the policy in force, filling ev with
// the refusal, if any (ev.Reason stays empty for an answered name). It
// returns nil for a message that is no query.
func (p *Proxy) answerDNS(ctx context.Context, ev *Event, msg []byte) []byte {
	dq, rcode, why, err := parseDNSQuery(msg)
	if err != nil {
		return nil
	}
	deny := func(reason Reason, rcode dnsmessage.RCode, detail string, withQuestion bool) []byte {
		ev.Reason, ev.Detail = reason, detail
		return dnsReply(dq, withQuestion, rcode, nil)
	}
	if rcode != dnsmessage.RCodeSuccess {
		reason := ReasonBadRequest
		if rcode == dnsmessage.RCodeNotImplemented {
			reason = ReasonUnsupported
		}
		return deny(reason, rcode, "DNS query: "+why, false)
	}
	qtype := strings.TrimPrefix(dq.q.Type.String(), "Type")
	if dq.q.Class != dnsmessage.ClassINET {
		return deny(ReasonUnsupported, dnsmessage.RCodeRefused, "DNS query of class "+strings.TrimPrefix(dq.q.Class.String(), "Class"), true)
	}
	name, err := parseName(dq.q.Name.String())
	if err != nil {
		return deny(ReasonBadTarget, dnsmessage.RCodeRefused, "DNS query "+qtype+" for "+strconv.Quote(cut(dq.q.Name.String(), 80))+": "+err.Error(), true)
	}
	ev.Host = name
	pol := p.policy.Load()
	d := pol.decideNameAnyPort(name)
	if p.anyName && !reservedName(name) {
		d = Decision{Allowed: true, Reason: ReasonAllowed}
	}
	ev.Rule = d.Rule
	if !d.Allowed {
		return deny(d.Reason, dnsmessage.RCodeRefused, "DNS query "+qtype, true)
	}
	if dq.q.Type != dnsmessage.TypeA && dq.q.Type != dnsmessage.TypeAAAA {
		// Only addresses are answered: other types of an allowed name
		// have no records here.
		return dnsReply(dq, true, dnsmessage.RCodeSuccess, nil)
	}
	rctx, cancel := context.WithTimeout(ctx, p.limits.DialTimeout)
	defer cancel()
	addrs, err := p.resolver.LookupNetIP(rctx, "ip", name)
	if err != nil {
		// The name is allowed; the host's resolver has no address for
		// it. Not a decision: no event.
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound {
			return dnsReply(dq, true, dnsmessage.RCodeNameError, nil)
		}
		return dnsReply(dq, true, dnsmessage.RCodeServerFailure, nil)
	}
	if len(addrs) > maxDNSAddrs {
		addrs = addrs[:maxDNSAddrs]
	}
	var out []netip.Addr
	for _, a := range addrs {
		a = canonicalAddr(a)
		// The guard of connections: one guarded address refuses the
		// name (see check), so that what the sandbox is told matches
		// what it may reach.
		if ad := pol.checkAddrAnyPort(a); !ad.Allowed {
			ev.Addr, ev.Class = a, ad.Class
			return deny(ad.Reason, dnsmessage.RCodeRefused, "DNS query "+qtype+": resolved to a "+string(ad.Class)+" address", true)
		}
		if a.Is4() == (dq.q.Type == dnsmessage.TypeA) {
			out = append(out, a)
		}
	}
	return dnsReply(dq, true, dnsmessage.RCodeSuccess, out)
}

// dnsReply builds the answer to dq: its question (when withQuestion),
// the addresses as A or AAAA records of the question's name, and an OPT
// record when the query had one (RFC 6891 6.1.1). Nothing in it can
// fail to pack (the question was parsed, the addresses are at most
// maxDNSAddrs); if it did, the answer is a bare SERVFAIL.
func dnsReply(dq dnsQuery, withQuestion bool, rcode dnsmessage.RCode, addrs []netip.Addr) []byte {
	h := dnsmessage.Header{
		ID: dq.h.ID, Response: true, OpCode: dq.h.OpCode,
		RecursionDesired: dq.h.RecursionDesired, RecursionAvailable: true, RCode: rcode,
	}
	build := func(h dnsmessage.Header, withQuestion bool, addrs []netip.Addr) ([]byte, error) {
		b := dnsmessage.NewBuilder(make([]byte, 0, 512), h)
		b.EnableCompression()
		if err := b.StartQuestions(); err != nil {
			return nil, err
		}
		if withQuestion {
			if err := b.Question(dq.q); err != nil {
				return nil, err
			}
		}
		if err := b.StartAnswers(); err != nil {
			return nil, err
		}
		for _, a := range addrs {
			rh := dnsmessage.ResourceHeader{Name: dq.q.Name, Class: dnsmessage.ClassINET, TTL: DNSTTL}
			var err error
			if a.Is4() {
				err = b.AResource(rh, dnsmessage.AResource{A: a.As4()})
			} else {
				err = b.AAAAResource(rh, dnsmessage.AAAAResource{AAAA: a.As16()})
			}
			if err != nil {
				return nil, err
			}
		}
		if dq.edns {
			if err := b.StartAdditionals(); err != nil {
				return nil, err
			}
			var rh dnsmessage.ResourceHeader
			if err := rh.SetEDNS0(MaxDNSMessage, dnsmessage.RCodeSuccess, false); err != nil {
				return nil, err
			}
			if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
				return nil, err
			}
		}
		return b.Finish()
	}
	msg, err := build(h, withQuestion, addrs)
	if err != nil {
		h.RCode = dnsmessage.RCodeServerFailure
		msg, _ = build(h, false, nil)
	}
	return msg
}

// decideNameAnyPort judges a canonical name for DNS: allowed when an
// exact or wildcard entry names it, whatever ports the entry lists.
// Names under reservedDomain are never allowed.
func (p *Policy) decideNameAnyPort(name string) Decision {
	if reservedName(name) {
		return refused(ReasonNotListed)
	}
	if rs := p.exact[name]; len(rs) > 0 {
		return Decision{Allowed: true, Reason: ReasonAllowed, Rule: rs[0].text}
	}
	for suffix := name; ; {
		i := strings.IndexByte(suffix, '.')
		if i < 0 {
			break
		}
		suffix = suffix[i+1:]
		if rs := p.wildcards[suffix]; len(rs) > 0 {
			return Decision{Allowed: true, Reason: ReasonAllowed, Rule: rs[0].text}
		}
	}
	return refused(ReasonNotListed)
}

// checkAddrAnyPort is CheckAddr for DNS: a guarded address passes when
// an address entry lists it explicitly, whatever ports the entry lists.
func (p *Policy) checkAddrAnyPort(a netip.Addr) Decision {
	a = canonicalAddr(a)
	class, guarded := classify(a)
	if class == ClassPublic {
		return Decision{Allowed: true, Reason: ReasonAllowed}
	}
	for _, r := range p.prefixes {
		if r.prefix.Contains(a) && within(r.prefix, guarded) {
			return Decision{Allowed: true, Reason: ReasonAllowed, Class: class, Rule: r.text}
		}
	}
	return Decision{Reason: ReasonBlockedAddress, Class: class}
}
