package sandbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/opennet"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// The network modes of a sandbox.
const (
	// NetworkNone: loopback only (the default).
	NetworkNone = "none"
	// NetworkAllowlist: the listed destinations only, through the
	// sandbox's own egress proxy (see Network).
	NetworkAllowlist = "allowlist"
	// NetworkOpen: a routed network of the sandbox's own (an interface
	// and an address, masqueraded out of the daemon's uplink) that
	// reaches everything but the host, other sandboxes and the blocked
	// ranges (opennet.Blocked); Allow lists IPv4 addresses and CIDRs
	// of those ranges it may reach (see OpenNetwork).
	NetworkOpen = "open"
)

// Network is a sandbox's network policy. Its network namespace never has
// more than loopback: in NetworkAllowlist mode the manager runs an
// egress.Proxy for the sandbox on the host, on the socket its runtime
// gives it (runtime.Egress), which the sandbox's agent bridges to
// runtime.EgressBridgeAddr inside; every process started through the
// manager gets the proxy variables (proxyEnv). Allow is the allowlist
// (egress.ParsePolicy's entries; in its canonical form once resolved).
type Network struct {
	Mode  string   `json:"mode"`
	Allow []string `json:"allow,omitempty"`
	// Credentials are headers the proxy adds, with a stored secret of
	// the sandbox's tenant, to requests to one allowed host (see
	// egress.Credential and EgressCredentials); allowlist mode only.
	Credentials []egress.Credential `json:"credentials,omitempty"`
	// Limits bound the sandbox's proxy below the daemon's limits (see
	// NetworkLimits); allowlist mode only.
	Limits NetworkLimits `json:"limits,omitzero"`
}

// resolve validates n and returns it in canonical form, with its policy
// (nil in mode none).
func (n Network) resolve() (Network, *egress.Policy, error) {
	switch n.Mode {
	case "", NetworkNone:
		if len(n.Allow) > 0 || len(n.Credentials) > 0 || n.Limits != (NetworkLimits{}) {
			return Network{}, nil, fmt.Errorf("network.allow, network.credentials and network.limits need network mode %q: %w", NetworkAllowlist, errdefs.ErrInvalidArgument)
		}
		return Network{Mode: NetworkNone}, nil, nil
	case NetworkAllowlist:
		pol, err := egress.ParsePolicy(n.Allow)
		if err != nil {
			return Network{}, nil, fmt.Errorf("network.allow: %w", err)
		}
		cs, err := parseCredentials(n.Credentials, pol)
		if err != nil {
			return Network{}, nil, err
		}
		if err := n.Limits.check(); err != nil {
			return Network{}, nil, err
		}
		return Network{Mode: NetworkAllowlist, Allow: pol.Entries(), Credentials: cs.List(), Limits: n.Limits}, pol, nil
	case NetworkOpen:
		if len(n.Credentials) > 0 || n.Limits != (NetworkLimits{}) {
			return Network{}, nil, fmt.Errorf("network.credentials and network.limits need network mode %q: %w", NetworkAllowlist, errdefs.ErrInvalidArgument)
		}
		allow, err := opennet.ParseAllow(n.Allow)
		if err != nil {
			return Network{}, nil, err
		}
		out := Network{Mode: NetworkOpen}
		for _, p := range allow {
			out.Allow = append(out.Allow, p.String())
		}
		return out, nil, nil
	}
	mode := n.Mode
	if len(mode) > 64 {
		mode = mode[:64]
	}
	return Network{}, nil, fmt.Errorf("network mode %q is unknown; want %q, %q or %q: %w", mode, NetworkNone, NetworkAllowlist, NetworkOpen, errdefs.ErrInvalidArgument)
}

// ValidateNetwork reports whether n is a network policy the manager
// accepts, with the error Create and SetNetwork would return (but for
// what depends on the daemon: see Manager.CheckNetwork).
func ValidateNetwork(n Network) error {
	_, _, err := n.resolve()
	return err
}

// EgressConfig configures the sandboxes' egress proxies.
type EgressConfig struct {
	// Limits bound each sandbox's proxy (egress.Limits; zero fields take
	// its defaults). MaxConns, BandwidthBytesPerSec and IdleTimeout are
	// also the ceilings of a sandbox's own (Network.Limits).
	Limits egress.Limits
	// Events, if set, receives every decision of every proxy, with the
	// sandbox it was made for. It is called from the proxy's connection
	// goroutines and must not block (the daemon queues them for the
	// audit log).
	Events func(EgressEvent)
	// Resolver resolves names for the proxies; tests set it. Default
	// the host's resolver.
	Resolver egress.Resolver
	// Credentials, if set, lets networks name credentials (see
	// EgressCredentials).
	Credentials *EgressCredentials
}

// EgressEvent is an egress.Event of one sandbox.
type EgressEvent struct {
	Sandbox string
	Owner   string
	egress.Event
}

// proxyEnv is the environment that points a sandbox's processes at its
// egress bridge, in both the upper- and lower-case spellings tools read.
// ALL_PROXY is SOCKS5 with names resolved by the proxy (socks5h), so
// nothing needs DNS inside the sandbox. NODE_USE_ENV_PROXY=1 makes
// Node's own fetch, http and https read the proxy variables (Node 22.21
// and 24 on; older versions ignore it, and their fetch reaches nothing:
// see docs/SECURITY.md). Built once; never modified (mergeEnv copies).
var proxyEnv = func() map[string]string {
	httpProxy := "http://" + runtime.EgressBridgeAddr
	env := map[string]string{"NODE_USE_ENV_PROXY": "1"}
	for k, v := range map[string]string{
		"HTTP_PROXY":  httpProxy,
		"HTTPS_PROXY": httpProxy,
		"ALL_PROXY":   "socks5h://" + runtime.EgressBridgeAddr,
		"NO_PROXY":    "localhost,127.0.0.1,::1",
	} {
		env[k] = v
		env[strings.ToLower(k)] = v
	}
	return env
}()

// netState is a sandbox's egress proxy, if it has one. mu serialises
// starting, changing and stopping it.
type netState struct {
	mu     sync.Mutex
	run    *egressRun
	closed bool // the sandbox is ending: no proxy starts any more
}

// egressRun is one running proxy.
type egressRun struct {
	proxy   *egress.Proxy
	anyName bool // egress.Config.AnyName: the DNS of an open sandbox
	cancel  context.CancelFunc
	done    chan struct{}
}

// stop ends the proxy (its listener, which removes the socket, and every
// connection) and waits for it, at most 10 s.
func (r *egressRun) stop() {
	r.cancel()
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
	}
}

// startEgressLocked starts rec's proxy with pol, creds and the network
// limits lim; with anyName, its DNS endpoint answers every name (an
// open sandbox's, see openPolicy). Call with rec.net.mu held and no
// proxy running.
func (m *Manager) startEgressLocked(rec *record, pol *egress.Policy, creds *egress.Credentials, lim NetworkLimits, anyName bool) error {
	id, owner := rec.sb.ID, rec.sb.Owner
	if rec.net.closed {
		return fmt.Errorf("sandbox %s is ending: %w", id, errdefs.ErrFailedPrecondition)
	}
	eg, ok := rec.inst.(runtime.Egress)
	if !ok {
		return fmt.Errorf("sandbox %s: this runtime gives sandboxes no egress: %w", id, errdefs.ErrNotSupported)
	}
	var onEvent func(egress.Event)
	if f := m.cfg.Egress.Events; f != nil {
		onEvent = func(ev egress.Event) { f(EgressEvent{Sandbox: id, Owner: owner, Event: ev}) }
	}
	px, err := egress.New(egress.Config{
		Policy:   pol,
		Limits:   m.cfg.Egress.EgressLimits(lim),
		Resolver: m.cfg.Egress.Resolver,
		OnEvent:  onEvent,
		Logger:   m.log.With("sandbox", id, "component", "egress"),
		// Every proxy can intercept when the daemon has a CA, so that a
		// PATCH may add credentials to a running sandbox.
		Intercept:   m.interception(owner),
		Credentials: creds,
		AnyName:     anyName,
	})
	if err != nil {
		return err
	}
	ln, err := eg.ListenEgress()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	run := &egressRun{proxy: px, anyName: anyName, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(run.done)
		if err := px.Serve(ctx, ln); err != nil {
			m.log.Error("egress proxy stopped", "sandbox", id, "err", err)
		}
	}()
	rec.net.run = run
	return nil
}

// startEgress starts the proxy of a sandbox being created or adopted in
// allowlist mode, or (anyName) the DNS proxy of one in open mode.
func (m *Manager) startEgress(rec *record, pol *egress.Policy, creds *egress.Credentials, lim NetworkLimits, anyName bool) error {
	rec.net.mu.Lock()
	defer rec.net.mu.Unlock()
	if rec.net.run != nil {
		return m.updateEgressLocked(rec, pol, creds, lim, anyName)
	}
	return m.startEgressLocked(rec, pol, creds, lim, anyName)
}

// openPolicy is the policy of an open sandbox's proxy, which serves it
// DNS only (egress.Config.AnyName): every name is answered, but one that
// resolves to a guarded address (private, loopback, metadata...) is
// refused unless n lists its range, as the open network's rules would
// refuse the packets. Its connections are refused but to the ranges n
// lists, which the sandbox reaches directly anyway; no proxy variables
// point at it (networkEnv).
func openPolicy(n Network) (*egress.Policy, error) {
	return egress.ParsePolicy(n.Allow)
}

// startOpenDNS starts the DNS proxy of rec, plugged into the open
// network with n.
func (m *Manager) startOpenDNS(rec *record, n Network) error {
	pol, err := openPolicy(n)
	if err != nil {
		return err
	}
	return m.startEgress(rec, pol, nil, NetworkLimits{}, true)
}

// updateEgressLocked gives rec's running proxy pol, creds and the limits
// lim. The connection and bandwidth caps change in place; a changed idle
// timeout, fixed in a running proxy, restarts it (its connections are
// cut and its counters start again). Call with rec.net.mu held.
func (m *Manager) updateEgressLocked(rec *record, pol *egress.Policy, creds *egress.Credentials, lim NetworkLimits, anyName bool) error {
	px := rec.net.run.proxy
	want := m.cfg.Egress.EgressLimits(lim)
	if px.Limits().IdleTimeout != want.IdleTimeout || rec.net.run.anyName != anyName {
		rec.net.run.stop()
		rec.net.run = nil
		return m.startEgressLocked(rec, pol, creds, lim, anyName)
	}
	if err := px.SetLimits(want); err != nil {
		return err
	}
	if err := px.SetCredentials(creds); err != nil {
		return err
	}
	return px.SetPolicy(pol)
}

// stopEgress stops rec's proxy for good: the sandbox is ending, or the
// manager closing (the next daemon starts it again on adoption).
func (m *Manager) stopEgress(rec *record) {
	rec.net.mu.Lock()
	defer rec.net.mu.Unlock()
	rec.net.closed = true
	if rec.net.run != nil {
		rec.net.run.stop()
		rec.net.run = nil
	}
}

// createEgress starts the proxy of a sandbox Create made in allowlist
// mode, or plugs one made in open mode into the open network; when it
// cannot, the sandbox is destroyed and the error returned.
func (m *Manager) createEgress(ctx context.Context, sb Sandbox, err error, pol *egress.Policy) (Sandbox, error) {
	if err != nil || sb.Ended() || (pol == nil && sb.Network.Mode != NetworkOpen) {
		return sb, err
	}
	m.mu.Lock()
	rec := m.records[sb.ID]
	m.mu.Unlock()
	if rec == nil {
		return Sandbox{}, notFound(sb.ID)
	}
	start := func() error { return m.startEgress(rec, pol, credsOf(sb.Network), sb.Network.Limits, false) }
	if pol == nil {
		start = func() error {
			if err := m.attachOpen(rec, sb.Network); err != nil {
				return err
			}
			return m.startOpenDNS(rec, sb.Network)
		}
	}
	if err := start(); err != nil {
		m.log.Error("starting the network of a new sandbox", "sandbox", sb.ID, "mode", sb.Network.Mode, "err", err)
		if derr := m.destroyRecord(ctx, rec, "its egress proxy did not start", false); derr != nil {
			m.log.Warn("destroying a sandbox whose egress proxy did not start", "sandbox", sb.ID, "err", derr)
		}
		if pol == nil {
			return Sandbox{}, publicErr("plug the sandbox into the open network", err)
		}
		return Sandbox{}, publicErr("start the sandbox's egress proxy", err)
	}
	return sb, nil
}

// adoptEgress restarts the proxy of an adopted sandbox from its record.
func (m *Manager) adoptEgress(rec *record, n *Network) {
	if n != nil && n.Mode == NetworkOpen {
		// Its interface stays across the restart: the router relearns
		// its lease (or, if it is gone, makes a new one).
		if err := m.attachOpen(rec, *n); err != nil {
			m.log.Error("attaching an adopted sandbox to the open network", "sandbox", rec.sb.ID, "err", err)
		}
		if err := m.startOpenDNS(rec, *n); err != nil {
			m.log.Error("restarting the DNS proxy of an adopted open sandbox", "sandbox", rec.sb.ID, "err", err)
		}
		return
	}
	if n == nil || n.Mode != NetworkAllowlist {
		return
	}
	_, pol, err := n.resolve()
	if err == nil {
		err = m.startEgress(rec, pol, credsOf(*n), n.Limits, false)
	}
	if err != nil {
		// The sandbox keeps running with no way out; a PATCH of its
		// network tries again.
		m.log.Error("restarting the egress proxy of an adopted sandbox", "sandbox", rec.sb.ID, "err", err)
	}
}

// SetNetwork changes the network policy of a running sandbox: from none
// to allowlist its proxy starts, from allowlist to none it stops (open
// connections are cut), and a changed allowlist applies at once to every
// destination asked for afterwards (connections already open stay).
// Changed limits apply at once: the connection cap to connections made
// afterwards, the bandwidth cap to open ones too; a changed idle timeout
// restarts the proxy (see updateEgressLocked). The
// proxy variables reach the processes started afterwards; processes
// already running keep the environment they started with. The policy is
// persisted for a restarted daemon.
func (m *Manager) SetNetwork(ctx context.Context, id string, n Network) (Sandbox, error) {
	n, pol, err := n.resolve()
	if err != nil {
		return Sandbox{}, err
	}
	if err := m.checkNetworkLimits(n.Limits); err != nil {
		return Sandbox{}, err
	}
	anyName := n.Mode == NetworkOpen
	if anyName {
		if pol, err = openPolicy(n); err != nil {
			return Sandbox{}, err
		}
	}
	rec, done, err := m.acquire(id)
	if err != nil {
		return Sandbox{}, err
	}
	defer done()
	if err := m.checkCredentials(ctx, rec.sb.Owner, n); err != nil {
		return Sandbox{}, err
	}
	creds := credsOf(n)
	if err := ctx.Err(); err != nil {
		return Sandbox{}, ctxErr(ctx, "set network")
	}
	if err := m.checkOpen(n); err != nil {
		return Sandbox{}, err
	}
	rec.net.mu.Lock()
	defer rec.net.mu.Unlock()
	m.mu.Lock()
	wasOpen := rec.sb.Network.Mode == NetworkOpen
	m.mu.Unlock()
	if n.Mode == NetworkOpen {
		if err := m.attachOpen(rec, n); err != nil {
			return Sandbox{}, publicErr("plug the sandbox into the open network", err)
		}
	} else if wasOpen {
		if err := m.cfg.OpenNetwork.Detach(id); err != nil {
			return Sandbox{}, publicErr("unplug the sandbox from the open network", err)
		}
	}
	switch {
	case pol == nil && rec.net.run != nil:
		rec.net.run.stop()
		rec.net.run = nil
	case pol != nil && rec.net.run != nil:
		if err := m.updateEgressLocked(rec, pol, creds, n.Limits, anyName); err != nil {
			return Sandbox{}, publicErr("change the sandbox's egress proxy", err)
		}
	case pol != nil:
		if err := m.startEgressLocked(rec, pol, creds, n.Limits, anyName); err != nil {
			return Sandbox{}, publicErr("start the sandbox's egress proxy", err)
		}
	}
	rec.saveMu.Lock()
	defer rec.saveMu.Unlock()
	m.mu.Lock()
	rec.sb.Network = n
	p := rec.persisted()
	sb := rec.snapshot()
	m.mu.Unlock()
	if err := m.state.save(id, p); err != nil {
		return Sandbox{}, err
	}
	m.log.Info("sandbox network set", "sandbox", id, "mode", n.Mode, "entries", len(n.Allow))
	return sb, nil
}

// NetworkStats returns the counters of the sandbox's egress proxy, or in
// open mode those of the open network (see opennet.Router.Stats); ok is
// false when it has none (mode none).
func (m *Manager) NetworkStats(id string) (stats egress.Stats, ok bool, err error) {
	m.mu.Lock()
	rec, found := m.records[id]
	m.mu.Unlock()
	if !found {
		return egress.Stats{}, false, notFound(id)
	}
	rec.net.mu.Lock()
	defer rec.net.mu.Unlock()
	run := rec.net.run
	if st, ok := m.openStats(id); ok {
		// An open sandbox's DNS proxy adds its queries and refusals.
		if run != nil && run.anyName {
			dns := run.proxy.Stats()
			st.DNSQueries += dns.DNSQueries
			st.Refused += dns.Refused
		}
		return st, true, nil
	}
	if run == nil || run.anyName {
		return egress.Stats{}, false, nil
	}
	return run.proxy.Stats(), true, nil
}

// cloneNetwork copies n's lists.
func cloneNetwork(n Network) Network {
	n.Allow = slices.Clone(n.Allow)
	n.Credentials = slices.Clone(n.Credentials)
	return n
}
