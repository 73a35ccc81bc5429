package opennet

import (
	"fmt"
	"net/netip"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// DefaultPool is the prefix sandbox addresses come from when the Config
// names none: part of the CGNAT range (100.64.0.0/10), which hosts rarely
// route, 16384 sandboxes.
var DefaultPool = netip.MustParsePrefix("100.96.0.0/16")

// Lease is the /30 of one sandbox: Gateway, the host end, and Addr, the
// sandbox's own address.
type Lease struct {
	Prefix  netip.Prefix // the /30
	Gateway netip.Addr   // first host address, the router's end
	Addr    netip.Addr   // second host address, the sandbox's end
}

// leaseAt is the lease of the index-th /30 of pool.
func leaseAt(pool netip.Prefix, index int) Lease {
	b := pool.Masked().Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(index) * 4
	base := netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
	gw := base.Next()
	return Lease{Prefix: netip.PrefixFrom(base, 30), Gateway: gw, Addr: gw.Next()}
}

// Pool hands out /30s of a prefix to sandboxes, each at most once. It is
// not safe for concurrent use (the Router serialises it).
type Pool struct {
	prefix netip.Prefix
	size   int            // number of /30s
	used   map[int]string // index -> sandbox ID
	byID   map[string]int
	next   int // where the next search starts, so that freed leases are reused last
}

// NewPool returns the pool of prefix, an IPv4 prefix of /8 to /30.
func NewPool(prefix netip.Prefix) (*Pool, error) {
	if !prefix.IsValid() || !prefix.Addr().Is4() || prefix.Bits() < 8 || prefix.Bits() > 30 {
		return nil, fmt.Errorf("open network pool %s: want an IPv4 prefix of /8 to /30: %w", prefix, errdefs.ErrInvalidArgument)
	}
	return &Pool{prefix: prefix.Masked(), size: 1 << (30 - prefix.Bits()), used: map[int]string{}, byID: map[string]int{}}, nil
}

// Prefix is the pool's prefix.
func (p *Pool) Prefix() netip.Prefix { return p.prefix }

// Allocate gives id a free /30, or the one it already has.
func (p *Pool) Allocate(id string) (Lease, error) {
	if i, ok := p.byID[id]; ok {
		return leaseAt(p.prefix, i), nil
	}
	for n := range p.size {
		i := (p.next + n) % p.size
		if _, taken := p.used[i]; !taken {
			p.used[i], p.byID[id] = id, i
			p.next = (i + 1) % p.size
			return leaseAt(p.prefix, i), nil
		}
	}
	return Lease{}, fmt.Errorf("open network pool %s: all %d addresses are in use: %w", p.prefix, p.size, errdefs.ErrResourceExhausted)
}

// Reserve records that id holds the /30 whose router end is gateway (a
// lease a previous daemon gave, found on its veth).
func (p *Pool) Reserve(id string, gateway netip.Addr) (Lease, error) {
	if !p.prefix.Contains(gateway) {
		return Lease{}, fmt.Errorf("address %s is outside the open network pool %s: %w", gateway, p.prefix, errdefs.ErrInvalidArgument)
	}
	a, b := gateway.As4(), p.prefix.Addr().As4()
	off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
	if off%4 != 1 {
		return Lease{}, fmt.Errorf("address %s is not the router end of a /30 of %s: %w", gateway, p.prefix, errdefs.ErrInvalidArgument)
	}
	i := int(off / 4)
	if owner, taken := p.used[i]; taken && owner != id {
		return Lease{}, fmt.Errorf("address %s is held by another sandbox: %w", gateway, errdefs.ErrAlreadyExists)
	}
	if j, ok := p.byID[id]; ok && j != i {
		return Lease{}, fmt.Errorf("sandbox %s already holds another address: %w", id, errdefs.ErrAlreadyExists)
	}
	p.used[i], p.byID[id] = id, i
	return leaseAt(p.prefix, i), nil
}

// Release frees id's lease, if it has one.
func (p *Pool) Release(id string) {
	if i, ok := p.byID[id]; ok {
		delete(p.byID, id)
		delete(p.used, i)
	}
}

// Len is the number of leases held.
func (p *Pool) Len() int { return len(p.byID) }
