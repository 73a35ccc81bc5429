package opennet

import (
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"testing"

	"github.com/mdlayher/netlink"
	"github.com/ti-mo/netfilter"
	"golang.org/x/sys/unix"
)

func TestParsePacket(t *testing.T) {
	v4 := make([]byte, 28)
	v4[0], v4[9] = 0x45, unix.IPPROTO_UDP
	copy(v4[12:], []byte{100, 96, 0, 2, 10, 77, 0, 1})
	binary.BigEndian.PutUint16(v4[22:], 8081)
	v6 := make([]byte, 44)
	v6[0], v6[6] = 0x60, unix.IPPROTO_TCP
	v6[23], v6[39] = 1, 2
	binary.BigEndian.PutUint16(v6[42:], 443)
	for _, c := range []struct {
		name     string
		b        []byte
		proto    uint8
		src, dst string
		port     uint16
	}{
		{"ipv4 udp", v4, 17, "100.96.0.2", "10.77.0.1", 8081},
		{"ipv4 without ports", v4[:20], 17, "100.96.0.2", "10.77.0.1", 0},
		{"ipv6 tcp", v6, 6, "::1", "::2", 443},
		{"truncated", v4[:12], 0, "", "", 0},
		{"bad header length", append([]byte{0x41}, v4[1:]...), 0, "", "", 0},
		{"empty", nil, 0, "", "", 0},
	} {
		proto, src, dst, port := parsePacket(c.b)
		str := func(a netip.Addr) string {
			if !a.IsValid() {
				return ""
			}
			return a.String()
		}
		if proto != c.proto || str(src) != c.src || str(dst) != c.dst || port != c.port {
			t.Errorf("%s: %d %s %s %d; want %d %s %s %d", c.name, proto, src, dst, port, c.proto, c.src, c.dst, c.port)
		}
	}
}

func FuzzParsePacket(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 28, 0, 0, 0, 0, 64, 17, 0, 0, 100, 96, 0, 2, 10, 77, 0, 1, 0, 1, 0, 2})
	f.Add([]byte{0x4f})
	f.Fuzz(func(t *testing.T, b []byte) {
		parsePacket(b)
		msg := netlink.Message{Header: netlink.Header{Type: netlink.HeaderType(uint16(netfilter.NFSubsysULOG) << 8)}, Data: append([]byte{2, 0, 0, 0}, b...)}
		parseLogMessage(msg)
	})
}

// TestParseLogMessage reads a refusal from an nflog packet message.
func TestParseLogMessage(t *testing.T) {
	pkt := make([]byte, 24)
	pkt[0], pkt[9] = 0x45, unix.IPPROTO_TCP
	copy(pkt[12:], []byte{100, 96, 0, 2, 169, 254, 169, 254})
	binary.BigEndian.PutUint16(pkt[22:], 80)
	msg, err := netfilter.MarshalNetlink(netfilter.Header{SubsystemID: netfilter.NFSubsysULOG, MessageType: nfulnlMsgPacket, Family: netfilter.ProtoIPv4},
		[]netfilter.Attribute{
			{Type: nfulaPacketHdr, Data: []byte{8, 0, 2, 0}},
			{Type: nfulaIfindexIndev, Data: netfilter.Uint32Bytes(42)},
			{Type: nfulaPayload, Data: pkt},
			{Type: nfulaPrefix, Data: []byte("blocked\x00")},
		})
	if err != nil {
		t.Fatal(err)
	}
	r, ok := parseLogMessage(msg)
	want := refusal{code: refusedBlocked, index: 42, proto: 6, src: netip.MustParseAddr("100.96.0.2"), dst: netip.MustParseAddr("169.254.169.254"), port: 80}
	if !ok || r != want {
		t.Fatalf("parsed %+v, %v; want %+v", r, ok, want)
	}
}

// TestReceiveENOBUFS: a socket overflow is counted and reading goes on;
// after close, reading stops.
func TestReceiveENOBUFS(t *testing.T) {
	m := &monitor{led: newLedger(slog.New(slog.NewTextHandler(io.Discard, nil)), 0, 0), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	overflow := &netlink.OpError{Op: "receive", Err: os.NewSyscallError("recvmsg", unix.ENOBUFS)}
	for range 3 {
		if !m.receiveErr("events", overflow, &m.led.lostFlows) {
			t.Fatal("reading stopped at an overflow")
		}
	}
	if n := m.led.lostFlows.Load(); n != 3 {
		t.Fatalf("lost %d; want 3", n)
	}
	m.closed.Store(true)
	if m.receiveErr("events", errors.New("use of closed file"), &m.led.lostFlows) {
		t.Fatal("reading went on after close")
	}
}
