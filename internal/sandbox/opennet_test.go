package sandbox

import (
	"context"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/opennet"
)

// fakeOpen is an OpenNetwork that attaches nothing: tests set its
// leases and counters and call its sink.
type fakeOpen struct {
	mu     sync.Mutex
	sink   opennet.Sink
	leases map[string]opennet.Lease
	stats  map[string]egress.Stats
}

var _ OpenNetwork = (*fakeOpen)(nil)

func (f *fakeOpen) Attach(id string, _ *os.File, _ []netip.Prefix) (opennet.Lease, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leases[id], nil
}
func (f *fakeOpen) Detach(string) error           { return nil }
func (f *fakeOpen) Prune(func(string) bool) error { return nil }
func (f *fakeOpen) Attached(id string) (opennet.Lease, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.leases[id]
	return l, ok
}
func (f *fakeOpen) OnEvent(s opennet.Sink) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sink = s
}
func (f *fakeOpen) Stats(id string) (egress.Stats, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	st, ok := f.stats[id]
	return st, ok
}

// TestOpenNetworkEvidencePath: the open network's events reach
// EgressConfig.Events with the sandbox's tenant, its counters are the
// sandbox's NetworkStats, and its lease the sandbox's NetworkAddress.
func TestOpenNetworkEvidencePath(t *testing.T) {
	e := newEnv(t)
	on := &fakeOpen{leases: map[string]opennet.Lease{}, stats: map[string]egress.Stats{}}
	var mu sync.Mutex
	var got []EgressEvent
	m := e.manager(Config{OpenNetwork: on, Egress: EgressConfig{Events: func(ev EgressEvent) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev)
	}}})
	sb, err := m.Create(context.Background(), Spec{Owner: "tenant-a"})
	if err != nil {
		t.Fatal(err)
	}
	on.mu.Lock()
	sink := on.sink
	on.leases[sb.ID] = opennet.Lease{Addr: netip.MustParseAddr("100.96.0.2")}
	on.stats[sb.ID] = egress.Stats{Conns: 3, Allowed: 3, Refused: 2, BytesUp: 10, BytesDown: 20}
	on.mu.Unlock()
	if sink == nil {
		t.Fatal("the manager did not subscribe to the open network's evidence")
	}
	ev := egress.Event{Start: time.Now(), Protocol: egress.ProtoOpen, Host: "198.51.100.2", Port: 443, Allowed: true, Reason: egress.ReasonAllowed}
	sink(sb.ID, ev)
	mu.Lock()
	if len(got) != 1 || got[0].Sandbox != sb.ID || got[0].Owner != "tenant-a" || got[0].Event != ev {
		t.Errorf("events %+v; want the one sent, of %s, owned by tenant-a", got, sb.ID)
	}
	mu.Unlock()
	st, ok, err := m.NetworkStats(sb.ID)
	if err != nil || !ok || st != on.stats[sb.ID] {
		t.Errorf("NetworkStats: %+v, %v, %v; want the open network's", st, ok, err)
	}
	addr, ok, err := m.NetworkAddress(sb.ID)
	if err != nil || !ok || addr.String() != "100.96.0.2" {
		t.Errorf("NetworkAddress: %v, %v, %v", addr, ok, err)
	}
	if _, _, err := m.NetworkAddress("nosuch"); err == nil {
		t.Error("NetworkAddress of an unknown sandbox succeeded")
	}
}
