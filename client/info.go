package client

import (
	"context"
	"net/http"

	"github.com/airlock-sandbox/airlock/api"
)

// Info describes the daemon and its host: its version, its runtime
// ("linux"), when it started and its HostReport.
type Info = api.Info

// HostReport is the daemon's host check: taken at start, with the data
// dir's space and the open-file limit taken again at CheckedAt.
type HostReport = api.HostReport

// HostCheck is one check of a HostReport.
type HostCheck = api.HostCheck

// Info returns the daemon's version, runtime and host report. It needs
// the admin scope.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	var out Info
	if err := c.doJSON(ctx, http.MethodGet, "/v1/info", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}
