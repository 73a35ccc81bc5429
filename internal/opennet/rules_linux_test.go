package opennet

import (
	"net/netip"
	"slices"
	"testing"
)

// TestRuleset pins the table's rules for one sandbox that lists a range:
// their order is the policy (anti-spoof and the pool before what a
// sandbox lists, what it lists before the blocked ranges).
func TestRuleset(t *testing.T) {
	m := member{link: "al-0123456789ab", addr: netip.MustParseAddr("100.96.0.2"), allow: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}}
	var got []string
	for _, r := range ruleset("eth9", DefaultPool, 7101, []member{m}) {
		got = append(got, r.String())
		if len(r.exprs()) == 0 {
			t.Errorf("rule %q has no expressions", r)
		}
	}
	var want []string
	for _, code := range []string{"ipv6", "route", "sandbox", "spoof", "blocked", "orphan", "host"} {
		want = append(want,
			`refuse_`+code+`: update @refusers { iifname limit rate 50/second burst 100 packets } log prefix "`+code+`" group 7101 snaplen 64`,
			`refuse_`+code+`: drop`)
	}
	want = append(want,
		`forward: iifname "al-*" jump from_sandbox`,
		`forward: oifname "al-*" jump to_sandbox`,
		`to_sandbox: ct state established,related accept`,
		`to_sandbox: drop`,
		`from_sandbox: meta nfproto != ipv4 goto refuse_ipv6`,
		`from_sandbox: oifname != "eth9" goto refuse_route`,
		`from_sandbox: ip daddr 100.96.0.0/16 goto refuse_sandbox`,
		`from_sandbox: iifname "al-0123456789ab" ip saddr != 100.96.0.2 goto refuse_spoof`,
		`from_sandbox: iifname "al-0123456789ab" ip daddr 10.1.0.0/16 accept`,
	)
	for _, p := range Blocked {
		d := p.String()
		if p.Bits() == 32 {
			d = p.Addr().String()
		}
		want = append(want, `from_sandbox: ip daddr `+d+` goto refuse_blocked`)
	}
	want = append(want,
		`from_sandbox: iifname "al-0123456789ab" ip saddr 100.96.0.2 accept`,
		`from_sandbox: goto refuse_orphan`,
		`input: iifname "al-*" goto refuse_host`,
		`postrouting: oifname "eth9" meta nfproto ipv4 ip saddr 100.96.0.0/16 masquerade`,
	)
	if !slices.Equal(got, want) {
		t.Fatalf("ruleset:\n%s\nwant:\n%s", join(got), join(want))
	}
}

func join(s []string) string {
	out := ""
	for _, l := range s {
		out += "  " + l + "\n"
	}
	return out
}

func TestBlockedCoversMetadata(t *testing.T) {
	for _, a := range []string{"169.254.169.254", "10.0.0.1", "172.16.0.1", "192.168.1.1", "100.64.0.1", "127.0.0.1", "224.0.0.1", "255.255.255.255", "0.0.0.0"} {
		ip := netip.MustParseAddr(a)
		if !slices.ContainsFunc(Blocked, func(p netip.Prefix) bool { return p.Contains(ip) }) {
			t.Errorf("%s is not blocked", a)
		}
	}
	if slices.ContainsFunc(Blocked, func(p netip.Prefix) bool { return p.Contains(netip.MustParseAddr("198.51.100.2")) }) {
		t.Error("the tests' uplink host 198.51.100.2 is blocked")
	}
}

func TestNetipMask(t *testing.T) {
	if got := netipMask(12); !slices.Equal(got, []byte{0xff, 0xf0, 0, 0}) {
		t.Fatalf("mask /12: %x", got)
	}
}
