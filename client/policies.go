package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/airlock-sandbox/airlock/api"
)

// Policy is the caller's tenant's Cedar policy text for the tool
// gateway, with its update time.
type Policy = api.Policy

// PutPolicy sets the caller's tenant's Cedar policy text, replacing any,
// and returns it as stored. A text that does not parse is ErrInvalid with
// the parser's message and position. It needs the tools:write scope.
func (c *Client) PutPolicy(ctx context.Context, cedar string) (*Policy, error) {
	if cedar == "" {
		return nil, fmt.Errorf("airlock: the policy text is empty (DeletePolicy removes the policy): %w", ErrInvalid)
	}
	var out Policy
	if err := c.doJSON(ctx, http.MethodPut, "/v1/policies", nil, api.PutPolicyRequest{Cedar: cedar}, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetPolicy returns the caller's tenant's policy text; ErrNotFound if it
// has none. It needs the tools:read scope.
func (c *Client) GetPolicy(ctx context.Context) (*Policy, error) {
	var out Policy
	if err := c.doJSON(ctx, http.MethodGet, "/v1/policies", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeletePolicy removes the caller's tenant's policy text, so that policy
// no longer limits its tool calls; ErrNotFound if it has none. It needs
// the tools:write scope.
func (c *Client) DeletePolicy(ctx context.Context) error {
	return c.doJSON(ctx, http.MethodDelete, "/v1/policies", nil, nil, nil, http.StatusNoContent)
}
