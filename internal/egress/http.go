package egress

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// serveHTTP serves an HTTP client connection: CONNECT turns it into a
// tunnel; other requests are forwarded one by one, each decided on its
// own, while the client keeps the connection alive.
func (s *session) serveHTTP(ctx context.Context) {
	lim := s.p.limits
	for first := true; ; first = false {
		if !first {
			// Between requests the connection may idle, no longer.
			s.c.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
			if _, err := s.br.Peek(1); err != nil {
				return
			}
			s.c.SetReadDeadline(time.Now().Add(lim.HandshakeTimeout))
		}
		start := time.Now()
		req, err := s.readRequest()
		if err != nil {
			status := http.StatusBadRequest
			if errors.Is(err, errTooLarge) {
				status = http.StatusRequestHeaderFieldsTooLarge
			}
			s.refuse(&Event{Start: start, Reason: ReasonBadRequest, Detail: "HTTP request: " + err.Error()}, status, "")
			return
		}
		if req.Method == http.MethodConnect {
			s.serveConnect(ctx, req, start)
			return
		}
		if isDNSRequest(req) {
			// The proxy's own DNS endpoint: answered here, never
			// forwarded (see serveDNS).
			if !s.serveDNS(ctx, req, start) {
				return
			}
			continue
		}
		if !s.forward(ctx, req, start) {
			return
		}
	}
}

// readRequest reads a request's line and headers, capped at
// MaxHeaderBytes; the body is left to read.
func (s *session) readRequest() (*http.Request, error) {
	if _, err := peekUntil(s.br, s.p.limits.MaxHeaderBytes, scanHeaderEnd); err != nil {
		return nil, err
	}
	return http.ReadRequest(s.br)
}

// refuse answers a refused HTTP request and reports it.
func (s *session) refuse(ev *Event, status int, hostPort string) {
	s.c.SetWriteDeadline(time.Now().Add(s.p.limits.HandshakeTimeout))
	s.c.Write(decisionResponse(status, Decision{Reason: ev.Reason, Class: ev.Class}, hostPort))
	s.p.report(ev)
}

// statusFor is the HTTP status of a refusal.
func statusFor(r Reason) int {
	switch r {
	case ReasonBadTarget, ReasonBadRequest, ReasonUnsupported:
		return http.StatusBadRequest
	case ReasonResolveFailed, ReasonDialFailed:
		return http.StatusBadGateway
	}
	return http.StatusForbidden
}

// splitTarget splits a CONNECT target or URL authority into host and
// port; a missing port is defPort (0: required).
func splitTarget(authority string, defPort uint16) (string, uint16, bool) {
	h, p, err := net.SplitHostPort(authority)
	if err != nil {
		if defPort == 0 || strings.Contains(authority, "]:") {
			return "", 0, false
		}
		h, p = strings.TrimSuffix(strings.TrimPrefix(authority, "["), "]"), strconv.Itoa(int(defPort))
	}
	port, err := parsePort(p)
	if err != nil || h == "" {
		return "", 0, false
	}
	return h, port, true
}

// serveConnect serves a CONNECT request: decide, resolve, dial, answer
// 200, then tunnel.
func (s *session) serveConnect(ctx context.Context, req *http.Request, start time.Time) {
	ev := &Event{Start: start, Protocol: ProtoConnect}
	h, port, ok := splitTarget(req.RequestURI, 0)
	if !ok {
		ev.Reason = ReasonBadTarget
		s.refuse(ev, http.StatusBadRequest, "")
		return
	}
	r, ok := s.check(ctx, ev, h, port)
	if !ok {
		s.refuse(ev, statusFor(ev.Reason), req.RequestURI)
		return
	}
	up, err := s.dial(ctx, ev, r)
	if err != nil {
		s.refuse(ev, statusFor(ev.Reason), req.RequestURI)
		return
	}
	s.c.SetWriteDeadline(time.Now().Add(s.p.limits.HandshakeTimeout))
	if _, err := io.WriteString(s.c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		up.Close()
		ev.Allowed, ev.End = true, endOf(err, ctx.Err() != nil)
		s.p.report(ev)
		return
	}
	s.carry(ctx, ev, up, r)
}

// hopHeaders are the hop-by-hop headers (RFC 9110 7.6.1) a forwarding
// proxy does not pass on, besides those Connection names and every
// Proxy-* header.
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHopHeaders removes the hop-by-hop headers from h, and every
// Proxy-* header (Proxy-Authorization, Proxy-Connection: a sandbox's
// proxy credentials, if any, never reach a destination).
func removeHopHeaders(h http.Header) {
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if f = textproto.TrimString(f); f != "" {
				h.Del(f)
			}
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for k := range h {
		if strings.HasPrefix(k, "Proxy-") {
			delete(h, k)
		}
	}
}

// upgradeType returns the protocol a request or response asks to switch
// to (Connection: upgrade and Upgrade: X), or "".
func upgradeType(h http.Header) string {
	for _, v := range h.Values("Connection") {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(textproto.TrimString(f), "upgrade") {
				return h.Get("Upgrade")
			}
		}
	}
	return ""
}

// forward forwards one plain HTTP request (absolute http:// URI) on a
// fresh connection to its destination, and relays the answer. It
// returns whether the client connection may carry another request.
func (s *session) forward(ctx context.Context, req *http.Request, start time.Time) bool {
	lim := s.p.limits
	ev := &Event{Start: start, Protocol: ProtoHTTP, Method: req.Method}
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		ev.Reason, ev.Detail = ReasonBadRequest, "not an absolute http:// URL"
		if req.URL.Scheme == "https" {
			ev.Reason, ev.Detail = ReasonUnsupported, "https:// URL sent for forwarding (use CONNECT)"
		}
		s.refuse(ev, http.StatusBadRequest, "")
		return false
	}
	hostName, port, ok := splitTarget(req.URL.Host, 80)
	if !ok {
		ev.Reason = ReasonBadTarget
		s.refuse(ev, http.StatusBadRequest, "")
		return false
	}
	r, ok := s.check(ctx, ev, hostName, port)
	if !ok {
		s.refuse(ev, statusFor(ev.Reason), req.URL.Host)
		return false
	}
	up, err := s.dial(ctx, ev, r)
	if err != nil {
		s.refuse(ev, statusFor(ev.Reason), req.URL.Host)
		return false
	}
	defer up.Close()
	// The proxy's end closes the destination's side too: a request
	// waiting for its answer must not outlive Serve.
	defer context.AfterFunc(ctx, func() { up.Close() })()

	// The request as the destination gets it: origin-form, its Host
	// from the URL, no hop-by-hop or Proxy-* headers, no added
	// User-Agent, and "Connection: close" (each request has its own
	// upstream connection; the client's stays alive).
	upgrade := upgradeType(req.Header)
	clientClose := req.Close
	removeHopHeaders(req.Header)
	if upgrade != "" {
		req.Header.Set("Connection", "Upgrade")
		req.Header.Set("Upgrade", upgrade)
	} else {
		req.Close = true
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""}
	}
	req.Host = req.URL.Host
	if creds := s.p.credentialsFor(r); len(creds) > 0 {
		names, err := s.addCredentials(ctx, req.Header, creds)
		if err != nil {
			ev.Reason, ev.Detail = ReasonCredential, err.Error()
			s.refuse(ev, http.StatusBadGateway, "")
			return false
		}
		ev.Credential = names
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		req.Header.Del("Expect")
		s.c.SetWriteDeadline(time.Now().Add(lim.HandshakeTimeout))
		io.WriteString(s.c, "HTTP/1.1 100 Continue\r\n\r\n")
	}

	act := newActivity()
	var nUp, nDown atomic.Int64
	toUp := &meteredWriter{ctx: ctx, w: up, c: up, idle: lim.IdleTimeout, act: act, lim: s.p.up, n: &nUp, total: &s.p.bytesUp}
	toClient := &meteredWriter{ctx: ctx, w: s.c, c: s.c, idle: lim.IdleTimeout, act: act, lim: s.p.down, n: &nDown, total: &s.p.bytesDown}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = readCloser{&idleReader{r: req.Body, c: s.c, idle: lim.IdleTimeout, act: act}, req.Body}
	}
	w := startWrite(req, toUp)

	finish := func(err error, keep bool) bool {
		werr, done := w.wait(time.Second)
		if !done {
			// The destination answered before reading the whole
			// request: the client connection cannot be reused.
			up.Close()
			s.c.Close()
			werr, _ = w.wait(-1)
			keep = false
		}
		if err == nil && werr != nil {
			err, keep = werr, false
		}
		ev.Allowed = true
		ev.BytesUp, ev.BytesDown = nUp.Load(), nDown.Load()
		ev.Duration = time.Since(ev.Start)
		ev.End = endOf(err, ctx.Err() != nil)
		s.p.report(ev)
		return keep && err == nil
	}

	ubr := bufio.NewReaderSize(&idleReader{r: up, c: up, idle: lim.IdleTimeout, act: act}, inspectBufferSize)
	var resp *http.Response
	for {
		if _, err := peekUntil(ubr, lim.MaxHeaderBytes, scanHeaderEnd); err != nil {
			return s.badGateway(ev, finish, err, &nDown)
		}
		resp, err = http.ReadResponse(ubr, req)
		if err != nil {
			return s.badGateway(ev, finish, err, &nDown)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		// 1xx interim answers (100 Continue, 103 Early Hints) pass as
		// they are.
		removeHopHeaders(resp.Header)
		if err := resp.Write(toClient); err != nil {
			return finish(err, false)
		}
	}
	defer resp.Body.Close()

	if resp.StatusCode == http.StatusSwitchingProtocols {
		if upgradeType(resp.Header) == "" || upgrade == "" {
			return s.badGateway(ev, finish, errors.New("101 without an upgrade"), &nDown)
		}
		got := resp.Header.Get("Upgrade")
		removeHopHeaders(resp.Header)
		resp.Header.Set("Connection", "Upgrade")
		resp.Header.Set("Upgrade", got)
		if err := resp.Write(toClient); err != nil {
			return finish(err, false)
		}
		// The connection now carries the new protocol both ways, once
		// the request is written.
		if err, _ := w.wait(-1); err != nil {
			return finish(err, false)
		}
		done := make(chan error, 1)
		go func() {
			err := pump(toUp, &idleReader{r: s.br, c: s.c, idle: lim.IdleTimeout, act: act})
			if err == nil {
				closeWrite(up)
			} else {
				up.Close()
			}
			done <- err
		}()
		err := pump(toClient, ubr)
		if err != nil {
			s.c.Close()
		} else {
			closeWrite(s.c)
		}
		if uerr := <-done; err == nil {
			err = uerr
		}
		return finish(err, false)
	}

	// The answer the client gets: hop-by-hop headers removed; it stays
	// alive when the body is delimited (length or chunked) and the
	// client did not ask to close.
	removeHopHeaders(resp.Header)
	delimited := resp.ContentLength >= 0 || slices0(resp.TransferEncoding) == "chunked" || !bodyAllowed(req.Method, resp.StatusCode)
	keep := !clientClose && delimited && req.ProtoAtLeast(1, 1)
	resp.Close = !keep
	if err := resp.Write(toClient); err != nil {
		return finish(err, false)
	}
	return finish(nil, keep)
}

// slices0 returns the first element of a list, or "".
func slices0(l []string) string {
	if len(l) == 0 {
		return ""
	}
	return l[0]
}

// bodyAllowed reports whether a response to method with status has a
// body at all (RFC 9110 6.4.1).
func bodyAllowed(method string, status int) bool {
	return method != http.MethodHead && status != http.StatusNoContent && status != http.StatusNotModified
}

// badGateway ends a forwarded request whose destination gave no valid
// answer: a 502 when nothing was relayed yet.
func (s *session) badGateway(ev *Event, finish func(error, bool) bool, err error, nDown *atomic.Int64) bool {
	if nDown.Load() == 0 && !isTimeout(err) && !errors.Is(err, errIdle) {
		ev.Detail = "bad answer: " + err.Error()
		s.c.SetWriteDeadline(time.Now().Add(s.p.limits.HandshakeTimeout))
		s.c.Write(proxyResponse(http.StatusBadGateway, "http_response_incomplete", "", "destination gave no valid HTTP answer"))
	}
	return finish(err, false)
}

// requestWrite is a request being written to its destination in the
// background while the answer is read.
type requestWrite struct {
	done chan struct{}
	err  error
}

func startWrite(req *http.Request, w io.Writer) *requestWrite {
	rw := &requestWrite{done: make(chan struct{})}
	go func() {
		defer close(rw.done)
		rw.err = req.Write(w)
	}()
	return rw
}

// wait waits up to d (forever when d < 0) for the write to end, and
// returns its error and whether it ended.
func (rw *requestWrite) wait(d time.Duration) (error, bool) {
	if d < 0 {
		<-rw.done
		return rw.err, true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-rw.done:
		return rw.err, true
	case <-t.C:
		return nil, false
	}
}

// readCloser pairs a reader with the closer of what it reads.
type readCloser struct {
	io.Reader
	io.Closer
}
