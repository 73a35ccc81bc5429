package egress

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Caps on a policy. ParsePolicy refuses a policy past them.
const (
	// MaxEntries is the most entries a policy may have.
	MaxEntries = 1024
	// MaxEntryLen is the longest entry, in bytes.
	MaxEntryLen = 512
	// MaxPortSpecs is the most ports and port ranges one entry may list.
	MaxPortSpecs = 32
	// maxNameLen is the longest DNS name (RFC 1035), without its
	// trailing dot.
	maxNameLen = 253
	// maxLabelLen is the longest DNS label.
	maxLabelLen = 63
)

// ruleKind tells the three kinds of entries apart.
type ruleKind uint8

const (
	ruleExact    ruleKind = iota + 1 // a host name
	ruleWildcard                     // *.suffix
	rulePrefix                       // an address or CIDR
)

// portRange is an inclusive range of ports.
type portRange struct{ lo, hi uint16 }

// rule is one parsed entry.
type rule struct {
	text   string // canonical form, as Entries returns it
	kind   ruleKind
	name   string       // ruleExact: the name; ruleWildcard: the suffix after "*."
	prefix netip.Prefix // rulePrefix, masked
	ports  []portRange  // nil: every port
}

func (r *rule) allowsPort(port uint16) bool {
	if r.ports == nil {
		return true
	}
	for _, pr := range r.ports {
		if port >= pr.lo && port <= pr.hi {
			return true
		}
	}
	return false
}

// Policy is a parsed, validated allowlist: the destinations a sandbox may
// reach through its proxy. It is immutable once parsed and safe for
// concurrent use; a proxy swaps a whole Policy to change it.
//
// Entries take these forms, each optionally followed by ":PORTS", a
// comma-separated list of ports and inclusive ranges ("443",
// "80,443", "8000-8100,9000"); without it every port is allowed:
//
//	example.com          the name itself (case-insensitive, a trailing dot ignored)
//	*.example.com        every name under example.com, at any depth
//	                     (a.example.com, a.b.example.com), not example.com itself
//	192.0.2.7            one IPv4 address
//	192.0.2.0/24         an IPv4 CIDR (host bits must be zero)
//	2001:db8::1          one IPv6 address; 2001:db8::/32 a CIDR (no port:
//	[2001:db8::1]:443    write it in brackets to add one)
//
// Names under airlock.internal are the runtime's own (DNSHost, the
// proxy's DNS endpoint): no entry may name them, and no wildcard covers
// them. A name entry also lets the sandbox resolve the names it covers
// (see DNSHost), whatever its ports.
//
// A name entry allows connections to that name only; an address entry
// allows connections to a raw address only. A name is resolved on the
// host and every address it resolves to is checked again (see CheckAddr):
// an address of a guarded class (loopback, private, link-local, CGNAT,
// unspecified, multicast, reserved, metadata) is refused unless an
// address entry lists it explicitly, that is an entry that holds it with
// the port and lies inside the guarded range holding it: "127.0.0.1" and
// "10.0.0.0/8" list their addresses, "0.0.0.0/0" lists none of the
// guarded ones, and "169.254.0.0/16" does not list the metadata address
// 169.254.169.254 (only "169.254.169.254" does).
type Policy struct {
	rules     []*rule
	exact     map[string][]*rule
	wildcards map[string][]*rule
	prefixes  []*rule
}

// ParsePolicy parses and validates entries. Errors wrap
// errdefs.ErrInvalidArgument and name the entry at fault. An empty list is
// a valid policy that allows nothing. Duplicate entries are kept once.
func ParsePolicy(entries []string) (*Policy, error) {
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("egress policy: %d entries, at most %d: %w", len(entries), MaxEntries, errdefs.ErrInvalidArgument)
	}
	p := &Policy{exact: map[string][]*rule{}, wildcards: map[string][]*rule{}}
	seen := map[string]bool{}
	for i, e := range entries {
		r, err := parseEntry(e)
		if err != nil {
			return nil, fmt.Errorf("egress policy entry %d %s: %w", i+1, quoteEntry(e), err)
		}
		if seen[r.text] {
			continue
		}
		seen[r.text] = true
		p.rules = append(p.rules, r)
		switch r.kind {
		case ruleExact:
			p.exact[r.name] = append(p.exact[r.name], r)
		case ruleWildcard:
			p.wildcards[r.name] = append(p.wildcards[r.name], r)
		case rulePrefix:
			p.prefixes = append(p.prefixes, r)
		}
	}
	return p, nil
}

// quoteEntry quotes an entry for an error message, cut to a readable
// length.
func quoteEntry(e string) string {
	if len(e) > 80 {
		e = e[:80] + "..."
	}
	return strconv.Quote(e)
}

// Entries returns the policy's entries in canonical form (lower case, no
// trailing dot, ports sorted and merged), in the order they were given,
// duplicates dropped. ParsePolicy(p.Entries()) is an equal policy.
func (p *Policy) Entries() []string {
	out := make([]string, len(p.rules))
	for i, r := range p.rules {
		out[i] = r.text
	}
	return out
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// errReservedName refuses an entry that names the runtime's own names:
// the proxy's DNS endpoint is never a destination.
var errReservedName = invalid("names under %s are the sandbox's DNS service (%s), never a destination", reservedDomain, DNSHost)

// parseEntry parses one entry.
func parseEntry(e string) (*rule, error) {
	if e == "" {
		return nil, invalid("empty entry")
	}
	if len(e) > MaxEntryLen {
		return nil, invalid("%d bytes, at most %d", len(e), MaxEntryLen)
	}
	if strings.TrimSpace(e) != e {
		return nil, invalid("leading or trailing space")
	}
	host, ports, err := splitEntry(e)
	if err != nil {
		return nil, err
	}
	r := &rule{}
	if ports != "" {
		if r.ports, err = parsePorts(ports); err != nil {
			return nil, err
		}
	}
	switch {
	case strings.HasPrefix(host, "*."):
		name, err := parseName(host[2:])
		if err != nil {
			return nil, err
		}
		if reservedName(name) {
			return nil, errReservedName
		}
		r.kind, r.name = ruleWildcard, name
		host = "*." + name
	case strings.Contains(host, "*"):
		return nil, invalid("a wildcard may only be a whole first label (*.example.com)")
	case looksLikeAddr(host):
		pf, err := parsePrefix(host)
		if err != nil {
			return nil, err
		}
		r.kind, r.prefix = rulePrefix, pf
		host = prefixText(pf)
		if pf.Addr().Is6() && r.ports != nil {
			host = "[" + host + "]"
		}
	default:
		name, err := parseName(host)
		if err != nil {
			return nil, err
		}
		if reservedName(name) {
			return nil, errReservedName
		}
		r.kind, r.name = ruleExact, name
		host = name
	}
	r.text = host
	if r.ports != nil {
		r.text += ":" + portsText(r.ports)
	}
	return r, nil
}

// splitEntry splits an entry into its host part and its port list.
func splitEntry(e string) (host, ports string, err error) {
	if strings.HasPrefix(e, "[") {
		end := strings.IndexByte(e, ']')
		if end < 0 {
			return "", "", invalid("unclosed [")
		}
		host, rest := e[1:end], e[end+1:]
		if !strings.Contains(host, ":") {
			return "", "", invalid("brackets are only for IPv6 addresses")
		}
		if rest == "" {
			return host, "", nil
		}
		if !strings.HasPrefix(rest, ":") || len(rest) == 1 {
			return "", "", invalid("expected :PORTS after ]")
		}
		return host, rest[1:], nil
	}
	switch strings.Count(e, ":") {
	case 0:
		return e, "", nil
	case 1:
		i := strings.IndexByte(e, ':')
		if i == len(e)-1 {
			return "", "", invalid("empty port list")
		}
		return e[:i], e[i+1:], nil
	default:
		return e, "", nil // a bare IPv6 address or CIDR, no port
	}
}

// looksLikeAddr reports whether host is meant as an address or CIDR:
// it holds a colon or a slash, or it is made of digits and dots only.
// Names with a numeric last label are refused by parseName, so nothing
// falls between the two.
func looksLikeAddr(host string) bool {
	if strings.ContainsAny(host, ":/") {
		return true
	}
	return strings.Trim(host, "0123456789.") == ""
}

// parsePrefix parses an address or a CIDR.
func parsePrefix(s string) (netip.Prefix, error) {
	if strings.Contains(s, "%") {
		return netip.Prefix{}, invalid("an address with a zone is not allowed")
	}
	var pf netip.Prefix
	if strings.Contains(s, "/") {
		var err error
		pf, err = netip.ParsePrefix(s)
		if err != nil {
			return netip.Prefix{}, invalid("not an address or CIDR")
		}
		if pf.Masked() != pf {
			return netip.Prefix{}, invalid("host bits set in CIDR (did you mean %s?)", pf.Masked())
		}
	} else {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, invalid("not an address or CIDR")
		}
		pf = netip.PrefixFrom(a, a.BitLen())
	}
	if pf.Addr().Is4In6() {
		return netip.Prefix{}, invalid("write an IPv4-mapped address in its IPv4 form")
	}
	return pf, nil
}

// prefixText writes a prefix as an entry: a single address without
// "/32" or "/128".
func prefixText(pf netip.Prefix) string {
	if pf.IsSingleIP() {
		return pf.Addr().String()
	}
	return pf.String()
}

// parsePorts parses a port list: ports and inclusive ranges, comma
// separated. The result is sorted and overlapping ranges are merged.
func parsePorts(s string) ([]portRange, error) {
	specs := strings.Split(s, ",")
	if len(specs) > MaxPortSpecs {
		return nil, invalid("%d ports or ranges, at most %d", len(specs), MaxPortSpecs)
	}
	var out []portRange
	for _, spec := range specs {
		lo, hi, isRange := strings.Cut(spec, "-")
		a, err := parsePort(lo)
		if err != nil {
			return nil, err
		}
		b := a
		if isRange {
			if b, err = parsePort(hi); err != nil {
				return nil, err
			}
			if b < a {
				return nil, invalid("port range %s runs backwards", spec)
			}
		}
		out = append(out, portRange{a, b})
	}
	slices.SortFunc(out, func(x, y portRange) int { return int(x.lo) - int(y.lo) })
	merged := out[:1]
	for _, pr := range out[1:] {
		last := &merged[len(merged)-1]
		if uint32(pr.lo) <= uint32(last.hi)+1 {
			last.hi = max(last.hi, pr.hi)
			continue
		}
		merged = append(merged, pr)
	}
	return merged, nil
}

// parsePort parses one port, 1 to 65535, decimal digits only.
func parsePort(s string) (uint16, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, invalid("bad port %q", s)
	}
	n, _ := strconv.Atoi(s)
	if n < 1 || n > 65535 {
		return 0, invalid("port %d out of range 1-65535", n)
	}
	return uint16(n), nil
}

func portsText(ports []portRange) string {
	var b strings.Builder
	for i, pr := range ports {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(int(pr.lo)))
		if pr.hi != pr.lo {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(int(pr.hi)))
		}
	}
	return b.String()
}

// parseName validates a DNS host name and returns it in canonical form:
// lower case, without a trailing dot. Labels are 1 to 63 bytes of ASCII
// letters, digits, '-' (not first or last) and '_'; the last label is
// not numeric, so that no name reads as an IPv4 address in a client's
// eyes (127.1, 0x7f.1).
func parseName(s string) (string, error) {
	s = strings.TrimSuffix(s, ".")
	if s == "" {
		return "", invalid("empty host name")
	}
	if len(s) > maxNameLen {
		return "", invalid("host name of %d bytes, at most %d", len(s), maxNameLen)
	}
	s = strings.ToLower(s)
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return "", invalid("empty label in host name")
		}
		if len(label) > maxLabelLen {
			return "", invalid("label of %d bytes, at most %d", len(label), maxLabelLen)
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", invalid("a label may not start or end with '-'")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '-', c == '_':
			case c >= 0x80:
				return "", invalid("non-ASCII host name (write its IDNA form, xn--...)")
			default:
				return "", invalid("character %q not allowed in a host name", c)
			}
		}
	}
	last := s[strings.LastIndexByte(s, '.')+1:]
	if numericLabel(last) {
		return "", invalid("host name ends in a numeric label (write an address as a.b.c.d)")
	}
	return s, nil
}

// numericLabel reports whether a label reads as a number (decimal, or
// hexadecimal with 0x), as URL parsers and inet_aton read the parts of
// an IPv4 address.
func numericLabel(l string) bool {
	if h, ok := strings.CutPrefix(l, "0x"); ok {
		return strings.Trim(h, "0123456789abcdef") == ""
	}
	return strings.Trim(l, "0123456789") == ""
}

// Reason says why a destination was allowed or refused. The values are
// stable: they are written to the audit log.
type Reason string

// The reasons.
const (
	// ReasonAllowed: the destination is listed, and so is each address
	// it resolved to where that address is guarded.
	ReasonAllowed Reason = "allowed"
	// ReasonNotListed: no entry names the host or holds the address.
	ReasonNotListed Reason = "not_listed"
	// ReasonPortNotListed: an entry names the host, but not the port.
	ReasonPortNotListed Reason = "port_not_listed"
	// ReasonBlockedAddress: the address (given or resolved) is of a
	// guarded class that no entry lists explicitly; Decision.Class says
	// which.
	ReasonBlockedAddress Reason = "blocked_address"
	// ReasonBadTarget: the host or port is not valid.
	ReasonBadTarget Reason = "bad_target"
	// ReasonResolveFailed: the name did not resolve (or to nothing).
	ReasonResolveFailed Reason = "resolve_failed"
	// ReasonDialFailed: no checked address accepted the connection.
	ReasonDialFailed Reason = "dial_failed"
	// ReasonSNIMismatch: the TLS ClientHello's server name is not the
	// tunnel's target (or is missing for a named target).
	ReasonSNIMismatch Reason = "sni_mismatch"
	// ReasonHostMismatch: the first HTTP request in a tunnel names
	// another host than the tunnel's target.
	ReasonHostMismatch Reason = "host_mismatch"
	// ReasonConnLimit: the proxy already has its maximum of connections.
	ReasonConnLimit Reason = "conn_limit"
	// ReasonBadRequest: the client spoke the protocol wrongly, sent
	// headers past the cap, or not within the handshake timeout.
	ReasonBadRequest Reason = "bad_request"
	// ReasonUnsupported: a request the proxy does not serve (SOCKS BIND
	// or UDP ASSOCIATE, SOCKS4, SOCKS authentication, an https:// URL
	// sent for plain forwarding).
	ReasonUnsupported Reason = "unsupported"
)

// Decision is the verdict on one destination.
type Decision struct {
	Allowed bool
	Reason  Reason
	// Class is the guarded class of the address, for
	// ReasonBlockedAddress (and for an allowed guarded address).
	Class AddrClass
	// Rule is the canonical entry that allowed the destination, if one
	// did.
	Rule string
}

// Message is a short text for the client: true, and free of host
// details (a refused resolved address is named by its class only).
func (d Decision) Message() string {
	switch d.Reason {
	case ReasonAllowed:
		return "allowed"
	case ReasonNotListed:
		return "destination not in the sandbox's egress allowlist"
	case ReasonPortNotListed:
		return "port not in the sandbox's egress allowlist for this host"
	case ReasonBlockedAddress:
		return "destination is a " + string(d.Class) + " address that the egress allowlist does not list"
	case ReasonBadTarget:
		return "not a valid host and port"
	case ReasonResolveFailed:
		return "host name did not resolve"
	case ReasonDialFailed:
		return "destination did not accept the connection"
	case ReasonSNIMismatch:
		return "TLS server name does not match the tunnel's host"
	case ReasonHostMismatch:
		return "HTTP Host does not match the tunnel's host"
	case ReasonConnLimit:
		return "too many connections"
	case ReasonBadRequest:
		return "malformed request"
	case ReasonUnsupported:
		return "request not supported by the egress proxy"
	case ReasonUpstreamTLS:
		return "destination's TLS certificate did not verify"
	case ReasonCredential:
		return "credential for this destination is unavailable"
	case ReasonNotHTTP:
		return "destination with a credential takes HTTP/1.1 only"
	}
	return string(d.Reason)
}

func refused(r Reason) Decision { return Decision{Reason: r} }

// Decide says whether a connection to host:port may be attempted,
// before any resolution. host is a name (any case, a trailing dot
// ignored) or an IP literal (IPv6 with or without brackets). A name is
// allowed by an exact or wildcard entry; an IP literal only by an
// address entry, and an address of a guarded class only by an entry
// that lists it explicitly. An allowed name must still pass CheckAddr
// for each address it resolves to.
func (p *Policy) Decide(host string, port uint16) Decision {
	t, err := parseHost(host)
	if err != nil || port == 0 {
		return refused(ReasonBadTarget)
	}
	if t.addr.IsValid() {
		return p.decideAddr(t.addr, port)
	}
	return p.decideName(t.name, port)
}

// decideName judges a canonical name. Names under reservedDomain are
// never allowed, whatever wildcard would cover them.
func (p *Policy) decideName(name string, port uint16) Decision {
	if reservedName(name) {
		return refused(ReasonNotListed)
	}
	hostMatched := false
	for _, r := range p.exact[name] {
		if r.allowsPort(port) {
			return Decision{Allowed: true, Reason: ReasonAllowed, Rule: r.text}
		}
		hostMatched = true
	}
	for suffix := name; ; {
		i := strings.IndexByte(suffix, '.')
		if i < 0 {
			break
		}
		suffix = suffix[i+1:]
		for _, r := range p.wildcards[suffix] {
			if r.allowsPort(port) {
				return Decision{Allowed: true, Reason: ReasonAllowed, Rule: r.text}
			}
			hostMatched = true
		}
	}
	if hostMatched {
		return refused(ReasonPortNotListed)
	}
	return refused(ReasonNotListed)
}

// decideAddr judges a raw address: it must be listed, and listed
// explicitly when guarded.
func (p *Policy) decideAddr(a netip.Addr, port uint16) Decision {
	a = canonicalAddr(a)
	class, guarded := classify(a)
	d := refused(ReasonNotListed)
	for _, r := range p.prefixes {
		if !r.prefix.Contains(a) {
			continue
		}
		if !r.allowsPort(port) {
			if d.Reason == ReasonNotListed {
				d = refused(ReasonPortNotListed)
			}
			continue
		}
		if class != ClassPublic && !within(r.prefix, guarded) {
			d = Decision{Reason: ReasonBlockedAddress, Class: class}
			continue
		}
		return Decision{Allowed: true, Reason: ReasonAllowed, Class: class, Rule: r.text}
	}
	return d
}

// within reports whether the entry's prefix lies inside the guarded
// range: it names only addresses of that range.
func within(entry, guarded netip.Prefix) bool {
	return entry.Bits() >= guarded.Bits() && guarded.Contains(entry.Addr())
}

// CheckAddr is the resolved-address guard: it judges an address that an
// allowed name resolved to. An address of no guarded class passes; a
// guarded one passes only when an address entry lists it explicitly,
// with the port.
func (p *Policy) CheckAddr(a netip.Addr, port uint16) Decision {
	class := ClassOf(a)
	if class == ClassPublic {
		return Decision{Allowed: true, Reason: ReasonAllowed}
	}
	d := p.decideAddr(a, port)
	if !d.Allowed {
		return Decision{Reason: ReasonBlockedAddress, Class: class}
	}
	return d
}

// host is a parsed destination host: a canonical name or an address.
type host struct {
	name string     // canonical name, when addr is not valid
	addr netip.Addr // the IP literal, canonical
}

// String returns the host as a client would write it in a host:port
// (brackets around IPv6 excepted).
func (h host) String() string {
	if h.addr.IsValid() {
		return h.addr.String()
	}
	return h.name
}

// parseHost parses a destination host as a client sent it.
func parseHost(s string) (host, error) {
	if s == "" || len(s) > maxNameLen+2 {
		return host{}, invalid("bad host")
	}
	if strings.HasPrefix(s, "[") && strings.HasSuffix(s, "]") {
		s = s[1 : len(s)-1]
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is6() || a.Zone() != "" {
			return host{}, invalid("bad IPv6 literal")
		}
		return host{addr: canonicalAddr(a)}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return host{}, invalid("address with a zone")
		}
		return host{addr: canonicalAddr(a)}, nil
	}
	name, err := parseName(s)
	if err != nil {
		return host{}, err
	}
	return host{name: name}, nil
}
