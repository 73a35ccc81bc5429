package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/airlock-sandbox/airlock/client"
)

// portServer is a web server for a sandbox, standard library only: GET
// and POST answer what they received as JSON; a WebSocket upgrade on any
// path echoes every text or binary message.
const portServer = `
import sys, json, base64, hashlib, struct
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def info(self, body=b""):
        h = self.headers
        return json.dumps({"method": self.command, "path": self.path, "host": h.get("Host"),
            "auth": h.get("Authorization"), "cookie": h.get("Cookie"), "xff": h.get("X-Forwarded-For"),
            "prefix": h.get("X-Forwarded-Prefix"), "body": body.decode()}).encode()
    def reply(self, body):
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.headers.get("Upgrade", "").lower() == "websocket":
            return self.ws()
        self.reply(self.info())
    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        self.reply(self.info(self.rfile.read(n)))
    def ws(self):
        acc = base64.b64encode(hashlib.sha1((self.headers["Sec-WebSocket-Key"] + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", acc)
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        r, w = self.rfile, self.wfile
        while True:
            h = r.read(2)
            if len(h) < 2:
                return
            op, n = h[0] & 15, h[1] & 127
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if h[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(r.read(n)))
            if op == 8:
                w.write(bytes([0x88, len(data)]) + data); w.flush(); return
            if op in (1, 2):
                hdr = bytes([0x80 | op])
                if len(data) < 126: hdr += bytes([len(data)])
                elif len(data) < 65536: hdr += bytes([126]) + struct.pack(">H", len(data))
                else: hdr += bytes([127]) + struct.pack(">Q", len(data))
                w.write(hdr + data); w.flush()
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
`

// portInfo is what portServer answers.
type portInfo struct {
	Method, Path, Host, Auth, Cookie, Xff, Prefix, Body string
}

// TestPorts: a web server and a WebSocket echo server started in a
// sandbox answer through the port proxy, with the key and with a signed
// URL; another tenant's key gets 404; a closed port 502; a signed URL
// expires; a tampered one is refused.
func TestPorts(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	defer func() {
		if err := d.C.DeleteSandbox(context.Background(), sb.ID); err != nil {
			t.Errorf("delete: %v", err)
		}
	}()
	if _, err := d.C.WriteFile(ctx, sb.ID, "/tmp/srv.py", strings.NewReader(portServer)); err != nil {
		t.Fatal(err)
	}
	const port = 8000
	mustExec(t, d, sb.ID, client.ExecRequest{Command: "setsid python3 /tmp/srv.py 8000 </dev/null >/tmp/srv.log 2>&1 &"})

	get := func(t *testing.T, c *client.Client, path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, path, nil)
		resp, err := c.Port(sb.ID, port, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	decode := func(t *testing.T, resp *http.Response) portInfo {
		t.Helper()
		defer resp.Body.Close()
		var pi portInfo
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 || json.Unmarshal(b, &pi) != nil {
			t.Fatalf("status %d: %s", resp.StatusCode, b)
		}
		return pi
	}
	// The server takes a moment to listen: until then, 502.
	if !waitFor(20*time.Second, func() bool {
		resp := get(t, d.C, "/")
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		res := mustExec(t, d, sb.ID, client.ExecRequest{Command: "cat /tmp/srv.log"})
		t.Fatalf("the server never answered through the proxy; its log: %s", res.Stdout)
	}

	t.Run("http", func(t *testing.T) {
		resp := get(t, d.C, "/a/b%2Fc?x=1&y=two")
		// The path route's pages run in an opaque origin, not the
		// daemon's that every sandbox's path route shares.
		if csp := resp.Header.Values("Content-Security-Policy"); !slices.ContainsFunc(csp, func(v string) bool {
			return strings.HasPrefix(v, "sandbox ") && !strings.Contains(v, "allow-same-origin")
		}) {
			t.Errorf("Content-Security-Policy = %q, want an opaque-origin sandbox", csp)
		}
		pi := decode(t, resp)
		want := portInfo{Method: "GET", Path: "/a/b%2Fc?x=1&y=two", Host: "localhost:8000",
			Prefix: "/v1/sandboxes/" + sb.ID + "/ports/8000", Xff: "127.0.0.1"}
		if pi != want {
			t.Fatalf("the server saw %+v, want %+v (the API key must not reach it)", pi, want)
		}
		body := strings.Repeat("payload ", 64<<10) // 512 KiB, streamed both ways
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "/echo", strings.NewReader(body))
		resp, err := d.C.Port(sb.ID, port, req)
		if err != nil {
			t.Fatal(err)
		}
		if pi := decode(t, resp); pi.Method != "POST" || pi.Body != body {
			t.Fatalf("POST: method %q, body of %d bytes, want %d", pi.Method, len(pi.Body), len(body))
		}
	})

	t.Run("websocket", func(t *testing.T) {
		u, _ := d.C.PortURL(sb.ID, port)
		conn, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(u, "http")+"ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + d.Key}}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.CloseNow()
		conn.SetReadLimit(1 << 20)
		for _, msg := range []string{"hello", strings.Repeat("x", 100<<10)} {
			if err := conn.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
				t.Fatal(err)
			}
			_, got, err := conn.Read(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != msg {
				t.Fatalf("echo of %d bytes came back as %d", len(msg), len(got))
			}
		}
		if err := conn.Close(websocket.StatusNormalClosure, ""); err != nil {
			t.Fatalf("close: %v", err)
		}
	})

	t.Run("other tenant", func(t *testing.T) {
		ten, err := d.C.CreateTenant(ctx, client.CreateTenantRequest{Name: "other"})
		if err != nil {
			t.Fatal(err)
		}
		other, err := client.New(d.URL, ten.AdminKey.Secret)
		if err != nil {
			t.Fatal(err)
		}
		resp := get(t, other, "/")
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 404 || !strings.Contains(string(b), "not_found") {
			t.Fatalf("another tenant's key: %d %s, want 404", resp.StatusCode, b)
		}
		if _, err := other.SignPortURL(ctx, sb.ID, port, 0); !errors.Is(err, client.ErrNotFound) {
			t.Fatalf("another tenant signs a URL: %v, want not found", err)
		}
		if r := raw(t, d, "GET", "/v1/sandboxes/"+sb.ID+"/ports/8000/", "", ""); r.Status != 401 {
			t.Fatalf("no key: %d, want 401", r.Status)
		}
	})

	t.Run("closed port", func(t *testing.T) {
		r := raw(t, d, "GET", "/v1/sandboxes/"+sb.ID+"/ports/8001/", d.Key, "")
		if r.Status != 502 || r.Code != "bad_gateway" || !strings.Contains(string(r.Body), "nothing listens on port 8001") {
			t.Fatalf("closed port: %d %s, want 502 bad_gateway", r.Status, r.Body)
		}
		for _, p := range []string{"0", "65536", "x"} {
			if r := raw(t, d, "GET", "/v1/sandboxes/"+sb.ID+"/ports/"+p+"/", d.Key, ""); r.Status != 400 {
				t.Errorf("port %s: %d, want 400", p, r.Status)
			}
		}
	})

	t.Run("signed url", func(t *testing.T) {
		su, err := d.C.SignPortURL(ctx, sb.ID, port, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		// A browser: no key, a cookie jar. The page's next request
		// carries the cookie instead of the token.
		jar, _ := cookiejar.New(nil)
		browser := &http.Client{Jar: jar}
		resp, err := browser.Get(d.C.Absolute(su))
		if err != nil {
			t.Fatal(err)
		}
		if pi := decode(t, resp); pi.Path != "/" || strings.Contains(pi.Cookie, "airlock") || pi.Auth != "" {
			t.Fatalf("signed URL: the server saw %+v (the token must not reach it)", pi)
		}
		base, _ := d.C.PortURL(sb.ID, port)
		resp, err = browser.Get(base + "next.js")
		if err != nil {
			t.Fatal(err)
		}
		if pi := decode(t, resp); pi.Path != "/next.js" {
			t.Fatalf("the cookie's request: %+v", pi)
		}
		// Another port of the same sandbox is not reachable with it.
		r := raw(t, d, "GET", strings.Replace(su.Path, "/ports/8000/", "/ports/8001/", 1), "", "")
		if r.Status != 401 {
			t.Fatalf("the token on another port: %d, want 401", r.Status)
		}
		// A tampered token: one character of its signature changed.
		tok := su.Token
		last := tok[len(tok)-2]
		flip := byte('A')
		if last == 'A' {
			flip = 'B'
		}
		tampered := strings.Replace(su.Path, tok, tok[:len(tok)-2]+string(flip)+tok[len(tok)-1:], 1)
		if r := raw(t, d, "GET", tampered, "", ""); r.Status != 401 {
			t.Fatalf("a tampered token: %d, want 401", r.Status)
		}
		time.Sleep(time.Until(su.ExpiresAt) + 100*time.Millisecond)
		if r := raw(t, d, "GET", su.Path, "", ""); r.Status != 401 || r.Code != "unauthenticated" {
			t.Fatalf("an expired token: %d %s, want 401", r.Status, r.Body)
		}
		resp, err = browser.Get(base)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 401 {
			t.Fatalf("an expired cookie: %d, want 401", resp.StatusCode)
		}
	})
}
