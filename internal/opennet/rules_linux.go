package opennet

import (
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// tableName is the nftables table (family inet) the Router owns.
const tableName = "airlock"

// The chains of the table.
const (
	chainForward = "forward"     // base: hook forward
	chainInput   = "input"       // base: hook input
	chainNAT     = "postrouting" // base: hook postrouting, nat
	chainFrom    = "from_sandbox"
	chainTo      = "to_sandbox"
)

// match is one condition of a rule, as nftables expressions and as the
// text nft would print (for tests and logs).
type match struct {
	text  string
	exprs []expr.Any
}

// rule is a rule of the table: its conditions and verdict.
type rule struct {
	chain   string
	matches []match
	verdict match
}

// String is the rule as nft would list it, prefixed with its chain.
func (r rule) String() string {
	parts := []string{r.chain + ":"}
	for _, m := range r.matches {
		parts = append(parts, m.text)
	}
	return strings.Join(append(parts, r.verdict.text), " ")
}

func (r rule) exprs() []expr.Any {
	var out []expr.Any
	for _, m := range r.matches {
		out = append(out, m.exprs...)
	}
	return append(out, r.verdict.exprs...)
}

// ifname is an interface name as the kernel compares it: NUL-padded to
// IFNAMSIZ.
func ifname(s string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, s)
	return b
}

func metaCmp(key expr.MetaKey, op expr.CmpOp, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: data},
	}
}

func iifIs(name string) match {
	return match{`iifname "` + name + `"`, metaCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, ifname(name))}
}

// iifSandbox matches every host end (a prefix: no NUL compared).
func iifSandbox() match {
	return match{`iifname "` + linkPrefix + `*"`, metaCmp(expr.MetaKeyIIFNAME, expr.CmpOpEq, []byte(linkPrefix))}
}

func oifSandbox() match {
	return match{`oifname "` + linkPrefix + `*"`, metaCmp(expr.MetaKeyOIFNAME, expr.CmpOpEq, []byte(linkPrefix))}
}

func oifIs(name string) match {
	return match{`oifname "` + name + `"`, metaCmp(expr.MetaKeyOIFNAME, expr.CmpOpEq, ifname(name))}
}

func oifIsNot(name string) match {
	return match{`oifname != "` + name + `"`, metaCmp(expr.MetaKeyOIFNAME, expr.CmpOpNeq, ifname(name))}
}

func notIPv4() match {
	return match{"meta nfproto != ipv4", metaCmp(expr.MetaKeyNFPROTO, expr.CmpOpNeq, []byte{unix.NFPROTO_IPV4})}
}

func isIPv4() match {
	return match{"meta nfproto ipv4", metaCmp(expr.MetaKeyNFPROTO, expr.CmpOpEq, []byte{unix.NFPROTO_IPV4})}
}

// ipField matches the IPv4 source (offset 12) or destination (16)
// against p. Rules using it first match isIPv4 (in an inet table the
// payload is read whatever the protocol).
func ipField(name string, offset uint32, op expr.CmpOp, p netip.Prefix) match {
	text := "ip " + name + " "
	if op == expr.CmpOpNeq {
		text += "!= "
	}
	if p.Bits() == 32 {
		text += p.Addr().String()
	} else {
		text += p.String()
	}
	load := &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4}
	addr := p.Masked().Addr().As4()
	if p.Bits() == 32 {
		return match{text, []expr.Any{load, &expr.Cmp{Op: op, Register: 1, Data: addr[:]}}}
	}
	mask := netipMask(p.Bits())
	return match{text, []expr.Any{
		load,
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: op, Register: 1, Data: addr[:]},
	}}
}

func netipMask(bits int) []byte {
	m := make([]byte, 4)
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

func saddrIs(a netip.Addr) match {
	return ipField("saddr", 12, expr.CmpOpEq, netip.PrefixFrom(a, 32))
}
func saddrIsNot(a netip.Addr) match {
	return ipField("saddr", 12, expr.CmpOpNeq, netip.PrefixFrom(a, 32))
}
func saddrIn(p netip.Prefix) match { return ipField("saddr", 12, expr.CmpOpEq, p) }
func daddrIn(p netip.Prefix) match { return ipField("daddr", 16, expr.CmpOpEq, p) }

func ctEstablished() match {
	return match{"ct state established,related", []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: nativeU32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}}
}

func nativeU32(v uint32) []byte {
	// ct state is a host-endian 32-bit value; every architecture this
	// daemon runs on (amd64, arm64) is little-endian.
	return []byte{byte(v), byte(v >> 8), byte(v >> 16), byte(v >> 24)}
}

var (
	accept = match{"accept", []expr.Any{&expr.Verdict{Kind: expr.VerdictAccept}}}
	drop   = match{"drop", []expr.Any{&expr.Counter{}, &expr.Verdict{Kind: expr.VerdictDrop}}}
	masq   = match{"masquerade", []expr.Any{&expr.Masq{}}}
)

func jump(chain string) match {
	return match{"jump " + chain, []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}}}
}

// member is one sandbox as the table sees it.
type member struct {
	link  string
	addr  netip.Addr
	allow []netip.Prefix
}

// ruleset is the table's rules for uplink, pool and the sandboxes, in
// order, chain by chain.
func ruleset(uplink string, pool netip.Prefix, members []member) []rule {
	rs := []rule{
		// The forward hook: only traffic from or to a host end is ours.
		{chain: chainForward, matches: []match{iifSandbox()}, verdict: jump(chainFrom)},
		{chain: chainForward, matches: []match{oifSandbox()}, verdict: jump(chainTo)},
		// Into a sandbox: replies only.
		{chain: chainTo, matches: []match{ctEstablished()}, verdict: accept},
		{chain: chainTo, verdict: drop},
		// Out of a sandbox: IPv4, out of the uplink, never to the pool.
		{chain: chainFrom, matches: []match{notIPv4()}, verdict: drop},
		{chain: chainFrom, matches: []match{oifIsNot(uplink)}, verdict: drop},
		{chain: chainFrom, matches: []match{daddrIn(pool)}, verdict: drop},
	}
	for _, m := range members {
		rs = append(rs, rule{chain: chainFrom, matches: []match{iifIs(m.link), saddrIsNot(m.addr)}, verdict: drop})
	}
	for _, m := range members {
		for _, p := range m.allow {
			rs = append(rs, rule{chain: chainFrom, matches: []match{iifIs(m.link), daddrIn(p)}, verdict: accept})
		}
	}
	for _, p := range Blocked {
		rs = append(rs, rule{chain: chainFrom, matches: []match{daddrIn(p)}, verdict: drop})
	}
	for _, m := range members {
		rs = append(rs, rule{chain: chainFrom, matches: []match{iifIs(m.link), saddrIs(m.addr)}, verdict: accept})
	}
	return append(rs,
		// An interface the table does not know (an orphan) gets nothing.
		rule{chain: chainFrom, verdict: drop},
		// Nothing of the router is a sandbox's to reach.
		rule{chain: chainInput, matches: []match{iifSandbox()}, verdict: drop},
		rule{chain: chainNAT, matches: []match{oifIs(uplink), isIPv4(), saddrIn(pool)}, verdict: masq},
	)
}

// program writes the whole table, replacing any previous one, into c's
// batch; the caller flushes it (one transaction).
func program(c *nftables.Conn, rs []rule) {
	t := &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}
	// Add first so that the delete finds it when there was none.
	c.AddTable(t)
	c.DelTable(t)
	t = c.AddTable(t)
	accept := nftables.ChainPolicyAccept
	chains := map[string]*nftables.Chain{
		chainForward: c.AddChain(&nftables.Chain{Name: chainForward, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accept}),
		chainInput: c.AddChain(&nftables.Chain{Name: chainInput, Table: t, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept}),
		chainNAT: c.AddChain(&nftables.Chain{Name: chainNAT, Table: t, Type: nftables.ChainTypeNAT,
			Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accept}),
		chainFrom: c.AddChain(&nftables.Chain{Name: chainFrom, Table: t}),
		chainTo:   c.AddChain(&nftables.Chain{Name: chainTo, Table: t}),
	}
	for _, r := range rs {
		c.AddRule(&nftables.Rule{Table: t, Chain: chains[r.chain], Exprs: r.exprs()})
	}
}
