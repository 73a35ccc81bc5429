package api

import (
	"context"
	"net/http"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/hostcheck"
)

// Info describes the daemon for GET /v1/info.
type Info struct {
	// Version is the daemon's version; Runtime names its sandbox backend.
	Version, Runtime string
	// StartedAt is when the daemon started.
	StartedAt time.Time
	// Host returns the host report: the one taken at start, with its
	// quick checks (the data dir's space, the open-file limit) taken
	// again (hostcheck.Refresh). It must not block for long.
	Host func(ctx context.Context) hostcheck.Report
}

// toHostReportJSON is the wire form of r.
func toHostReportJSON(r hostcheck.Report) wire.HostReport {
	out := wire.HostReport{OK: r.OK, ProbedAt: r.ProbedAt, CheckedAt: r.CheckedAt}
	if r.Checks != nil {
		out.Checks = make([]wire.HostCheck, 0, len(r.Checks))
	}
	for _, c := range r.Checks {
		out.Checks = append(out.Checks, wire.HostCheck{Name: c.Name, Status: string(c.Status), Mandatory: c.Mandatory,
			Found: c.Found, Meaning: c.Meaning, Fix: c.Fix})
	}
	return out
}

// getInfo serves GET /v1/info: the daemon's version and runtime, and what the
// host gives each guarantee the sandboxes rely on.
func (h *Handler) getInfo(c *call) error {
	if h.hostInfo == nil || h.hostInfo.Host == nil {
		return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not report on its host"}
	}
	return c.json(http.StatusOK, wire.Info{
		Version:   h.hostInfo.Version,
		Runtime:   h.hostInfo.Runtime,
		StartedAt: h.hostInfo.StartedAt,
		Host:      toHostReportJSON(h.hostInfo.Host(c.r.Context())),
	})
}
