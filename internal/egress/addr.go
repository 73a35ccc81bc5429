package egress

import "net/netip"

// AddrClass names a range of addresses that the resolved-address guard
// refuses unless an address or CIDR entry of the policy lists it
// explicitly (see Policy). The zero value, ClassPublic, is every other
// address.
type AddrClass string

// The address classes, from the most specific range to the widest.
const (
	ClassPublic      AddrClass = ""
	ClassMetadata    AddrClass = "metadata"    // 169.254.169.254, fd00:ec2::254: cloud instance metadata
	ClassLoopback    AddrClass = "loopback"    // 127.0.0.0/8, ::1
	ClassUnspecified AddrClass = "unspecified" // 0.0.0.0/8, ::
	ClassPrivate     AddrClass = "private"     // RFC 1918, fc00::/7 (ULA), fec0::/10 (site-local)
	ClassCGNAT       AddrClass = "cgnat"       // 100.64.0.0/10 (RFC 6598)
	ClassLinkLocal   AddrClass = "link-local"  // 169.254.0.0/16, fe80::/10
	ClassMulticast   AddrClass = "multicast"   // 224.0.0.0/4, ff00::/8
	ClassReserved    AddrClass = "reserved"    // 240.0.0.0/4 (with 255.255.255.255)
)

// specialRange is one range of a class.
type specialRange struct {
	prefix netip.Prefix
	class  AddrClass
}

// specialRanges are the guarded ranges, the most specific first: an
// address takes the class of the first range that holds it, so the
// metadata addresses are "metadata", not "link-local" or "private".
var specialRanges = []specialRange{
	{netip.MustParsePrefix("169.254.169.254/32"), ClassMetadata},
	{netip.MustParsePrefix("fd00:ec2::254/128"), ClassMetadata},
	{netip.MustParsePrefix("127.0.0.0/8"), ClassLoopback},
	{netip.MustParsePrefix("::1/128"), ClassLoopback},
	{netip.MustParsePrefix("0.0.0.0/8"), ClassUnspecified},
	{netip.MustParsePrefix("::/128"), ClassUnspecified},
	{netip.MustParsePrefix("10.0.0.0/8"), ClassPrivate},
	{netip.MustParsePrefix("172.16.0.0/12"), ClassPrivate},
	{netip.MustParsePrefix("192.168.0.0/16"), ClassPrivate},
	{netip.MustParsePrefix("fc00::/7"), ClassPrivate},
	{netip.MustParsePrefix("fec0::/10"), ClassPrivate},
	{netip.MustParsePrefix("100.64.0.0/10"), ClassCGNAT},
	{netip.MustParsePrefix("169.254.0.0/16"), ClassLinkLocal},
	{netip.MustParsePrefix("fe80::/10"), ClassLinkLocal},
	{netip.MustParsePrefix("224.0.0.0/4"), ClassMulticast},
	{netip.MustParsePrefix("ff00::/8"), ClassMulticast},
	{netip.MustParsePrefix("240.0.0.0/4"), ClassReserved},
}

// nat64 is the well-known NAT64 prefix (RFC 6052): its addresses stand
// for the IPv4 address in their last 32 bits, which is what is guarded.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// canonicalAddr returns the address the guard judges: an IPv4-mapped
// IPv6 address (::ffff:a.b.c.d) as plain IPv4, without a zone.
func canonicalAddr(a netip.Addr) netip.Addr {
	return a.Unmap().WithZone("")
}

// classify returns the class of a and the guarded range that holds it.
// An address of the NAT64 prefix is judged by the IPv4 address it
// embeds.
func classify(a netip.Addr) (AddrClass, netip.Prefix) {
	a = canonicalAddr(a)
	if a.Is6() && nat64.Contains(a) {
		b := a.As16()
		a = netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	}
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r.class, r.prefix
		}
	}
	return ClassPublic, netip.Prefix{}
}

// ClassOf returns the class of a: ClassPublic, or the guarded range that
// holds it.
func ClassOf(a netip.Addr) AddrClass {
	c, _ := classify(a)
	return c
}
