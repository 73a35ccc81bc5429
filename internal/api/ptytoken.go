package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// PTY tokens. A browser cannot set headers on a WebSocket, so it cannot
// open GET /v1/sandboxes/{id}/pty with the API key. The key's holder (a
// web console's backend) asks POST /v1/sandboxes/{id}/pty/token for a
// token (an auth ticket: random, 260 bits, single use, DefaultPTYTokenTTL)
// bound to that sandbox and its key, and hands the browser the URL
// /v1/sandboxes/{id}/pty?token=T, which it opens instead of sending the
// Authorization header. The request that redeems it is authorized as the
// key is at that moment (a revoked key's tokens are refused, the scope is
// checked again); the token leaves the request's URL before anything
// else sees it (handlers, logs, audit records), and is never stored but
// as its hash (see auth.Tickets).

// ActionSandboxPTYToken is the audit action of minting a PTY token.
const ActionSandboxPTYToken = "sandbox.pty_token"

// DefaultPTYTokenTTL is how long a PTY token may wait for its use.
const DefaultPTYTokenTTL = 30 * time.Second

// ptyPurpose is the auth ticket purpose of a PTY token.
const ptyPurpose = "pty"

// ticketRoutes are the routes that accept a token (query parameter
// "token") instead of the Authorization header, with the purpose the
// token must have been issued for; its resource is the {id} path value.
var ticketRoutes = map[string]string{
	"GET /v1/sandboxes/{id}/pty": ptyPurpose,
}

// maxTicketParam caps a token read from a query string.
const maxTicketParam = 128

// KeyChecker is the optional ability of an Authenticator to resolve a key
// by its ID as it is now, without its secret (auth.Service has it): a
// token is redeemed for its key's current principal. Without it, PTY
// tokens are not served (501).
type KeyChecker interface {
	KeyPrincipal(ctx context.Context, keyID string) (auth.Principal, error)
}

// createPTYToken serves POST /v1/sandboxes/{id}/pty/token.
func (h *Handler) createPTYToken(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	var none struct{}
	if err := c.decodeJSON(&none, true); err != nil {
		return err
	}
	if h.keyCheck == nil {
		return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "PTY tokens are not supported by this server"}
	}
	if sb.State != sandbox.StateRunning {
		return fmt.Errorf("sandbox %s is %s: %w", sb.ID, sb.State, errdefs.ErrFailedPrecondition)
	}
	c.ev.Details = map[string]any{"ttl_s": int(h.lim.PTYTokenTTL / time.Second)}
	if err := c.begin(); err != nil {
		return err
	}
	token, exp, err := h.tickets.Issue(c.p, ptyPurpose, sb.ID)
	if err != nil {
		return err
	}
	// The token itself is never recorded.
	c.ev.Details["expires_at"] = exp.UTC().Format(time.RFC3339Nano)
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusCreated, wire.PTYToken{
		Token:     token,
		ExpiresAt: exp.UTC(),
		URL:       sandboxRoute(sb.ID, "/pty") + "?token=" + token,
	})
}

// sandboxRoute is the path of a sandbox's sub-route.
func sandboxRoute(id, suffix string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + suffix
}

// principal authenticates r for rt: by the Authorization header, or, on a
// route of ticketRoutes whose query carries a token, by redeeming the
// token (viaToken true). The token is cut from r's URL first, whatever
// happens next, so that nothing downstream sees it.
func (h *Handler) principal(r *http.Request, rt route) (p auth.Principal, viaToken bool, err error) {
	if rt.path == portProxyPath {
		return h.portPrincipal(r)
	}
	purpose, accepts := ticketRoutes[rt.method+" "+rt.path]
	if !accepts {
		p, err = h.authenticate(r)
		return p, false, err
	}
	tokens, rest := cutQueryParam(r.URL.RawQuery, "token")
	if len(tokens) == 0 {
		p, err = h.authenticate(r)
		return p, false, err
	}
	r.URL.RawQuery = rest
	r.RequestURI = r.URL.RequestURI()
	invalid := &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: auth.ErrInvalidTicket.Error()}
	// Every token presented is consumed, whatever is wrong with the
	// request.
	var keyID, tenantID string
	var rerr error
	for _, tok := range tokens {
		if len(tok) > maxTicketParam {
			rerr = auth.ErrInvalidTicket
			continue
		}
		keyID, tenantID, rerr = h.tickets.Redeem(tok, purpose, r.PathValue("id"))
	}
	switch {
	case len(tokens) > 1:
		return p, true, &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated, msg: "give one token"}
	case len(r.Header.Values("Authorization")) > 0:
		return p, true, &apiError{status: http.StatusUnauthorized, code: CodeUnauthenticated,
			msg: "give either the Authorization header or a token, not both"}
	case rerr != nil || h.keyCheck == nil:
		return p, true, invalid
	}
	p, err = h.keyCheck.KeyPrincipal(r.Context(), keyID)
	if err != nil {
		for _, class := range []error{errdefs.ErrUnavailable, errdefs.ErrTimeout, errdefs.ErrInternal, errdefs.ErrCanceled} {
			if errors.Is(err, class) {
				return p, true, fmt.Errorf("authenticate: %w", err)
			}
		}
		return auth.Principal{}, true, invalid // its key was revoked or has expired
	}
	if p.TenantID != tenantID || p.KeyID != keyID {
		return auth.Principal{}, true, invalid
	}
	return p, true, nil
}

// cutQueryParam splits a raw query into the values of parameter name and
// the query without it (the other parameters exactly as they were). A
// part whose name cannot be unescaped is kept in rest.
func cutQueryParam(raw, name string) (values []string, rest string) {
	if !strings.Contains(raw, name) {
		return nil, raw
	}
	var kept []string
	for part := range strings.SplitSeq(raw, "&") {
		k, v, _ := strings.Cut(part, "=")
		key, err := url.QueryUnescape(k)
		if err != nil || key != name {
			kept = append(kept, part)
			continue
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			val = "" // redeems nothing, and still counts as a token given
		}
		values = append(values, val)
	}
	return values, strings.Join(kept, "&")
}
