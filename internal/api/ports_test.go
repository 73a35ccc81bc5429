package api

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

func TestPortSigner(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := newPortSigner()
	s.now = func() time.Time { return now }
	cl := portClaim{keyID: "k1", tenantID: "t1", sandboxID: "sb-aaaaaaaaaaaaaaaa", port: 8000, expires: now.Add(time.Minute)}
	tok := s.sign(cl)
	got, err := s.verify(tok, cl.sandboxID, 8000)
	if err != nil || got.keyID != "k1" || got.tenantID != "t1" || !got.expires.Equal(cl.expires) {
		t.Fatalf("verify = %+v, %v", got, err)
	}
	other := newPortSigner()
	other.now = s.now
	bad := map[string]func() error{
		"other sandbox": func() error { _, err := s.verify(tok, "sb-bbbbbbbbbbbbbbbb", 8000); return err },
		"other port":    func() error { _, err := s.verify(tok, cl.sandboxID, 8001); return err },
		"other daemon":  func() error { _, err := other.verify(tok, cl.sandboxID, 8000); return err },
		"a later port in the payload": func() error {
			c2 := cl
			c2.port = 8001
			forged := strings.SplitN(s.sign(c2), ".", 2)[0] + "." + strings.SplitN(tok, ".", 2)[1]
			_, err := s.verify(forged, cl.sandboxID, 8001)
			return err
		},
		"expired": func() error {
			s2 := *s
			s2.now = func() time.Time { return cl.expires }
			_, err := s2.verify(tok, cl.sandboxID, 8000)
			return err
		},
		"truncated": func() error { _, err := s.verify(tok[:len(tok)-1], cl.sandboxID, 8000); return err },
		"no prefix": func() error {
			_, err := s.verify(strings.TrimPrefix(tok, portTokenPrefix), cl.sandboxID, 8000)
			return err
		},
		"empty": func() error { _, err := s.verify("", cl.sandboxID, 8000); return err },
		"huge": func() error {
			_, err := s.verify(tok+strings.Repeat("a", maxPortToken), cl.sandboxID, 8000)
			return err
		},
	}
	for name, f := range bad {
		if err := f(); err != errPortToken {
			t.Errorf("%s: err = %v, want the invalid token error", name, err)
		}
	}
}

func TestPortHost(t *testing.T) {
	const id = "sb-aaaaaaaaaaaaaaaa"
	for _, tc := range []struct {
		host, domain string
		port         int
		ok           bool
	}{
		{"8000-" + id + ".ports.example", "ports.example", 8000, true},
		{"8000-" + id + ".ports.example:8443", "ports.example", 8000, true},
		{"8000-" + strings.ToUpper(id) + ".Ports.Example", "ports.example", 8000, true},
		{"8000-" + id + ".ports.example", "", 0, false},
		{"8000-" + id + ".other.example", "ports.example", 0, false},
		{"a.8000-" + id + ".ports.example", "ports.example", 0, false},
		{"0-" + id + ".ports.example", "ports.example", 0, false},
		{"65536-" + id + ".ports.example", "ports.example", 0, false},
		{"08000-" + id + ".ports.example", "ports.example", 0, false},
		{"8000-sb-short.ports.example", "ports.example", 0, false},
		{"ports.example", "ports.example", 0, false},
	} {
		gotID, port, ok := portHost(tc.host, tc.domain)
		if ok != tc.ok || port != tc.port || (ok && gotID != id) {
			t.Errorf("portHost(%q, %q) = %q, %d, %v", tc.host, tc.domain, gotID, port, ok)
		}
	}
}

// serveLoopback serves a handler that answers what it received, on the
// host's loopback: the fake runtime's sandbox loopback.
func serveLoopback(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s prefix=%q auth=%q", r.Method, r.URL.RequestURI(), r.Header.Get("X-Forwarded-Prefix"), r.Header.Get("Authorization"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// TestPortProxyHostRouting: with a wildcard domain, {port}-{id}.{domain}
// reaches the port, whatever the path, with the key; without the key it
// is 401, and another host name is the API.
func TestPortProxyHostRouting(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t, func(c *Config) { c.PortDomain = "Ports.Test." })
	sb := e.sandbox(ctx)
	port := serveLoopback(t)
	host := strconv.Itoa(port) + "-" + sb.ID + ".ports.test"
	send := func(host, path, key string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL+path, nil)
		req.Host = host
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := send(host, "/v1/sandboxes?x=1", keyA); code != 200 || body != `GET /v1/sandboxes?x=1 prefix="" auth=""` {
		t.Fatalf("by host name: %d %q", code, body)
	}
	if code, _ := send(host, "/", ""); code != 401 {
		t.Fatalf("by host name without the key: %d, want 401", code)
	}
	if code, body := send("127.0.0.1", "/v1/sandboxes", keyA); code != 200 || !strings.Contains(body, sb.ID) {
		t.Fatalf("the API's own host: %d %q", code, body)
	}
	// The path route still works, with its prefix.
	code, body := send("127.0.0.1", "/v1/sandboxes/"+sb.ID+"/ports/"+strconv.Itoa(port)+"/a", keyA)
	if want := fmt.Sprintf(`GET /a prefix="/v1/sandboxes/%s/ports/%d" auth=""`, sb.ID, port); code != 200 || body != want {
		t.Fatalf("path route: %d %q, want %q", code, body, want)
	}
}

// The port proxy's overhead on one small GET: the same request sent
// straight to the server on the loopback, through the agent alone (an
// http.Transport dialling Manager.DialPort), and through the API
// (authentication, ownership, the agent stream, ReverseProxy). Run them
// in one go (p50 and p99 are reported as metrics):
//
//	CGO_ENABLED=0 go test ./internal/api -run '^$' -bench 'PortProxy' -benchtime 2000x
func BenchmarkPortProxy(b *testing.B) {
	ctx := context.Background()
	e := newTestEnv(b)
	sb := e.sandbox(ctx)
	port := serveLoopback(b)
	run := func(b *testing.B, hc *http.Client, url, key string) {
		var lat []time.Duration
		for b.Loop() {
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			if key != "" {
				req.Header.Set("Authorization", "Bearer "+key)
			}
			start := time.Now()
			resp, err := hc.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat = append(lat, time.Since(start))
			if resp.StatusCode != 200 {
				b.Fatalf("status %d", resp.StatusCode)
			}
		}
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	b.Run("direct", func(b *testing.B) {
		run(b, &http.Client{}, fmt.Sprintf("http://127.0.0.1:%d/x", port), "")
	})
	b.Run("agent", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true,
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var c *agentclient.PortConn
				c, err := e.mgr.DialPort(ctx, sb.ID, port)
				return c, err
			}}}
		run(b, hc, "http://sandbox/x", "")
	})
	b.Run("api", func(b *testing.B) {
		run(b, e.srv.Client(), e.srv.URL+"/v1/sandboxes/"+sb.ID+"/ports/"+strconv.Itoa(port)+"/x", keyA)
	})
}

// TestConfineToPath: an answer of the path route gets the opaque-origin
// policy, and the app's cookies are kept to the port's path.
func TestConfineToPath(t *testing.T) {
	const prefix = "/v1/sandboxes/sb-aaaaaaaaaaaaaaaa/ports/8080"
	h := http.Header{}
	h.Add("Content-Security-Policy", "default-src 'self'")
	h.Add("Set-Cookie", "session=abc; Path=/; Domain=example.com; HttpOnly")
	h.Add("Set-Cookie", "pref=1; Path=/app")
	h.Add("Set-Cookie", "nopath=2")
	h.Add("Set-Cookie", portTokenCookie+"=forged; Path=/v1/sandboxes/sb-bbbbbbbbbbbbbbbb/ports/8080/")
	h.Add("Set-Cookie", "=;;")
	confineToPath(h, prefix)
	if csp := h.Values("Content-Security-Policy"); len(csp) != 2 || csp[0] != "default-src 'self'" || csp[1] != pathRouteSandbox {
		t.Errorf("Content-Security-Policy = %q, want the app's and %q", csp, pathRouteSandbox)
	}
	got := h.Values("Set-Cookie")
	want := []string{
		"session=abc; Path=" + prefix + "/; HttpOnly",
		"pref=1; Path=" + prefix + "/app",
		"nopath=2; Path=" + prefix + "/",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Set-Cookie =\n%q\nwant\n%q", got, want)
	}
	if strings.Contains(pathRouteSandbox, "allow-same-origin") {
		t.Error("the path route's pages must not keep the daemon's origin")
	}
}
