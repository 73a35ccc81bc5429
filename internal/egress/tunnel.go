package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// errTooLarge is a handshake (headers, ClientHello) past its cap.
var errTooLarge = errors.New("too large")

// peekUntil waits, without consuming anything, until the bytes buffered
// in br satisfy scan, and returns them. scan is given the buffered bytes
// and the offset it had scanned to before (so that each call looks only
// at what is new) and returns the length of the part it wanted and true,
// or false to wait for more. More than limit bytes (or than br holds)
// without an answer is errTooLarge.
func peekUntil(br *bufio.Reader, limit int, scan func(b []byte, from int) (int, bool)) ([]byte, error) {
	limit = min(limit, br.Size())
	from := 0
	for {
		b, _ := br.Peek(br.Buffered())
		if n, ok := scan(b, from); ok {
			if n > limit {
				return nil, errTooLarge
			}
			return b[:n], nil
		}
		if len(b) >= limit {
			return nil, errTooLarge
		}
		from = len(b)
		if _, err := br.Peek(len(b) + 1); err != nil {
			return nil, err
		}
	}
}

// scanHeaderEnd finds the blank line that ends an HTTP header block.
func scanHeaderEnd(b []byte, from int) (int, bool) {
	start := max(from-3, 0)
	for i := start; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2, true
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3, true
		}
	}
	return 0, false
}

// lineVerdict is what classifyRequestLine makes of a tunnel's first bytes.
type lineVerdict int

const (
	lineMore   lineVerdict = iota // could still become an HTTP request line
	lineHTTP                      // a whole HTTP/1.x request line
	lineOpaque                    // not HTTP
)

// classifyRequestLine reads b as the start of an HTTP/1.x request line,
// "METHOD SP target SP HTTP/1.d CRLF", method upper-case letters only.
func classifyRequestLine(b []byte) lineVerdict {
	const maxMethod, maxTarget = 20, 8 << 10
	i := 0
	for i < len(b) && b[i] >= 'A' && b[i] <= 'Z' {
		i++
	}
	if i == len(b) {
		if i <= maxMethod {
			return lineMore
		}
		return lineOpaque
	}
	if i == 0 || i > maxMethod || b[i] != ' ' {
		return lineOpaque
	}
	i++
	t := i
	for i < len(b) && b[i] > ' ' && b[i] < 0x7f {
		i++
	}
	if i-t > maxTarget {
		return lineOpaque
	}
	if i == len(b) {
		return lineMore
	}
	if i == t || b[i] != ' ' {
		return lineOpaque
	}
	i++
	const version = "HTTP/1."
	for k := 0; k < len(version); k, i = k+1, i+1 {
		if i == len(b) {
			return lineMore
		}
		if b[i] != version[k] {
			return lineOpaque
		}
	}
	if i == len(b) {
		return lineMore
	}
	if b[i] < '0' || b[i] > '9' {
		return lineOpaque
	}
	i++
	if i < len(b) && b[i] == '\r' {
		i++
	}
	if i == len(b) {
		return lineMore
	}
	if b[i] != '\n' {
		return lineOpaque
	}
	return lineHTTP
}

// peekConn is the net.Conn crypto/tls reads a ClientHello from: its
// reads peek into the client's buffered reader without consuming, and
// its writes (an alert when the handshake is aborted) go nowhere.
type peekConn struct {
	net.Conn
	br  *bufio.Reader
	off int
}

func (pc *peekConn) Read(p []byte) (int, error) {
	if pc.off >= pc.br.Size() {
		return 0, errTooLarge
	}
	if pc.off >= pc.br.Buffered() {
		if _, err := pc.br.Peek(pc.off + 1); err != nil {
			return 0, err
		}
	}
	b, _ := pc.br.Peek(pc.br.Buffered())
	n := copy(p, b[pc.off:])
	pc.off += n
	return n, nil
}

func (pc *peekConn) Write(p []byte) (int, error)      { return len(p), nil }
func (pc *peekConn) Close() error                     { return nil }
func (pc *peekConn) SetDeadline(time.Time) error      { return nil }
func (pc *peekConn) SetReadDeadline(time.Time) error  { return nil }
func (pc *peekConn) SetWriteDeadline(time.Time) error { return nil }

// errHelloRead stops the handshake once the ClientHello is read.
var errHelloRead = errors.New("client hello read")

// peekServerName reads the TLS ClientHello at the start of br, without
// consuming it, and returns its server name ("" when it has none).
func peekServerName(br *bufio.Reader, c net.Conn) (string, error) {
	var name string
	got := false
	srv := tls.Server(&peekConn{Conn: c, br: br}, &tls.Config{
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = hello.ServerName, true
			return nil, errHelloRead
		},
	})
	err := srv.Handshake()
	if got {
		return name, nil
	}
	if err == nil {
		err = errors.New("no ClientHello")
	}
	return "", err
}

// tlsAccessDenied is a fatal TLS alert record, access_denied: what a
// client whose ClientHello names another server than the tunnel's gets,
// so that it reports a refusal rather than a reset.
var tlsAccessDenied = []byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 0x31}

// inspection is what the client's first bytes in a tunnel showed.
type inspection struct {
	ok     bool
	reason Reason
	detail string
	reply  []byte // what to send the client on refusal
	// end, when ok, is why the client sent nothing to inspect: it
	// closed its side (io.EOF) or went idle (errIdle).
	end error
}

// awaitByte waits until the client's first byte is buffered, under the
// idle rule (the destination may speak first: its bytes count as
// activity).
func (s *session) awaitByte(act *activity) error {
	idle := s.p.limits.IdleTimeout
	s.c.SetReadDeadline(time.Now().Add(idle))
	for {
		_, err := s.br.Peek(1)
		if err == nil {
			return nil
		}
		if !isTimeout(err) {
			return err
		}
		next := act.lastTime().Add(idle)
		if time.Until(next) <= 0 {
			return errIdle
		}
		s.c.SetReadDeadline(next)
	}
}

// inspect checks the client's first bytes in a tunnel to r, without
// consuming them: a TLS ClientHello must name r's host (SNI), an HTTP
// request's Host must be r's host; other protocols pass. It waits for
// the first byte under the idle rule, then for the whole ClientHello or
// header block within the handshake timeout.
func (s *session) inspect(r resolved, act *activity) inspection {
	lim := s.p.limits
	if err := s.awaitByte(act); err != nil {
		return inspection{ok: true, end: err}
	}
	s.c.SetReadDeadline(time.Now().Add(lim.HandshakeTimeout))
	b, _ := s.br.Peek(1)
	switch {
	case b[0] == 0x16: // a TLS handshake record
		name, err := peekServerName(s.br, s.c)
		if err != nil {
			return inspection{reason: ReasonBadRequest, detail: "TLS ClientHello: " + err.Error(), reply: tlsAccessDenied}
		}
		// A tunnel to an address takes no server name (RFC 6066 has
		// none for addresses); one to a name must carry that name.
		if r.host.addr.IsValid() && name != "" || !r.host.addr.IsValid() && !sameHost(name, r.host) {
			return inspection{reason: ReasonSNIMismatch, detail: "server name " + strconv.Quote(name), reply: tlsAccessDenied}
		}
		return inspection{ok: true}
	case b[0] >= 'A' && b[0] <= 'Z':
		verdict := lineMore
		_, err := peekUntil(s.br, inspectBufferSize, func(b []byte, _ int) (int, bool) {
			verdict = classifyRequestLine(b)
			return len(b), verdict != lineMore
		})
		if err != nil {
			// A line that could still be HTTP must become HTTP or stop
			// looking like it in time: passing it unread on a timeout
			// would let its Host come unchecked later.
			return inspection{reason: ReasonBadRequest, detail: "HTTP request line: " + err.Error(), reply: refusalResponse(http.StatusBadRequest, ReasonBadRequest, "")}
		}
		if verdict == lineOpaque {
			// Not HTTP: a protocol the proxy does not read. The
			// destination itself is allowed.
			return inspection{ok: true}
		}
		hdr, err := peekUntil(s.br, lim.MaxHeaderBytes, scanHeaderEnd)
		if err != nil {
			return inspection{reason: ReasonBadRequest, detail: "HTTP headers: " + err.Error(), reply: refusalResponse(http.StatusBadRequest, ReasonBadRequest, "")}
		}
		req, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(hdr)))
		if err != nil {
			return inspection{reason: ReasonBadRequest, detail: "HTTP request: " + err.Error(), reply: refusalResponse(http.StatusBadRequest, ReasonBadRequest, "")}
		}
		if !hostHeaderMatches(req.Host, r) {
			return inspection{reason: ReasonHostMismatch, detail: "Host " + strconv.Quote(req.Host), reply: refusalResponse(http.StatusForbidden, ReasonHostMismatch, "")}
		}
	}
	return inspection{ok: true}
}

// sameHost reports whether a name a client sent inside a tunnel (SNI,
// Host without port) names the tunnel's host. A tunnel to an address
// matches only that address (and no SNI, which may not be an address).
func sameHost(name string, h host) bool {
	if name == "" {
		return false
	}
	got, err := parseHost(name)
	if err != nil {
		return false
	}
	if h.addr.IsValid() {
		return got.addr == h.addr
	}
	return got.name == h.name
}

// hostHeaderMatches reports whether an HTTP Host ("name", "name:port",
// "[v6]:port") names the tunnel's host, and its port if it has one.
func hostHeaderMatches(hostHdr string, r resolved) bool {
	name, port := hostHdr, ""
	if h, p, err := net.SplitHostPort(hostHdr); err == nil {
		name, port = h, p
	}
	if port != "" && port != strconv.Itoa(int(r.port)) {
		return false
	}
	if r.host.addr.IsValid() {
		got, err := parseHost(name)
		return err == nil && got.addr == r.host.addr
	}
	return sameHost(name, r.host)
}

// tunnel runs an allowed tunnel between the client and up: it inspects
// the client's first bytes (while the destination's bytes already flow
// to the client), then copies both ways until both are done or one
// fails. It fills and reports ev.
func (s *session) tunnel(ctx context.Context, ev *Event, up net.Conn, r resolved) {
	defer up.Close()
	defer context.AfterFunc(ctx, func() { up.Close() })()
	lim := s.p.limits
	act := newActivity()
	var nUp, nDown atomic.Int64
	var firstErr error
	var once sync.Once
	fail := func(err error) {
		once.Do(func() { firstErr = err })
		s.c.Close()
		up.Close()
	}
	// refusing is set when the inspection refuses the tunnel: closing
	// up then ends the destination's direction, which must leave the
	// client's connection open for the refusal's reply.
	var refusing atomic.Bool
	downDone := make(chan struct{})
	go func() {
		defer close(downDone)
		err := pump(
			&meteredWriter{ctx: ctx, w: s.c, c: s.c, idle: lim.IdleTimeout, act: act, lim: s.p.down, n: &nDown, total: &s.p.bytesDown},
			&idleReader{r: up, c: up, idle: lim.IdleTimeout, act: act})
		if refusing.Load() {
			return
		}
		if err != nil {
			fail(err)
			return
		}
		closeWrite(s.c)
	}()

	in := s.inspect(r, act)
	if in.end != nil && !errors.Is(in.end, io.EOF) {
		fail(in.end)
	}
	if !in.ok {
		refusing.Store(true)
		up.Close()
		s.c.SetWriteDeadline(time.Now().Add(time.Second))
		<-downDone
		if in.reply != nil {
			s.c.Write(in.reply)
		}
		ev.Allowed, ev.Reason, ev.Detail = false, in.reason, in.detail
		ev.BytesDown = nDown.Load()
		s.p.report(ev)
		return
	}
	err := pump(
		&meteredWriter{ctx: ctx, w: up, c: up, idle: lim.IdleTimeout, act: act, lim: s.p.up, n: &nUp, total: &s.p.bytesUp},
		&idleReader{r: s.br, c: s.c, idle: lim.IdleTimeout, act: act})
	if err != nil {
		fail(err)
	} else {
		closeWrite(up)
	}
	<-downDone
	ev.Allowed = true
	ev.BytesUp, ev.BytesDown = nUp.Load(), nDown.Load()
	ev.Duration = time.Since(ev.Start)
	ev.End = endOf(firstErr, ctx.Err() != nil)
	s.p.report(ev)
}

// refusalResponse is the HTTP answer to a refused request: the status,
// a Proxy-Status header (RFC 9209) naming the reason, and the reason's
// message as text. hostPort, when given, names the destination in the
// text.
func refusalResponse(status int, reason Reason, hostPort string) []byte {
	return decisionResponse(status, Decision{Reason: reason}, hostPort)
}

// decisionResponse is refusalResponse for a policy decision, whose Class
// names the class of a refused address in the message.
func decisionResponse(status int, d Decision, hostPort string) []byte {
	msg := d.Message()
	if hostPort != "" {
		msg = hostPort + ": " + msg
	}
	return proxyResponse(status, proxyStatusError(d.Reason), string(d.Reason), msg)
}

// proxyResponse is an HTTP answer of the proxy's own: status, a
// Proxy-Status header with the RFC 9209 error type perr (and details,
// if any), and "airlock egress: text" as the body. It closes the
// connection.
func proxyResponse(status int, perr, details, text string) []byte {
	body := "airlock egress: " + text + "\n"
	var b bytes.Buffer
	fmt.Fprintf(&b, "HTTP/1.1 %d %s\r\n", status, http.StatusText(status))
	fmt.Fprintf(&b, "Proxy-Status: airlock; error=%s", perr)
	if details != "" {
		fmt.Fprintf(&b, "; details=%q", details)
	}
	b.WriteString("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n")
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.Bytes()
}

// proxyStatusError maps a reason to an RFC 9209 proxy error type.
func proxyStatusError(r Reason) string {
	switch r {
	case ReasonBlockedAddress:
		return "destination_ip_prohibited"
	case ReasonResolveFailed:
		return "dns_error"
	case ReasonDialFailed:
		return "destination_unavailable"
	case ReasonBadTarget, ReasonBadRequest, ReasonUnsupported, ReasonNotHTTP:
		return "http_request_error"
	case ReasonUpstreamTLS:
		return "tls_certificate_error"
	case ReasonCredential:
		return "proxy_internal_error"
	case ReasonConnLimit:
		return "proxy_internal_error"
	}
	return "http_request_denied"
}
