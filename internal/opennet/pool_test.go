package opennet

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestPool(t *testing.T) {
	p, err := NewPool(netip.MustParsePrefix("100.96.0.0/29")) // two /30s
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Allocate("a")
	if err != nil {
		t.Fatal(err)
	}
	want := Lease{Prefix: netip.MustParsePrefix("100.96.0.0/30"), Gateway: netip.MustParseAddr("100.96.0.1"), Addr: netip.MustParseAddr("100.96.0.2")}
	if a != want {
		t.Fatalf("first lease %+v; want %+v", a, want)
	}
	if again, _ := p.Allocate("a"); again != a {
		t.Fatalf("second Allocate of the same ID gave %+v; want %+v", again, a)
	}
	b, err := p.Allocate("b")
	if err != nil || b.Addr != netip.MustParseAddr("100.96.0.6") {
		t.Fatalf("second lease %+v, %v", b, err)
	}
	if _, err := p.Allocate("c"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("full pool: %v; want resource exhausted", err)
	}
	p.Release("a")
	c, err := p.Allocate("c")
	if err != nil || c != a {
		t.Fatalf("after release: %+v, %v; want the freed %+v", c, err, a)
	}
	if p.Len() != 2 {
		t.Fatalf("Len %d", p.Len())
	}
}

func TestPoolReserve(t *testing.T) {
	p, _ := NewPool(DefaultPool)
	l, err := p.Reserve("x", netip.MustParseAddr("100.96.1.5"))
	if err != nil || l.Addr != netip.MustParseAddr("100.96.1.6") || l.Prefix != netip.MustParsePrefix("100.96.1.4/30") {
		t.Fatalf("Reserve: %+v, %v", l, err)
	}
	for _, c := range []struct {
		id, gw string
		want   error
	}{
		{"y", "100.96.1.5", errdefs.ErrAlreadyExists},   // held by x
		{"x", "100.96.2.1", errdefs.ErrAlreadyExists},   // x holds another
		{"y", "100.96.1.6", errdefs.ErrInvalidArgument}, // a sandbox end
		{"y", "10.0.0.1", errdefs.ErrInvalidArgument},   // outside
	} {
		if _, err := p.Reserve(c.id, netip.MustParseAddr(c.gw)); !errors.Is(err, c.want) {
			t.Errorf("Reserve(%s, %s): %v; want %v", c.id, c.gw, err, c.want)
		}
	}
	// Allocation skips the reserved lease.
	for range 600 {
		l, err := p.Allocate(fmt.Sprint("s", p.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if l.Addr == netip.MustParseAddr("100.96.1.6") {
			t.Fatal("allocated a reserved lease")
		}
	}
}

func TestNewPoolRefuses(t *testing.T) {
	for _, s := range []string{"fd00::/64", "100.96.0.0/31", "10.0.0.0/7"} {
		if _, err := NewPool(netip.MustParsePrefix(s)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewPool(%s): %v; want invalid argument", s, err)
		}
	}
	if _, err := NewPool(netip.Prefix{}); err == nil {
		t.Error("NewPool(zero) succeeded")
	}
}

func TestParseAllow(t *testing.T) {
	got, err := ParseAllow([]string{"10.1.2.3", "10.0.0.0/8", "10.9.9.9/8", "169.254.169.254/32"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.1.2.3/32", "10.0.0.0/8", "169.254.169.254/32"}
	if len(got) != len(want) {
		t.Fatalf("got %v; want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Fatalf("got %v; want %v", got, want)
		}
	}
	for _, bad := range [][]string{{"example.com"}, {"::1"}, {"fd00::/8"}, {"10.0.0.0/33"}, make([]string, MaxAllow+1)} {
		if _, err := ParseAllow(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ParseAllow(%.40q): %v; want invalid argument", bad, err)
		}
	}
}

func TestLinkName(t *testing.T) {
	a, b := LinkName("sandbox-aaaaaaaaaaaaaaaaaaaa1"), LinkName("sandbox-aaaaaaaaaaaaaaaaaaaa2")
	if a == b || len(a) > 15 || a[:3] != "al-" {
		t.Fatalf("LinkName: %q, %q", a, b)
	}
}
