package client

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// PortURL is a signed URL to a port of a sandbox: it reaches the port
// without the API key until ExpiresAt, for any number of requests (a
// browser keeps its token in a cookie for the port's path). Its token is
// a credential: do not log it.
type PortURL = api.PortURL

// PortPath is the path, relative to the server, of port (1-65535) of
// sandbox id: the prefix the daemon proxies to that port on the sandbox's
// loopback (HTTP and WebSocket), with the API key in the Authorization
// header.
func PortPath(id string, port int) string {
	return sandboxPath(id, "/ports/"+strconv.Itoa(port)+"/")
}

// PortURL returns the absolute URL of port of sandbox id (see PortPath):
// requests to it, and below it, need the API key (Client.Port does
// that). It makes no request.
func (c *Client) PortURL(id string, port int) (string, error) {
	if err := checkID(id); err != nil {
		return "", err
	}
	if err := checkPort(port); err != nil {
		return "", err
	}
	return c.endpoint(PortPath(id, port), nil), nil
}

// SignPortURL asks for a signed URL to port of sandbox id that lasts ttl
// (0: the server's default, 10 minutes; at most 24 hours). The exec scope
// is needed. Absolute returns its URL.
func (c *Client) SignPortURL(ctx context.Context, id string, port int, ttl time.Duration) (*PortURL, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPort(port); err != nil {
		return nil, err
	}
	if ttl < 0 || (ttl > 0 && ttl < time.Second) {
		return nil, fmt.Errorf("airlock: port URL lifetime %v: want 0 or at least 1s: %w", ttl, ErrInvalid)
	}
	var out PortURL
	in := api.PortURLRequest{TTLSeconds: int(ttl / time.Second)}
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/ports/"+strconv.Itoa(port)), nil, in, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	return &out, nil
}

// Absolute returns the signed URL a browser opens: HostURL when the
// server has a wildcard domain, else the server's URL and Path.
func (c *Client) Absolute(u *PortURL) string {
	if u.HostURL != "" {
		return u.HostURL
	}
	path, query, _ := strings.Cut(u.Path, "?")
	out := c.endpoint(path, nil)
	if query != "" {
		out += "?" + query
	}
	return out
}

// Port sends req to port of sandbox id: req's URL path and query are
// taken below the port's path (a request for /api?x=1 reaches the
// sandbox's server as /api?x=1), the API key is added, and the answer is
// the server's own (a 502 with an API error when nothing listens there).
func (c *Client) Port(id string, port int, req *http.Request) (*http.Response, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkPort(port); err != nil {
		return nil, err
	}
	out := req.Clone(req.Context())
	u := *c.base
	prefix := strings.TrimRight(u.Path, "/") + strings.TrimSuffix(PortPath(id, port), "/")
	u.Path = prefix + req.URL.Path
	u.RawPath = prefix + req.URL.EscapedPath()
	u.RawQuery = req.URL.RawQuery
	out.URL = &u
	out.Host = ""
	out.RequestURI = ""
	out.Header.Set("Authorization", "Bearer "+c.key)
	resp, err := c.hc.Do(out)
	if err != nil {
		return nil, fmt.Errorf("airlock: %w", err)
	}
	return resp, nil
}

func checkPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("airlock: port %d is out of range 1-65535: %w", port, ErrInvalid)
	}
	return nil
}
