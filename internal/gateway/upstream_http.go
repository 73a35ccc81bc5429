package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// answer is what an upstream answered: its status and body.
type answer struct {
	status int
	body   []byte
}

// upstreamClient calls HTTP upstreams. Its dialer is the SSRF guard:
// it resolves the upstream's host itself, refuses an address that is
// not public (egress.ClassOf) unless allow admits it, and dials the
// address it checked, so that the name cannot resolve to another
// address between the check and the connection. It uses no proxy and
// follows no redirect (a redirect could carry a secret header to
// another host).
type upstreamClient struct {
	http *http.Client
	tr   *http.Transport
}

func newUpstreamClient(allow func(netip.Addr) bool) *upstreamClient {
	g := &guardedDialer{allow: allow, resolver: net.DefaultResolver, dialer: net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}}
	tr := &http.Transport{
		Proxy:                  nil,
		DialContext:            g.DialContext,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           512,
		MaxIdleConnsPerHost:    128,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    10 * time.Second,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: 64 << 10,
	}
	return &upstreamClient{tr: tr, http: &http.Client{
		Transport:     tr,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

func (u *upstreamClient) close() { u.tr.CloseIdleConnections() }

// ssrfError is the guard's refusal of an upstream address.
type ssrfError struct {
	host  string
	addr  netip.Addr
	class egress.AddrClass
}

func (e *ssrfError) Error() string {
	return fmt.Sprintf("upstream host %s resolves to %s, a %s address, which tools may not reach", e.host, e.addr, e.class)
}

// guardedDialer is the SSRF guard (see upstreamClient).
type guardedDialer struct {
	allow    func(netip.Addr) bool
	resolver *net.Resolver
	dialer   net.Dialer
}

// admits reports whether the guard lets a connection reach a, and a's
// class when it does not.
func (g *guardedDialer) admits(a netip.Addr) (bool, egress.AddrClass) {
	a = a.Unmap().WithZone("")
	c := egress.ClassOf(a)
	if c == egress.ClassPublic || (g.allow != nil && g.allow(a)) {
		return true, c
	}
	return false, c
}

// DialContext resolves address's host, keeps the addresses the guard
// admits and dials them in turn; none admitted is an *ssrfError.
func (g *guardedDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = g.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var refused *ssrfError
	var lastErr error
	for _, a := range addrs {
		ok, class := g.admits(a)
		if !ok {
			if refused == nil {
				refused = &ssrfError{host: host, addr: a.Unmap(), class: class}
			}
			continue
		}
		c, err := g.dialer.DialContext(ctx, network, net.JoinHostPort(a.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	if lastErr != nil {
		return nil, lastErr
	}
	if refused != nil {
		return nil, refused
	}
	return nil, fmt.Errorf("upstream host %s has no address", host)
}

// do calls the tool's HTTP upstream with args, within timeout. Its
// errors are *stageError.
func (u *upstreamClient) do(ctx context.Context, cl *call, args map[string]any, timeout time.Duration) (answer, error) {
	h := cl.tool.Upstream.HTTP
	if h == nil {
		return answer{}, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s has no HTTP upstream", cl.name)
	}
	req, err := cl.newRequest(ctx, h, args)
	if err != nil {
		return answer{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	resp, err := u.http.Do(req.WithContext(ctx))
	if err != nil {
		return answer{}, cl.transportError(ctx, err, timeout)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode}
	max := cl.g.cfg.MaxOutputBytes
	if resp.ContentLength > int64(max) {
		return a, failure(StageOutput, errdefs.ErrResourceExhausted, "the answer of tool %s is over the limit of %d bytes", cl.name, max)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(max)+1))
	if err != nil {
		return a, cl.transportError(ctx, err, timeout)
	}
	if len(body) > max {
		return a, failure(StageOutput, errdefs.ErrResourceExhausted, "the answer of tool %s is over the limit of %d bytes", cl.name, max)
	}
	if s := resp.StatusCode; s >= 300 {
		// The body is not repeated: an upstream may echo what it was
		// sent, a secret header included.
		e := failure(StageUpstream, statusClass(s), "tool %s's upstream answered %d %s", cl.name, s, http.StatusText(s))
		e.fault = s >= 500
		return a, e
	}
	a.body = body
	return a, nil
}

// statusClass is the error class of an upstream's HTTP status (≥ 300).
func statusClass(s int) error {
	switch {
	case s == http.StatusTooManyRequests:
		return errdefs.ErrResourceExhausted
	case s == http.StatusNotFound:
		return errdefs.ErrNotFound
	case s == http.StatusBadRequest || s == http.StatusUnprocessableEntity:
		return errdefs.ErrInvalidArgument
	case s == http.StatusGatewayTimeout:
		return errdefs.ErrTimeout
	case s >= 500:
		return errdefs.ErrUnavailable
	}
	return errdefs.ErrFailedPrecondition
}

// transportError turns a failed request into the call's error, naming
// the cause without the upstream's addresses.
func (cl *call) transportError(ctx context.Context, err error, timeout time.Duration) error {
	var ssrf *ssrfError
	var dns *net.DNSError
	var e *stageError
	switch {
	case errors.As(err, &ssrf):
		e = refuse(StageUpstream, errdefs.ErrPermissionDenied, "tool %s: %s", cl.name, ssrf.Error())
		e.ignore = true
		return e
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		e = failure(StageUpstream, errdefs.ErrTimeout, "tool %s's upstream did not answer within %s", cl.name, timeout)
	case ctx.Err() != nil:
		e = failure(StageUpstream, errdefs.ErrCanceled, "the call of tool %s was canceled", cl.name)
		e.ignore = true
		return e
	case errors.As(err, &dns):
		e = failure(StageUpstream, errdefs.ErrUnavailable, "tool %s's upstream host %s does not resolve", cl.name, dns.Name)
	case errors.Is(err, syscall.ECONNREFUSED):
		e = failure(StageUpstream, errdefs.ErrUnavailable, "tool %s's upstream refused the connection", cl.name)
	default:
		e = failure(StageUpstream, errdefs.ErrUnavailable, "tool %s's upstream could not be reached", cl.name)
	}
	e.fault = true
	return e
}

// newRequest fills the upstream's templates with args (and secrets, in
// headers) and builds the request.
func (cl *call) newRequest(ctx context.Context, h *HTTPUpstream, args map[string]any) (*http.Request, error) {
	method := h.Method
	if method == "" {
		method = http.MethodPost
	}
	rawURL, err := expand(h.URL, func(name string) (string, error) { return escapeURL(argText(args[name])), nil }, nil)
	if err != nil {
		return nil, cl.templateError("url", err)
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s's upstream URL is not an absolute http or https URL", cl.name)
	}
	var body io.Reader
	sendsBody := false
	switch {
	case h.Body != "":
		b, err := expand(h.Body, func(name string) (string, error) { return argJSON(args[name]), nil }, nil)
		if err != nil {
			return nil, cl.templateError("body", err)
		}
		body, sendsBody = strings.NewReader(b), true
	case method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch:
		b, err := json.Marshal(args)
		if err != nil {
			return nil, failure(StageUpstream, errdefs.ErrInternal, "the arguments of tool %s could not be encoded", cl.name)
		}
		body, sendsBody = bytes.NewReader(b), true
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), body)
	if err != nil {
		return nil, failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s's upstream request could not be built", cl.name)
	}
	secret := func(name string) (string, error) {
		v, err := cl.reveal(ctx, name)
		if err != nil {
			return "", err
		}
		// net/http keeps header values as strings, which cannot be
		// wiped; the Value itself is wiped when the call ends.
		return string(v.Bytes()), nil
	}
	for name, tmpl := range h.Headers {
		v, err := expand(tmpl, func(arg string) (string, error) { return argText(args[arg]), nil }, secret)
		if err != nil {
			return nil, cl.templateError("header "+name, err)
		}
		if strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) {
			return nil, failure(StageUpstream, errdefs.ErrInvalidArgument, "tool %s: header %s would hold a control character (from an argument or a secret)", cl.name, name)
		}
		req.Header.Set(name, v)
	}
	if sendsBody && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", "airlock-gateway")
	}
	return req, nil
}

// templateError is the failure of filling a template: a *stageError as
// is (a secret that is not set), else a malformed template.
func (cl *call) templateError(where string, err error) error {
	var se *stageError
	if errors.As(err, &se) {
		return se
	}
	return failure(StageUpstream, errdefs.ErrFailedPrecondition, "tool %s's upstream %s: %s", cl.name, where, err.Error())
}

// expand replaces each {args.NAME} of tmpl by arg(NAME) and each
// {secret.NAME} by secret(NAME); secret nil means secrets may not stand
// there. Other braces are text.
func expand(tmpl string, arg, secret func(string) (string, error)) (string, error) {
	if !strings.Contains(tmpl, "{") {
		return tmpl, nil
	}
	var out strings.Builder
	rest := tmpl
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			out.WriteString(rest)
			return out.String(), nil
		}
		out.WriteString(rest[:i])
		rest = rest[i:]
		var fill func(string) (string, error)
		var prefix string
		switch {
		case strings.HasPrefix(rest, argsPrefix):
			prefix, fill = argsPrefix, arg
		case strings.HasPrefix(rest, secretPrefix):
			if secret == nil {
				return "", errors.New("secrets may be used only in header values")
			}
			prefix, fill = secretPrefix, secret
		default:
			out.WriteByte('{')
			rest = rest[1:]
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", fmt.Errorf("%s... has no closing '}'", prefix)
		}
		v, err := fill(rest[len(prefix):end])
		if err != nil {
			return "", err
		}
		out.WriteString(v)
		rest = rest[end+1:]
	}
}

// argText is an argument as text: a string as is, null or absent as
// "", anything else as JSON.
func argText(v any) string {
	switch v := v.(type) {
	case nil:
		return ""
	case string:
		return v
	case json.Number:
		return v.String()
	case bool:
		return strconv.FormatBool(v)
	}
	return argJSON(v)
}

// argJSON is an argument as JSON (absent: null).
func argJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "null"
	}
	return string(b)
}

// escapeURL percent-encodes every byte of s but letters, digits and
// '-', '_', '~' (RFC 3986's unreserved characters less '.', so that an
// argument cannot be a ".." segment), so that an argument stays one path
// segment or one query value wherever it stands in a URL.
func escapeURL(s string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '~' {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	return b.String()
}
