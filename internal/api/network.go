package api

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// ActionSandboxNetwork is the audit action of PATCH
// /v1/sandboxes/{id}/network.
const ActionSandboxNetwork = "sandbox.network"

// actionEgressConnect is the audit action the daemon writes for each
// egress decision of a sandbox's proxy (daemon.ActionEgressConnect).
const actionEgressConnect = "egress.connect"

// networkFrom is the manager's form of a request's network policy: nil
// is none given (a create's template default), a network without a mode
// is mode none. Its limits are checked against the daemon's, ceiling
// (sandbox.EgressConfig.EgressLimits of none), and errors name them
// after field ("network." in a create, "" in a PATCH).
func networkFrom(n *wire.Network, field string, ceiling egress.Limits) (sandbox.Network, error) {
	if n == nil {
		return sandbox.Network{}, nil
	}
	out := sandbox.Network{Mode: n.Mode, Allow: n.Allow}
	if out.Mode == "" {
		out.Mode = sandbox.NetworkNone
	}
	for _, c := range n.Credentials {
		out.Credentials = append(out.Credentials, egress.Credential(c))
	}
	if l := n.Limits; l != nil {
		field += "limits."
		for _, f := range []struct {
			name   string
			v, max int64
		}{
			{"max_connections", int64(l.MaxConnections), int64(ceiling.MaxConns)},
			{"bandwidth_bytes_per_s", l.BandwidthBytesPerS, ceiling.BandwidthBytesPerSec},
			{"idle_timeout_s", l.IdleTimeoutS, int64(ceiling.IdleTimeout / time.Second)},
		} {
			switch {
			case f.v < 0:
				return out, invalidf("%s%s must not be negative", field, f.name)
			case f.max > 0 && f.v > f.max:
				return out, invalidf("%s%s %d is above this server's limit of %d", field, f.name, f.v, f.max)
			}
		}
		out.Limits = sandbox.NetworkLimits{MaxConns: l.MaxConnections, BandwidthBytesPerSec: l.BandwidthBytesPerS,
			IdleTimeout: time.Duration(l.IdleTimeoutS) * time.Second}
	}
	return out, nil
}

// networkCeiling is the daemon's egress limits: a sandbox's ceilings.
func (h *Handler) networkCeiling() egress.Limits {
	return h.mgr.Config().Egress.EgressLimits(sandbox.NetworkLimits{})
}

// networkLimitsView is the wire form of network limits.
func networkLimitsView(l sandbox.NetworkLimits) *wire.NetworkLimits {
	return &wire.NetworkLimits{MaxConnections: l.MaxConns, BandwidthBytesPerS: l.BandwidthBytesPerSec,
		IdleTimeoutS: int64(l.IdleTimeout / time.Second)}
}

// networkView is the wire form of a network policy (a template's
// default; no counters).
func networkView(n sandbox.Network) *wire.Network {
	out := &wire.Network{Mode: n.Mode, Allow: n.Allow, Credentials: credentialsView(n.Credentials)}
	if n.Limits != (sandbox.NetworkLimits{}) {
		out.Limits = networkLimitsView(n.Limits)
	}
	return out
}

// credentialsView is the wire form of a network's credentials: names of
// secrets, never values.
func credentialsView(cs []egress.Credential) []wire.NetworkCredential {
	var out []wire.NetworkCredential
	for _, c := range cs {
		out = append(out, wire.NetworkCredential(c))
	}
	return out
}

// networkDetails are the audit details of a network policy: its mode,
// its size and a digest of its entries (the list itself may be long).
func networkDetails(n sandbox.Network) map[string]any {
	mode := n.Mode
	if mode == "" {
		mode = sandbox.NetworkNone
	}
	d := map[string]any{"mode": mode}
	if len(n.Allow) > 0 {
		sum := sha256.Sum256([]byte(strings.Join(n.Allow, "\n")))
		d["allow_entries"] = len(n.Allow)
		d["allow_sha256"] = hex.EncodeToString(sum[:])
	}
	if len(n.Credentials) > 0 {
		names := make([]string, len(n.Credentials))
		for i, c := range n.Credentials {
			names[i] = c.Host + " " + c.Header + ": " + c.Secret
		}
		d["credentials"] = names
	}
	if l := n.Limits; l != (sandbox.NetworkLimits{}) {
		d["limits"] = networkLimitsView(l)
	}
	return d
}

// toNetworkView is the wire form of sb's network, with its proxy's
// counters when it has one.
func (h *Handler) toNetworkView(sb sandbox.Sandbox) (wire.NetworkView, error) {
	out := wire.NetworkView{Mode: sb.Network.Mode, Allow: sb.Network.Allow, Credentials: credentialsView(sb.Network.Credentials)}
	if out.Mode == "" {
		out.Mode = wire.NetworkNone
	}
	if out.Allow == nil {
		out.Allow = []string{}
	}
	if out.Mode == wire.NetworkAllowlist {
		out.Limits = networkLimitsView(h.mgr.EffectiveNetworkLimits(sb.Network))
	}
	st, ok, err := h.mgr.NetworkStats(sb.ID)
	if err != nil {
		return out, err
	}
	if ok {
		out.Stats = &wire.NetworkStats{Conns: st.Conns, Active: st.Active, Allowed: st.Allowed,
			Refused: st.Refused, BytesUp: st.BytesUp, BytesDown: st.BytesDown, DNSQueries: st.DNSQueries}
	}
	if out.Mode == wire.NetworkOpen {
		addr, ok, err := h.mgr.NetworkAddress(sb.ID)
		if err != nil {
			return out, err
		}
		if ok {
			out.Address = addr.String()
		}
	}
	return out, nil
}

// getNetwork serves GET /v1/sandboxes/{id}/network.
func (h *Handler) getNetwork(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	v, err := h.toNetworkView(sb)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, v)
}

// setNetwork serves PATCH /v1/sandboxes/{id}/network.
func (h *Handler) setNetwork(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	var req wire.Network
	if err := c.decodeJSON(&req, false); err != nil {
		return err
	}
	if req.Mode == "" {
		return invalidf("mode is required: %q or %q", sandbox.NetworkNone, sandbox.NetworkAllowlist)
	}
	n, err := networkFrom(&req, "", h.networkCeiling())
	if err != nil {
		return err
	}
	c.ev.Details = networkDetails(n)
	if err := h.mgr.CheckNetwork(n); err != nil {
		return err
	}
	if err := c.begin(); err != nil {
		return err
	}
	sb, err = h.mgr.SetNetwork(c.r.Context(), sb.ID, n)
	if err != nil {
		return err
	}
	if err := c.commit(); err != nil {
		return err
	}
	v, err := h.toNetworkView(sb)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, v)
}

// networkLog serves GET /v1/sandboxes/{id}/network/log: the sandbox's
// egress.connect audit records (GET /v1/audit with action and target
// set), paged by after and limit.
func (h *Handler) networkLog(c *call) error {
	sb, err := c.ownedSandbox()
	if err != nil {
		return err
	}
	if h.auditLog == nil {
		return auditNotServed()
	}
	if _, err := parseQuery(c.r.URL.RawQuery, "after", "limit"); err != nil {
		return err
	}
	q, phase, err := parseAuditQuery(c.r.URL.RawQuery, c.p.TenantID)
	if err != nil {
		return err
	}
	q.Action, q.Target = actionEgressConnect, sb.ID
	return h.writeAuditPage(c, q, phase)
}
