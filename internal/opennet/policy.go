package opennet

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Blocked are the IPv4 destinations an open sandbox cannot reach unless
// it lists them (see ParseAllow). The pool itself (other sandboxes) and
// the router's own addresses are refused whatever a sandbox lists.
var Blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),          // "this network"
	netip.MustParsePrefix("10.0.0.0/8"),         // RFC 1918
	netip.MustParsePrefix("100.64.0.0/10"),      // CGNAT (RFC 6598)
	netip.MustParsePrefix("127.0.0.0/8"),        // loopback
	netip.MustParsePrefix("169.254.0.0/16"),     // link-local, cloud metadata (169.254.169.254)
	netip.MustParsePrefix("172.16.0.0/12"),      // RFC 1918
	netip.MustParsePrefix("192.0.0.0/24"),       // IETF protocol assignments
	netip.MustParsePrefix("192.168.0.0/16"),     // RFC 1918
	netip.MustParsePrefix("198.18.0.0/15"),      // benchmarking
	netip.MustParsePrefix("224.0.0.0/4"),        // multicast
	netip.MustParsePrefix("240.0.0.0/4"),        // reserved, broadcast
	netip.MustParsePrefix("100.100.100.200/32"), // Alibaba metadata (inside CGNAT; listed for clarity)
}

// MaxAllow caps the prefixes one sandbox may list.
const MaxAllow = 64

// ParseAllow parses an open sandbox's list: IPv4 addresses and CIDRs it
// may reach although Blocked holds them. Entries are returned masked,
// without duplicates.
func ParseAllow(entries []string) ([]netip.Prefix, error) {
	if len(entries) > MaxAllow {
		return nil, fmt.Errorf("network.allow: %d entries, at most %d in open mode: %w", len(entries), MaxAllow, errdefs.ErrInvalidArgument)
	}
	var out []netip.Prefix
	seen := map[netip.Prefix]bool{}
	for _, e := range entries {
		shown := e
		if len(shown) > 64 {
			shown = shown[:64]
		}
		var p netip.Prefix
		var err error
		if strings.Contains(e, "/") {
			p, err = netip.ParsePrefix(e)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(e)
			if err == nil {
				p = netip.PrefixFrom(a, a.BitLen())
			}
		}
		if err != nil || !p.Addr().Is4() {
			return nil, fmt.Errorf("network.allow entry %q: open mode takes IPv4 addresses and CIDRs only: %w", shown, errdefs.ErrInvalidArgument)
		}
		p = p.Masked()
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// LinkName is the name of the host end of id's veth: "al-" and 12 hex
// digits of a hash of the ID (IDs may share a prefix; an interface name
// has at most 15 bytes). The full ID is the link's alias.
func LinkName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return linkPrefix + hex.EncodeToString(sum[:])[:12]
}

// linkPrefix starts the name of every host end.
const linkPrefix = "al-"
