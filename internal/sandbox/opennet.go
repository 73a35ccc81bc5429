package sandbox

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/opennet"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// OpenNetwork plugs sandboxes in NetworkOpen mode into a routed network
// (opennet.Router). Attach gives a sandbox its interface and address, or
// updates what it lists when it has them; Detach removes them; Prune
// removes those of every sandbox keep does not claim; Attached reports a
// sandbox's lease. Its evidence: OnEvent makes a sink receive an
// egress.Event per flow ended and per refusal recorded, and Stats gives a
// sandbox's counters.
type OpenNetwork interface {
	Attach(id string, ns *os.File, allow []netip.Prefix) (opennet.Lease, error)
	Detach(id string) error
	Prune(keep func(id string) bool) error
	Attached(id string) (opennet.Lease, bool)
	OnEvent(f opennet.Sink)
	Stats(id string) (egress.Stats, bool)
}

var _ OpenNetwork = (*opennet.Router)(nil)

// subscribeOpen sends the open network's evidence, with each sandbox's
// tenant, where the proxies' goes (EgressConfig.Events).
func (m *Manager) subscribeOpen() {
	if m.cfg.OpenNetwork == nil || m.cfg.Egress.Events == nil {
		return
	}
	f := m.cfg.Egress.Events
	m.cfg.OpenNetwork.OnEvent(func(id string, ev egress.Event) {
		m.mu.Lock()
		var owner string
		if rec := m.records[id]; rec != nil {
			owner = rec.sb.Owner
		}
		m.mu.Unlock()
		f(EgressEvent{Sandbox: id, Owner: owner, Event: ev})
	})
}

// openStats returns the open network's counters of sandbox id, if it is
// attached.
func (m *Manager) openStats(id string) (egress.Stats, bool) {
	if m.cfg.OpenNetwork == nil {
		return egress.Stats{}, false
	}
	return m.cfg.OpenNetwork.Stats(id)
}

// NetworkAddress returns the address of sandbox id in the open network;
// ok is false when it has none (it is not in mode open).
func (m *Manager) NetworkAddress(id string) (addr netip.Addr, ok bool, err error) {
	m.mu.Lock()
	_, found := m.records[id]
	m.mu.Unlock()
	if !found {
		return netip.Addr{}, false, notFound(id)
	}
	if m.cfg.OpenNetwork == nil {
		return netip.Addr{}, false, nil
	}
	lease, ok := m.cfg.OpenNetwork.Attached(id)
	return lease.Addr, ok, nil
}

// checkOpen refuses mode open when the daemon has no open network.
func (m *Manager) checkOpen(n Network) error {
	if n.Mode == NetworkOpen && m.cfg.OpenNetwork == nil {
		return fmt.Errorf("network mode %q is not enabled on this daemon (it needs an uplink: see docs/SECURITY.md): %w", NetworkOpen, errdefs.ErrNotSupported)
	}
	return nil
}

// attachOpen plugs rec's sandbox into the open network with n's list.
func (m *Manager) attachOpen(rec *record, n Network) error {
	if err := m.checkOpen(n); err != nil {
		return err
	}
	allow, err := opennet.ParseAllow(n.Allow)
	if err != nil {
		return err
	}
	nsi, ok := rec.inst.(runtime.NetNS)
	if !ok {
		return fmt.Errorf("sandbox %s: this runtime gives sandboxes no network namespace to plug: %w", rec.sb.ID, errdefs.ErrNotSupported)
	}
	ns, err := nsi.OpenNetNS()
	if err != nil {
		return err
	}
	defer ns.Close()
	lease, err := m.cfg.OpenNetwork.Attach(rec.sb.ID, ns, allow)
	if err != nil {
		return err
	}
	m.log.Info("sandbox attached to the open network", "sandbox", rec.sb.ID, "address", lease.Addr, "listed", len(allow))
	return nil
}

// detachOpen removes rec's sandbox from the open network, if it is in it.
func (m *Manager) detachOpen(rec *record) {
	if m.cfg.OpenNetwork == nil {
		return
	}
	if err := m.cfg.OpenNetwork.Detach(rec.sb.ID); err != nil {
		m.log.Error("detaching a sandbox from the open network", "sandbox", rec.sb.ID, "err", err)
	}
}

// pruneOpen removes from the open network what a previous daemon left
// for sandboxes that are gone or no longer open. Call once the records
// of adopted sandboxes are in.
func (m *Manager) pruneOpen() {
	if m.cfg.OpenNetwork == nil {
		return
	}
	m.mu.Lock()
	keep := map[string]bool{}
	for id, rec := range m.records {
		if rec.sb.Network.Mode == NetworkOpen && !rec.ending {
			keep[id] = true
		}
	}
	m.mu.Unlock()
	if err := m.cfg.OpenNetwork.Prune(func(id string) bool { return keep[id] }); err != nil {
		m.log.Error("removing open-network interfaces of gone sandboxes", "err", err)
	}
}
