package opennet

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

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
	// chainRefuse prefixes the chains that log (see refuse) and drop
	// what a sandbox may not send, one per refusal code.
	chainRefuse = "refuse_"
)

// setRefusers is the meter that rate-limits refusal logging per host
// end: a dynamic set of interface names, each with its own limit.
const setRefusers = "refusers"

// The kernel's bound on refusal logging: per sandbox (host end), at most
// refuseLogRate packets a second, refuseLogBurst at once, reach the
// Monitor; beyond that packets are still dropped, unlogged. The
// Monitor's own per-sandbox limit on audit records is lower.
const (
	refuseLogRate  = 50
	refuseLogBurst = 100
	// refuseSnaplen is how much of a refused packet is logged: the IPv4
	// header (60 bytes at most) and the ports.
	refuseSnaplen = 64
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

// refuse drops a packet a sandbox may not send, as evidence: it goes to
// the chain of code, which logs it (rate-limited) to the Monitor's
// nflog group and drops it.
func refuse(code refusalCode) match {
	chain := chainRefuse + string(code)
	return match{"goto " + chain, []expr.Any{&expr.Verdict{Kind: expr.VerdictGoto, Chain: chain}}}
}

// refuseLog logs a packet to the nflog group with code as prefix, within
// the per-interface meter's limit (a packet over it ends the rule
// unlogged).
func refuseLog(code refusalCode, group uint16) match {
	return match{fmt.Sprintf(`update @%s { iifname limit rate %d/second burst %d packets } log prefix "%s" group %d snaplen %d`,
		setRefusers, refuseLogRate, refuseLogBurst, code, group, refuseSnaplen), []expr.Any{
		&expr.Meta{Key: expr.MetaKeyIIFNAME, Register: 1},
		&expr.Dynset{SrcRegKey: 1, SetName: setRefusers, Operation: unix.NFT_DYNSET_OP_UPDATE,
			Exprs: []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: refuseLogRate, Unit: expr.LimitTimeSecond, Burst: refuseLogBurst}}},
		&expr.Log{Key: 1<<unix.NFTA_LOG_GROUP | 1<<unix.NFTA_LOG_PREFIX | 1<<unix.NFTA_LOG_SNAPLEN,
			Group: group, Data: []byte(code), Snaplen: refuseSnaplen},
	}}
}

// member is one sandbox as the table sees it.
type member struct {
	link  string
	addr  netip.Addr
	allow []netip.Prefix
}

// ruleset is the table's rules for uplink, pool and the sandboxes, in
// order, chain by chain; refused packets are logged to nflog group.
func ruleset(uplink string, pool netip.Prefix, group uint16, members []member) []rule {
	var rs []rule
	for _, code := range refusalCodes {
		rs = append(rs,
			rule{chain: chainRefuse + string(code), verdict: refuseLog(code, group)},
			rule{chain: chainRefuse + string(code), verdict: drop})
	}
	rs = append(rs, []rule{
		// The forward hook: only traffic from or to a host end is ours.
		{chain: chainForward, matches: []match{iifSandbox()}, verdict: jump(chainFrom)},
		{chain: chainForward, matches: []match{oifSandbox()}, verdict: jump(chainTo)},
		// Into a sandbox: replies only.
		{chain: chainTo, matches: []match{ctEstablished()}, verdict: accept},
		{chain: chainTo, verdict: drop},
		// Out of a sandbox: IPv4, out of the uplink, never to the pool.
		{chain: chainFrom, matches: []match{notIPv4()}, verdict: refuse(refusedIPv6)},
		{chain: chainFrom, matches: []match{oifIsNot(uplink)}, verdict: refuse(refusedRoute)},
		{chain: chainFrom, matches: []match{daddrIn(pool)}, verdict: refuse(refusedSandbox)},
	}...)
	for _, m := range members {
		rs = append(rs, rule{chain: chainFrom, matches: []match{iifIs(m.link), saddrIsNot(m.addr)}, verdict: refuse(refusedSpoof)})
	}
	for _, m := range members {
		for _, p := range m.allow {
			rs = append(rs, rule{chain: chainFrom, matches: []match{iifIs(m.link), daddrIn(p)}, verdict: accept})
		}
	}
	for _, p := range Blocked {
		rs = append(rs, rule{chain: chainFrom, matches: []match{daddrIn(p)}, verdict: refuse(refusedBlocked)})
	}
	for _, m := range members {
		rs = append(rs, rule{chain: chainFrom, matches: []match{iifIs(m.link), saddrIs(m.addr)}, verdict: accept})
	}
	return append(rs,
		// An interface the table does not know (an orphan) gets nothing.
		rule{chain: chainFrom, verdict: refuse(refusedOrphan)},
		// Nothing of the router is a sandbox's to reach.
		rule{chain: chainInput, matches: []match{iifSandbox()}, verdict: refuse(refusedHost)},
		rule{chain: chainNAT, matches: []match{oifIs(uplink), isIPv4(), saddrIn(pool)}, verdict: masq},
	)
}

// refusersSize bounds the meter's entries.
const refusersSize = 65536

// program writes the whole table, replacing any previous one, into c's
// batch; the caller flushes it (one transaction).
func program(c *nftables.Conn, rs []rule) error {
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
	for _, code := range refusalCodes {
		chains[chainRefuse+string(code)] = c.AddChain(&nftables.Chain{Name: chainRefuse + string(code), Table: t})
	}
	// The meter: one limit per host end that refused packets came in
	// on, forgotten a minute after its last; no more entries than the
	// pool could have interfaces.
	if err := c.AddSet(&nftables.Set{Table: t, Name: setRefusers, KeyType: nftables.TypeIFName,
		Dynamic: true, HasTimeout: true, Timeout: time.Minute, Size: refusersSize}, nil); err != nil {
		return err
	}
	for _, r := range rs {
		c.AddRule(&nftables.Rule{Table: t, Chain: chains[r.chain], Exprs: r.exprs()})
	}
	return nil
}
