package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Reasons of the credential edge.
const (
	// ReasonUpstreamTLS: the destination's TLS certificate did not
	// verify against the host's roots, or its handshake failed.
	ReasonUpstreamTLS Reason = "upstream_tls"
	// ReasonCredential: a credential's secret could not be revealed
	// (deleted, or sealed by a key not loaded).
	ReasonCredential Reason = "credential_unavailable"
	// ReasonNotHTTP: a destination with a credential was sent something
	// else than HTTP/1.1 (over TLS or not), which the proxy cannot add a
	// header to.
	ReasonNotHTTP Reason = "not_http"
)

// alpnHTTP1 is the only application protocol offered on either side of
// an intercepted connection: the proxy adds headers to HTTP/1.1 only.
var alpnHTTP1 = []string{"http/1.1"}

// SetCredentials replaces the credentials (nil: none). Like SetPolicy, it
// applies to every destination asked for afterwards. Credentials need
// the proxy to have been made with an Interception.
func (p *Proxy) SetCredentials(cs *Credentials) error {
	if cs.Len() > 0 && p.intercept == nil {
		return fmt.Errorf("egress proxy: credentials need an interception CA: %w", errdefs.ErrFailedPrecondition)
	}
	p.creds.Store(cs)
	return nil
}

// credentialsFor returns the credentials for r's destination, nil for
// an address or a host without any.
func (p *Proxy) credentialsFor(r resolved) []Credential {
	if r.host.name == "" {
		return nil
	}
	return p.creds.Load().For(r.host.name, r.port)
}

// carry runs an allowed tunnel: intercepted when its destination has a
// credential, untouched otherwise.
func (s *session) carry(ctx context.Context, ev *Event, up net.Conn, r resolved) {
	if creds := s.p.credentialsFor(r); len(creds) > 0 {
		s.intercept(ctx, ev, up, r, creds)
		return
	}
	s.tunnel(ctx, ev, up, r)
}

// readerConn reads a connection through its buffered reader.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// intercept serves a tunnel to a destination with credentials: it
// terminates the sandbox's TLS with a certificate minted for the host
// (only http/1.1 offered), opens its own TLS to the destination,
// verified against the roots, and relays HTTP/1.1 requests one by one,
// each with the credentials' headers set. A tunnel that carries plain
// HTTP gets the same without TLS. It fills and reports ev.
func (s *session) intercept(ctx context.Context, ev *Event, up net.Conn, r resolved, creds []Credential) {
	defer up.Close()
	defer context.AfterFunc(ctx, func() { up.Close() })()
	lim := s.p.limits
	refuse := func(reason Reason, detail string, reply []byte, w io.Writer) {
		if reply != nil && w != nil {
			s.c.SetWriteDeadline(time.Now().Add(lim.HandshakeTimeout))
			w.Write(reply)
		}
		ev.Allowed, ev.Reason, ev.Detail = false, reason, detail
		s.p.report(ev)
	}
	act := newActivity()
	if err := s.awaitByte(act); err != nil {
		ev.Allowed, ev.End = true, endOf(err, ctx.Err() != nil)
		s.p.report(ev)
		return
	}
	s.c.SetReadDeadline(time.Now().Add(lim.HandshakeTimeout))
	first, _ := s.br.Peek(1)

	var client net.Conn = &readerConn{Conn: s.c, r: s.br}
	var cbr *bufio.Reader
	upstream := up
	if first[0] == 0x16 {
		ctls := tls.Server(client, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: alpnHTTP1,
			GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
				if !sameHost(hello.ServerName, r.host) {
					return nil, errSNI
				}
				return s.p.intercept.CA.leaf(r.host.name)
			},
		})
		if err := ctls.HandshakeContext(ctx); err != nil {
			reason := ReasonBadRequest
			if errors.Is(err, errSNI) {
				reason = ReasonSNIMismatch
			}
			refuse(reason, "TLS handshake with the sandbox: "+err.Error(), nil, nil)
			return
		}
		client, cbr = ctls, bufio.NewReaderSize(ctls, inspectBufferSize)
		roots := s.p.intercept.Roots
		utls := tls.Client(up, &tls.Config{
			ServerName: r.host.name,
			RootCAs:    roots,
			MinVersion: tls.VersionTLS12,
			NextProtos: alpnHTTP1,
		})
		hctx, cancel := context.WithTimeout(ctx, lim.HandshakeTimeout)
		err := utls.HandshakeContext(hctx)
		cancel()
		if err != nil {
			// The sandbox gets a clear answer to its first request
			// rather than a reset.
			client.SetReadDeadline(time.Now().Add(lim.HandshakeTimeout))
			if _, rerr := peekUntil(cbr, lim.MaxHeaderBytes, scanHeaderEnd); rerr == nil {
				refuse(ReasonUpstreamTLS, "TLS handshake with the destination: "+err.Error(),
					proxyResponse(http.StatusBadGateway, "tls_certificate_error", string(ReasonUpstreamTLS), r.host.name+": "+Decision{Reason: ReasonUpstreamTLS}.Message()), client)
			} else {
				refuse(ReasonUpstreamTLS, "TLS handshake with the destination: "+err.Error(), nil, nil)
			}
			return
		}
		upstream = utls
	} else {
		cbr = s.br
	}

	var nUp, nDown atomic.Int64
	toUp := &meteredWriter{ctx: ctx, w: upstream, c: upstream, idle: lim.IdleTimeout, act: act, lim: s.p.up, n: &nUp, total: &s.p.bytesUp}
	toClient := &meteredWriter{ctx: ctx, w: client, c: client, idle: lim.IdleTimeout, act: act, lim: s.p.down, n: &nDown, total: &s.p.bytesDown}
	ubr := bufio.NewReaderSize(&idleReader{r: upstream, c: upstream, idle: lim.IdleTimeout, act: act}, inspectBufferSize)

	var err error
	for first := true; ; first = false {
		if !first {
			client.SetReadDeadline(time.Now().Add(lim.IdleTimeout))
			if _, err = cbr.Peek(1); err != nil {
				if isEOF(err) || isTimeout(err) {
					err = nil
				}
				break
			}
		}
		client.SetReadDeadline(time.Now().Add(lim.HandshakeTimeout))
		var req *http.Request
		if _, err = peekUntil(cbr, lim.MaxHeaderBytes, scanHeaderEnd); err == nil {
			req, err = http.ReadRequest(cbr)
		}
		if err != nil {
			if first {
				refuse(ReasonNotHTTP, "request: "+err.Error(), refusalResponse(http.StatusBadRequest, ReasonNotHTTP, ""), toClient)
				return
			}
			break
		}
		if !hostHeaderMatches(req.Host, r) {
			refuse(ReasonHostMismatch, "Host "+strconv.Quote(req.Host), refusalResponse(http.StatusForbidden, ReasonHostMismatch, ""), toClient)
			return
		}
		names, cerr := s.addCredentials(ctx, req.Header, creds)
		if cerr != nil {
			refuse(ReasonCredential, cerr.Error(), refusalResponse(http.StatusBadGateway, ReasonCredential, ""), toClient)
			return
		}
		ev.Credential = names
		var keep bool
		keep, err = s.relay(req, act, client, cbr, upstream, ubr, toUp, toClient)
		if err != nil || !keep {
			break
		}
	}
	ev.Allowed = true
	ev.BytesUp, ev.BytesDown = nUp.Load(), nDown.Load()
	ev.Duration = time.Since(ev.Start)
	ev.End = endOf(err, ctx.Err() != nil)
	s.p.report(ev)
}

// errSNI is a ClientHello naming another host than the tunnel's.
var errSNI = errors.New("server name does not match the tunnel's host")

// relay sends one request (its credentials set) to the destination and
// its answer to the client, and returns whether the connection may
// carry another. An HTTP/2 upgrade (h2c) is dropped from the request; a
// WebSocket upgrade the destination accepts turns the connection into a
// two-way copy, which ends it.
func (s *session) relay(req *http.Request, act *activity, client net.Conn, cbr *bufio.Reader,
	upstream net.Conn, ubr *bufio.Reader, toUp, toClient io.Writer) (bool, error) {
	lim := s.p.limits
	upgrade := upgradeType(req.Header)
	if upgrade != "" && !strings.EqualFold(upgrade, "websocket") {
		req.Header.Del("Upgrade")
		req.Header.Del("Connection")
		req.Header.Del("Http2-Settings")
		upgrade = ""
	}
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""}
	}
	if req.Body != nil && req.Body != http.NoBody {
		req.Body = readCloser{&idleReader{r: req.Body, c: client, idle: lim.IdleTimeout, act: act}, req.Body}
	}
	w := startWrite(req, toUp)
	var resp *http.Response
	var err error
	for {
		if _, err = peekUntil(ubr, lim.MaxHeaderBytes, scanHeaderEnd); err == nil {
			resp, err = http.ReadResponse(ubr, req)
		}
		if err != nil {
			upstream.Close()
			w.wait(-1)
			return false, err
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
		if err := resp.Write(toClient); err != nil {
			upstream.Close()
			w.wait(-1)
			return false, err
		}
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if upgrade == "" {
			upstream.Close()
			w.wait(-1)
			return false, errors.New("101 without an upgrade asked for")
		}
		if err := resp.Write(toClient); err != nil {
			return false, err
		}
		if err, _ := w.wait(-1); err != nil {
			return false, err
		}
		done := make(chan error, 1)
		go func() {
			err := pump(toUp, &idleReader{r: cbr, c: client, idle: lim.IdleTimeout, act: act})
			closeWrite(upstream)
			done <- err
		}()
		err := pump(toClient, ubr)
		closeWrite(client)
		if uerr := <-done; err == nil {
			err = uerr
		}
		return false, err
	}
	delimited := resp.ContentLength >= 0 || slices0(resp.TransferEncoding) == "chunked" || !bodyAllowed(req.Method, resp.StatusCode)
	keep := !req.Close && !resp.Close && delimited && req.ProtoAtLeast(1, 1)
	resp.Close = !keep
	if err := resp.Write(toClient); err != nil {
		upstream.Close()
		w.wait(-1)
		return false, err
	}
	werr, done := w.wait(time.Second)
	if !done {
		// The destination answered before reading the whole request:
		// the connection cannot carry another.
		upstream.Close()
		client.Close()
		werr, _ = w.wait(-1)
		keep = false
	}
	if werr != nil {
		return false, werr
	}
	return keep, nil
}
