package opennet

import (
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
)

// Evidence of the open mode. There is no proxy to see a sandbox's
// traffic, so the Router reads it from the kernel (see the Monitor in
// monitor_linux.go): every flow a sandbox begins, from the connection
// tracker's events, reported as one egress.Event when it ends, with the
// bytes each way and its duration; and every packet the table refuses,
// from its nflog group, reported as one egress.Event with Allowed false,
// at most refusalBurst at once and refusalRate a second per sandbox. The
// events carry addresses only: in open mode no name is ever seen.

// Sink receives the evidence of the open network: one egress.Event per
// ended flow or recorded refusal, with the ID of the sandbox it is of.
// It is called from the Router's own goroutines (and from Detach) and
// must not block.
type Sink func(sandbox string, ev egress.Event)

// refusalCode names why the table refused a packet: it is the prefix of
// the packet's nflog record and the suffix of the chain that logs it.
type refusalCode string

// The refusals of the table (see ruleset).
const (
	refusedIPv6    refusalCode = "ipv6"    // not IPv4: IPv6 is never forwarded
	refusedRoute   refusalCode = "route"   // it would not leave by the uplink
	refusedSandbox refusalCode = "sandbox" // to the pool: another sandbox
	refusedSpoof   refusalCode = "spoof"   // a source that is not the sandbox's address
	refusedBlocked refusalCode = "blocked" // a blocked range the sandbox does not list
	refusedOrphan  refusalCode = "orphan"  // from a host end the table does not know
	refusedHost    refusalCode = "host"    // to the router (the host) itself
)

// refusalCodes are the refusals, each with a chain of its own.
var refusalCodes = []refusalCode{refusedIPv6, refusedRoute, refusedSandbox, refusedSpoof, refusedBlocked, refusedOrphan, refusedHost}

// reason is a refusal's egress reason and what it says to the operator.
func (c refusalCode) reason() (egress.Reason, string) {
	switch c {
	case refusedIPv6:
		return egress.ReasonUnsupported, "IPv6 is not forwarded in open mode"
	case refusedRoute:
		return egress.ReasonBlockedAddress, "the destination is not routed out of the uplink"
	case refusedSandbox:
		return egress.ReasonBlockedAddress, "the address of another sandbox"
	case refusedSpoof:
		return egress.ReasonBadRequest, "a source address that is not the sandbox's own"
	case refusedBlocked:
		return egress.ReasonBlockedAddress, "a blocked range the sandbox does not list"
	case refusedHost:
		return egress.ReasonBlockedAddress, "the host itself"
	case refusedOrphan:
		return egress.ReasonNotListed, "an interface the open network does not know"
	}
	return egress.ReasonNotListed, "refused by the open network's table (" + string(c) + ")"
}

// Limits of the evidence.
const (
	// DefaultMaxFlows caps the open flows tracked over all sandboxes, and
	// DefaultMaxFlowsPerSandbox those of one sandbox. A flow begun over a
	// cap is counted but not tracked: its end is still reported (from
	// the kernel's DESTROY event) without its start when the kernel
	// gives none, and not at its sandbox's end.
	DefaultMaxFlows           = 65536
	DefaultMaxFlowsPerSandbox = 4096
	// refusalRate and refusalBurst bound the refusals of one sandbox
	// recorded as events (a token bucket); the others are counted
	// (Stats.Refused) and their number is in the Detail of the next
	// one recorded.
	refusalRate  = 5
	refusalBurst = 20
	// doneFor is how long a flow reported before the kernel destroyed
	// it (a TCP flow in TIME_WAIT, a flow open at its sandbox's end) is
	// remembered, so that its DESTROY is not reported again: longer
	// than the tracker keeps TIME_WAIT (120 s by default).
	doneFor = 4 * time.Minute
)

// flowKey identifies a tracked flow: the tracker's ID and its original
// tuple (the ID alone may be reused).
type flowKey struct {
	id       uint32
	proto    uint8
	src, dst netip.AddrPort
}

// flow is a flow being tracked.
type flow struct {
	sandbox string
	key     flowKey
	start   time.Time
}

// account is one sandbox's counters and limits.
type account struct {
	stats      egress.Stats
	tokens     float64
	refill     time.Time
	suppressed int64 // refusals unrecorded since the last recorded
}

// doneEntry is a reported flow whose DESTROY is still to come.
type doneEntry struct {
	key   flowKey
	until time.Time
}

// ledger maps what the kernel reports to sandboxes, keeps their
// counters and the open flows, and turns ends and refusals into events.
// It is safe for concurrent use.
type ledger struct {
	log          *slog.Logger
	maxFlows     int
	maxPerSbx    int
	sink         atomic.Pointer[Sink]
	untracked    atomic.Int64 // flows begun over a cap
	unsunk       atomic.Int64 // events with no sink to go to
	lostFlows    atomic.Int64 // tracker events the kernel dropped (ENOBUFS)
	lostRefusals atomic.Int64 // nflog records the kernel dropped (ENOBUFS)

	mu    sync.Mutex
	addrs map[netip.Addr]string // sandbox address -> ID
	links map[int]string        // host end's index -> ID
	accts map[string]*account
	flows map[flowKey]*flow
	perSb map[string]int // tracked flows by sandbox
	done  map[flowKey]time.Time
	doneQ []doneEntry // done in the order added
}

func newLedger(log *slog.Logger, maxFlows, maxPerSandbox int) *ledger {
	if maxFlows <= 0 {
		maxFlows = DefaultMaxFlows
	}
	if maxPerSandbox <= 0 {
		maxPerSandbox = DefaultMaxFlowsPerSandbox
	}
	return &ledger{log: log, maxFlows: maxFlows, maxPerSbx: maxPerSandbox,
		addrs: map[netip.Addr]string{}, links: map[int]string{}, accts: map[string]*account{},
		flows: map[flowKey]*flow{}, perSb: map[string]int{}, done: map[flowKey]time.Time{}}
}

// setSink makes f receive the events from now on.
func (l *ledger) setSink(f Sink) { l.sink.Store(&f) }

// emit hands ev to the sink. Call without l.mu held.
func (l *ledger) emit(id string, ev egress.Event) {
	f := l.sink.Load()
	if f == nil || *f == nil {
		if l.unsunk.Add(1) == 1 {
			l.log.Warn("open network evidence with nowhere to go (no sink yet): counted, not recorded", "sandbox", id)
		}
		return
	}
	(*f)(id, ev)
}

// attach maps sandbox id's address and host end to it. Its counters,
// if it has them (a changed list), are kept.
func (l *ledger) attach(id string, addr netip.Addr, index int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.addrs[addr] = id
	if index > 0 {
		l.links[index] = id
	}
	if l.accts[id] == nil {
		l.accts[id] = &account{tokens: refusalBurst}
	}
}

// detach forgets sandbox id and returns its open flows, which the caller
// reports (ended). Their DESTROY, when it comes, is not reported again.
func (l *ledger) detach(id string, now time.Time) []flow {
	l.mu.Lock()
	defer l.mu.Unlock()
	for a, owner := range l.addrs {
		if owner == id {
			delete(l.addrs, a)
		}
	}
	for i, owner := range l.links {
		if owner == id {
			delete(l.links, i)
		}
	}
	var open []flow
	for k, f := range l.flows {
		if f.sandbox == id {
			open = append(open, *f)
			delete(l.flows, k)
			l.markDoneLocked(k, now)
		}
	}
	delete(l.perSb, id)
	if a := l.accts[id]; a != nil && a.suppressed > 0 {
		l.log.Info("open network refusals not recorded (rate limit) at the sandbox's end", "sandbox", id, "count", a.suppressed)
	}
	delete(l.accts, id)
	return open
}

// markDoneLocked remembers k as reported until now+doneFor, dropping the
// expired entries (and the oldest, past the cap).
func (l *ledger) markDoneLocked(k flowKey, now time.Time) {
	for len(l.doneQ) > 0 && (now.After(l.doneQ[0].until) || len(l.doneQ) >= l.maxFlows) {
		old := l.doneQ[0]
		l.doneQ = l.doneQ[1:]
		if l.done[old.key].Equal(old.until) {
			delete(l.done, old.key)
		}
	}
	until := now.Add(doneFor)
	l.done[k] = until
	l.doneQ = append(l.doneQ, doneEntry{k, until})
}

// stats returns sandbox id's counters.
func (l *ledger) stats(id string) (egress.Stats, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a := l.accts[id]
	if a == nil {
		return egress.Stats{}, false
	}
	st := a.stats
	st.Active = int64(l.perSb[id])
	return st, true
}

// begun records a new flow from a sandbox's address: it counts, and is
// tracked within the caps.
func (l *ledger) begun(k flowKey, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	id, ok := l.addrs[k.src.Addr()]
	if !ok {
		return
	}
	a := l.accts[id]
	a.stats.Conns++
	a.stats.Allowed++
	if _, dup := l.flows[k]; dup {
		return
	}
	if len(l.flows) >= l.maxFlows || l.perSb[id] >= l.maxPerSbx {
		if l.untracked.Add(1) == 1 {
			l.log.Warn("open network flows over the cap: counted, reported at their end without a start", "sandbox", id,
				"max_flows", l.maxFlows, "max_per_sandbox", l.maxPerSbx)
		}
		return
	}
	l.flows[k] = &flow{sandbox: id, key: k, start: at}
	l.perSb[id]++
}

// tracked reports whether k is an open flow being tracked.
func (l *ledger) tracked(k flowKey) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.flows[k]
	return ok
}

// flowEnd is how a flow ended, as the kernel (or the Router) saw it.
type flowEnd struct {
	up, down    int64     // bytes: original direction, reply direction
	start, stop time.Time // start is zero when the kernel did not give it
	end         egress.EndReason
	destroyed   bool   // the tracker destroyed it (no DESTROY is to come)
	detail      string // more for the operator, if any
}

// ended reports the end of flow k, once: a flow reported before its
// DESTROY (closing, or at its sandbox's end) is not reported again.
// A flow not tracked is reported when its source is a sandbox's.
func (l *ledger) ended(k flowKey, e flowEnd) {
	l.mu.Lock()
	if _, ok := l.done[k]; ok {
		if e.destroyed {
			delete(l.done, k)
		}
		l.mu.Unlock()
		return
	}
	var id string
	start := e.start
	if f, ok := l.flows[k]; ok {
		id = f.sandbox
		delete(l.flows, k)
		l.perSb[id]--
		if start.IsZero() || f.start.Before(start) {
			start = f.start
		}
	} else if id, ok = l.addrs[k.src.Addr()]; !ok {
		l.mu.Unlock()
		return
	}
	if !e.destroyed {
		l.markDoneLocked(k, e.stop)
	}
	if a := l.accts[id]; a != nil {
		a.stats.BytesUp += e.up
		a.stats.BytesDown += e.down
	}
	l.mu.Unlock()
	l.emit(id, flowEvent(k, e, start))
}

// flowEvent is the evidence of one flow.
func flowEvent(k flowKey, e flowEnd, start time.Time) egress.Event {
	detail := protoName(k.proto) + "; open mode: the destination is an address, no name is seen"
	if e.detail != "" {
		detail += "; " + e.detail
	}
	if start.IsZero() {
		start = e.stop
		detail += "; began before it was seen (its start is unknown)"
	}
	dur := e.stop.Sub(start)
	if dur < 0 {
		dur = 0
	}
	dst := k.dst.Addr()
	return egress.Event{
		Start:     start,
		Protocol:  egress.ProtoOpen,
		Host:      dst.String(),
		Port:      k.dst.Port(),
		Addr:      dst,
		Allowed:   true,
		Reason:    egress.ReasonAllowed,
		Class:     egress.ClassOf(dst),
		Detail:    detail,
		BytesUp:   e.up,
		BytesDown: e.down,
		Duration:  dur,
		End:       e.end,
	}
}

// protoName is the name of an IP protocol number.
func protoName(p uint8) string {
	switch p {
	case 1:
		return "icmp"
	case 6:
		return "tcp"
	case 17:
		return "udp"
	case 58:
		return "icmpv6"
	case 132:
		return "sctp"
	}
	return fmt.Sprintf("ip proto %d", p)
}

// refusal is one packet the table refused, as its nflog record shows it.
type refusal struct {
	code     refusalCode
	index    int // the interface it came in on
	proto    uint8
	src, dst netip.Addr
	port     uint16 // destination port (TCP, UDP), or 0
}

// refused counts r against the sandbox whose host end it came in on and
// records it as an event unless that sandbox is over its rate.
func (l *ledger) refused(r refusal, now time.Time) {
	l.mu.Lock()
	id, ok := l.links[r.index]
	if !ok {
		l.mu.Unlock()
		return
	}
	a := l.accts[id]
	a.stats.Refused++
	if !a.refill.IsZero() {
		a.tokens = min(refusalBurst, a.tokens+now.Sub(a.refill).Seconds()*refusalRate)
	}
	a.refill = now
	if a.tokens < 1 {
		if a.suppressed++; a.suppressed == 1 {
			l.log.Info("open network refusals over the rate limit: counted, not recorded", "sandbox", id,
				"rate", refusalRate, "burst", refusalBurst)
		}
		l.mu.Unlock()
		return
	}
	a.tokens--
	suppressed := a.suppressed
	a.suppressed = 0
	l.mu.Unlock()

	reason, detail := r.code.reason()
	detail = protoName(r.proto) + "; " + detail
	if r.src.IsValid() && r.code == refusedSpoof {
		detail += " (" + r.src.String() + ")"
	}
	if suppressed > 0 {
		detail += fmt.Sprintf("; %d refusals before this one were not recorded (rate limit %d/s)", suppressed, refusalRate)
	}
	ev := egress.Event{Start: now, Protocol: egress.ProtoOpen, Port: r.port, Allowed: false, Reason: reason, Detail: detail}
	if r.dst.IsValid() {
		ev.Host, ev.Addr, ev.Class = r.dst.String(), r.dst, egress.ClassOf(r.dst)
	}
	l.emit(id, ev)
}
