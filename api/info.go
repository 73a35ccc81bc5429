package api

import "time"

// Info is the body of GET /v1/info: the daemon and its host.
type Info struct {
	// Version is the daemon's version.
	Version string `json:"version"`
	// Runtime names its sandbox backend ("linux").
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
	OK bool `json:"ok"`
	// ProbedAt is when the whole report was taken; CheckedAt when its
	// quick checks were last taken again.
	ProbedAt  time.Time `json:"probed_at"`
	CheckedAt time.Time `json:"checked_at"`
}

// HostCheck is one check of a HostReport.
type HostCheck struct {
	// Name identifies it ("kernel", "cgroup_controllers", "landlock", ...).
	Name string `json:"name"`
	// Status is "ok", "warn" (an optional guarantee is missing: the
	// daemon runs without it) or "fail" (a mandatory one is).
	Status string `json:"status"`
	// Mandatory says whether the daemon refuses to start when it fails.
	Mandatory bool `json:"mandatory"`
	// Found is what the host gives, in a line.
	Found string `json:"found"`
	// Meaning is what that means for the sandboxes' isolation.
	Meaning string `json:"meaning"`
	// Fix, for a warning or failure, is the host setting to change.
	Fix string `json:"fix,omitempty"`
}
