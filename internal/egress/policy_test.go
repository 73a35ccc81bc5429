package egress

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestParsePolicyCanonical(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		{"example.com", "example.com"},
		{"Example.COM.", "example.com"},
		{"*.Example.com", "*.example.com"},
		{"example.com:443", "example.com:443"},
		{"example.com:443,80,81,82-90", "example.com:80-90,443"},
		{"example.com:1-65535", "example.com:1-65535"},
		{"_srv.example.com", "_srv.example.com"},
		{"intranet", "intranet"},
		{"xn--bcher-kva.example", "xn--bcher-kva.example"},
		{"192.0.2.7", "192.0.2.7"},
		{"192.0.2.7/32", "192.0.2.7"},
		{"192.0.2.0/24:443", "192.0.2.0/24:443"},
		{"10.0.0.0/8", "10.0.0.0/8"},
		{"2001:db8::1", "2001:db8::1"},
		{"2001:DB8::/32", "2001:db8::/32"},
		{"[2001:db8::1]:443", "[2001:db8::1]:443"},
		{"[2001:db8::/32]:80,443", "[2001:db8::/32]:80,443"},
		{"[::1]", "::1"},
	}
	for _, tt := range tests {
		p, err := ParsePolicy([]string{tt.in})
		if err != nil {
			t.Errorf("ParsePolicy(%q): %v", tt.in, err)
			continue
		}
		if got := p.Entries(); len(got) != 1 || got[0] != tt.want {
			t.Errorf("ParsePolicy(%q).Entries() = %q, want %q", tt.in, got, tt.want)
			continue
		}
		// The canonical form parses to itself.
		q, err := ParsePolicy(p.Entries())
		if err != nil || !slices.Equal(q.Entries(), p.Entries()) {
			t.Errorf("reparse of %q = %v, %v", p.Entries(), q, err)
		}
	}
}

func TestParsePolicyErrors(t *testing.T) {
	tests := []struct {
		in   string
		want string // in the error
	}{
		{"", "empty entry"},
		{" example.com", "space"},
		{"*", "wildcard"},
		{"*example.com", "wildcard"},
		{"a.*.example.com", "wildcard"},
		{"*.*.example.com", "not allowed"},
		{"*.", "empty host name"},
		{"example.com:", "empty port list"},
		{"example.com:0", "out of range"},
		{"example.com:65536", "out of range"},
		{"example.com:http", "bad port"},
		{"example.com:+80", "bad port"},
		{"example.com:90-80", "backwards"},
		{"example.com:80,,443", "bad port"},
		{"example..com", "empty label"},
		{"-a.example.com", "start or end with '-'"},
		{"a-.example.com", "start or end with '-'"},
		{"exa mple.com", "not allowed"},
		{"exa/mple.com", "not an address"},
		{"bücher.example", "IDNA"},
		{strings.Repeat("a", 64) + ".com", "label of 64 bytes"},
		{strings.Repeat("abcdefghi.", 26) + "com", "host name of 263 bytes"},
		{"127.1", "not an address"},
		{"1.2.3.4.5", "not an address"},
		{"example.123", "numeric label"},
		{"example.0x7f", "numeric label"},
		{"10.1.2.3/8", "did you mean 10.0.0.0/8"},
		{"10.0.0.0/33", "not an address"},
		{"::ffff:10.0.0.1", "IPv4 form"},
		{"fe80::1%eth0", "zone"},
		{"[2001:db8::1", "unclosed"},
		{"[2001:db8::1]443", "expected :PORTS"},
		{"[example.com]:443", "only for IPv6"},
		{"example.com:" + strings.TrimSuffix(strings.Repeat("1,", MaxPortSpecs+1), ","), "at most 32"},
		{strings.Repeat("a", MaxEntryLen+1), "at most 512"},
	}
	for _, tt := range tests {
		_, err := ParsePolicy([]string{"ok.example", tt.in})
		if err == nil {
			t.Errorf("ParsePolicy(%q) = nil error, want %q", tt.in, tt.want)
			continue
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParsePolicy(%q) error %v is not invalid argument", tt.in, err)
		}
		if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "entry 2") {
			t.Errorf("ParsePolicy(%q) = %v, want it to name entry 2 and %q", tt.in, err, tt.want)
		}
	}
}

func TestParsePolicyCaps(t *testing.T) {
	entries := make([]string, MaxEntries+1)
	for i := range entries {
		entries[i] = fmt.Sprintf("h%d.example", i)
	}
	if _, err := ParsePolicy(entries); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("%d entries: %v, want invalid argument", len(entries), err)
	}
	if _, err := ParsePolicy(entries[:MaxEntries]); err != nil {
		t.Errorf("%d entries: %v", MaxEntries, err)
	}
	p, err := ParsePolicy([]string{"a.example", "A.example.", "b.example"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Entries(); !slices.Equal(got, []string{"a.example", "b.example"}) {
		t.Errorf("duplicates: Entries() = %q", got)
	}
	if p, err := ParsePolicy(nil); err != nil || p.Decide("a.example", 443).Allowed {
		t.Errorf("empty policy: %v, allows a.example", err)
	}
}

func TestDecide(t *testing.T) {
	p, err := ParsePolicy([]string{
		"exact.example",
		"ports.example:80,443",
		"range.example:8000-8100",
		"*.wild.example",
		"*.wild.example:22",
		"*.portwild.example:443",
		"192.0.2.7",
		"198.51.100.0/24:443",
		"2001:db8::/32",
		"[2001:db8:1::1]:22",
		"0.0.0.0/0:8443",
		"10.0.0.0/8",
		"169.254.0.0/16",
		"127.0.0.1:5432",
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		host   string
		port   uint16
		reason Reason
		class  AddrClass
		rule   string
	}{
		{"exact.example", 443, ReasonAllowed, "", "exact.example"},
		{"EXACT.example.", 1, ReasonAllowed, "", "exact.example"},
		{"sub.exact.example", 443, ReasonNotListed, "", ""},
		{"xexact.example", 443, ReasonNotListed, "", ""},
		{"ports.example", 443, ReasonAllowed, "", "ports.example:80,443"},
		{"ports.example", 8080, ReasonPortNotListed, "", ""},
		{"range.example", 8050, ReasonAllowed, "", "range.example:8000-8100"},
		{"range.example", 8101, ReasonPortNotListed, "", ""},
		{"a.wild.example", 443, ReasonAllowed, "", "*.wild.example"},
		{"a.b.c.wild.example", 9, ReasonAllowed, "", "*.wild.example"},
		{"wild.example", 443, ReasonNotListed, "", ""},
		{"awild.example", 443, ReasonNotListed, "", ""},
		{"a.portwild.example", 443, ReasonAllowed, "", "*.portwild.example:443"},
		{"a.portwild.example", 80, ReasonPortNotListed, "", ""},
		{"portwild.example", 443, ReasonNotListed, "", ""},
		{"other.example", 443, ReasonNotListed, "", ""},
		// Addresses: only address entries allow them.
		{"192.0.2.7", 1, ReasonAllowed, "", "192.0.2.7"},
		{"192.0.2.8", 80, ReasonPortNotListed, "", ""}, // 0.0.0.0/0 holds it, for 8443 only
		{"198.51.100.9", 443, ReasonAllowed, "", "198.51.100.0/24:443"},
		{"198.51.100.9", 80, ReasonPortNotListed, "", ""},
		{"203.0.113.1", 8443, ReasonAllowed, "", "0.0.0.0/0:8443"},
		{"2001:db8::5", 80, ReasonAllowed, "", "2001:db8::/32"},
		{"[2001:db8::5]", 80, ReasonAllowed, "", "2001:db8::/32"},
		{"2001:db9::5", 80, ReasonNotListed, "", ""},
		{"::ffff:192.0.2.7", 80, ReasonAllowed, "", "192.0.2.7"},
		// Guarded addresses need an entry inside their range.
		{"10.1.2.3", 80, ReasonAllowed, ClassPrivate, "10.0.0.0/8"},
		{"172.16.0.1", 8443, ReasonBlockedAddress, ClassPrivate, ""},
		{"127.0.0.1", 5432, ReasonAllowed, ClassLoopback, "127.0.0.1:5432"},
		{"127.0.0.1", 8443, ReasonBlockedAddress, ClassLoopback, ""},
		{"127.0.0.2", 8443, ReasonBlockedAddress, ClassLoopback, ""},
		{"::ffff:127.0.0.1", 5432, ReasonAllowed, ClassLoopback, "127.0.0.1:5432"},
		{"169.254.1.1", 80, ReasonAllowed, ClassLinkLocal, "169.254.0.0/16"},
		{"169.254.169.254", 80, ReasonBlockedAddress, ClassMetadata, ""},
		{"169.254.169.254", 8443, ReasonBlockedAddress, ClassMetadata, ""},
		{"fd00:ec2::254", 80, ReasonNotListed, "", ""},
		{"100.64.0.1", 8443, ReasonBlockedAddress, ClassCGNAT, ""},
		{"0.0.0.0", 8443, ReasonBlockedAddress, ClassUnspecified, ""},
		{"224.0.0.1", 8443, ReasonBlockedAddress, ClassMulticast, ""},
		// Not a target at all.
		{"", 80, ReasonBadTarget, "", ""},
		{"exact.example", 0, ReasonBadTarget, "", ""},
		{"127.1", 80, ReasonBadTarget, "", ""},
		{"0x7f000001", 80, ReasonBadTarget, "", ""},
		{"fe80::1%eth0", 80, ReasonBadTarget, "", ""},
		{"exa mple", 80, ReasonBadTarget, "", ""},
	}
	for _, tt := range tests {
		d := p.Decide(tt.host, tt.port)
		if d.Reason != tt.reason || d.Allowed != (tt.reason == ReasonAllowed) || d.Class != tt.class || d.Rule != tt.rule {
			t.Errorf("Decide(%q, %d) = %+v, want reason %s class %q rule %q", tt.host, tt.port, d, tt.reason, tt.class, tt.rule)
		}
		if d.Message() == "" || strings.Contains(d.Message(), tt.host) && tt.host != "" {
			t.Errorf("Decide(%q).Message() = %q: empty or names the host", tt.host, d.Message())
		}
	}
}

func TestCheckAddr(t *testing.T) {
	none, _ := ParsePolicy(nil)
	tests := []struct {
		addr  string
		class AddrClass
	}{
		{"8.8.8.8", ClassPublic},
		{"2606:4700::1111", ClassPublic},
		{"127.0.0.1", ClassLoopback},
		{"127.255.0.9", ClassLoopback},
		{"::1", ClassLoopback},
		{"::ffff:127.0.0.1", ClassLoopback},
		{"10.9.8.7", ClassPrivate},
		{"172.31.255.255", ClassPrivate},
		{"192.168.1.1", ClassPrivate},
		{"fd12:3456::1", ClassPrivate},
		{"fec0::1", ClassPrivate},
		{"169.254.3.4", ClassLinkLocal},
		{"fe80::1", ClassLinkLocal},
		{"100.64.0.1", ClassCGNAT},
		{"100.127.255.255", ClassCGNAT},
		{"0.0.0.0", ClassUnspecified},
		{"0.1.2.3", ClassUnspecified},
		{"::", ClassUnspecified},
		{"224.0.0.251", ClassMulticast},
		{"ff02::1", ClassMulticast},
		{"240.0.0.1", ClassReserved},
		{"255.255.255.255", ClassReserved},
		{"169.254.169.254", ClassMetadata},
		{"fd00:ec2::254", ClassMetadata},
		{"::ffff:169.254.169.254", ClassMetadata},
		{"64:ff9b::a9fe:a9fe", ClassMetadata}, // NAT64 of 169.254.169.254
		{"64:ff9b::7f00:1", ClassLoopback},
		{"64:ff9b::808:808", ClassPublic},
		{"172.32.0.1", ClassPublic},
		{"100.128.0.1", ClassPublic},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		if got := ClassOf(a); got != tt.class {
			t.Errorf("ClassOf(%s) = %q, want %q", tt.addr, got, tt.class)
		}
		d := none.CheckAddr(a, 443)
		if d.Allowed != (tt.class == ClassPublic) || !d.Allowed && (d.Reason != ReasonBlockedAddress || d.Class != tt.class) {
			t.Errorf("CheckAddr(%s) with no entries = %+v", tt.addr, d)
		}
	}

	p, err := ParsePolicy([]string{"127.0.0.1:443", "10.0.0.0/8", "0.0.0.0/0", "::/0", "169.254.169.254:80", "fd00:ec2::254"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		addr string
		port uint16
		ok   bool
	}{
		{"127.0.0.1", 443, true},
		{"127.0.0.1", 80, false}, // listed for 443 only
		{"127.0.0.2", 443, false},
		{"10.1.1.1", 22, true},
		{"192.168.0.1", 22, false}, // only 0.0.0.0/0 holds it: not explicit
		{"fd12::1", 22, false},     // only ::/0 holds it
		{"169.254.169.254", 80, true},
		{"169.254.169.254", 443, false},
		{"fd00:ec2::254", 1, true},
		{"1.1.1.1", 1, true},
	} {
		if d := p.CheckAddr(netip.MustParseAddr(tt.addr), tt.port); d.Allowed != tt.ok {
			t.Errorf("CheckAddr(%s, %d) = %+v, want allowed %v", tt.addr, tt.port, d, tt.ok)
		}
	}
}

func FuzzParsePolicy(f *testing.F) {
	for _, s := range []string{
		"example.com", "*.example.com:443", "example.com:80,443,8000-8100", "192.0.2.0/24:443",
		"[2001:db8::/32]:80", "2001:db8::1", "::ffff:1.2.3.4", "*.", "[", "a:b:c", "127.1", "x.0x1f",
		"example.com\n*.example.org:22", "10.0.0.0/8\n169.254.169.254:80",
	} {
		f.Add(s, "a.example.com", uint16(443))
	}
	f.Fuzz(func(t *testing.T, list, target string, port uint16) {
		entries := strings.Split(list, "\n")
		p, err := ParsePolicy(entries)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not invalid argument", err)
			}
			return
		}
		// Canonical entries parse again to themselves.
		canon := p.Entries()
		q, err := ParsePolicy(canon)
		if err != nil {
			t.Fatalf("canonical %q does not parse: %v", canon, err)
		}
		if !slices.Equal(q.Entries(), canon) {
			t.Fatalf("canonical %q reparses as %q", canon, q.Entries())
		}
		for _, e := range canon {
			if len(e) > MaxEntryLen {
				t.Fatalf("canonical entry of %d bytes", len(e))
			}
		}
		// Deciding never panics, and agrees between the two policies.
		d1, d2 := p.Decide(target, port), q.Decide(target, port)
		if d1 != d2 {
			t.Fatalf("Decide(%q, %d): %+v vs %+v", target, port, d1, d2)
		}
		if d1.Allowed && (port == 0 || d1.Rule == "") {
			t.Fatalf("Decide(%q, %d) = %+v", target, port, d1)
		}
		if a, err := netip.ParseAddr(target); err == nil {
			p.CheckAddr(a, port)
		}
	})
}
