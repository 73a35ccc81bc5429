package sandbox

import (
	"fmt"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// NetworkLimits bound one sandbox's egress proxy (allowlist mode). Each
// zero field takes the daemon's value (EgressConfig.Limits), which is
// also its ceiling: a sandbox may ask for less, never for more.
type NetworkLimits struct {
	// MaxConns caps the connections open through the proxy at once
	// (egress.Limits.MaxConns).
	MaxConns int `json:"max_conns,omitempty"`
	// BandwidthBytesPerSec caps the proxy's throughput in each direction
	// (egress.Limits.BandwidthBytesPerSec).
	BandwidthBytesPerSec int64 `json:"bandwidth_bytes_per_sec,omitempty"`
	// IdleTimeout ends a connection on which nothing moved for this long
	// (egress.Limits.IdleTimeout); whole seconds.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
}

// check validates l's own values (not the daemon's ceilings: see
// Manager.checkNetworkLimits).
func (l NetworkLimits) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("network.limits: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case l.MaxConns < 0:
		return bad("max conns must not be negative")
	case l.BandwidthBytesPerSec < 0:
		return bad("bandwidth must not be negative")
	case l.IdleTimeout < 0:
		return bad("idle timeout must not be negative")
	case l.IdleTimeout%time.Second != 0:
		return bad("idle timeout must be whole seconds")
	}
	return nil
}

// egressDefaults fills the zero limits of l, the daemon's proxy limits,
// with the proxy's own defaults: the values the daemon's proxies run
// with, which are the ceilings of a sandbox's NetworkLimits.
func egressDefaults(l egress.Limits) egress.Limits {
	if l.MaxConns == 0 {
		l.MaxConns = egress.DefaultMaxConns
	}
	if l.IdleTimeout == 0 {
		l.IdleTimeout = egress.DefaultIdleTimeout
	}
	return l
}

// EgressLimits returns the limits a proxy of network n runs with: n's
// limits over the daemon's (c.Limits, with the proxy's defaults), none
// above them (a sandbox adopted by a daemon restarted with lower limits
// gets the daemon's).
func (c EgressConfig) EgressLimits(n NetworkLimits) egress.Limits {
	l := egressDefaults(c.Limits)
	if n.MaxConns > 0 {
		l.MaxConns = min(n.MaxConns, l.MaxConns)
	}
	if bw := n.BandwidthBytesPerSec; bw > 0 && (l.BandwidthBytesPerSec == 0 || bw < l.BandwidthBytesPerSec) {
		l.BandwidthBytesPerSec = bw
	}
	if n.IdleTimeout > 0 {
		l.IdleTimeout = min(n.IdleTimeout, l.IdleTimeout)
	}
	return l
}

// checkNetworkLimits refuses limits above the daemon's: its proxy limits
// are the operator's ceiling (a bandwidth of 0 there is no ceiling).
func (m *Manager) checkNetworkLimits(l NetworkLimits) error {
	max := egressDefaults(m.cfg.Egress.Limits)
	bad := func(what string, v, limit any) error {
		return fmt.Errorf("network.limits: %s %v is above this daemon's %v: %w", what, v, limit, errdefs.ErrInvalidArgument)
	}
	switch {
	case l.MaxConns > max.MaxConns:
		return bad("max conns", l.MaxConns, max.MaxConns)
	case max.BandwidthBytesPerSec > 0 && l.BandwidthBytesPerSec > max.BandwidthBytesPerSec:
		return bad("bandwidth (bytes/s)", l.BandwidthBytesPerSec, max.BandwidthBytesPerSec)
	case l.IdleTimeout > max.IdleTimeout:
		return bad("idle timeout", l.IdleTimeout, max.IdleTimeout)
	}
	return nil
}

// EffectiveNetworkLimits returns the limits the proxy of a sandbox in
// network n runs with, every field filled in (a bandwidth of 0 is no
// cap).
func (m *Manager) EffectiveNetworkLimits(n Network) NetworkLimits {
	l := m.cfg.Egress.EgressLimits(n.Limits)
	return NetworkLimits{MaxConns: l.MaxConns, BandwidthBytesPerSec: l.BandwidthBytesPerSec, IdleTimeout: l.IdleTimeout}
}

// CheckNetwork reports whether the manager accepts n, with the error
// Create and SetNetwork would return for its syntax and for limits
// above the daemon's (not for credentials naming missing secrets, nor
// for mode open on a daemon without an open network).
func (m *Manager) CheckNetwork(n Network) error {
	n, _, err := n.resolve()
	if err != nil {
		return err
	}
	return m.checkNetworkLimits(n.Limits)
}

// templateNetwork is the default network of a template (layers.Config's
// Network, via template.Networker), or false when it has none.
func templateNetwork(src template.Source) (Network, bool) {
	t, ok := src.(template.Networker)
	if !ok {
		return Network{}, false
	}
	tn := t.Network()
	if tn == nil {
		return Network{}, false
	}
	return NetworkOfTemplate(*tn), true
}

// NetworkOfTemplate is the sandbox form of a template's default network.
func NetworkOfTemplate(tn layers.Network) Network {
	n := Network{Mode: tn.Mode, Allow: tn.Allow, Limits: NetworkLimits{
		MaxConns: tn.MaxConns, BandwidthBytesPerSec: tn.BandwidthBytesPerSec, IdleTimeout: tn.IdleTimeout}}
	if n.Mode == "" {
		n.Mode = NetworkNone
	}
	return cloneNetwork(n)
}

// TemplateNetwork is the template form of n, a validated network without
// credentials (a template may be shared, and credentials name one
// tenant's secrets).
func TemplateNetwork(n Network) (layers.Network, error) {
	n, _, err := n.resolve()
	if err != nil {
		return layers.Network{}, err
	}
	if len(n.Credentials) > 0 {
		return layers.Network{}, fmt.Errorf("network.credentials: a template's network cannot name credentials (they name one tenant's secrets, and a template may be shared); set them on the sandbox: %w", errdefs.ErrInvalidArgument)
	}
	return layers.Network{Mode: n.Mode, Allow: n.Allow, MaxConns: n.Limits.MaxConns,
		BandwidthBytesPerSec: n.Limits.BandwidthBytesPerSec, IdleTimeout: n.Limits.IdleTimeout}, nil
}
