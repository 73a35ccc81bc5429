package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Ports into a sandbox. A server listening on a sandbox's loopback (a web
// app, an agent's own API, a WebSocket) is reached through
//
//	ANY /v1/sandboxes/{id}/ports/{port}/{path...}
//
// and, when the daemon has a wildcard domain (Config.PortDomain), through
// the host name {port}-{id}.{domain} on the same listener. Each request
// is one TCP connection to 127.0.0.1:{port} (or ::1) inside the
// sandbox's network namespace, made by its agent (sandbox.Manager.DialPort);
// net/http/httputil.ReverseProxy forwards the request (path and query,
// hop-by-hop headers removed, X-Forwarded-For/-Host/-Proto and
// X-Forwarded-Prefix set, Host localhost:{port}) and streams both bodies,
// and passes an Upgrade (WebSocket) through as two copied byte streams.
//
// Ports are private: a request needs the tenant's API key with the exec
// scope (Authorization, which is then not forwarded), or a signed token
// (POST /v1/sandboxes/{id}/ports/{port}) in the query parameter
// airlock_token or, after a browser used it once, the cookie
// airlock_port_token that the answer sets for that port's path (both
// removed before forwarding; the request's own Authorization header then
// reaches the app). A token is an HMAC-SHA256, under a key made at
// random when the daemon starts, of its key ID, tenant, sandbox, port and
// expiry; it serves any number of requests until it expires, each
// authorized as its key is at that moment (a revoked key's tokens stop
// working). Tokens do not survive a restart of the daemon.

// ActionPortURL is the audit action of signing a port URL.
const ActionPortURL = "sandbox.port_url"

// Port URL lifetimes.
const (
	DefaultPortURLTTL = 10 * time.Minute
	MaxPortURLTTL     = 24 * time.Hour
)

const (
	portTokenParam  = "airlock_token"
	portTokenCookie = "airlock_port_token"
	portTokenPrefix = "alp_"
	// maxPortToken caps a presented token.
	maxPortToken = 512
	// portProxyPath is the route of the proxy.
	portProxyPath = "/v1/sandboxes/{id}/ports/{port}/{path...}"
)

// portSigner signs and checks port tokens.
type portSigner struct {
	key [32]byte
	now func() time.Time
}

func newPortSigner() *portSigner {
	s := &portSigner{now: time.Now}
	if _, err := rand.Read(s.key[:]); err != nil {
		panic("crypto/rand: " + err.Error()) // never fails on Linux
	}
	return s
}

// portClaim is what a token stands for.
type portClaim struct {
	keyID, tenantID, sandboxID string
	port                       int
	expires                    time.Time
}

func (s *portSigner) mac(payload string) []byte {
	m := hmac.New(sha256.New, s.key[:])
	m.Write([]byte(payload))
	return m.Sum(nil)
}

// sign returns the token for cl.
func (s *portSigner) sign(cl portClaim) string {
	payload := strings.Join([]string{"v1", cl.keyID, cl.tenantID, cl.sandboxID,
		strconv.Itoa(cl.port), strconv.FormatInt(cl.expires.Unix(), 10)}, "|")
	enc := base64.RawURLEncoding
	return portTokenPrefix + enc.EncodeToString([]byte(payload)) + "." + enc.EncodeToString(s.mac(payload))
}

var errPortToken = &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: "invalid or expired port token"}

// verify checks tok and that it is for sandboxID and port, unexpired.
// Every failure is the same errPortToken.
func (s *portSigner) verify(tok, sandboxID string, port int) (portClaim, error) {
	if len(tok) > maxPortToken || !strings.HasPrefix(tok, portTokenPrefix) {
		return portClaim{}, errPortToken
	}
	p64, m64, ok := strings.Cut(tok[len(portTokenPrefix):], ".")
	if !ok {
		return portClaim{}, errPortToken
	}
	enc := base64.RawURLEncoding
	payload, err1 := enc.DecodeString(p64)
	mac, err2 := enc.DecodeString(m64)
	if err1 != nil || err2 != nil || !hmac.Equal(mac, s.mac(string(payload))) {
		return portClaim{}, errPortToken
	}
	f := strings.Split(string(payload), "|")
	if len(f) != 6 || f[0] != "v1" {
		return portClaim{}, errPortToken
	}
	pt, err1 := strconv.Atoi(f[4])
	exp, err2 := strconv.ParseInt(f[5], 10, 64)
	cl := portClaim{keyID: f[1], tenantID: f[2], sandboxID: f[3], port: pt, expires: time.Unix(exp, 0)}
	if err1 != nil || err2 != nil || cl.sandboxID != sandboxID || cl.port != port || !s.now().Before(cl.expires) {
		return portClaim{}, errPortToken
	}
	return cl, nil
}

// parsePort reads the {port} path value.
func parsePort(s string) (int, error) {
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 || s != strconv.Itoa(p) {
		return 0, invalidf("port %q is not a number in 1-65535", s)
	}
	return p, nil
}

// portPrincipal authenticates a request to the proxy: by a port token
// (the query parameter, else the cookie; viaToken true), else by the
// Authorization header. proxyPort removes the token from what it
// forwards; nothing before it logs a query or a cookie.
func (h *Handler) portPrincipal(r *http.Request) (p auth.Principal, viaToken bool, err error) {
	tok, _, n := portToken(r)
	switch {
	case n > 1:
		return p, true, &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: "give one port token"}
	case n == 0:
		p, err = h.authenticate(r)
		return p, false, err
	}
	if h.keyCheck == nil {
		return p, true, errPortToken
	}
	port, err := parsePort(r.PathValue("port"))
	if err != nil {
		return p, true, err
	}
	cl, err := h.portSigner.verify(tok, r.PathValue("id"), port)
	if err != nil {
		return p, true, err
	}
	p, err = h.keyCheck.KeyPrincipal(r.Context(), cl.keyID)
	if err != nil {
		for _, class := range []error{errdefs.ErrUnavailable, errdefs.ErrTimeout, errdefs.ErrInternal, errdefs.ErrCanceled} {
			if errors.Is(err, class) {
				return p, true, fmt.Errorf("authenticate: %w", err)
			}
		}
		return auth.Principal{}, true, errPortToken // its key was revoked or has expired
	}
	if p.TenantID != cl.tenantID {
		return auth.Principal{}, true, errPortToken
	}
	return p, true, nil
}

// portToken returns the port token r carries: the query parameter's (n
// counts them), else the cookie's.
func portToken(r *http.Request) (tok string, fromQuery bool, n int) {
	toks, _ := cutQueryParam(r.URL.RawQuery, portTokenParam)
	if len(toks) > 0 {
		return toks[0], true, len(toks)
	}
	if ck := r.CookiesNamed(portTokenCookie); len(ck) > 0 {
		return ck[0].Value, false, 1
	}
	return "", false, 0
}

// removeCookie drops every cookie called name from r's Cookie headers.
func removeCookie(r *http.Request, name string) {
	var kept []string
	for _, line := range r.Header.Values("Cookie") {
		for part := range strings.SplitSeq(line, ";") {
			k, _, _ := strings.Cut(strings.TrimSpace(part), "=")
			if k != name && strings.TrimSpace(part) != "" {
				kept = append(kept, strings.TrimSpace(part))
			}
		}
	}
	r.Header.Del("Cookie")
	if len(kept) > 0 {
		r.Header.Set("Cookie", strings.Join(kept, "; "))
	}
}

// createPortURL serves POST /v1/sandboxes/{id}/ports/{port}.
func (h *Handler) createPortURL(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	port, err := parsePort(c.r.PathValue("port"))
	if err != nil {
		return err
	}
	var req wire.PortURLRequest
	if err := c.decodeJSON(&req, true); err != nil {
		return err
	}
	ttl := DefaultPortURLTTL
	if req.TTLSeconds < 0 || time.Duration(req.TTLSeconds)*time.Second > MaxPortURLTTL {
		return invalidf("ttl_s %d is out of range 0-%d", req.TTLSeconds, int(MaxPortURLTTL/time.Second))
	} else if req.TTLSeconds > 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
	}
	if h.keyCheck == nil {
		return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "port URLs are not supported by this server"}
	}
	if err := sb.CheckRunning(); err != nil {
		return err
	}
	c.ev.Details = map[string]any{"port": port, "ttl_s": int(ttl / time.Second)}
	if err := c.begin(); err != nil {
		return err
	}
	exp := h.portSigner.now().Add(ttl).Truncate(time.Second)
	tok := h.portSigner.sign(portClaim{keyID: c.p.KeyID, tenantID: c.p.TenantID, sandboxID: sb.ID, port: port, expires: exp})
	// The token itself is never recorded.
	c.ev.Details["expires_at"] = exp.UTC().Format(time.RFC3339)
	if err := c.commit(); err != nil {
		return err
	}
	out := wire.PortURL{
		Port:      port,
		Path:      sandboxRoute(sb.ID, "/ports/"+strconv.Itoa(port)+"/") + "?" + portTokenParam + "=" + tok,
		Token:     tok,
		ExpiresAt: exp.UTC(),
	}
	if h.portDomain != "" {
		scheme := "http"
		if c.r.TLS != nil || c.r.Header.Get("X-Forwarded-Proto") == "https" {
			scheme = "https"
		}
		out.HostURL = fmt.Sprintf("%s://%d-%s.%s/?%s=%s", scheme, port, sb.ID, h.portDomain, portTokenParam, tok)
	}
	return c.json(http.StatusCreated, out)
}

// portHostKey marks a request that came by a port's host name (see
// Handler.ServeHTTP).
type portHostKey struct{}

// portConnKey carries a request's dialled connection to portTransport.
type portConnKey struct{}

// portTransport is the proxy's transport: it "dials" the connection the
// handler made through the sandbox manager, once, and keeps none.
var portTransport = &http.Transport{
	DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, _ := ctx.Value(portConnKey{}).(*portOnce)
		if c == nil {
			return nil, fmt.Errorf("port proxy: no connection: %w", errdefs.ErrInternal)
		}
		return c.take()
	},
	DisableKeepAlives:      true,
	DisableCompression:     true,
	MaxResponseHeaderBytes: 1 << 20,
}

// portOnce hands out one connection once.
type portOnce struct {
	conn net.Conn
}

func (p *portOnce) take() (net.Conn, error) {
	c := p.conn
	p.conn = nil
	if c == nil {
		return nil, fmt.Errorf("port proxy: the connection was used: %w", errdefs.ErrUnavailable)
	}
	return c, nil
}

// proxyPort serves the proxy's routes.
func (h *Handler) proxyPort(c *call) error {
	sb, err := c.agentSandbox()
	if err != nil {
		return err
	}
	port, err := parsePort(c.r.PathValue("port"))
	if err != nil {
		return err
	}
	if err := sb.CheckRunning(); err != nil {
		return err
	}
	conn, err := h.mgr.DialPort(c.r.Context(), sb.ID, port)
	// The agent's refusal, not a sandbox that ended meanwhile (also a
	// failed precondition, which explain words).
	if errdefs.Class(err) == errdefs.ErrFailedPrecondition {
		if now, e := h.mgr.Get(sb.ID); e == nil && now.State == sandbox.StateRunning {
			return &apiError{status: http.StatusBadGateway, code: CodeBadGateway,
				msg: fmt.Sprintf("nothing listens on port %d in sandbox %s", port, sb.ID)}
		}
	}
	if err != nil {
		return err
	}
	defer conn.Close()

	viaHost, _ := c.r.Context().Value(portHostKey{}).(bool)
	prefix := sandboxRoute(sb.ID, "/ports/"+strconv.Itoa(port))
	cookiePath := prefix + "/"
	if viaHost {
		cookiePath = "/"
	}
	// The token is Airlock's: it leaves the forwarded request; one that
	// came in the query is kept in a cookie for the port's path, so that
	// what the page loads next is authorized too.
	viaToken := c.viaToken
	setCookie := ""
	if tok, fromQuery, _ := portToken(c.r); viaToken && fromQuery {
		if cl, err := h.portSigner.verify(tok, sb.ID, port); err == nil {
			setCookie = portCookie(tok, cookiePath, c.r.TLS != nil, cl.expires)
		}
	}
	_, c.r.URL.RawQuery = cutQueryParam(c.r.URL.RawQuery, portTokenParam)
	if len(c.r.CookiesNamed(portTokenCookie)) > 0 {
		removeCookie(c.r, portTokenCookie)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			rest := strings.TrimPrefix(pr.In.URL.EscapedPath(), prefix)
			if !strings.HasPrefix(rest, "/") {
				rest = "/" + rest
			}
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = net.JoinHostPort("localhost", strconv.Itoa(port))
			pr.Out.URL.RawPath = rest
			pr.Out.URL.Path = rest
			if p, err := url.PathUnescape(rest); err == nil {
				pr.Out.URL.Path = p
			}
			pr.Out.URL.RawQuery = pr.In.URL.RawQuery
			pr.Out.Host = pr.Out.URL.Host
			pr.SetXForwarded()
			if !viaHost {
				pr.Out.Header.Set("X-Forwarded-Prefix", prefix)
			}
			if !viaToken {
				// The API key is Airlock's, never the app's.
				pr.Out.Header.Del("Authorization")
			}
		},
		Transport:     portTransport,
		FlushInterval: -1,
		ModifyResponse: func(res *http.Response) error {
			// The answer is the app's: a trace context it gives
			// replaces the one of Airlock's span (set when tracing is
			// on), rather than standing beside it.
			if res.Header.Get("Traceparent") != "" {
				c.w.Header().Del("Traceparent")
				c.w.Header().Del("Tracestate")
			}
			if !viaHost {
				confineToPath(res.Header, prefix)
			}
			if setCookie != "" {
				res.Header.Add("Set-Cookie", setCookie)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			h.writeError(w, r, &apiError{status: http.StatusBadGateway, code: CodeBadGateway,
				msg: fmt.Sprintf("port %d of sandbox %s closed the connection without a valid answer", port, sb.ID)})
		},
	}
	ctx := context.WithValue(c.r.Context(), portConnKey{}, &portOnce{conn: conn})
	rp.ServeHTTP(c.w, c.r.WithContext(ctx))
	return nil
}

// portCookie is the Set-Cookie line that keeps tok for the port's path
// (the proxy route's, or / on a port's host name) until it expires.
func portCookie(tok, path string, secure bool, expires time.Time) string {
	ck := &http.Cookie{
		Name: portTokenCookie, Value: tok, Path: path, Expires: expires,
		HttpOnly: true, Secure: secure, SameSite: http.SameSiteLaxMode,
	}
	return ck.String()
}

// portHost parses a host name {port}-{id}.{domain} (an optional :port of
// the listener after it) for the wildcard domain.
func portHost(host, domain string) (id string, port int, ok bool) {
	if domain == "" {
		return "", 0, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+domain)
	if !ok || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, id, ok := strings.Cut(label, "-")
	if !ok || !sandbox.ValidID(id) {
		return "", 0, false
	}
	port, err := parsePort(ps)
	if err != nil {
		return "", 0, false
	}
	return id, port, true
}

// portHostRequest turns a request for {port}-{id}.{domain} into one for
// the proxy's route, marked as come by its host name.
func portHostRequest(r *http.Request, id string, port int) *http.Request {
	r = r.WithContext(context.WithValue(r.Context(), portHostKey{}, true))
	u := *r.URL
	prefix := sandboxRoute(id, "/ports/"+strconv.Itoa(port))
	u.Path = prefix + r.URL.Path
	if r.URL.RawPath != "" {
		u.RawPath = prefix + r.URL.RawPath
	}
	if !strings.HasPrefix(r.URL.Path, "/") {
		u.Path, u.RawPath = prefix+"/", ""
	}
	r.URL = &u
	r.RequestURI = u.RequestURI()
	return r
}

// pathRouteSandbox is the Content-Security-Policy of every answer of the
// path route: its pages run in an opaque origin, not the daemon's, which
// every sandbox's path route shares. Scripts run, forms post, popups
// open; but a page cannot read another sandbox's port path (or the API)
// as same-origin, nor read or write cookies. Apps that need their own
// origin are served through Config.PortDomain.
const pathRouteSandbox = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-modals allow-downloads"

// confineToPath keeps an answer of the path route to the port's path
// prefix: the opaque-origin sandbox policy is added (on top of any the
// app sends: browsers enforce every policy), and each cookie the app sets
// is rewritten onto the prefix (its Path under it, no Domain), so that
// one sandbox's app cannot set or shadow cookies of another's path or of
// the daemon's own.
func confineToPath(h http.Header, prefix string) {
	h.Add("Content-Security-Policy", pathRouteSandbox)
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	h.Del("Set-Cookie")
	for _, line := range lines {
		ck, err := http.ParseSetCookie(line)
		if err != nil || ck.Name == portTokenCookie {
			continue // dropped: unparseable, or posing as Airlock's
		}
		p := ck.Path
		if !strings.HasPrefix(p, "/") {
			p = "/"
		}
		ck.Path = prefix + p
		ck.Domain = ""
		if v := ck.String(); v != "" {
			h.Add("Set-Cookie", v)
		}
	}
}
