// Package client is the Go client of Airlock's public REST API (v1):
// sandboxes, commands, files, interactive terminals, the audit log and API
// keys.
//
//	c, err := client.New("http://127.0.0.1:7070", os.Getenv("AIRLOCK_API_KEY"))
//	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
//	res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo hi"})
//	defer c.DeleteSandbox(ctx, sb.ID)
//
// Every method takes a context that bounds the whole call, including the
// transfer of the response body. Failures reported by the server are
// *APIError values, which errors.Is matches against the sentinel errors of
// this package (ErrNotFound, ErrForbidden, ...). A Client is safe for
// concurrent use.
package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// DefaultMaxResponseBytes caps a JSON response the client buffers.
const DefaultMaxResponseBytes = 16 << 20

// maxErrorBytes caps an error body the client reads.
const maxErrorBytes = 64 << 10

// Client calls one Airlock server with one API key.
type Client struct {
	base      *url.URL
	key       string
	hc        *http.Client
	maxResp   int64
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient sets the http.Client used for requests (default: a
// client without a timeout; use contexts to bound calls).
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) {
		if hc != nil {
			c.hc = hc
		}
	}
}

// WithMaxResponseBytes caps the JSON responses the client buffers
// (default DefaultMaxResponseBytes). A larger response fails the call.
// File downloads and streamed output are not buffered and not capped.
func WithMaxResponseBytes(n int64) Option {
	return func(c *Client) {
		if n > 0 {
			c.maxResp = n
		}
	}
}

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option {
	return func(c *Client) { c.userAgent = ua }
}

// New returns a client for the server at baseURL (e.g.
// "http://127.0.0.1:7070") that authenticates with apiKey.
func New(baseURL, apiKey string, opts ...Option) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("airlock: base URL %q must be http(s)://host[:port]", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("airlock: base URL %q must not have a query or fragment", baseURL)
	}
	if apiKey == "" || strings.ContainsAny(apiKey, " \r\n\t") {
		return nil, errors.New("airlock: the API key is empty or contains white space")
	}
	c := &Client{base: u, key: apiKey, hc: http.DefaultClient, maxResp: DefaultMaxResponseBytes, userAgent: "airlock-go-client/1"}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// endpoint returns the URL of path (which starts with "/") with query q.
func (c *Client) endpoint(path string, q url.Values) string {
	u := *c.base
	u.Path = strings.TrimRight(u.Path, "/") + path
	u.RawPath = ""
	u.RawQuery = q.Encode()
	return u.String()
}

// sandboxPath is the path of sandbox id plus suffix, with id escaped.
func sandboxPath(id, suffix string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + suffix
}

// newRequest builds an authenticated request.
func (c *Client) newRequest(ctx context.Context, method, path string, q url.Values, body io.Reader) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.endpoint(path, q), body)
	if err != nil {
		return nil, fmt.Errorf("airlock: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if c.userAgent != "" {
		req.Header.Set("User-Agent", c.userAgent)
	}
	return req, nil
}

// send performs req and returns the response when its status is want;
// any other status becomes an error (and the body is closed).
func (c *Client) send(req *http.Request, want ...int) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("airlock: %s %s: %w", req.Method, req.URL.Path, err)
	}
	for _, w := range want {
		if resp.StatusCode == w {
			return resp, nil
		}
	}
	defer resp.Body.Close()
	return nil, decodeError(resp)
}

// doJSON sends a request with an optional JSON body and decodes a JSON
// response into out (if not nil), expecting status want.
func (c *Client) doJSON(ctx context.Context, method, path string, q url.Values, in, out any, want int) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("airlock: encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, q, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	resp, err := c.send(req, want)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBytes))
		return nil
	}
	return c.decodeBody(resp, out)
}

// decodeBody decodes a JSON response of at most maxResp bytes.
func (c *Client) decodeBody(resp *http.Response, out any) error {
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.maxResp+1))
	if err != nil {
		return fmt.Errorf("airlock: read response: %w", err)
	}
	if int64(len(b)) > c.maxResp {
		return fmt.Errorf("airlock: response is larger than %d bytes: %w", c.maxResp, ErrResponseTooLarge)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("airlock: decode response: %w", err)
	}
	return nil
}

// openStream POSTs body to path with query q, with the headers of hdr,
// and returns the NDJSON answer (status 200). The caller closes its body.
func (c *Client) openStream(ctx context.Context, path string, q url.Values, body io.Reader, hdr http.Header) (*http.Response, error) {
	req, err := c.newRequest(ctx, http.MethodPost, path, q, body)
	if err != nil {
		return nil, err
	}
	for k, vs := range hdr {
		for _, v := range vs {
			req.Header.Add(k, v)
		}
	}
	req.Header.Set("Accept", "application/x-ndjson")
	return c.send(req, http.StatusOK)
}

// streamJSON POSTs in as JSON to path and hands the lines of the NDJSON
// answer to fn as readStream does; the request ends when streamJSON
// returns.
func streamJSON[T any](ctx context.Context, c *Client, path string, in any, what string, maxLine int, fn func(*T) (bool, error)) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("airlock: encode request: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp, err := c.openStream(ctx, path, nil, bytes.NewReader(b), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readStream(resp.Body, what, maxLine, fn)
}

// readStream decodes each NDJSON line of r (at most maxLine bytes) into a
// new T and passes it to fn, until fn reports the stream done or fails.
// what names the stream in errors ("exec stream"); a stream that ends
// before fn is done is ErrUnavailable.
func readStream[T any](r io.Reader, what string, maxLine int, fn func(*T) (done bool, err error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	for sc.Scan() {
		var line T
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return fmt.Errorf("airlock: %s: malformed line: %w", what, err)
		}
		if done, err := fn(&line); done || err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("airlock: %s: line longer than %d bytes: %w", what, maxLine, ErrResponseTooLarge)
		}
		return fmt.Errorf("airlock: %s: %w", what, err)
	}
	return fmt.Errorf("airlock: %s ended without a result: %w", what, ErrUnavailable)
}

// parseErrorDetail decodes raw, the error field of a stream's error
// line, as an error object; nil if it is not one.
func parseErrorDetail(raw json.RawMessage) *api.ErrorDetail {
	var d api.ErrorDetail
	if json.Unmarshal(raw, &d) != nil {
		return nil
	}
	return &d
}

// streamError is the error a stream's error line reports: d's code and
// message, or an internal error saying fallback when d has no code.
func streamError(d *api.ErrorDetail, fallback string) *APIError {
	e := &APIError{Status: http.StatusOK, Code: api.CodeInternal, Message: fallback}
	if d != nil && d.Code != "" {
		e.Code, e.Message = d.Code, d.Message
	}
	return e
}
