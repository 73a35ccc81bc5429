package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// egressRuntime wraps the fake runtime so that its instances have an
// egress socket (runtime.Egress) in dir, one per sandbox, which a test
// dials as the sandbox's bridge would.
type egressRuntime struct {
	runtime.Runtime
	dir string
}

func (r egressRuntime) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	inst, err := r.Runtime.Create(ctx, spec)
	if err != nil {
		return nil, err
	}
	return egressInstance{inst, r.dir}, nil
}

func (r egressRuntime) Recover(ctx context.Context) ([]runtime.Instance, error) {
	insts, err := r.Runtime.Recover(ctx)
	for i, inst := range insts {
		insts[i] = egressInstance{inst, r.dir}
	}
	return insts, err
}

type egressInstance struct {
	runtime.Instance
	dir string
}

func (i egressInstance) ListenEgress() (net.Listener, error) {
	path := filepath.Join(i.dir, i.ID()+".sock")
	os.Remove(path)
	return net.Listen("unix", path)
}

// mapResolver resolves every name to 127.0.0.1.
type mapResolver struct{}

func (mapResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// egressEvents collects the proxies' decisions.
type egressEvents struct {
	mu  sync.Mutex
	evs []EgressEvent
}

func (e *egressEvents) add(ev EgressEvent) {
	e.mu.Lock()
	e.evs = append(e.evs, ev)
	e.mu.Unlock()
}

func (e *egressEvents) count(reason egress.Reason) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, ev := range e.evs {
		if ev.Reason == reason {
			n++
		}
	}
	return n
}

// netEnv is an env whose manager runs real egress proxies for its
// sandboxes, on sockets in sockDir, reaching an echo server on loopback.
type netEnv struct {
	*env
	sockDir string
	events  *egressEvents
	target  string // allowed.test:PORT of the echo server
}

func newNetEnv(t *testing.T, sources ...template.Source) *netEnv {
	t.Helper()
	e := newEnv(t)
	if len(sources) > 0 {
		reg, err := template.NewRegistry(append([]template.Source{staticSource{"host"}}, sources...)...)
		if err != nil {
			t.Fatal(err)
		}
		e.templates = reg
	}
	// Unix socket paths are short: a directory of its own under /tmp.
	dir, err := os.MkdirTemp("", "egress")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	return &netEnv{env: e, sockDir: dir, events: &egressEvents{},
		target: fmt.Sprintf("allowed.test:%d", ln.Addr().(*net.TCPAddr).Port)}
}

// manager starts a manager (recovering what a previous one left) whose
// daemon-wide egress limits are lim.
func (e *netEnv) manager(lim egress.Limits) *Manager {
	e.t.Helper()
	cfg := Config{StateDir: e.stateDir, HealthInterval: -1,
		Egress: EgressConfig{Limits: lim, Resolver: mapResolver{}, Events: e.events.add}}
	m, err := New(egressRuntime{e.rt, e.sockDir}, e.templates, cfg, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = m.Close(context.Background()) })
	if err := m.Start(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.WaitRecovered(ctx); err != nil {
		e.t.Fatal(err)
	}
	return m
}

// tunnel opens a CONNECT tunnel to the echo server through sandbox id's
// proxy and checks it echoes; ok is false when the proxy closed the
// connection instead.
func (e *netEnv) tunnel(t *testing.T, id string) (c net.Conn, ok bool) {
	t.Helper()
	c, err := net.Dial("unix", filepath.Join(e.sockDir, id+".sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", e.target, e.target)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return c, false
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("CONNECT: %s", resp.Status)
	}
	io.WriteString(c, "x")
	if b, err := br.ReadByte(); err != nil || b != 'x' {
		t.Fatalf("echo through the tunnel: %q %v", b, err)
	}
	c.SetDeadline(time.Time{})
	return c, true
}

// TestNetworkLimits: a sandbox's max_connections is enforced by its proxy
// (a second connection refused as conn_limit), a limit above the
// daemon's is refused, a PATCH raises the cap in place (the open
// connection stays), and the limits survive a daemon restart, enforced
// by the adopted sandbox's new proxy.
func TestNetworkLimits(t *testing.T) {
	ctx := context.Background()
	e := newNetEnv(t)
	daemon := egress.Limits{MaxConns: 8, BandwidthBytesPerSec: 1 << 20}
	m := e.manager(daemon)
	allow := []string{"allowed.test", "127.0.0.1"}

	for _, l := range []NetworkLimits{{MaxConns: 9}, {BandwidthBytesPerSec: 2 << 20}, {IdleTimeout: 6 * time.Minute}} {
		_, err := m.Create(ctx, Spec{Network: Network{Mode: NetworkAllowlist, Allow: allow, Limits: l}})
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("limits %+v above the daemon's %+v: %v, want invalid argument", l, daemon, err)
		}
	}
	if _, err := m.Create(ctx, Spec{Network: Network{Mode: NetworkNone, Limits: NetworkLimits{MaxConns: 1}}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("limits in mode none: %v", err)
	}

	sb, err := m.Create(ctx, Spec{Network: Network{Mode: NetworkAllowlist, Allow: allow, Limits: NetworkLimits{MaxConns: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.EffectiveNetworkLimits(sb.Network); got != (NetworkLimits{MaxConns: 1, BandwidthBytesPerSec: 1 << 20, IdleTimeout: egress.DefaultIdleTimeout}) {
		t.Errorf("effective limits %+v", got)
	}
	first, ok := e.tunnel(t, sb.ID)
	if !ok {
		t.Fatal("the first connection was refused")
	}
	if _, ok := e.tunnel(t, sb.ID); ok {
		t.Fatal("a second connection passed a cap of 1")
	}
	eventually(t, 5*time.Second, "a conn_limit event", func() bool { return e.events.count(egress.ReasonConnLimit) == 1 })

	// Raised in place: the first connection stays open (no restart).
	if _, err := m.SetNetwork(ctx, sb.ID, Network{Mode: NetworkAllowlist, Allow: allow, Limits: NetworkLimits{MaxConns: 2}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.tunnel(t, sb.ID); !ok {
		t.Error("a second connection refused under a cap raised to 2")
	}
	first.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := first.Write([]byte("y")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(first, make([]byte, 1)); err != nil {
		t.Errorf("the connection open before the PATCH: %v", err)
	}
	if _, err := m.SetNetwork(ctx, sb.ID, Network{Mode: NetworkAllowlist, Allow: allow, Limits: NetworkLimits{MaxConns: 9}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("PATCH above the daemon's cap: %v", err)
	}

	// A restarted daemon adopts the sandbox with its limits.
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	m2 := e.manager(daemon)
	got, err := m2.Get(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Network.Limits != (NetworkLimits{MaxConns: 2}) {
		t.Fatalf("limits after the restart %+v, want max conns 2", got.Network.Limits)
	}
	for range 2 {
		if _, ok := e.tunnel(t, sb.ID); !ok {
			t.Fatal("a connection within the cap refused after the restart")
		}
	}
	if _, ok := e.tunnel(t, sb.ID); ok {
		t.Error("a third connection passed the cap of 2 after the restart")
	}

	// A changed idle timeout restarts the proxy with it.
	if _, err := m2.SetNetwork(ctx, sb.ID, Network{Mode: NetworkAllowlist, Allow: allow, Limits: NetworkLimits{MaxConns: 2, IdleTimeout: time.Minute}}); err != nil {
		t.Fatal(err)
	}
	m2.mu.Lock()
	rec := m2.records[sb.ID]
	m2.mu.Unlock()
	rec.net.mu.Lock()
	lim := rec.net.run.proxy.Limits()
	rec.net.mu.Unlock()
	if lim.IdleTimeout != time.Minute || lim.MaxConns != 2 || lim.BandwidthBytesPerSec != 1<<20 {
		t.Errorf("proxy limits after the PATCH %+v", lim)
	}
}

// netTemplate is a template with a default network.
type netTemplate struct {
	staticSource
	n layers.Network
}

func (t netTemplate) Network() *layers.Network { return &t.n }

// TestTemplateNetwork: a sandbox created without a network gets its
// template's default, one with a network keeps its own, and a template's
// limits above the daemon's refuse the create.
func TestTemplateNetwork(t *testing.T) {
	ctx := context.Background()
	e := newNetEnv(t,
		netTemplate{staticSource{"web"}, layers.Network{Mode: NetworkAllowlist, Allow: []string{"allowed.test", "127.0.0.1"}, MaxConns: 1}},
		netTemplate{staticSource{"greedy"}, layers.Network{Mode: NetworkAllowlist, Allow: []string{"allowed.test", "127.0.0.1"}, MaxConns: 100}})
	m := e.manager(egress.Limits{MaxConns: 8})

	sb, err := m.Create(ctx, Spec{Template: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Network.Mode != NetworkAllowlist || len(sb.Network.Allow) != 2 || sb.Network.Allow[0] != "allowed.test" || sb.Network.Limits.MaxConns != 1 {
		t.Fatalf("network %+v, want the template's", sb.Network)
	}
	if _, ok := e.tunnel(t, sb.ID); !ok {
		t.Fatal("the template's allowlist did not let the sandbox out")
	}
	if _, ok := e.tunnel(t, sb.ID); ok {
		t.Error("the template's max conns 1 was not enforced")
	}

	own, err := m.Create(ctx, Spec{Template: "web", Network: Network{Mode: NetworkNone}})
	if err != nil {
		t.Fatal(err)
	}
	if own.Network.Mode != NetworkNone || len(own.Network.Allow) != 0 {
		t.Errorf("network %+v, want the request's none", own.Network)
	}
	if _, err := m.Create(ctx, Spec{Template: "greedy"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a template network above the daemon's limits: %v", err)
	}
	if _, err := TemplateNetwork(Network{Mode: NetworkAllowlist, Allow: []string{"api.test"},
		Credentials: []egress.Credential{{Host: "api.test", Header: "X-Api-Key", Secret: "k"}}}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a template network with credentials: %v", err)
	}
}
