package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// lockedBuffer is a bytes.Buffer safe for the concurrent writes of a
// logger.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// ptyWithToken opens the PTY of sandbox id with token and no
// Authorization header, as a browser does (from another origin), and
// returns the handshake's HTTP status.
func (e *testEnv) ptyWithToken(ctx context.Context, id, token, query string, hdr http.Header) (*websocket.Conn, int) {
	e.t.Helper()
	u := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/sandboxes/" + id + "/pty?token=" + token
	if query != "" {
		u += "&" + query
	}
	if hdr == nil {
		hdr = http.Header{}
	}
	if hdr.Get("Origin") == "" {
		hdr.Set("Origin", "https://console.example.com")
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: e.srv.Client(), HTTPHeader: hdr})
	if err != nil {
		if resp == nil {
			e.t.Fatalf("dial: %v", err)
		}
		return nil, resp.StatusCode
	}
	return conn, resp.StatusCode
}

// readUntilExit reads a PTY WebSocket until the exit frame and returns
// the terminal output and the exit frame.
func readUntilExit(t *testing.T, ctx context.Context, conn *websocket.Conn) (string, wire.PtyExit) {
	t.Helper()
	var out strings.Builder
	for {
		typ, b, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("pty read: %v (output so far %q)", err, out.String())
		}
		if typ == websocket.MessageBinary {
			out.Write(b)
			continue
		}
		var ex wire.PtyExit
		if err := json.Unmarshal(b, &ex); err != nil || ex.Type != "exit" {
			t.Fatalf("pty text frame %s", b)
		}
		return out.String(), ex
	}
}

// TestPTYToken: a token from POST .../pty/token opens the sandbox's
// terminal without the Authorization header, from another origin, once;
// the session is the minting key's, audited as such; the token is in no
// log and no audit record.
func TestPTYToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs := &lockedBuffer{}
	e := newTestEnv(t, func(c *Config) {
		c.Log = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	e.audit.take()

	tok, err := a.PTYToken(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Until(tok.ExpiresAt); d < 25*time.Second || d > DefaultPTYTokenTTL {
		t.Errorf("token expires in %v, want about %v", d, DefaultPTYTokenTTL)
	}
	if want := "/v1/sandboxes/" + sb.ID + "/pty?token=" + tok.Token; tok.URL != want {
		t.Errorf("url %q, want %q", tok.URL, want)
	}
	minted := e.audit.take()
	if len(minted) != 2 || minted[1].Action != ActionSandboxPTYToken || minted[1].Outcome != audit.OutcomeOK ||
		minted[1].KeyID != "ka" || minted[1].Target != sb.ID || minted[1].Details["expires_at"] == nil {
		t.Errorf("minting audited as %+v", minted)
	}

	conn, status := e.ptyWithToken(ctx, sb.ID, tok.Token, "cmd="+url.QueryEscape("echo via-$((6*7)); exit 3"), nil)
	if status != http.StatusSwitchingProtocols {
		t.Fatalf("PTY with the token: %d", status)
	}
	out, ex := readUntilExit(t, ctx, conn)
	conn.CloseNow()
	if !strings.Contains(out, "via-42") || ex.ExitCode != 3 {
		t.Errorf("session output %q, exit %+v", out, ex)
	}
	waitUntil(t, 5*time.Second, "the session's outcome", func() bool {
		for _, ev := range e.audit.take() {
			if ev.Action == ActionSandboxPTY && ev.Outcome == audit.OutcomeOK {
				if ev.KeyID != "ka" || ev.TenantID != tenantA || ev.Details["auth"] != "pty_token" {
					t.Errorf("session audited as %+v", ev)
				}
				return true
			}
		}
		return false
	})

	// Used: refused, however it is presented again.
	if _, status := e.ptyWithToken(ctx, sb.ID, tok.Token, "cmd=true", nil); status != http.StatusUnauthorized {
		t.Errorf("the token's second use: %d, want 401", status)
	}
	resp, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"/pty?token="+tok.Token, "", "", nil)
	if resp.StatusCode != 401 || errCode(t, body) != CodeUnauthenticated || !strings.Contains(string(body), "invalid, used or expired token") {
		t.Errorf("a used token: %d %s", resp.StatusCode, body)
	}

	// A failure that is logged (the authenticator down) with a fresh
	// token in the URL.
	tok2, err := a.PTYToken(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	e.auth.err = errors.Join(errors.New("store down"), errdefs.ErrUnavailable)
	resp, body = e.do("GET", "/v1/sandboxes/"+sb.ID+"/pty?cmd=true&token="+tok2.Token, "", "", nil)
	e.auth.err = nil
	if resp.StatusCode != 503 {
		t.Errorf("token with the authenticator down: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(logs.String(), "request failed") {
		t.Errorf("the failure was not logged; the check below proves nothing: %s", logs.String())
	}
	for _, secret := range []string{tok.Token, tok2.Token} {
		if strings.Contains(logs.String(), secret) {
			t.Errorf("a token is in the log:\n%s", logs.String())
		}
		for _, ev := range e.audit.all {
			b, _ := json.Marshal(ev)
			if strings.Contains(string(b), secret) {
				t.Errorf("a token is in the audit record %s", b)
			}
		}
	}
}

// TestPTYTokenRefusals: expired, wrong sandbox, another tenant's, a
// revoked key's, a key that lost the exec scope, with the header too, two
// tokens, a token on a route that takes none: each refused, each token
// consumed.
func TestPTYTokenRefusals(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, func(c *Config) { c.Limits.PTYTokenTTL = 300 * time.Millisecond })
	a, b := e.client(keyA), e.client(keyB)
	sb := e.sandbox(ctx)
	other := e.sandbox(ctx)
	sbB, err := b.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	mint := func(c *client.Client, id string) string {
		t.Helper()
		tok, err := c.PTYToken(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return tok.Token
	}
	refused := func(what, id, tok string, hdr http.Header, want int) {
		t.Helper()
		if _, status := e.ptyWithToken(ctx, id, tok, "cmd=true", hdr); status != want {
			t.Errorf("%s: %d, want %d", what, status, want)
		}
		// Consumed, whatever was wrong.
		if id != sb.ID {
			return
		}
		if _, status := e.ptyWithToken(ctx, sb.ID, tok, "cmd=true", nil); status != http.StatusUnauthorized {
			t.Errorf("%s: the token works after it was presented: %d", what, status)
		}
	}

	expired := mint(a, sb.ID)
	time.Sleep(400 * time.Millisecond)
	refused("expired", sb.ID, expired, nil, 401)

	refused("another sandbox of the tenant", other.ID, mint(a, sb.ID), nil, 401)
	// Tenant B cannot mint for A's sandbox, nor use its own token there.
	if _, err := b.PTYToken(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant B mints for A's sandbox: %v, want not found", err)
	}
	refused("tenant B's token on A's sandbox", sb.ID, mint(b, sbB.ID), nil, 401)

	revoked := mint(a, sb.ID)
	e.auth.revoked = map[string]bool{"ka": true}
	refused("revoked key", sb.ID, revoked, nil, 401)
	e.auth.revoked = nil

	lost := mint(a, sb.ID)
	p := e.auth.keys[keyA]
	e.auth.keys[keyA] = auth.Principal{TenantID: p.TenantID, KeyID: p.KeyID, Scopes: []auth.Scope{auth.ScopeSandboxesRead}}
	refused("the key lost the exec scope", sb.ID, lost, nil, 403)
	e.auth.keys[keyA] = p

	refused("with the Authorization header too", sb.ID, mint(a, sb.ID), http.Header{"Authorization": {"Bearer " + keyA}}, 401)
	two := mint(a, sb.ID)
	if _, status := e.ptyWithToken(ctx, sb.ID, two, "token="+mint(a, sb.ID), nil); status != 401 {
		t.Errorf("two tokens: %d, want 401", status)
	}
	refused("two tokens", sb.ID, two, nil, 401)
	for _, bad := range []string{"", "nope", strings.Repeat("a", 500), "alt_" + strings.Repeat("a", 52)} {
		refused(fmt.Sprintf("token %.10q", bad), sb.ID, bad, nil, 401)
	}

	if n := e.h.tickets.Len(); n != 0 {
		t.Errorf("%d tokens held after every one was presented", n)
	}
	// Another route does not take tokens: the header is needed.
	resp, body := e.do("GET", "/v1/sandboxes/"+sb.ID+"?token="+mint(a, sb.ID), "", "", nil)
	if resp.StatusCode != 401 {
		t.Errorf("a token on GET /v1/sandboxes/{id}: %d %s", resp.StatusCode, body)
	}
	// A stopped sandbox gets no token.
	if err := a.DeleteSandbox(ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PTYToken(ctx, other.ID); !errors.Is(err, client.ErrConflict) {
		t.Errorf("a token for a deleted sandbox: %v, want conflict", err)
	}
	// With the header, a foreign origin is still refused (the check is
	// relaxed for tokens only).
	conn, resp, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL, "http")+"/v1/sandboxes/"+sb.ID+"/pty?cmd=true",
		&websocket.DialOptions{HTTPClient: e.srv.Client(), HTTPHeader: http.Header{"Authorization": {"Bearer " + keyA}, "Origin": {"https://evil.example"}}})
	if err == nil {
		conn.CloseNow()
		t.Error("a foreign origin opened the PTY with the Authorization header")
	} else if resp == nil || resp.StatusCode != http.StatusForbidden {
		t.Errorf("a foreign origin with the header: %v", err)
	}
}

// TestPTYTokenClient: the Go client opens a session with a token
// (PTYOptions.Token) and builds the browser's URL.
func TestPTYTokenClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	tok, err := a.PTYToken(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	anon, err := client.New(e.srv.URL, "not-a-key", client.WithHTTPClient(e.srv.Client()))
	if err != nil {
		t.Fatal(err)
	}
	p, err := anon.PTY(ctx, sb.ID, client.PTYOptions{Token: tok.Token, Command: "echo tok-ok"})
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(p)
	if ex, err := p.Wait(ctx); err != nil || ex.ExitCode != 0 || !strings.Contains(string(out), "tok-ok") {
		t.Errorf("session with a token: %q %+v %v", out, ex, err)
	}
	if _, err := anon.PTY(ctx, sb.ID, client.PTYOptions{Token: tok.Token}); !errors.Is(err, client.ErrUnauthorized) {
		t.Errorf("the token again: %v, want unauthorized", err)
	}
	u := a.PTYURL(sb.ID, "alt_x", client.PTYOptions{Cols: 100, Command: "top"})
	if want := "ws" + strings.TrimPrefix(e.srv.URL, "http") + "/v1/sandboxes/" + sb.ID + "/pty?cmd=top&cols=100&token=alt_x"; u != want {
		t.Errorf("PTYURL = %q, want %q", u, want)
	}
}

// TestOpenAPIServed: GET /v1/openapi.json serves api/openapi.yaml byte
// for byte, without a key, as JSON, with an ETag that a conditional
// request matches.
func TestOpenAPIServed(t *testing.T) {
	e := newTestEnv(t)
	want, err := os.ReadFile(openAPIPath)
	if err != nil {
		t.Fatal(err)
	}
	resp, body := e.do("GET", "/v1/openapi.json", "", "", nil)
	if resp.StatusCode != 200 || !bytes.Equal(body, want) {
		t.Fatalf("GET /v1/openapi.json: %d, %d bytes; want 200 and the %d bytes of api/openapi.yaml", resp.StatusCode, len(body), len(want))
	}
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var doc map[string]any
	if err := json.Unmarshal(body, &doc); err != nil || doc["openapi"] == nil {
		t.Errorf("the served document is not an OpenAPI JSON document: %v", err)
	}
	req, _ := http.NewRequest("GET", e.srv.URL+"/v1/openapi.json", nil)
	req.Header.Set("If-None-Match", resp.Header.Get("ETag"))
	if r2, err := e.srv.Client().Do(req); err != nil || r2.StatusCode != http.StatusNotModified {
		t.Errorf("conditional GET: %v %v, want 304", r2, err)
	} else {
		r2.Body.Close()
	}
	if resp, _ := e.do("GET", "/v1/openapi.json?x=1", "", "", nil); resp.StatusCode != 400 {
		t.Errorf("with a query: %d, want 400", resp.StatusCode)
	}
	if resp, _ := e.do("POST", "/v1/openapi.json", keyA, "", nil); resp.StatusCode != 405 {
		t.Errorf("POST: %d, want 405", resp.StatusCode)
	}
	if evs := e.audit.take(); len(evs) != 0 {
		t.Errorf("reading the description was audited: %+v", evs)
	}
}
