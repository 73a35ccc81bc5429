package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Every test here answers DNS from the fake resolver and forbids the
// dialer: the DNS endpoint never connects anywhere.

// dnsQueryOpts shape a test query.
type dnsQueryOpts struct {
	id        uint16
	class     dnsmessage.Class
	opcode    dnsmessage.OpCode
	questions int // 0: one
	edns      bool
}

// buildDNSQuery builds a query for name of type qt.
func buildDNSQuery(t testing.TB, name string, qt dnsmessage.Type, o dnsQueryOpts) []byte {
	t.Helper()
	if o.class == 0 {
		o.class = dnsmessage.ClassINET
	}
	if o.questions == 0 {
		o.questions = 1
	}
	if o.questions < 0 {
		o.questions = 0
	}
	b := dnsmessage.NewBuilder(nil, dnsmessage.Header{ID: o.id, OpCode: o.opcode, RecursionDesired: true})
	if err := b.StartQuestions(); err != nil {
		t.Fatal(err)
	}
	for range o.questions {
		if err := b.Question(dnsmessage.Question{Name: dnsmessage.MustNewName(name), Type: qt, Class: o.class}); err != nil {
			t.Fatal(err)
		}
	}
	if o.edns {
		if err := b.StartAdditionals(); err != nil {
			t.Fatal(err)
		}
		var rh dnsmessage.ResourceHeader
		if err := rh.SetEDNS0(1232, dnsmessage.RCodeSuccess, false); err != nil {
			t.Fatal(err)
		}
		if err := b.OPTResource(rh, dnsmessage.OPTResource{}); err != nil {
			t.Fatal(err)
		}
	}
	msg, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// dnsRequest is the request the sandbox's agent sends, with body q.
func dnsRequest(q []byte) string {
	return fmt.Sprintf("POST http://%s%s HTTP/1.1\r\nHost: %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s",
		DNSHost, DNSPath, DNSHost, DNSContentType, len(q), q)
}

// roundTrip sends raw requests on one connection to the proxy and reads
// one response for each.
func (h *harness) roundTrip(reqs ...string) []*http.Response {
	h.t.Helper()
	c := h.dialProxy()
	br := bufio.NewReader(c)
	var out []*http.Response
	for _, r := range reqs {
		if _, err := io.WriteString(c, r); err != nil {
			h.t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			h.t.Fatalf("reading the answer to %.60q: %v", r, err)
		}
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			h.t.Fatal(err)
		}
		resp.Body = io.NopCloser(strings.NewReader(string(body)))
		out = append(out, resp)
	}
	return out
}

// dnsAnswer is a parsed DNS answer.
type dnsAnswer struct {
	h      dnsmessage.Header
	qs     []dnsmessage.Question
	addrs  []netip.Addr
	ttls   []uint32
	hasOPT bool
}

// ask sends one query and parses the DNS answer, which must come as a
// 200 application/dns-message.
func (h *harness) ask(q []byte) dnsAnswer {
	h.t.Helper()
	resp := h.roundTrip(dnsRequest(q))[0]
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != DNSContentType {
		h.t.Fatalf("DNS endpoint: %d %q %q", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return parseDNSAnswer(h.t, body)
}

func parseDNSAnswer(t testing.TB, msg []byte) dnsAnswer {
	t.Helper()
	var p dnsmessage.Parser
	var a dnsAnswer
	var err error
	if a.h, err = p.Start(msg); err != nil {
		t.Fatalf("answer: %v", err)
	}
	if a.qs, err = p.AllQuestions(); err != nil {
		t.Fatalf("answer's questions: %v", err)
	}
	rs, err := p.AllAnswers()
	if err != nil {
		t.Fatalf("answer's answers: %v", err)
	}
	for _, r := range rs {
		switch b := r.Body.(type) {
		case *dnsmessage.AResource:
			a.addrs = append(a.addrs, netip.AddrFrom4(b.A))
		case *dnsmessage.AAAAResource:
			a.addrs = append(a.addrs, netip.AddrFrom16(b.AAAA))
		default:
			t.Fatalf("unexpected record %v", r)
		}
		a.ttls = append(a.ttls, r.Header.TTL)
	}
	if err := p.SkipAllAuthorities(); err != nil {
		t.Fatal(err)
	}
	adds, err := p.AllAdditionals()
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range adds {
		a.hasOPT = a.hasOPT || r.Header.Type == dnsmessage.TypeOPT
	}
	return a
}

// TestDNSAllowedName: a listed name (exact, whatever its ports, or
// under a wildcard) is answered with the resolver's addresses, each
// family in its own record type, with the short TTL, the question and
// the ID echoed; other types get an empty NOERROR; a guarded address
// listed explicitly is answered; nothing is reported or dialled, and
// the queries are counted.
func TestDNSAllowedName(t *testing.T) {
	h := newHarness(t, []string{"allowed.test:443", "*.wild.test", "lo.test", "127.0.0.5:8080"}, map[string]string{
		"allowed.test":   "192.0.2.10,2001:db8::10",
		"a.b.wild.test":  "192.0.2.11",
		"lo.test":        "127.0.0.5",
		"mapped.test":    "::ffff:192.0.2.12",
		"unlisted.test":  "192.0.2.13",
		"wild.test":      "192.0.2.14",
		"nothere.test.x": "192.0.2.15",
	})
	h.dialer.forbid(true)
	for _, tt := range []struct {
		name string
		qt   dnsmessage.Type
		want []string
	}{
		{"allowed.test.", dnsmessage.TypeA, []string{"192.0.2.10"}},
		{"ALLOWED.test.", dnsmessage.TypeAAAA, []string{"2001:db8::10"}},
		{"a.b.wild.test.", dnsmessage.TypeA, []string{"192.0.2.11"}},
		{"a.b.wild.test.", dnsmessage.TypeAAAA, nil},
		{"lo.test.", dnsmessage.TypeA, []string{"127.0.0.5"}},
		{"allowed.test.", dnsmessage.TypeTXT, nil},
		{"allowed.test.", dnsmessage.TypeMX, nil},
	} {
		q := buildDNSQuery(t, tt.name, tt.qt, dnsQueryOpts{id: 0x1234})
		a := h.ask(q)
		if !a.h.Response || a.h.ID != 0x1234 || a.h.RCode != dnsmessage.RCodeSuccess || !a.h.RecursionDesired || !a.h.RecursionAvailable {
			t.Errorf("%s %v: header %+v", tt.name, tt.qt, a.h)
		}
		if len(a.qs) != 1 || a.qs[0].Name.String() != tt.name || a.qs[0].Type != tt.qt {
			t.Errorf("%s %v: question not echoed: %+v", tt.name, tt.qt, a.qs)
		}
		var got []string
		for _, ad := range a.addrs {
			got = append(got, ad.Unmap().String())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s %v: addresses %v, want %v", tt.name, tt.qt, got, tt.want)
		}
		for _, ttl := range a.ttls {
			if ttl != DNSTTL {
				t.Errorf("%s %v: TTL %d, want %d", tt.name, tt.qt, ttl, DNSTTL)
			}
		}
	}
	// A name the resolver does not know: NXDOMAIN, still no event.
	h.setPolicy("*.x")
	if a := h.ask(buildDNSQuery(t, "nothere.x.", dnsmessage.TypeA, dnsQueryOpts{})); a.h.RCode != dnsmessage.RCodeNameError || len(a.addrs) != 0 {
		t.Errorf("unknown allowed name: %+v", a)
	}
	h.events.none(t, 100*time.Millisecond)
	if st := h.proxy.Stats(); st.DNSQueries != 8 || st.Refused != 0 || st.Allowed != 0 {
		t.Errorf("stats %+v, want 8 DNS queries and no other decision", st)
	}
	if n := h.dialer.count(); n != 0 {
		t.Errorf("%d dials", n)
	}
}

// TestDNSDeniedName: a name no entry covers is REFUSED without being
// resolved, and reported with its type; once the policy lists it, it is
// answered (at once, on the same connection's next query).
func TestDNSDeniedName(t *testing.T) {
	h := newHarness(t, []string{"allowed.test", "*.wild.test"}, map[string]string{"denied.test": "192.0.2.20"})
	h.dialer.forbid(true)
	for _, name := range []string{"denied.test.", "wild.test.", "allowed.test.evil.", "xallowed.test."} {
		a := h.ask(buildDNSQuery(t, name, dnsmessage.TypeAAAA, dnsQueryOpts{id: 7}))
		if a.h.RCode != dnsmessage.RCodeRefused || a.h.ID != 7 || len(a.addrs) != 0 || len(a.qs) != 1 {
			t.Errorf("%s: want REFUSED with the question and no answer, got %+v", name, a)
		}
		ev := h.events.next(t)
		want := strings.TrimSuffix(name, ".")
		if ev.Allowed || ev.Protocol != ProtoDNS || ev.Reason != ReasonNotListed || ev.Host != want ||
			ev.Detail != "DNS query AAAA" || ev.Addr.IsValid() || ev.Start.IsZero() {
			t.Errorf("%s: event %+v", name, ev)
		}
	}
	h.res.mu.Lock()
	calls := slices.Clone(h.res.calls)
	h.res.mu.Unlock()
	if len(calls) != 0 {
		t.Errorf("denied names were resolved: %v", calls)
	}
	if st := h.proxy.Stats(); st.Refused != 4 || st.DNSQueries != 4 {
		t.Errorf("stats %+v", st)
	}

	// A changed list applies to the next query.
	q := buildDNSQuery(t, "denied.test.", dnsmessage.TypeA, dnsQueryOpts{})
	c := h.dialProxy()
	br := bufio.NewReader(c)
	io.WriteString(c, dnsRequest(q))
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if a := parseDNSAnswer(t, body); a.h.RCode != dnsmessage.RCodeRefused {
		t.Fatalf("before the change: %+v", a)
	}
	h.events.next(t)
	h.setPolicy("denied.test")
	io.WriteString(c, dnsRequest(q))
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("second query on a kept-alive connection: %v", err)
	}
	body, _ = io.ReadAll(resp.Body)
	if a := parseDNSAnswer(t, body); a.h.RCode != dnsmessage.RCodeSuccess || len(a.addrs) != 1 || a.addrs[0].String() != "192.0.2.20" {
		t.Fatalf("after the change: %+v", a)
	}
	h.events.none(t, 100*time.Millisecond)
}

// TestDNSRebindingRefused: a listed name that resolves to a guarded
// address (only, or among public ones) is REFUSED and reported as a
// blocked address, as a connection to it would be; listing the address
// lets it through, so the guard is what refused it.
func TestDNSRebindingRefused(t *testing.T) {
	h := newHarness(t, []string{"rebind.test", "mixed.test", "meta.test"}, map[string]string{
		"rebind.test": "127.0.0.1",
		"mixed.test":  "192.0.2.30,10.1.2.3",
		"meta.test":   "169.254.169.254",
	})
	h.dialer.forbid(true)
	for _, tt := range []struct {
		name, addr string
		class      AddrClass
	}{
		{"rebind.test", "127.0.0.1", ClassLoopback},
		{"mixed.test", "10.1.2.3", ClassPrivate},
		{"meta.test", "169.254.169.254", ClassMetadata},
	} {
		for _, qt := range []dnsmessage.Type{dnsmessage.TypeA, dnsmessage.TypeAAAA} {
			a := h.ask(buildDNSQuery(t, tt.name+".", qt, dnsQueryOpts{}))
			if a.h.RCode != dnsmessage.RCodeRefused || len(a.addrs) != 0 {
				t.Errorf("%s %v: want REFUSED and no address, got %+v", tt.name, qt, a)
			}
			ev := h.events.next(t)
			if ev.Allowed || ev.Protocol != ProtoDNS || ev.Reason != ReasonBlockedAddress || ev.Class != tt.class ||
				ev.Addr.String() != tt.addr || ev.Host != tt.name {
				t.Errorf("%s %v: event %+v", tt.name, qt, ev)
			}
		}
	}
	h.setPolicy("rebind.test", "127.0.0.1:8080")
	if a := h.ask(buildDNSQuery(t, "rebind.test.", dnsmessage.TypeA, dnsQueryOpts{})); a.h.RCode != dnsmessage.RCodeSuccess ||
		len(a.addrs) != 1 || a.addrs[0].String() != "127.0.0.1" {
		t.Errorf("rebind.test with 127.0.0.1 listed: %+v", a)
	}
	h.events.none(t, 100*time.Millisecond)
}

// TestDNSMalformed: requests to the DNS endpoint that are not one
// well-formed query are refused, with an HTTP error when there is no
// query to answer and with a DNS error otherwise, each reported; none
// is forwarded or resolved.
func TestDNSMalformed(t *testing.T) {
	h := newHarness(t, []string{"allowed.test"}, map[string]string{"allowed.test": "192.0.2.40"})
	h.dialer.forbid(true)
	ok := buildDNSQuery(t, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{})
	response := slices.Clone(ok)
	response[2] |= 0x80 // QR: a response, not a query
	trailing := append(slices.Clone(ok), 0, 0, 0)
	big := append(slices.Clone(ok), make([]byte, MaxDNSMessage)...)
	for _, tt := range []struct {
		name   string
		req    string
		status int
		rcode  dnsmessage.RCode // with status 200
		reason Reason
	}{
		{"oversized", dnsRequest(big), 413, 0, ReasonBadRequest},
		{"oversized chunked", fmt.Sprintf("POST http://%s%s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n",
			DNSHost, DNSPath, DNSContentType, len(big), big), 413, 0, ReasonBadRequest},
		{"short", dnsRequest([]byte{1, 2, 3}), 400, 0, ReasonBadRequest},
		{"a response", dnsRequest(response), 400, 0, ReasonBadRequest},
		{"two questions", dnsRequest(buildDNSQuery(t, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{questions: 2})), 200, dnsmessage.RCodeFormatError, ReasonBadRequest},
		{"no question", dnsRequest(buildDNSQuery(t, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{questions: -1})), 200, dnsmessage.RCodeFormatError, ReasonBadRequest},
		{"trailing garbage", dnsRequest(trailing[:len(trailing)-1]), 200, dnsmessage.RCodeSuccess, ""},
		{"opcode STATUS", dnsRequest(buildDNSQuery(t, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{opcode: 2})), 200, dnsmessage.RCodeNotImplemented, ReasonUnsupported},
		{"class CHAOS", dnsRequest(buildDNSQuery(t, "allowed.test.", dnsmessage.TypeTXT, dnsQueryOpts{class: dnsmessage.ClassCHAOS})), 200, dnsmessage.RCodeRefused, ReasonUnsupported},
		{"bad name", dnsRequest(buildDNSQuery(t, "a b.allowed.test.", dnsmessage.TypeA, dnsQueryOpts{})), 200, dnsmessage.RCodeRefused, ReasonBadTarget},
		{"numeric name", dnsRequest(buildDNSQuery(t, "1.0.0.127.", dnsmessage.TypeA, dnsQueryOpts{})), 200, dnsmessage.RCodeRefused, ReasonBadTarget},
		{"root", dnsRequest(buildDNSQuery(t, ".", dnsmessage.TypeNS, dnsQueryOpts{})), 200, dnsmessage.RCodeRefused, ReasonBadTarget},
		{"GET", fmt.Sprintf("GET http://%s%s?dns=AAAB HTTP/1.1\r\nHost: x\r\n\r\n", DNSHost, DNSPath), 404, 0, ReasonBadRequest},
		{"GET no query", fmt.Sprintf("GET http://%s%s HTTP/1.1\r\nHost: x\r\n\r\n", DNSHost, DNSPath), 405, 0, ReasonUnsupported},
		{"other path", strings.Replace(dnsRequest(ok), DNSPath, "/other", 1), 404, 0, ReasonBadRequest},
		{"other port", strings.Replace(dnsRequest(ok), DNSHost+DNSPath, DNSHost+":8080"+DNSPath, 1), 404, 0, ReasonBadRequest},
		{"content type", strings.Replace(dnsRequest(ok), DNSContentType, "application/octet-stream", 1), 415, 0, ReasonBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.roundTrip(tt.req)[0]
			body, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d %q, want %d", resp.StatusCode, body, tt.status)
			}
			if tt.status == 200 {
				a := parseDNSAnswer(t, body)
				if a.h.RCode != tt.rcode || !a.h.Response {
					t.Errorf("answer %+v, want rcode %v", a.h, tt.rcode)
				}
				if tt.reason == "" {
					if len(a.addrs) != 1 {
						t.Errorf("answer %+v", a)
					}
					return
				}
			} else if !strings.HasPrefix(string(body), "airlock egress: ") {
				t.Errorf("body %q", body)
			}
			ev := h.events.next(t)
			if ev.Allowed || ev.Protocol != ProtoDNS || ev.Reason != tt.reason {
				t.Errorf("event %+v, want a dns refusal %s", ev, tt.reason)
			}
		})
	}
	h.res.mu.Lock()
	calls := slices.Clone(h.res.calls)
	h.res.mu.Unlock()
	if len(calls) != 1 { // the one well-formed query
		t.Errorf("lookups %v, want one", calls)
	}
	h.events.none(t, 100*time.Millisecond)
}

// TestDNSEDNS: a query with an OPT record gets one back (RFC 6891
// 6.1.1); one without gets none.
func TestDNSEDNS(t *testing.T) {
	h := newHarness(t, []string{"allowed.test"}, map[string]string{"allowed.test": "192.0.2.50"})
	h.dialer.forbid(true)
	for _, edns := range []bool{true, false} {
		a := h.ask(buildDNSQuery(t, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{edns: edns}))
		if a.hasOPT != edns || len(a.addrs) != 1 {
			t.Errorf("edns %v: answer %+v", edns, a)
		}
	}
}

// slowResolver never answers before its context ends.
type slowResolver struct{}

func (slowResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// TestDNSResolveTimeout: an allowed name whose resolution does not end
// within the dial timeout is SERVFAIL, in time.
func TestDNSResolveTimeout(t *testing.T) {
	h := newHarness(t, []string{"slow.test"}, nil, withLimits(Limits{DialTimeout: 200 * time.Millisecond}),
		func(c *Config) { c.Resolver = slowResolver{} })
	h.dialer.forbid(true)
	start := time.Now()
	a := h.ask(buildDNSQuery(t, "slow.test.", dnsmessage.TypeA, dnsQueryOpts{}))
	if a.h.RCode != dnsmessage.RCodeServerFailure {
		t.Errorf("answer %+v, want SERVFAIL", a)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("answered after %v", d)
	}
}

// TestDNSReservedName: the DNS endpoint's names cannot be listed, no
// wildcard covers them, and they are no destination for any protocol
// (a plain HTTP request to the host reaches the endpoint, never the
// network).
func TestDNSReservedName(t *testing.T) {
	for _, e := range []string{"dns.airlock.internal", "DNS.Airlock.Internal.", "airlock.internal", "*.airlock.internal", "x.dns.airlock.internal:80", "*.dns.airlock.internal"} {
		_, err := ParsePolicy([]string{e})
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "sandbox's DNS service") {
			t.Errorf("ParsePolicy(%q): %v, want a reserved-name error", e, err)
		}
	}
	h := newHarness(t, []string{"*.internal"}, map[string]string{"corp.internal": "192.0.2.60", DNSHost: "192.0.2.61"})
	h.dialer.forbid(true)
	if d := h.proxy.Policy().Decide("corp.internal", 80); !d.Allowed {
		t.Errorf("corp.internal under *.internal: %+v", d)
	}
	for _, port := range []uint16{80, 443} {
		if d := h.proxy.Policy().Decide(DNSHost, port); d.Allowed || d.Reason != ReasonNotListed {
			t.Errorf("Decide(%s, %d) = %+v", DNSHost, port, d)
		}
	}
	c, _, code, _ := h.connect(DNSHost + ":80")
	c.Close()
	if code != http.StatusForbidden {
		t.Errorf("CONNECT %s:80: %d", DNSHost, code)
	}
	if ev := h.events.next(t); ev.Reason != ReasonNotListed || ev.Protocol != ProtoConnect {
		t.Errorf("CONNECT event %+v", ev)
	}
	if a := h.ask(buildDNSQuery(t, DNSHost+".", dnsmessage.TypeA, dnsQueryOpts{})); a.h.RCode != dnsmessage.RCodeRefused {
		t.Errorf("query for %s: %+v", DNSHost, a)
	}
	if ev := h.events.next(t); ev.Reason != ReasonNotListed || ev.Protocol != ProtoDNS {
		t.Errorf("DNS event %+v", ev)
	}
	if a := h.ask(buildDNSQuery(t, "corp.internal.", dnsmessage.TypeA, dnsQueryOpts{})); len(a.addrs) != 1 {
		t.Errorf("query for corp.internal: %+v", a)
	}
	h.res.mu.Lock()
	calls := slices.Clone(h.res.calls)
	h.res.mu.Unlock()
	if slices.Contains(calls, DNSHost) {
		t.Errorf("%s was resolved: %v", DNSHost, calls)
	}
}

// FuzzDNSQuery: whatever the body, answerDNS does not panic, and what it
// answers is a well-formed response to the same ID with at most one
// question.
func FuzzDNSQuery(f *testing.F) {
	f.Add(buildDNSQuery(f, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{id: 1}))
	f.Add(buildDNSQuery(f, "denied.test.", dnsmessage.TypeAAAA, dnsQueryOpts{edns: true}))
	f.Add(buildDNSQuery(f, "allowed.test.", dnsmessage.TypeA, dnsQueryOpts{questions: 3}))
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 12, 0, 1, 0, 1})
	pol, err := ParsePolicy([]string{"allowed.test", "*.wild.test"})
	if err != nil {
		f.Fatal(err)
	}
	p, err := New(Config{Policy: pol, Resolver: newFakeResolver(map[string]string{"allowed.test": "192.0.2.1,2001:db8::1"})})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var ev Event
		out := p.answerDNS(context.Background(), &ev, msg)
		if out == nil {
			return
		}
		var ps dnsmessage.Parser
		h, err := ps.Start(out)
		if err != nil || !h.Response || len(msg) < 2 || h.ID != uint16(msg[0])<<8|uint16(msg[1]) {
			t.Fatalf("answer header %+v, %v", h, err)
		}
		qs, err := ps.AllQuestions()
		if err != nil || len(qs) > 1 {
			t.Fatalf("answer questions %v, %v", qs, err)
		}
		if _, err := ps.AllAnswers(); err != nil {
			t.Fatalf("answer records: %v", err)
		}
	})
}

// TestDNSAnyName: a proxy with AnyName (network mode open) answers every
// name, listed or not, but still refuses one that resolves to a guarded
// address the policy does not list, and the runtime's own names; its
// connections are judged by the policy as ever.
func TestDNSAnyName(t *testing.T) {
	h := newHarness(t, []string{"10.9.0.0/16"}, map[string]string{
		"public.test":  "192.0.2.50",
		"private.test": "10.1.2.3",
		"listed.test":  "10.9.1.1",
	}, func(c *Config) { c.AnyName = true })
	h.dialer.forbid(true)
	for name, want := range map[string]string{"public.test.": "192.0.2.50", "listed.test.": "10.9.1.1"} {
		if a := h.ask(buildDNSQuery(t, name, dnsmessage.TypeA, dnsQueryOpts{})); a.h.RCode != dnsmessage.RCodeSuccess ||
			len(a.addrs) != 1 || a.addrs[0].String() != want {
			t.Errorf("%s with AnyName: %+v, want %s", name, a, want)
		}
	}
	h.events.none(t, 100*time.Millisecond)
	if a := h.ask(buildDNSQuery(t, "private.test.", dnsmessage.TypeA, dnsQueryOpts{})); a.h.RCode != dnsmessage.RCodeRefused {
		t.Errorf("a name resolving to an unlisted private address: %+v, want REFUSED", a)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonBlockedAddress || ev.Class != ClassPrivate {
		t.Errorf("event of the private name: %+v", ev)
	}
	if a := h.ask(buildDNSQuery(t, DNSHost+".", dnsmessage.TypeA, dnsQueryOpts{})); a.h.RCode != dnsmessage.RCodeRefused {
		t.Errorf("the reserved name with AnyName: %+v, want REFUSED", a)
	}
	h.events.next(t)
	// A tunnel to a name is still refused: the policy lists no name.
	c, _, err := proxyConnect(h.addr, "public.test:443")
	if err == nil {
		c.Close()
		t.Error("a CONNECT to an unlisted name went through an AnyName proxy")
	}
}
