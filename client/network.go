package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlock-sandbox/airlock/api"
)

// The network modes (Network.Mode).
const (
	NetworkNone      = api.NetworkNone
	NetworkAllowlist = api.NetworkAllowlist
	NetworkOpen      = api.NetworkOpen
)

// NetworkView is a sandbox's network policy and, in allowlist mode, its
// egress proxy's counters.
type NetworkView = api.NetworkView

// NetworkStats are the counters of a sandbox's egress proxy.
type NetworkStats = api.NetworkStats

// NetworkLimits bound a sandbox's egress proxy below the server's own
// limits (in a NetworkView: the limits in force).
type NetworkLimits = api.NetworkLimits

// NetworkCredential is a header the sandbox's egress proxy adds, with a
// stored secret's value, to the requests to one allowed host.
type NetworkCredential = api.NetworkCredential

// Network returns the sandbox's network policy and counters.
func (c *Client) Network(ctx context.Context, id string) (*NetworkView, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out NetworkView
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/network"), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetNetwork changes a running sandbox's network policy (PATCH
// /v1/sandboxes/{id}/network): mode none or allowlist, the list, the
// credentials and the limits. A changed list applies at once to new
// connections, changed connection and bandwidth caps at once, and a
// changed idle timeout restarts the proxy (cutting its connections); the
// proxy variables reach the processes started afterwards.
func (c *Client) SetNetwork(ctx context.Context, id string, n Network) (*NetworkView, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if n.Mode == "" {
		return nil, fmt.Errorf("airlock: network mode is required: %w", ErrInvalid)
	}
	var out NetworkView
	if err := c.doJSON(ctx, http.MethodPatch, sandboxPath(id, "/network"), nil, n, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// NetworkLog returns a page of the sandbox's egress decisions (audit
// records of action egress.connect), oldest first, after the record seq
// after (0 for the first page), at most limit (0 for the server's
// default). nextAfter is the after of the next page, 0 on the last. It
// needs the audit:read scope.
func (c *Client) NetworkLog(ctx context.Context, id string, after uint64, limit int) (records []AuditRecord, nextAfter uint64, err error) {
	if err := checkID(id); err != nil {
		return nil, 0, err
	}
	if limit < 0 {
		return nil, 0, fmt.Errorf("airlock: limit %d is negative: %w", limit, ErrInvalid)
	}
	v := url.Values{}
	if after > 0 {
		v.Set("after", strconv.FormatUint(after, 10))
	}
	if limit > 0 {
		v.Set("limit", strconv.Itoa(limit))
	}
	var out api.AuditList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/network/log"), v, nil, &out, http.StatusOK); err != nil {
		return nil, 0, err
	}
	return out.Records, out.NextAfter, nil
}
