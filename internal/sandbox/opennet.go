package sandbox

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/opennet"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// OpenNetwork plugs sandboxes in NetworkOpen mode into a routed network
// (opennet.Router). Attach gives a sandbox its interface and address, or
// updates what it lists when it has them; Detach removes them; Prune
// removes those of every sandbox keep does not claim.
type OpenNetwork interface {
	Attach(id string, ns *os.File, allow []netip.Prefix) (opennet.Lease, error)
	Detach(id string) error
	Prune(keep func(id string) bool) error
}

var _ OpenNetwork = (*opennet.Router)(nil)

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
