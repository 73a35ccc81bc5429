package client

import (
	"context"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// PTYToken is a short-lived, single-use credential for one terminal
// session in one sandbox, for a client that cannot send the API key: a
// browser's WebSocket cannot set the Authorization header. Hand the
// browser URL (or Client.PTYURL's absolute form); the first request that
// presents the token consumes it, and it expires at ExpiresAt (30 s after
// it was made) if unused. The session is authorized as the key that made
// the token is at that moment: revoking the key refuses its tokens.
type PTYToken = api.PTYToken

// PTYToken makes a PTY token for sandbox id (the exec scope is needed).
func (c *Client) PTYToken(ctx context.Context, id string) (*PTYToken, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out PTYToken
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/pty/token"), nil, nil, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return &out, nil
}

// PTYURL returns the WebSocket URL (ws:// or wss://) that opens a
// terminal in sandbox id with token and opts (opts.Token is not used):
// what a browser's `new WebSocket(url)` opens. It carries the token, a
// credential until it is used or expires: do not log it.
func (c *Client) PTYURL(id, token string, opts PTYOptions) string {
	q := ptyQuery(opts)
	q.Set("token", token)
	u := c.endpoint(sandboxPath(id, "/pty"), q)
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(u, "http://")
}
