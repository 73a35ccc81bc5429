package opennet

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/conntrack"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/egress"
)

// DefaultLogGroup is the nflog group the table logs refused packets to
// when the Config names none. Only one socket of a network namespace
// can bind a group: another program using it there makes New fail.
const DefaultLogGroup = 7101

// monitorReadBuffer is the receive buffer of the monitor's sockets: a
// burst of events beyond it is lost (ENOBUFS), counted and logged.
const monitorReadBuffer = 4 << 20

// nfnetlink_log's protocol (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgPacket   = 0
	nfulnlMsgConfig   = 1
	nfulaCfgCmd       = 1
	nfulaCfgMode      = 2
	nfulnlCfgCmdBind  = 1
	nfulnlCopyPacket  = 2
	nfulaPacketHdr    = 1
	nfulaIfindexIndev = 4
	nfulaPayload      = 9
	nfulaPrefix       = 10
)

// TCP states of the connection tracker (nf_conntrack_tcp.h) after which
// a flow is over.
const (
	tcpTimeWait = 7
	tcpClose    = 8
)

// monitor reads the evidence of the router's namespace from the kernel:
// the connection tracker's events (NEW, UPDATE for TCP closing, DESTROY,
// with bytes: accounting is on) and the table's nflog group, and gives
// them to the ledger.
type monitor struct {
	led    *ledger
	log    *slog.Logger
	events *netfilter.Conn // conntrack multicast groups
	query  *conntrack.Conn // conntrack queries (a flow's counters)
	nflog  *netfilter.Conn // the table's log group
	closed atomic.Bool
	wg     sync.WaitGroup
}

// startMonitor opens the sockets in the namespace ns (an open file
// descriptor) and starts reading them.
func startMonitor(ns int, group uint16, led *ledger, log *slog.Logger) (*monitor, error) {
	m := &monitor{led: led, log: log}
	ok := false
	defer func() {
		if !ok {
			m.close()
		}
	}()
	cfg := &netlink.Config{NetNS: ns}
	var err error
	if m.events, err = netfilter.Dial(cfg); err != nil {
		return nil, fmt.Errorf("conntrack events: %w", err)
	}
	if err := m.events.SetReadBuffer(monitorReadBuffer); err != nil {
		return nil, fmt.Errorf("conntrack events: %w", err)
	}
	if err := m.events.JoinGroups([]netfilter.NetlinkGroup{netfilter.GroupCTNew, netfilter.GroupCTUpdate, netfilter.GroupCTDestroy}); err != nil {
		return nil, fmt.Errorf("conntrack events: %w", err)
	}
	if m.query, err = conntrack.Dial(cfg); err != nil {
		return nil, fmt.Errorf("conntrack: %w", err)
	}
	if m.nflog, err = netfilter.Dial(cfg); err != nil {
		return nil, fmt.Errorf("nflog: %w", err)
	}
	if err := m.nflog.SetReadBuffer(monitorReadBuffer); err != nil {
		return nil, fmt.Errorf("nflog: %w", err)
	}
	if err := m.bindLog(group); err != nil {
		return nil, err
	}
	m.wg.Add(2)
	go m.readFlows()
	go m.readRefusals()
	ok = true
	return m, nil
}

// bindLog binds the nflog socket to group, copying each logged packet's
// first refuseSnaplen bytes.
func (m *monitor) bindLog(group uint16) error {
	cfg := func(attr netfilter.Attribute) error {
		msg, err := netfilter.MarshalNetlink(netfilter.Header{SubsystemID: netfilter.NFSubsysULOG, MessageType: nfulnlMsgConfig,
			Family: netfilter.ProtoUnspec, ResourceID: group, Flags: netlink.Request | netlink.Acknowledge}, []netfilter.Attribute{attr})
		if err != nil {
			return err
		}
		_, err = m.nflog.Query(msg)
		return err
	}
	if err := cfg(netfilter.Attribute{Type: nfulaCfgCmd, Data: []byte{nfulnlCfgCmdBind}}); err != nil {
		return fmt.Errorf("nflog: bind group %d (is another program using it?): %w", group, err)
	}
	mode := make([]byte, 6)
	binary.BigEndian.PutUint32(mode, refuseSnaplen)
	mode[4] = nfulnlCopyPacket
	if err := cfg(netfilter.Attribute{Type: nfulaCfgMode, Data: mode}); err != nil {
		return fmt.Errorf("nflog: group %d copy mode: %w", group, err)
	}
	return nil
}

// close stops reading and waits for the readers.
func (m *monitor) close() {
	m.closed.Store(true)
	if m.events != nil {
		_ = m.events.Close()
	}
	if m.nflog != nil {
		_ = m.nflog.Close()
	}
	if m.query != nil {
		_ = m.query.Close()
	}
	m.wg.Wait()
}

// receiveErr handles an error of a socket's Receive; it reports whether
// the reader goes on. ENOBUFS (the kernel dropped messages: the daemon
// fell behind) is counted in lost and logged, then reading goes on;
// after Close the reader stops; another error is logged and reading goes
// on after a pause.
func (m *monitor) receiveErr(what string, err error, lost *atomic.Int64) bool {
	if m.closed.Load() {
		return false
	}
	if errors.Is(err, unix.ENOBUFS) {
		n := lost.Add(1)
		if n == 1 || n%100 == 0 {
			m.log.Warn("open network evidence lost: the kernel dropped "+what+" (its socket buffer overflowed)", "overflows", n)
		}
		return true
	}
	m.log.Error("open network evidence: reading "+what, "err", err)
	time.Sleep(time.Second)
	return !m.closed.Load()
}

// readFlows reads the connection tracker's events.
func (m *monitor) readFlows() {
	defer m.wg.Done()
	for {
		msgs, err := m.events.Receive()
		if err != nil {
			if m.receiveErr("connection tracking events", err, &m.led.lostFlows) {
				continue
			}
			return
		}
		for _, msg := range msgs {
			var ev conntrack.Event
			if err := ev.Unmarshal(msg); err != nil || ev.Flow == nil {
				continue
			}
			m.flow(ev)
		}
	}
}

// keyOf is the key of a tracked flow; ok is false for a flow that is not
// IPv4 (no sandbox has another address).
func keyOf(f conntrack.Flow) (flowKey, bool) {
	o := f.TupleOrig
	if !o.IP.SourceAddress.Is4() {
		return flowKey{}, false
	}
	return flowKey{id: f.ID, proto: o.Proto.Protocol,
		src: netip.AddrPortFrom(o.IP.SourceAddress, o.Proto.SourcePort),
		dst: netip.AddrPortFrom(o.IP.DestinationAddress, o.Proto.DestinationPort)}, true
}

// flow handles one event of the tracker.
func (m *monitor) flow(ev conntrack.Event) {
	f := *ev.Flow
	k, ok := keyOf(f)
	if !ok {
		return
	}
	now := time.Now()
	switch ev.Type {
	case conntrack.EventNew:
		m.led.begun(k, now)
	case conntrack.EventUpdate:
		// The tracker keeps a closed TCP flow (TIME_WAIT) for minutes
		// before its DESTROY: report it now, with its counters read.
		if f.ProtoInfo.TCP == nil || (f.ProtoInfo.TCP.State != tcpTimeWait && f.ProtoInfo.TCP.State != tcpClose) || !m.led.tracked(k) {
			return
		}
		cur, err := m.query.Get(conntrack.Flow{TupleOrig: f.TupleOrig, Zone: f.Zone})
		if err != nil {
			return // gone already: its DESTROY reports it
		}
		m.led.ended(k, flowEnd{up: int64(cur.CountersOrig.Bytes), down: int64(cur.CountersReply.Bytes),
			start: cur.Timestamp.Start, stop: now, end: egress.EndClosed})
	case conntrack.EventDestroy:
		end := egress.EndClosed
		if k.proto != unix.IPPROTO_TCP {
			end = egress.EndIdle // UDP, ICMP: the tracker's timeout ended it
		}
		stop := f.Timestamp.Stop
		if stop.IsZero() {
			stop = now
		}
		m.led.ended(k, flowEnd{up: int64(f.CountersOrig.Bytes), down: int64(f.CountersReply.Bytes),
			start: f.Timestamp.Start, stop: stop, end: end, destroyed: true})
	}
}

// report reports flows open at their sandbox's end, with the counters the
// tracker has for them now.
func (m *monitor) report(flows []flow, now time.Time) {
	for _, f := range flows {
		e := flowEnd{stop: now, end: egress.EndShutdown, detail: "open when the sandbox left the open network"}
		t := conntrack.Tuple{IP: conntrack.IPTuple{SourceAddress: f.key.src.Addr(), DestinationAddress: f.key.dst.Addr()},
			Proto: conntrack.ProtoTuple{Protocol: f.key.proto, SourcePort: f.key.src.Port(), DestinationPort: f.key.dst.Port()}}
		if cur, err := m.query.Get(conntrack.Flow{TupleOrig: t}); err == nil {
			e.up, e.down = int64(cur.CountersOrig.Bytes), int64(cur.CountersReply.Bytes)
		} else {
			e.detail += "; its counters could not be read"
		}
		m.led.emit(f.sandbox, flowEvent(f.key, e, f.start))
	}
}

// readRefusals reads the table's nflog group.
func (m *monitor) readRefusals() {
	defer m.wg.Done()
	for {
		msgs, err := m.nflog.Receive()
		if err != nil {
			if m.receiveErr("refused packets", err, &m.led.lostRefusals) {
				continue
			}
			return
		}
		now := time.Now()
		for _, msg := range msgs {
			if r, ok := parseLogMessage(msg); ok {
				m.led.refused(r, now)
			}
		}
	}
}

// parseLogMessage reads a refusal from an nflog packet message.
func parseLogMessage(msg netlink.Message) (refusal, bool) {
	h, ad, err := netfilter.DecodeNetlink(msg)
	if err != nil || h.SubsystemID != netfilter.NFSubsysULOG || h.MessageType != nfulnlMsgPacket {
		return refusal{}, false
	}
	var r refusal
	var payload []byte
	for ad.Next() {
		switch ad.Type() {
		case nfulaIfindexIndev:
			if b := ad.Bytes(); len(b) == 4 {
				r.index = int(binary.BigEndian.Uint32(b))
			}
		case nfulaPrefix:
			b := ad.Bytes()
			for len(b) > 0 && b[len(b)-1] == 0 {
				b = b[:len(b)-1]
			}
			r.code = refusalCode(b)
		case nfulaPayload:
			payload = ad.Bytes()
		}
	}
	if ad.Err() != nil || r.index == 0 || r.code == "" {
		return refusal{}, false
	}
	r.proto, r.src, r.dst, r.port = parsePacket(payload)
	return r, true
}

// parsePacket reads the protocol, addresses and destination port of an
// IPv4 or IPv6 packet's first bytes; what it cannot read is left zero.
// (An IPv6 packet's extension headers are not followed: its port is
// then 0.)
func parsePacket(b []byte) (proto uint8, src, dst netip.Addr, port uint16) {
	if len(b) < 1 {
		return
	}
	var l4 []byte
	switch b[0] >> 4 {
	case 4:
		ihl := int(b[0]&0x0f) * 4
		if len(b) < 20 || ihl < 20 {
			return
		}
		proto = b[9]
		src, dst = netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		if len(b) > ihl {
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < 40 {
			return
		}
		proto = b[6]
		src, dst = netip.AddrFrom16([16]byte(b[8:24])), netip.AddrFrom16([16]byte(b[24:40]))
		l4 = b[40:]
	default:
		return
	}
	if (proto == unix.IPPROTO_TCP || proto == unix.IPPROTO_UDP) && len(l4) >= 4 {
		port = binary.BigEndian.Uint16(l4[2:4])
	}
	return
}
