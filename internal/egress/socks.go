package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"syscall"
	"time"
)

// SOCKS protocol constants (RFC 1928).
const (
	socks4Version = 0x04
	socks5Version = 0x05

	socksNoAuth       = 0x00
	socksNoAcceptable = 0xff

	socksCmdConnect = 0x01

	socksAtypIPv4   = 0x01
	socksAtypDomain = 0x03
	socksAtypIPv6   = 0x04

	socksSucceeded           = 0x00
	socksGeneralFailure      = 0x01
	socksNotAllowed          = 0x02
	socksHostUnreachable     = 0x04
	socksConnectionRefused   = 0x05
	socksCommandUnsupported  = 0x07
	socksAddrTypeUnsupported = 0x08
)

// serveSOCKS5 serves a SOCKS5 client: no authentication, CONNECT only.
// A domain name is resolved here, on the host (socks5h semantics), and
// judged by the same policy as an HTTP CONNECT target, its tunnel
// inspected the same way.
func (s *session) serveSOCKS5(ctx context.Context) {
	ev := &Event{Start: time.Now(), Protocol: ProtoSOCKS5}
	// The handshake's deadline was set by handle.
	var hdr [2]byte
	if _, err := io.ReadFull(s.br, hdr[:]); err != nil {
		s.socksBadRequest(ev, "greeting: "+err.Error())
		return
	}
	methods := make([]byte, hdr[1])
	if _, err := io.ReadFull(s.br, methods); err != nil {
		s.socksBadRequest(ev, "greeting: "+err.Error())
		return
	}
	noAuth := false
	for _, m := range methods {
		noAuth = noAuth || m == socksNoAuth
	}
	if !noAuth {
		s.c.Write([]byte{socks5Version, socksNoAcceptable})
		ev.Reason, ev.Detail = ReasonUnsupported, "SOCKS5 client offers no 'no authentication' method"
		s.p.report(ev)
		return
	}
	if _, err := s.c.Write([]byte{socks5Version, socksNoAuth}); err != nil {
		return
	}

	var req [4]byte // VER CMD RSV ATYP
	if _, err := io.ReadFull(s.br, req[:]); err != nil {
		s.socksBadRequest(ev, "request: "+err.Error())
		return
	}
	ev.Start = time.Now()
	if req[0] != socks5Version {
		s.socksBadRequest(ev, "request: bad version")
		return
	}
	hostStr, err := s.readSOCKSAddr(req[3])
	if err != nil {
		if errors.Is(err, errAtyp) {
			s.socksReply(socksAddrTypeUnsupported)
			ev.Reason, ev.Detail = ReasonUnsupported, "SOCKS5 address type"
			s.p.report(ev)
			return
		}
		s.socksBadRequest(ev, "request: "+err.Error())
		return
	}
	var portB [2]byte
	if _, err := io.ReadFull(s.br, portB[:]); err != nil {
		s.socksBadRequest(ev, "request: "+err.Error())
		return
	}
	port := uint16(portB[0])<<8 | uint16(portB[1])
	if req[1] != socksCmdConnect {
		s.socksReply(socksCommandUnsupported)
		ev.Reason, ev.Detail = ReasonUnsupported, socksCommandName(req[1])+" (only CONNECT is served)"
		if h, err := parseHost(hostStr); err == nil {
			ev.Host, ev.Port = h.String(), port
		}
		s.p.report(ev)
		return
	}

	r, ok := s.check(ctx, ev, hostStr, port)
	if !ok {
		code := byte(socksNotAllowed)
		switch ev.Reason {
		case ReasonResolveFailed:
			code = socksHostUnreachable
		case ReasonBadTarget:
			code = socksGeneralFailure
		}
		s.socksReply(code)
		s.p.report(ev)
		return
	}
	up, err := s.dial(ctx, ev, r)
	if err != nil {
		code := byte(socksHostUnreachable)
		if errors.Is(err, syscall.ECONNREFUSED) {
			code = socksConnectionRefused
		}
		s.socksReply(code)
		s.p.report(ev)
		return
	}
	// The bound address would tell the sandbox a host address: it gets
	// 0.0.0.0:0 instead, which clients ignore.
	if err := s.socksReply(socksSucceeded); err != nil {
		up.Close()
		ev.Allowed, ev.End = true, endOf(err, ctx.Err() != nil)
		s.p.report(ev)
		return
	}
	s.carry(ctx, ev, up, r)
}

// errAtyp is an address type SOCKS5 does not define.
var errAtyp = errors.New("unknown address type")

// readSOCKSAddr reads a request's DST.ADDR of type atyp, as a host
// string parseHost reads.
func (s *session) readSOCKSAddr(atyp byte) (string, error) {
	switch atyp {
	case socksAtypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(s.br, b[:]); err != nil {
			return "", err
		}
		return netip.AddrFrom4(b).String(), nil
	case socksAtypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(s.br, b[:]); err != nil {
			return "", err
		}
		return netip.AddrFrom16(b).String(), nil
	case socksAtypDomain:
		var n [1]byte
		if _, err := io.ReadFull(s.br, n[:]); err != nil {
			return "", err
		}
		name := make([]byte, n[0])
		if _, err := io.ReadFull(s.br, name); err != nil {
			return "", err
		}
		return string(name), nil
	}
	return "", errAtyp
}

// socksReply writes a reply with the given code and a zero bound
// address.
func (s *session) socksReply(code byte) error {
	s.c.SetWriteDeadline(time.Now().Add(s.p.limits.HandshakeTimeout))
	_, err := s.c.Write([]byte{socks5Version, code, 0, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// socksBadRequest reports a malformed SOCKS5 handshake (or one cut
// short) and ends the connection.
func (s *session) socksBadRequest(ev *Event, detail string) {
	ev.Reason, ev.Detail = ReasonBadRequest, "SOCKS5 "+detail
	s.p.report(ev)
}

func socksCommandName(cmd byte) string {
	switch cmd {
	case 0x02:
		return "SOCKS5 BIND"
	case 0x03:
		return "SOCKS5 UDP ASSOCIATE"
	}
	return fmt.Sprintf("SOCKS5 command 0x%02x", cmd)
}
