package egress

import (
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"testing"
	"time"
)

// httpsSize is what BenchmarkHTTPSDownload moves per op.
const httpsSize = 16 << 20

// bulkTLSServer serves GET /bytes/N: N bytes (at most httpsSize) over
// TLS, valid for example.com and 127.0.0.1.
func bulkTLSServer(b *testing.B) *httptest.Server {
	chunk := make([]byte, 256<<10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Path[len("/bytes/"):])
		if err != nil || n < 0 || n > httpsSize {
			http.Error(w, "bad size", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(n))
		for n > 0 {
			k, err := w.Write(chunk[:min(n, len(chunk))])
			if err != nil {
				return
			}
			n -= k
		}
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkHTTPSDownload compares, side by side, HTTPS GETs from a
// loopback server made directly, through a CONNECT tunnel of the proxy
// (the proxy sees only TLS records), and intercepted: the destination
// has an edge credential, so the proxy terminates the sandbox's TLS with
// its CA, adds the header and opens its own verified TLS to the server.
// bulk moves 16 MiB per op on a kept-alive connection (MB/s); small is
// one 100-byte GET per op on a kept-alive connection (p50-ns); handshake
// is a small GET on a fresh connection each op (p50-ns: TCP, CONNECT,
// both TLS handshakes).
//
//	CGO_ENABLED=0 go test ./internal/egress -run '^$' -bench HTTPSDownload -count 3
func BenchmarkHTTPSDownload(b *testing.B) {
	srv := bulkTLSServer(b)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	roots := serverRoots(srv)
	ca := newTestCA(b)
	names := map[string]string{"example.com": "127.0.0.1"}
	// Events are dropped: the harness's queue would fill.
	quiet := func(c *Config) { c.OnEvent = func(Event) {} }
	tunnel := newHarness(b, []string{"example.com", "127.0.0.1"}, names, quiet)
	intercept := newHarness(b, []string{"example.com", "127.0.0.1"}, names,
		withCredentials(b, ca, roots, &revealer{}, Credential{Host: "example.com", Header: "Authorization", Secret: "CANARY", Format: "Bearer {secret}"}), quiet)

	clients := []struct {
		name string
		tr   func(keepAlive bool) *http.Transport
	}{
		{"direct", func(keep bool) *http.Transport {
			// example.com resolves to the server only through the
			// proxy; the direct client dials its address.
			return &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "example.com"}, DisableKeepAlives: !keep}
		}},
		{"tunnel", func(keep bool) *http.Transport {
			_, tr := sandboxClient(tunnel, roots)
			tr.DisableKeepAlives = !keep
			return tr
		}},
		{"intercept", func(keep bool) *http.Transport {
			_, tr := sandboxClient(intercept, caPool(ca))
			tr.DisableKeepAlives = !keep
			return tr
		}},
	}
	url := func(name string, n int) string {
		host := fmt.Sprintf("example.com:%d", port)
		if name == "direct" {
			host = fmt.Sprintf("127.0.0.1:%d", port)
		}
		return fmt.Sprintf("https://%s/bytes/%d", host, n)
	}
	fetch := func(b *testing.B, c *http.Client, u string, want int) {
		resp, err := c.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || n != int64(want) || resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %d bytes, status %d, %v", u, n, resp.StatusCode, err)
		}
	}
	p50 := func(b *testing.B, c *http.Client, u string) {
		durs := make([]time.Duration, 0, b.N)
		for b.Loop() {
			t0 := time.Now()
			fetch(b, c, u, 100)
			durs = append(durs, time.Since(t0))
		}
		slices.Sort(durs)
		b.ReportMetric(float64(durs[len(durs)/2].Nanoseconds()), "p50-ns")
	}
	for _, cl := range clients {
		b.Run("bulk/"+cl.name, func(b *testing.B) {
			tr := cl.tr(true)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			fetch(b, c, url(cl.name, 100), 100) // the connection, once
			b.SetBytes(httpsSize)
			for b.Loop() {
				fetch(b, c, url(cl.name, httpsSize), httpsSize)
			}
		})
		b.Run("small/"+cl.name, func(b *testing.B) {
			tr := cl.tr(true)
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			fetch(b, c, url(cl.name, 100), 100)
			p50(b, c, url(cl.name, 100))
		})
		b.Run("handshake/"+cl.name, func(b *testing.B) {
			tr := cl.tr(false)
			defer tr.CloseIdleConnections()
			p50(b, &http.Client{Transport: tr}, url(cl.name, 100))
		})
	}
}
