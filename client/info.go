package client

import (
	"context"
	"net/http"
	"time"
)

// Info describes the daemon and its host.
type Info struct {
	// Version is the daemon's version; Runtime names its sandbox backend
	// ("linux").
	Version string `json:"version"`
	Runtime string `json:"runtime"`
	// StartedAt is when the daemon started.
	StartedAt time.Time `json:"started_at"`
	// Host is what the host gives each guarantee the sandboxes rely on.
	Host HostReport `json:"host"`
}

// HostReport is the daemon's host check: taken at start, with the data
// dir's space and the open-file limit taken again at CheckedAt.
type HostReport struct {
	// Checks are in a fixed order.
	Checks []HostCheck `json:"checks"`
	// OK is false when a mandatory check fails (a daemon does not start
	// on such a host, so a running one reports true unless its disk
	// filled since).
	OK        bool      `json:"ok"`
	ProbedAt  time.Time `json:"probed_at"`
	CheckedAt time.Time `json:"checked_at"`
}

// HostCheck is one check of a HostReport.
type HostCheck struct {
	// Name identifies it ("kernel", "cgroup_controllers", "landlock", ...).
	Name string `json:"name"`
	// Status is "ok", "warn" (an optional guarantee is missing: the
	// daemon runs without it) or "fail".
	Status    string `json:"status"`
	Mandatory bool   `json:"mandatory"`
	// Found is what the host gives; Meaning what that means for
	// isolation; Fix, for a warning or failure, the setting to change.
	Found   string `json:"found"`
	Meaning string `json:"meaning"`
	Fix     string `json:"fix,omitempty"`
}

// Info returns the daemon's version, runtime and host report. It needs
// the admin scope.
func (c *Client) Info(ctx context.Context) (*Info, error) {
	var out Info
	if err := c.doJSON(ctx, http.MethodGet, "/v1/info", nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	return &out, nil
}
