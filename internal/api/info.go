package api

import (
	"context"
	"net/http"
	"time"

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

// infoResponse is the body of GET /v1/info.
type infoResponse struct {
	Version   string           `json:"version"`
	Runtime   string           `json:"runtime"`
	StartedAt time.Time        `json:"started_at"`
	Host      hostcheck.Report `json:"host"`
}

// getInfo serves GET /v1/info: the daemon's version and runtime, and what the
// host gives each guarantee the sandboxes rely on.
func (h *Handler) getInfo(c *call) error {
	if h.hostInfo == nil || h.hostInfo.Host == nil {
		return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not report on its host"}
	}
	return c.json(http.StatusOK, infoResponse{
		Version:   h.hostInfo.Version,
		Runtime:   h.hostInfo.Runtime,
		StartedAt: h.hostInfo.StartedAt,
		Host:      h.hostInfo.Host(c.r.Context()),
	})
}
