package egress

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/proxy"
)

// serverPort returns the port of an httptest server.
func serverPort(t *testing.T, s *httptest.Server) int {
	t.Helper()
	u, err := url.Parse(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := strconv.Atoi(u.Port())
	return p
}

func TestConnectTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.TLS.ServerName)
	}))
	defer srv.Close()
	port := serverPort(t, srv)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})

	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: h.addr}),
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the test server's certificate is not for allowed.test
	}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := c.Get(fmt.Sprintf("https://allowed.test:%d/", port))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello allowed.test" {
		t.Errorf("body %q", body)
	}
	tr.CloseIdleConnections()
	ev := h.events.next(t)
	if !ev.Allowed || ev.Reason != ReasonAllowed || ev.Protocol != ProtoConnect || ev.Host != "allowed.test" ||
		ev.Port != uint16(port) || ev.Addr != netip.MustParseAddr("127.0.0.1") || ev.Rule != "allowed.test" ||
		ev.BytesUp == 0 || ev.BytesDown == 0 || ev.Duration <= 0 || ev.End != EndClosed {
		t.Errorf("event %+v", ev)
	}
	if st := h.proxy.Stats(); st.Allowed != 1 || st.Refused != 0 || st.BytesUp != ev.BytesUp || st.BytesDown != ev.BytesDown {
		t.Errorf("stats %+v, event %+v", st, ev)
	}
}

// recordingServer is an HTTP test server that keeps the requests it got.
type recordingServer struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []*http.Request
	body []string
}

func newRecordingServer(t *testing.T) *recordingServer {
	rs := &recordingServer{}
	rs.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		rs.mu.Lock()
		rs.reqs = append(rs.reqs, r)
		rs.body = append(rs.body, string(b))
		rs.mu.Unlock()
		w.Header().Set("Keep-Alive", "timeout=5")
		w.Header().Set("X-Answer", "yes")
		fmt.Fprintf(w, "%s %s", r.Method, r.URL.RequestURI())
	}))
	t.Cleanup(rs.Close)
	return rs
}

func (rs *recordingServer) got(i int) (*http.Request, string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.reqs[i], rs.body[i]
}

func TestHTTPForward(t *testing.T) {
	rs := newRecordingServer(t)
	port := serverPort(t, rs.Server)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	c := h.dialProxy()
	br := bufio.NewReader(c)
	target := fmt.Sprintf("allowed.test:%d", port)

	fmt.Fprintf(c, "GET http://%s/p?q=1 HTTP/1.1\r\nHost: wrong.test\r\n"+
		"Proxy-Authorization: Basic Zm9vOmJhcg==\r\nProxy-Connection: keep-alive\r\n"+
		"Connection: keep-alive, X-Drop\r\nX-Drop: 1\r\nKeep-Alive: 300\r\nX-Keep: yes\r\n\r\n", target)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "GET /p?q=1" || resp.Header.Get("X-Answer") != "yes" {
		t.Errorf("response %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if resp.Close || resp.Header.Get("Keep-Alive") != "" {
		t.Errorf("the client's connection should stay alive, without hop-by-hop headers: close %v, %v", resp.Close, resp.Header)
	}
	r, _ := rs.got(0)
	if r.Host != target || r.RequestURI != "/p?q=1" {
		t.Errorf("server got Host %q URI %q", r.Host, r.RequestURI)
	}
	for _, k := range []string{"Proxy-Authorization", "Proxy-Connection", "X-Drop", "Keep-Alive", "User-Agent"} {
		if v, ok := r.Header[k]; ok {
			t.Errorf("server got header %s: %q", k, v)
		}
	}
	if r.Header.Get("X-Keep") != "yes" || !r.Close {
		t.Errorf("server got X-Keep %q, close %v", r.Header.Get("X-Keep"), r.Close)
	}
	ev := h.events.next(t)
	if !ev.Allowed || ev.Protocol != ProtoHTTP || ev.Method != "GET" || ev.Host != "allowed.test" || ev.Port != uint16(port) ||
		ev.Addr != netip.MustParseAddr("127.0.0.1") || ev.BytesUp == 0 || ev.BytesDown == 0 || ev.End != EndClosed {
		t.Errorf("event %+v", ev)
	}

	// A second request, with a body, on the same client connection.
	fmt.Fprintf(c, "POST http://%s/up HTTP/1.1\r\nHost: %s\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n", target, target)
	resp, err = http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusContinue {
		t.Fatalf("want 100 Continue: %v %v", resp, err)
	}
	io.WriteString(c, "hello")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if _, got := rs.got(1); string(body) != "POST /up" || got != "hello" {
		t.Errorf("POST: response %q, server got body %q", body, got)
	}
	if ev := h.events.next(t); !ev.Allowed || ev.Method != "POST" || ev.BytesUp < 5 {
		t.Errorf("event %+v", ev)
	}

	// A refused destination on the same connection: 403, and the
	// connection ends.
	fmt.Fprintf(c, "GET http://denied.test/ HTTP/1.1\r\nHost: denied.test\r\n\r\n")
	resp, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != 403 || !strings.Contains(resp.Header.Get("Proxy-Status"), "not_listed") || !strings.Contains(string(body), "not in the sandbox's egress allowlist") {
		t.Errorf("refusal %d %v %q", resp.StatusCode, resp.Header, body)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonNotListed || ev.Host != "denied.test" || ev.Port != 80 {
		t.Errorf("event %+v", ev)
	}
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("after a refusal the connection should end: %v", err)
	}
	if n := h.dialer.count(); n != 2 {
		t.Errorf("%d dials, want 2", n)
	}
}

func TestHTTPForwardBadRequests(t *testing.T) {
	h := newHarness(t, []string{"allowed.test"}, nil)
	h.dialer.forbid(true)
	for _, tt := range []struct {
		req    string
		status int
		reason Reason
	}{
		{"GET https://allowed.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonUnsupported},
		{"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonBadRequest},
		{"GET http://allowed.test:0/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonBadTarget},
		{"CONNECT allowed.test HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 400, ReasonBadTarget},
		{"CONNECT 127.1:80 HTTP/1.1\r\nHost: x\r\n\r\n", 400, ReasonBadTarget},
		{"NOT HTTP\r\n\r\n", 400, ReasonBadRequest},
		{"GET http://allowed.test/ HTTP/1.1\r\nX-Big: " + strings.Repeat("a", 40<<10) + "\r\n\r\n", 431, ReasonBadRequest},
	} {
		c := h.dialProxy()
		io.WriteString(c, tt.req)
		code, head := readHead(t, bufio.NewReader(c))
		if code != tt.status || !strings.Contains(head, "Proxy-Status: airlock") {
			t.Errorf("%.40q: %d %q, want %d", tt.req, code, head, tt.status)
		}
		if ev := h.events.next(t); ev.Allowed || ev.Reason != tt.reason {
			t.Errorf("%.40q: event %+v, want %s", tt.req, ev, tt.reason)
		}
	}
}

func TestHTTPForwardUpgrade(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		br := bufio.NewReader(c)
		req, err := http.ReadRequest(br)
		if err != nil || req.Header.Get("Upgrade") != "echo" {
			io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
			return
		}
		io.WriteString(c, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		io.Copy(c, br)
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	c := h.dialProxy()
	br := bufio.NewReader(c)
	fmt.Fprintf(c, "GET http://allowed.test:%d/ws HTTP/1.1\r\nHost: allowed.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n", port)
	code, head := readHead(t, br)
	if code != 101 || !strings.Contains(head, "Upgrade: echo") {
		t.Fatalf("%d %q", code, head)
	}
	io.WriteString(c, "ping")
	buf := make([]byte, 4)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q %v", buf, err)
	}
	c.(*net.TCPConn).CloseWrite()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("want EOF after close: %v", err)
	}
	if ev := h.events.next(t); !ev.Allowed || ev.Protocol != ProtoHTTP || ev.BytesDown == 0 || ev.BytesUp == 0 {
		t.Errorf("event %+v", ev)
	}
}

func TestSOCKS5(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	d, err := proxy.SOCKS5("tcp", h.addr, nil, proxy.Direct)
	if err != nil {
		t.Fatal(err)
	}
	c, err := d.Dial("tcp", fmt.Sprintf("allowed.test:%d", echo.port()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "hello")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "hello" {
		t.Fatalf("echo %q %v", buf, err)
	}
	c.Close()
	ev := h.events.next(t)
	if !ev.Allowed || ev.Protocol != ProtoSOCKS5 || ev.Host != "allowed.test" || ev.Addr != netip.MustParseAddr("127.0.0.1") ||
		ev.BytesUp != 5 || ev.BytesDown != 5 {
		t.Errorf("event %+v", ev)
	}
	// The name was resolved by the proxy (socks5h), not by the client.
	if got := h.res.calls; len(got) != 1 || got[0] != "allowed.test" {
		t.Errorf("resolver calls %q", got)
	}

	// A refused name.
	if _, err := d.Dial("tcp", "denied.test:80"); err == nil || !strings.Contains(err.Error(), "not allowed") {
		t.Errorf("denied.test: %v", err)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonNotListed || ev.Protocol != ProtoSOCKS5 {
		t.Errorf("event %+v", ev)
	}
}

// socksRaw sends a SOCKS5 greeting with methods and, if req is not nil,
// a request, and returns the replies.
func socksRaw(t *testing.T, h *harness, methods []byte, req []byte) (greet, reply []byte) {
	t.Helper()
	c := h.dialProxy()
	c.Write(append([]byte{5, byte(len(methods))}, methods...))
	greet = make([]byte, 2)
	if _, err := io.ReadFull(c, greet); err != nil {
		t.Fatalf("greeting reply: %v", err)
	}
	if req == nil {
		return greet, nil
	}
	c.Write(req)
	reply = make([]byte, 10)
	if _, err := io.ReadFull(c, reply); err != nil {
		t.Fatalf("request reply: %v", err)
	}
	return greet, reply
}

func TestSOCKS5Refusals(t *testing.T) {
	echo := newEchoServer(t)
	p := echo.port()
	h := newHarness(t, []string{"allowed.test", "*.wild.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	pb := []byte{byte(p >> 8), byte(p)}
	domain := func(cmd byte, name string) []byte {
		return append(append([]byte{5, cmd, 0, 3, byte(len(name))}, name...), pb...)
	}
	for _, tt := range []struct {
		name    string
		methods []byte
		req     []byte
		rep     byte
		reason  Reason
	}{
		{"BIND", []byte{0}, domain(2, "allowed.test"), 7, ReasonUnsupported},
		{"UDP ASSOCIATE", []byte{0}, domain(3, "allowed.test"), 7, ReasonUnsupported},
		{"address type", []byte{0}, append([]byte{5, 1, 0, 9, 1, 2, 3, 4}, pb...), 8, ReasonUnsupported},
		{"unlisted name", []byte{0}, domain(1, "denied.test"), 2, ReasonNotListed},
		{"unresolvable", []byte{0}, domain(1, "x.wild.test"), 4, ReasonResolveFailed},
		{"bad name", []byte{0}, domain(1, "a b"), 1, ReasonBadTarget},
		{"unlisted IPv4", []byte{0}, append([]byte{5, 1, 0, 1, 127, 0, 0, 2}, pb...), 2, ReasonNotListed},
		{"IPv6 loopback", []byte{0}, append(append([]byte{5, 1, 0, 4}, netip.IPv6Loopback().AsSlice()...), pb...), 2, ReasonNotListed},
	} {
		h.dialer.forbid(true)
		greet, reply := socksRaw(t, h, tt.methods, tt.req)
		h.dialer.forbid(false)
		if !bytes.Equal(greet, []byte{5, 0}) || reply[0] != 5 || reply[1] != tt.rep {
			t.Errorf("%s: greeting %v reply %v, want code %d", tt.name, greet, reply, tt.rep)
		}
		if !bytes.Equal(reply[3:], []byte{1, 0, 0, 0, 0, 0, 0}) {
			t.Errorf("%s: bound address %v, want 0.0.0.0:0", tt.name, reply[3:])
		}
		if ev := h.events.next(t); ev.Allowed || ev.Reason != tt.reason || ev.Protocol != ProtoSOCKS5 {
			t.Errorf("%s: event %+v, want %s", tt.name, ev, tt.reason)
		}
	}

	// Only username/password offered: no acceptable method.
	if greet, _ := socksRaw(t, h, []byte{2}, nil); !bytes.Equal(greet, []byte{5, 0xff}) {
		t.Errorf("auth only: greeting %v", greet)
	}
	if ev := h.events.next(t); ev.Reason != ReasonUnsupported {
		t.Errorf("auth only: event %+v", ev)
	}

	// SOCKS4 is refused in its own terms.
	c := h.dialProxy()
	c.Write(append([]byte{4, 1, pb[0], pb[1], 127, 0, 0, 1}, "user\x00"...))
	r := make([]byte, 8)
	if _, err := io.ReadFull(c, r); err != nil || r[1] != 0x5b {
		t.Errorf("SOCKS4 reply %v %v", r, err)
	}
	if ev := h.events.next(t); ev.Reason != ReasonUnsupported {
		t.Errorf("SOCKS4: event %+v", ev)
	}

	// A listed address by IPv4 works.
	_, reply := socksRaw(t, h, []byte{1, 0}, append([]byte{5, 1, 0, 1, 127, 0, 0, 1}, pb...))
	if reply[1] != 0 {
		t.Errorf("listed IPv4: reply %v", reply)
	}
}

func TestSNIMismatchRefused(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes end in EOF there
	srv.StartTLS()
	defer srv.Close()
	port := serverPort(t, srv)
	h := newHarness(t, []string{"allowed.test", "other.test", "127.0.0.1"},
		map[string]string{"allowed.test": "127.0.0.1", "other.test": "127.0.0.1"})
	for _, tt := range []struct {
		target, sni string
		ok          bool
	}{
		{"allowed.test", "allowed.test", true},
		{"allowed.test", "ALLOWED.test", true},
		{"allowed.test", "other.test", false}, // listed itself, but not the tunnel's host
		{"allowed.test", "", false},           // no SNI for a named target
		{"127.0.0.1", "", true},
		{"127.0.0.1", "allowed.test", false},
	} {
		c, br, code, _ := h.connect(fmt.Sprintf("%s:%d", tt.target, port))
		if code != 200 {
			t.Fatalf("%s: CONNECT %d", tt.target, code)
		}
		tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: tt.sni, InsecureSkipVerify: true})
		err := tc.Handshake()
		if tt.ok != (err == nil) {
			t.Errorf("target %s SNI %q: handshake %v, want ok %v", tt.target, tt.sni, err, tt.ok)
		}
		if !tt.ok && (err == nil || !strings.Contains(err.Error(), "access denied")) {
			t.Errorf("target %s SNI %q: want an access denied alert, got %v", tt.target, tt.sni, err)
		}
		c.Close()
		ev := h.events.next(t)
		if tt.ok != ev.Allowed || !tt.ok && (ev.Reason != ReasonSNIMismatch || !strings.Contains(ev.Detail, strconv.Quote(tt.sni))) {
			t.Errorf("target %s SNI %q: event %+v", tt.target, tt.sni, ev)
		}
	}
}

// bufConn reads through a bufio.Reader that may hold bytes already.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func TestHostMismatchRefused(t *testing.T) {
	rs := newRecordingServer(t)
	port := serverPort(t, rs.Server)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	for _, tt := range []struct {
		host string
		ok   bool
	}{
		{"allowed.test", true},
		{fmt.Sprintf("allowed.test:%d", port), true},
		{"Allowed.Test.", true},
		{"other.test", false},
		{"allowed.test:1", false},
		{"", false},
	} {
		c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", port))
		if code != 200 {
			t.Fatalf("CONNECT %d", code)
		}
		fmt.Fprintf(c, "GET /x HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", tt.host)
		code, head := readHead(t, br)
		if tt.ok && code != 200 || !tt.ok && (code != 403 || !strings.Contains(head, "host_mismatch")) {
			t.Errorf("Host %q: %d %q", tt.host, code, head)
		}
		c.Close()
		if ev := h.events.next(t); ev.Allowed != tt.ok || !tt.ok && ev.Reason != ReasonHostMismatch {
			t.Errorf("Host %q: event %+v", tt.host, ev)
		}
	}
	rs.mu.Lock()
	n := len(rs.reqs)
	rs.mu.Unlock()
	if n != 3 {
		t.Errorf("server got %d requests, want the 3 allowed ones", n)
	}
}

// TestRebindingRefused: a listed name that resolves to 127.0.0.1 is
// refused, before any dial, unless 127.0.0.1 is listed too.
func TestRebindingRefused(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"rebind.test"}, map[string]string{"rebind.test": "127.0.0.1"})
	h.dialer.forbid(true)
	target := fmt.Sprintf("rebind.test:%d", echo.port())

	_, _, code, head := h.connect(target)
	if code != 403 || !strings.Contains(head, "destination_ip_prohibited") {
		t.Errorf("CONNECT: %d %q", code, head)
	}
	ev := h.events.next(t)
	if ev.Allowed || ev.Reason != ReasonBlockedAddress || ev.Class != ClassLoopback || ev.Addr != netip.MustParseAddr("127.0.0.1") || ev.Host != "rebind.test" {
		t.Errorf("event %+v", ev)
	}
	c := h.dialProxy()
	fmt.Fprintf(c, "GET http://%s/ HTTP/1.1\r\nHost: rebind.test\r\n\r\n", target)
	if code, _ := readHead(t, bufio.NewReader(c)); code != 403 {
		t.Errorf("HTTP forward: %d", code)
	}
	if ev := h.events.next(t); ev.Reason != ReasonBlockedAddress {
		t.Errorf("event %+v", ev)
	}
	d, _ := proxy.SOCKS5("tcp", h.addr, nil, proxy.Direct)
	if _, err := d.Dial("tcp", target); err == nil {
		t.Error("SOCKS5 dial allowed")
	}
	if ev := h.events.next(t); ev.Reason != ReasonBlockedAddress {
		t.Errorf("event %+v", ev)
	}
	if n := echo.count(); n != 0 {
		t.Errorf("echo server got %d connections", n)
	}

	// Listed explicitly, the loopback address is allowed.
	h.dialer.forbid(false)
	h.setPolicy("rebind.test", "127.0.0.1")
	c, br, code, _ := h.connect(target)
	if code != 200 {
		t.Fatalf("CONNECT with 127.0.0.1 listed: %d", code)
	}
	io.WriteString(c, "abc")
	buf := make([]byte, 3)
	if _, err := io.ReadFull(br, buf); err != nil || string(buf) != "abc" {
		t.Errorf("echo %q %v", buf, err)
	}
}

// TestGuardedAddressesRefused: metadata, private and mixed answers are
// refused before any dial, whether asked for by address or by a name
// that resolves to them, even under wide CIDR entries.
func TestGuardedAddressesRefused(t *testing.T) {
	h := newHarness(t,
		[]string{"*.test", "0.0.0.0/0", "::/0", "169.254.0.0/16"},
		map[string]string{
			"meta.test":    "169.254.169.254",
			"meta6.test":   "fd00:ec2::254",
			"private.test": "10.0.0.5",
			"ula.test":     "fd12::5",
			"mixed.test":   "192.0.2.10,127.0.0.1",
			"cgnat.test":   "100.100.100.200",
			"mapped.test":  "::ffff:169.254.169.254",
		})
	h.dialer.forbid(true)
	for _, tt := range []struct {
		target string
		class  AddrClass
	}{
		{"169.254.169.254:80", ClassMetadata},
		{"[fd00:ec2::254]:80", ClassMetadata},
		{"[::ffff:169.254.169.254]:80", ClassMetadata},
		{"meta.test:80", ClassMetadata},
		{"meta6.test:80", ClassMetadata},
		{"mapped.test:80", ClassMetadata},
		{"private.test:443", ClassPrivate},
		{"ula.test:443", ClassPrivate},
		{"mixed.test:443", ClassLoopback},
		{"cgnat.test:443", ClassCGNAT},
		{"10.1.2.3:22", ClassPrivate},
		{"127.0.0.1:22", ClassLoopback},
		{"[::1]:22", ClassLoopback},
		{"0.0.0.0:22", ClassUnspecified},
	} {
		_, _, code, _ := h.connect(tt.target)
		if code != 403 {
			t.Errorf("%s: %d, want 403", tt.target, code)
		}
		if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonBlockedAddress || ev.Class != tt.class {
			t.Errorf("%s: event %+v, want blocked %s", tt.target, ev, tt.class)
		}
	}
	// SOCKS5 to the metadata address.
	_, reply := socksRaw(t, h, []byte{0}, []byte{5, 1, 0, 1, 169, 254, 169, 254, 0, 80})
	if reply[1] != 2 {
		t.Errorf("SOCKS5 metadata: reply %v", reply)
	}
	if ev := h.events.next(t); ev.Reason != ReasonBlockedAddress || ev.Class != ClassMetadata {
		t.Errorf("event %+v", ev)
	}
	if n := h.dialer.count(); n != 0 {
		t.Errorf("%d dials", n)
	}
}

// TestRawAddressNotListed: a raw address no address entry lists is
// refused, before any dial, even when a name entry resolves to it.
func TestRawAddressNotListed(t *testing.T) {
	h := newHarness(t, []string{"allowed.test"}, map[string]string{"allowed.test": "192.0.2.1"})
	h.dialer.forbid(true)
	for _, target := range []string{"192.0.2.1:443", "127.0.0.1:80", "[::1]:80", "[2001:db8::1]:443"} {
		_, _, code, _ := h.connect(target)
		if code != 403 {
			t.Errorf("%s: %d", target, code)
		}
		if ev := h.events.next(t); ev.Reason != ReasonNotListed {
			t.Errorf("%s: event %+v", target, ev)
		}
	}
	c := h.dialProxy()
	io.WriteString(c, "GET http://192.0.2.1/ HTTP/1.1\r\nHost: 192.0.2.1\r\n\r\n")
	if code, _ := readHead(t, bufio.NewReader(c)); code != 403 {
		t.Errorf("HTTP forward to a raw address: %d", code)
	}
	if ev := h.events.next(t); ev.Reason != ReasonNotListed {
		t.Errorf("event %+v", ev)
	}
}

func TestResolveFailed(t *testing.T) {
	h := newHarness(t, []string{"*.test"}, nil)
	h.dialer.forbid(true)
	_, _, code, head := h.connect("nowhere.test:443")
	if code != 502 || !strings.Contains(head, "dns_error") {
		t.Errorf("%d %q", code, head)
	}
	if ev := h.events.next(t); ev.Reason != ReasonResolveFailed || !strings.Contains(ev.Detail, "no such host") {
		t.Errorf("event %+v", ev)
	}
}

func TestDialFailed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // nothing listens there now
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	_, _, code, head := h.connect(fmt.Sprintf("allowed.test:%d", port))
	if code != 502 || !strings.Contains(head, "destination_unavailable") {
		t.Errorf("%d %q", code, head)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonDialFailed || ev.Addr != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("event %+v", ev)
	}
	_, reply := socksRaw(t, h, []byte{0}, []byte{5, 1, 0, 1, 127, 0, 0, 1, byte(port >> 8), byte(port)})
	if reply[1] != 5 {
		t.Errorf("SOCKS5: reply %v, want connection refused", reply)
	}
	h.events.next(t)
}

func TestPolicySwap(t *testing.T) {
	echo := newEchoServer(t)
	rs := newRecordingServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	target := fmt.Sprintf("allowed.test:%d", echo.port())

	open, obr, code, _ := h.connect(target)
	if code != 200 {
		t.Fatal(code)
	}
	hc := h.dialProxy()
	hbr := bufio.NewReader(hc)
	get := func() int {
		fmt.Fprintf(hc, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", serverPort(t, rs.Server))
		resp, err := http.ReadResponse(hbr, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if code := get(); code != 200 {
		t.Fatalf("GET before the swap: %d", code)
	}
	h.events.next(t)

	h.setPolicy("other.test")
	// New tunnels and the next request of a kept-alive connection are
	// judged by the new policy at once.
	if _, _, code, _ := h.connect(target); code != 403 {
		t.Errorf("CONNECT after the swap: %d", code)
	}
	if ev := h.events.next(t); ev.Reason != ReasonNotListed {
		t.Errorf("event %+v", ev)
	}
	if code := get(); code != 403 {
		t.Errorf("GET after the swap: %d", code)
	}
	h.events.next(t)
	// A tunnel opened before stays open.
	io.WriteString(open, "still")
	buf := make([]byte, 5)
	if _, err := io.ReadFull(obr, buf); err != nil || string(buf) != "still" {
		t.Errorf("open tunnel: %q %v", buf, err)
	}
	if got := h.proxy.Policy().Entries(); len(got) != 1 || got[0] != "other.test" {
		t.Errorf("Policy() = %q", got)
	}
	if err := h.proxy.SetPolicy(nil); err == nil {
		t.Error("SetPolicy(nil) accepted")
	}

	h.setPolicy("allowed.test", "127.0.0.1")
	if _, _, code, _ := h.connect(target); code != 200 {
		t.Errorf("CONNECT after swapping back: %d", code)
	}
}

func TestConnLimit(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"},
		withLimits(Limits{MaxConns: 2}))
	target := fmt.Sprintf("allowed.test:%d", echo.port())
	var open []net.Conn
	for range 2 {
		c, br, code, _ := h.connect(target)
		if code != 200 {
			t.Fatal(code)
		}
		io.WriteString(c, "x")
		if _, err := br.ReadByte(); err != nil {
			t.Fatal(err)
		}
		open = append(open, c)
	}
	c := h.dialProxy()
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\n\r\n", target)
	if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil {
		t.Errorf("third connection: read %d %v, want it closed", n, err)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonConnLimit {
		t.Errorf("event %+v", ev)
	}
	if st := h.proxy.Stats(); st.Conns != 3 || st.Active != 2 || st.Refused != 1 {
		t.Errorf("stats %+v", st)
	}
	// A slot frees when a connection ends.
	open[0].Close()
	h.events.next(t)
	deadline := time.Now().Add(5 * time.Second)
	for h.proxy.Stats().Active != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("active stays %d", h.proxy.Stats().Active)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, _, code, _ := h.connect(target); code != 200 {
		t.Errorf("after a slot freed: %d", code)
	}
}

func TestIdleTimeout(t *testing.T) {
	// The server waits for a byte, then sends a byte every 50 ms, 12
	// times, then nothing.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if _, err := c.Read(make([]byte, 1)); err != nil {
					return
				}
				for range 12 {
					time.Sleep(50 * time.Millisecond)
					c.Write([]byte{'.'})
				}
				io.Copy(io.Discard, c)
			}()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"},
		withLimits(Limits{IdleTimeout: 200 * time.Millisecond}))
	c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", port))
	if code != 200 {
		t.Fatal(code)
	}
	// 600 ms of bytes one way only keep the tunnel open past the 200 ms
	// idle timeout: the quiet direction does not count.
	io.WriteString(c, "g")
	start := time.Now()
	buf := make([]byte, 12)
	if _, err := io.ReadFull(br, buf); err != nil {
		t.Fatalf("after %v: %v", time.Since(start), err)
	}
	// Then nothing moves: the proxy ends it.
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("want EOF: %v", err)
	}
	if idle := time.Since(start); idle > 5*time.Second {
		t.Errorf("ended after %v", idle)
	}
	c.Close()
	if ev := h.events.next(t); !ev.Allowed || ev.End != EndIdle || ev.BytesUp != 1 || ev.BytesDown != 12 {
		t.Errorf("event %+v", ev)
	}

	// A kept-alive HTTP client connection idles out too.
	rs := newRecordingServer(t)
	hc := h.dialProxy()
	hbr := bufio.NewReader(hc)
	fmt.Fprintf(hc, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", serverPort(t, rs.Server))
	resp, err := http.ReadResponse(hbr, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	if _, err := hbr.ReadByte(); err != io.EOF {
		t.Errorf("kept-alive connection: want EOF, got %v", err)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	h := newHarness(t, []string{"allowed.test"}, nil, withLimits(Limits{HandshakeTimeout: 200 * time.Millisecond}))
	h.dialer.forbid(true)
	for _, partial := range []string{"CONNECT allowed.te", "\x05\x01", "\x05\x01\x00\x05\x01\x00\x03"} {
		c := h.dialProxy()
		io.WriteString(c, partial)
		start := time.Now()
		io.Copy(io.Discard, c) // until the proxy closes it
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%q: closed after %v", partial, d)
		}
		if ev := h.events.next(t); ev.Reason != ReasonBadRequest {
			t.Errorf("%q: event %+v", partial, ev)
		}
	}
	// In a tunnel, a ClientHello started must be finished in time.
	echo := newEchoServer(t)
	h.dialer.forbid(false)
	h.setPolicy("allowed.test", "127.0.0.1")
	h.res.names["allowed.test"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	c, _, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", echo.port()))
	if code != 200 {
		t.Fatal(code)
	}
	c.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}) // a record header and one byte of 512
	io.Copy(io.Discard, c)
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonBadRequest || !strings.Contains(ev.Detail, "ClientHello") {
		t.Errorf("event %+v", ev)
	}
}

// TestSlowRequestLineRefused: a tunnel's first bytes that look like the
// start of an HTTP request line are not let through unread when the
// handshake timeout passes: the Host sent later would go unchecked.
func TestSlowRequestLineRefused(t *testing.T) {
	rs := newRecordingServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"},
		withLimits(Limits{HandshakeTimeout: 200 * time.Millisecond}))
	c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", serverPort(t, rs.Server)))
	if code != 200 {
		t.Fatal(code)
	}
	io.WriteString(c, "GET / HTTP/1.1")
	time.Sleep(500 * time.Millisecond)
	io.WriteString(c, "\r\nHost: other.test\r\n\r\n")
	if code, _ := readHead(t, br); code != 400 {
		t.Errorf("status %d", code)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonBadRequest {
		t.Errorf("event %+v", ev)
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.reqs) != 0 {
		t.Errorf("server got %d requests", len(rs.reqs))
	}
}

func TestServerSpeaksFirst(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.WriteString(c, "220 ready\r\n")
		io.Copy(c, c)
	}()
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", ln.Addr().(*net.TCPAddr).Port))
	if code != 200 {
		t.Fatal(code)
	}
	line, err := br.ReadString('\n')
	if err != nil || line != "220 ready\r\n" {
		t.Fatalf("banner %q %v", line, err)
	}
	io.WriteString(c, "QUIT\r\n")
	if line, err = br.ReadString('\n'); err != nil || line != "QUIT\r\n" {
		t.Errorf("echo %q %v", line, err)
	}
}

func TestBandwidthCap(t *testing.T) {
	echo := newEchoServer(t)
	const rate, size = 256 << 10, 384 << 10
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"},
		withLimits(Limits{BandwidthBytesPerSec: rate}))
	c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", echo.port()))
	if code != 200 {
		t.Fatal(code)
	}
	start := time.Now()
	go func() {
		c.Write(make([]byte, size))
		c.(*net.TCPConn).CloseWrite()
	}()
	n, err := io.Copy(io.Discard, br)
	elapsed := time.Since(start)
	if err != nil || n != size {
		t.Fatalf("read %d %v", n, err)
	}
	// 384 KiB at 256 KiB/s, less the first burst (a tenth of a second's
	// worth), takes at least 1.4 s.
	if elapsed < 1300*time.Millisecond || elapsed > 15*time.Second {
		t.Errorf("%d bytes took %v at %d B/s", size, elapsed, rate)
	}
	if ev := h.events.next(t); ev.BytesUp != size || ev.BytesDown != size {
		t.Errorf("event %+v", ev)
	}
}

func TestCountersAndEvents(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"allowed.test:" + strconv.Itoa(echo.port()), "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	payload := bytes.Repeat([]byte("z"), 1000)
	for range 2 {
		c, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", echo.port()))
		if code != 200 {
			t.Fatal(code)
		}
		c.Write(payload)
		if _, err := io.ReadFull(br, make([]byte, len(payload))); err != nil {
			t.Fatal(err)
		}
		c.Close()
		ev := h.events.next(t)
		if ev.BytesUp != 1000 || ev.BytesDown != 1000 || ev.Rule != "allowed.test:"+strconv.Itoa(echo.port()) {
			t.Errorf("event %+v", ev)
		}
		j, err := json.Marshal(ev)
		if err != nil || !strings.Contains(string(j), `"addr":"127.0.0.1"`) || !strings.Contains(string(j), `"reason":"allowed"`) {
			t.Errorf("event JSON %s %v", j, err)
		}
	}
	h.connect("allowed.test:1")
	ev := h.events.next(t)
	if ev.Reason != ReasonPortNotListed {
		t.Errorf("event %+v", ev)
	}
	if j, _ := json.Marshal(ev); strings.Contains(string(j), `"addr"`) || strings.Contains(string(j), `"end"`) {
		t.Errorf("refusal JSON %s has an addr or end", j)
	}
	// A client that goes away before asking for anything is no decision.
	h.dialProxy().Close()
	h.events.none(t, 200*time.Millisecond)
	st := h.proxy.Stats()
	if st.Conns != 4 || st.Allowed != 2 || st.Refused != 1 || st.BytesUp != 2000 || st.BytesDown != 2000 {
		t.Errorf("stats %+v", st)
	}
}

func TestShutdown(t *testing.T) {
	echo := newEchoServer(t)
	h := newHarness(t, []string{"allowed.test", "127.0.0.1"}, map[string]string{"allowed.test": "127.0.0.1"})
	_, br, code, _ := h.connect(fmt.Sprintf("allowed.test:%d", echo.port()))
	if code != 200 {
		t.Fatal(code)
	}
	idle := h.dialProxy() // sent nothing yet
	// A forwarded request whose destination never answers.
	mute, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer mute.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := mute.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	waiting := h.dialProxy()
	fmt.Fprintf(waiting, "GET http://allowed.test:%d/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n", mute.Addr().(*net.TCPAddr).Port)
	select {
	case c := <-accepted:
		defer c.Close()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := http.ReadRequest(bufio.NewReader(c)); err != nil {
			t.Fatalf("mute server: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the request did not reach the mute server")
	}
	h.stop()
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("tunnel after shutdown: %v", err)
	}
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("idle connection still open after shutdown")
	}
	for range 2 {
		if ev := h.events.next(t); !ev.Allowed || ev.End != EndShutdown {
			t.Errorf("event %+v", ev)
		}
	}
	if _, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
		t.Error("listener still open after shutdown")
	}
}

func TestNewValidates(t *testing.T) {
	pol, _ := ParsePolicy(nil)
	for _, cfg := range []Config{
		{},
		{Policy: pol, Limits: Limits{MaxConns: -1}},
		{Policy: pol, Limits: Limits{IdleTimeout: -time.Second}},
		{Policy: pol, Limits: Limits{MaxConns: maxMaxConns + 1}},
		{Policy: pol, Limits: Limits{MaxHeaderBytes: inspectBufferSize + 1}},
		{Policy: pol, Limits: Limits{BandwidthBytesPerSec: -1}},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
	p, err := New(Config{Policy: pol})
	if err != nil {
		t.Fatal(err)
	}
	if l := p.limits; l.MaxConns != DefaultMaxConns || l.IdleTimeout != DefaultIdleTimeout || l.HandshakeTimeout != DefaultHandshakeTimeout ||
		l.DialTimeout != DefaultDialTimeout || l.MaxHeaderBytes != DefaultMaxHeaderBytes || p.Limits().BandwidthBytesPerSec != 0 {
		t.Errorf("defaults %+v", l)
	}
}
