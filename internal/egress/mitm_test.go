package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// The canary: a secret value that must reach the test server's request
// headers and nothing else (no event, no error, no answer to the
// sandbox).
const canary = "canary-7f3c9d1e-not-for-the-sandbox"

// headerLog records the headers each request a test server got carried.
type headerLog struct {
	mu   sync.Mutex
	reqs []http.Header
	prot []string
}

func (l *headerLog) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l.mu.Lock()
		l.reqs = append(l.reqs, r.Header.Clone())
		l.prot = append(l.prot, r.Proto)
		l.mu.Unlock()
		io.Copy(io.Discard, r.Body)
		fmt.Fprintf(w, "ok %s", r.URL.Path)
	})
}

func (l *headerLog) get() ([]http.Header, []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]http.Header(nil), l.reqs...), append([]string(nil), l.prot...)
}

// reveals counts Reveal calls; a test's store holds CANARY only.
type revealer struct {
	mu    sync.Mutex
	calls int
}

func (rv *revealer) reveal(ctx context.Context, name string) (secrets.Value, error) {
	rv.mu.Lock()
	rv.calls++
	rv.mu.Unlock()
	if name != "CANARY" {
		return secrets.Value{}, fmt.Errorf("secret %s: %w", name, errdefs.ErrNotFound)
	}
	return secrets.NewValue([]byte(canary)), nil
}

func (rv *revealer) count() int {
	rv.mu.Lock()
	defer rv.mu.Unlock()
	return rv.calls
}

// withCredentials sets up interception with a fresh CA, roots and the
// credentials.
func withCredentials(t testing.TB, ca *CA, roots *x509.CertPool, rv *revealer, creds ...Credential) harnessOpt {
	cs, err := ParseCredentials(creds)
	if err != nil {
		t.Fatal(err)
	}
	return func(c *Config) {
		c.Intercept = &Interception{CA: ca, Roots: roots, Reveal: rv.reveal}
		c.Credentials = cs
	}
}

func newTestCA(t testing.TB) *CA {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// serverRoots is a pool holding an httptest TLS server's certificate
// (valid for example.com and 127.0.0.1).
func serverRoots(srv *httptest.Server) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	return pool
}

// sandboxClient is an HTTP client through the proxy that trusts only
// roots, keeping its connections alive.
func sandboxClient(h *harness, roots *x509.CertPool) (*http.Client, *http.Transport) {
	tr := &http.Transport{
		Proxy:             http.ProxyURL(&url.URL{Scheme: "http", Host: h.addr}),
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: true, // it offers h2: the proxy must pick http/1.1
	}
	h.t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}, tr
}

func caPool(ca *CA) *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Certificate())
	return pool
}

func get(t *testing.T, c *http.Client, u string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, u, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(body)
}

// noCanary fails if the canary shows in any event.
func noCanary(t *testing.T, evs ...Event) {
	t.Helper()
	for _, ev := range evs {
		b, _ := json.Marshal(ev)
		if strings.Contains(string(b)+fmt.Sprintf("%+v", ev), canary) {
			t.Errorf("the canary is in an event: %s", b)
		}
	}
}

func TestCredentialHTTPS(t *testing.T) {
	var log headerLog
	srv := httptest.NewUnstartedServer(log.handler())
	srv.EnableHTTP2 = true // the proxy must still speak HTTP/1.1 to it
	srv.StartTLS()
	defer srv.Close()
	port := serverPort(t, srv)
	ca := newTestCA(t)
	rv := &revealer{}
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, serverRoots(srv), rv, Credential{Host: "example.com", Header: "authorization", Secret: "CANARY", Format: "Bearer {secret}"}))
	if rv.count() != 0 {
		t.Fatalf("secret revealed %d times before any request", rv.count())
	}

	c, tr := sandboxClient(h, caPool(ca))
	base := fmt.Sprintf("https://example.com:%d", port)
	// The sandbox's own Authorization is replaced, not doubled.
	for i, path := range []string{"/a", "/b", "/c"} {
		resp, body := get(t, c, base+path, map[string]string{"Authorization": "Bearer sandbox-own", "X-Other": "kept"})
		if resp.StatusCode != 200 || body != "ok "+path {
			t.Fatalf("request %d: %d %q", i, resp.StatusCode, body)
		}
		if resp.Proto != "HTTP/1.1" || resp.TLS == nil || resp.TLS.NegotiatedProtocol != "http/1.1" {
			t.Errorf("request %d: proto %s, ALPN %q; want HTTP/1.1 over http/1.1", i, resp.Proto, resp.TLS.NegotiatedProtocol)
		}
		if got := resp.TLS.PeerCertificates[0]; got.Issuer.CommonName != ca.Certificate().Subject.CommonName {
			t.Errorf("request %d: the sandbox saw a certificate issued by %q, not the egress CA", i, got.Issuer.CommonName)
		}
		if strings.Contains(body, canary) {
			t.Errorf("the canary reached the sandbox")
		}
	}
	hdrs, protos := log.get()
	if len(hdrs) != 3 {
		t.Fatalf("server got %d requests, want 3", len(hdrs))
	}
	for i, hd := range hdrs {
		if got := hd.Values("Authorization"); len(got) != 1 || got[0] != "Bearer "+canary {
			t.Errorf("request %d: Authorization %q, want the credential only", i, got)
		}
		if hd.Get("X-Other") != "kept" {
			t.Errorf("request %d: other headers lost: %v", i, hd)
		}
		if protos[i] != "HTTP/1.1" {
			t.Errorf("request %d reached the server as %s, want HTTP/1.1", i, protos[i])
		}
	}
	if rv.count() != 3 {
		t.Errorf("secret revealed %d times, want once per request (3)", rv.count())
	}
	tr.CloseIdleConnections()
	ev := h.events.next(t)
	if !ev.Allowed || ev.Protocol != ProtoConnect || ev.Credential != "CANARY" || ev.BytesUp == 0 || ev.BytesDown == 0 {
		t.Errorf("event %+v: want one allowed CONNECT (kept alive for three requests) with credential CANARY and bytes", ev)
	}
	h.events.none(t, 100*time.Millisecond)
	noCanary(t, ev)
}

func TestCredentialOnlyForItsDestination(t *testing.T) {
	var withLog, withoutLog headerLog
	srvWith := httptest.NewTLSServer(withLog.handler())
	defer srvWith.Close()
	srvWithout := httptest.NewTLSServer(withoutLog.handler())
	defer srvWithout.Close()
	// Both servers are example.com; the credential is for one port.
	ca := newTestCA(t)
	roots := serverRoots(srvWith)
	roots.AddCert(srvWithout.Certificate())
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, roots, &revealer{}, Credential{Host: "example.com", Port: uint16(serverPort(t, srvWith)), Header: "X-Api-Key", Secret: "CANARY"}))

	// The other port is tunnelled untouched: the sandbox sees the real
	// server's certificate (it trusts only that one) and no header is
	// added.
	c, _ := sandboxClient(h, serverRoots(srvWithout))
	resp, _ := get(t, c, fmt.Sprintf("https://example.com:%d/", serverPort(t, srvWithout)), nil)
	if resp.StatusCode != 200 {
		t.Fatalf("untouched tunnel: %d", resp.StatusCode)
	}
	if !resp.TLS.PeerCertificates[0].Equal(srvWithout.Certificate()) {
		t.Error("the tunnel without a credential was intercepted")
	}
	c2, _ := sandboxClient(h, caPool(ca))
	if resp, _ := get(t, c2, fmt.Sprintf("https://example.com:%d/", serverPort(t, srvWith)), nil); resp.StatusCode != 200 {
		t.Fatalf("credential tunnel: %d", resp.StatusCode)
	}
	if hd, _ := withoutLog.get(); len(hd) != 1 || hd[0].Get("X-Api-Key") != "" {
		t.Errorf("server without credential got %v", hd)
	}
	if hd, _ := withLog.get(); len(hd) != 1 || hd[0].Get("X-Api-Key") != canary {
		t.Errorf("server with credential got %v", hd)
	}
}

func TestCredentialPlainHTTP(t *testing.T) {
	var log headerLog
	srv := httptest.NewServer(log.handler())
	defer srv.Close()
	port := serverPort(t, srv)
	h := newHarness(t, []string{"api.test", "other.test", "127.0.0.1"}, map[string]string{"api.test": "127.0.0.1", "other.test": "127.0.0.1"},
		withCredentials(t, newTestCA(t), nil, &revealer{}, Credential{Host: "api.test", Header: "Authorization", Secret: "CANARY", Format: "Token {secret}"}))
	c := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: h.addr})}, Timeout: 10 * time.Second}
	defer c.CloseIdleConnections()
	for _, host := range []string{"api.test", "other.test", "api.test"} {
		if resp, _ := get(t, c, fmt.Sprintf("http://%s:%d/", host, port), map[string]string{"Authorization": "mine"}); resp.StatusCode != 200 {
			t.Fatalf("%s: %d", host, resp.StatusCode)
		}
	}
	hdrs, _ := log.get()
	want := []string{"Token " + canary, "mine", "Token " + canary}
	for i, hd := range hdrs {
		if got := hd.Values("Authorization"); len(got) != 1 || got[0] != want[i] {
			t.Errorf("request %d: Authorization %q, want %q", i, got, want[i])
		}
	}
	for i, wantCred := range []string{"CANARY", "", "CANARY"} {
		ev := h.events.next(t)
		if ev.Protocol != ProtoHTTP || !ev.Allowed || ev.Credential != wantCred {
			t.Errorf("event %d: %+v, want credential %q", i, ev, wantCred)
		}
		noCanary(t, ev)
	}
}

func TestCredentialUpstreamCertVerified(t *testing.T) {
	var log headerLog
	srv := httptest.NewTLSServer(log.handler())
	defer srv.Close()
	ca := newTestCA(t)
	// The proxy's roots do not hold the server's certificate (an
	// impostor at the destination's address).
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, caPool(newTestCA(t)), &revealer{}, Credential{Host: "example.com", Header: "Authorization", Secret: "CANARY"}))
	c, _ := sandboxClient(h, caPool(ca))
	resp, body := get(t, c, fmt.Sprintf("https://example.com:%d/", serverPort(t, srv)), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "did not verify") {
		t.Errorf("got %d %q, want 502 naming the certificate", resp.StatusCode, body)
	}
	if hd, _ := log.get(); len(hd) != 0 {
		t.Errorf("the impostor got %d requests", len(hd))
	}
	ev := h.events.next(t)
	if ev.Allowed || ev.Reason != ReasonUpstreamTLS || !strings.Contains(ev.Detail, "certificate") {
		t.Errorf("event %+v, want refused %s with the verification error", ev, ReasonUpstreamTLS)
	}
}

func TestCredentialALPN(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := newTestCA(t)
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, serverRoots(srv), &revealer{}, Credential{Host: "example.com", Header: "Authorization", Secret: "CANARY"}))
	target := fmt.Sprintf("example.com:%d", serverPort(t, srv))
	for _, tc := range []struct {
		offer []string
		want  string // "" : refused
	}{
		{[]string{"h2"}, ""},
		{[]string{"h2", "http/1.1"}, "http/1.1"},
		{nil, ""},
	} {
		c, _, code, _ := h.connect(target)
		if code != 200 {
			t.Fatalf("CONNECT: %d", code)
		}
		tc2 := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: caPool(ca), NextProtos: tc.offer})
		err := tc2.Handshake()
		switch {
		case tc.want == "" && tc.offer != nil && err == nil:
			t.Errorf("offer %v: handshake succeeded with %q; want HTTP/2 refused", tc.offer, tc2.ConnectionState().NegotiatedProtocol)
		case tc.want != "" && err != nil:
			t.Errorf("offer %v: %v", tc.offer, err)
		case tc.want != "" && tc2.ConnectionState().NegotiatedProtocol != tc.want:
			t.Errorf("offer %v: negotiated %q", tc.offer, tc2.ConnectionState().NegotiatedProtocol)
		case tc.offer == nil && err != nil:
			t.Errorf("no ALPN: %v (HTTP/1.1 without ALPN must work)", err)
		}
		c.Close()
	}
}

func TestCredentialSNIMismatch(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := newTestCA(t)
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, serverRoots(srv), &revealer{}, Credential{Host: "example.com", Header: "Authorization", Secret: "CANARY"}))
	c, _, code, _ := h.connect(fmt.Sprintf("example.com:%d", serverPort(t, srv)))
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	if err := tls.Client(c, &tls.Config{ServerName: "elsewhere.test", InsecureSkipVerify: true}).Handshake(); err == nil {
		t.Error("a ClientHello for another name got a certificate")
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonSNIMismatch {
		t.Errorf("event %+v, want %s", ev, ReasonSNIMismatch)
	}
	if n := ca.cachedLeaves(); n != 0 {
		t.Errorf("%d leaves minted for a refused name", n)
	}
}

func TestCredentialUnavailable(t *testing.T) {
	var log headerLog
	srv := httptest.NewTLSServer(log.handler())
	defer srv.Close()
	ca := newTestCA(t)
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, serverRoots(srv), &revealer{}, Credential{Host: "example.com", Header: "Authorization", Secret: "GONE"}))
	c, _ := sandboxClient(h, caPool(ca))
	resp, body := get(t, c, fmt.Sprintf("https://example.com:%d/", serverPort(t, srv)), nil)
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "credential") {
		t.Errorf("got %d %q, want 502 about the credential", resp.StatusCode, body)
	}
	if hd, _ := log.get(); len(hd) != 0 {
		t.Errorf("a request without its credential went out: %v", hd)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonCredential || !strings.Contains(ev.Detail, "GONE") {
		t.Errorf("event %+v", ev)
	}
}

func TestCredentialNotHTTP(t *testing.T) {
	srv := httptest.NewTLSServer(http.NotFoundHandler())
	defer srv.Close()
	ca := newTestCA(t)
	h := newHarness(t, []string{"example.com", "127.0.0.1"}, map[string]string{"example.com": "127.0.0.1"},
		withCredentials(t, ca, serverRoots(srv), &revealer{}, Credential{Host: "example.com", Header: "Authorization", Secret: "CANARY"}))
	c, _, code, _ := h.connect(fmt.Sprintf("example.com:%d", serverPort(t, srv)))
	if code != 200 {
		t.Fatalf("CONNECT: %d", code)
	}
	tc := tls.Client(c, &tls.Config{ServerName: "example.com", RootCAs: caPool(ca)})
	io.WriteString(tc, "\x00\x01 not http at all\r\n\r\n")
	code, _ = readHead(t, bufio.NewReader(tc))
	if code != http.StatusBadRequest {
		t.Errorf("status %d, want 400", code)
	}
	if ev := h.events.next(t); ev.Allowed || ev.Reason != ReasonNotHTTP {
		t.Errorf("event %+v", ev)
	}
}

func TestSetCredentialsNeedsInterception(t *testing.T) {
	h := newHarness(t, []string{"example.com"}, nil)
	cs, err := ParseCredentials([]Credential{{Host: "example.com", Header: "Authorization", Secret: "S"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.proxy.SetCredentials(cs); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("got %v, want ErrFailedPrecondition", err)
	}
	if err := h.proxy.SetCredentials(nil); err != nil {
		t.Errorf("no credentials: %v", err)
	}
	if _, err := New(Config{Policy: h.proxy.Policy(), Intercept: &Interception{}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("interception without CA: %v", err)
	}
}

func TestParseCredentials(t *testing.T) {
	ok := Credential{Host: "API.Example.com.", Header: "x-api-key", Secret: "K", Format: "Key {secret}"}
	cs, err := ParseCredentials([]Credential{ok})
	if err != nil {
		t.Fatal(err)
	}
	if got := cs.List()[0]; got.Host != "api.example.com" || got.Header != "X-Api-Key" {
		t.Errorf("canonical %+v", got)
	}
	if len(cs.For("api.example.com", 443)) != 1 || cs.For("example.com", 443) != nil {
		t.Error("For")
	}
	bad := []struct {
		name string
		c    Credential
	}{
		{"wildcard", Credential{Host: "*.example.com", Header: "A", Secret: "K"}},
		{"address", Credential{Host: "192.0.2.1", Header: "A", Secret: "K"}},
		{"empty host", Credential{Header: "A", Secret: "K"}},
		{"header space", Credential{Host: "a.test", Header: "X Key", Secret: "K"}},
		{"header host", Credential{Host: "a.test", Header: "host", Secret: "K"}},
		{"header proxy", Credential{Host: "a.test", Header: "Proxy-Authorization", Secret: "K"}},
		{"header length", Credential{Host: "a.test", Header: "Content-Length", Secret: "K"}},
		{"no secret", Credential{Host: "a.test", Header: "A"}},
		{"bad secret", Credential{Host: "a.test", Header: "A", Secret: "1 x"}},
		{"no placeholder", Credential{Host: "a.test", Header: "A", Secret: "K", Format: "Bearer"}},
		{"two placeholders", Credential{Host: "a.test", Header: "A", Secret: "K", Format: "{secret}{secret}"}},
		{"crlf", Credential{Host: "a.test", Header: "A", Secret: "K", Format: "{secret}\r\nX: y"}},
		{"long format", Credential{Host: "a.test", Header: "A", Secret: "K", Format: "{secret}" + strings.Repeat("x", MaxFormatLen)}},
	}
	for _, tc := range bad {
		if _, err := ParseCredentials([]Credential{tc.c}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	dup := []Credential{{Host: "a.test", Header: "A", Secret: "K"}, {Host: "a.test", Port: 443, Header: "a", Secret: "L"}}
	if _, err := ParseCredentials(dup); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("duplicate header: %v", err)
	}
	if _, err := ParseCredentials(make([]Credential, MaxCredentials+1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("too many: %v", err)
	}
}
