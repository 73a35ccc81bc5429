//go:build !linux

package opennet

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Config configures a Router (see the Linux build).
type Config struct {
	Uplink                       string
	Pool                         netip.Prefix
	NetNS                        string
	LogGroup                     uint16
	MaxFlows, MaxFlowsPerSandbox int
}

// Router is Linux-only.
type Router struct{}

// New fails: the open network needs Linux (veths, nftables).
func New(Config, *slog.Logger) (*Router, error) {
	return nil, fmt.Errorf("open network: %w on this OS", errdefs.ErrNotSupported)
}

func (r *Router) Close()             {}
func (r *Router) Pool() netip.Prefix { return netip.Prefix{} }
func (r *Router) Attach(id string, ns *os.File, allow []netip.Prefix) (Lease, error) {
	return Lease{}, fmt.Errorf("open network: %w on this OS", errdefs.ErrNotSupported)
}
func (r *Router) Detach(string) error           { return nil }
func (r *Router) Prune(func(string) bool) error { return nil }
func (r *Router) Attached(string) (Lease, bool) { return Lease{}, false }
func (r *Router) OnEvent(Sink)                  {}
func (r *Router) Stats(string) (egress.Stats, bool) {
	return egress.Stats{}, false
}
