// Package opennet gives sandboxes in the open network mode a routed path
// out: per sandbox a veth pair (the host end al-<hash of the ID> in the
// router's network namespace, the other end eth0 in the sandbox's), a /30
// from a pool (the host end takes the first address, the sandbox the
// second, with its default route through the first), and one nftables
// table, inet "airlock", that the Router rewrites whole, in one
// transaction, whenever a sandbox comes or goes.
//
// The table forwards a sandbox's IPv4 packets only out of the configured
// uplink interface, masqueraded, with the sandbox's own address as source
// (anti-spoof), and never to another sandbox's address or to the blocked
// ranges (Blocked: private, CGNAT, loopback, link-local and metadata,
// multicast, reserved) unless the sandbox lists them; it lets into a
// sandbox only replies (conntrack established or related); it drops
// every packet a sandbox sends to the router itself (its API, its
// services, any of its addresses); IPv6 is never forwarded. The base
// chains hook forward, input and postrouting with policy accept and
// match only al-* interfaces, so the host's other traffic is untouched.
//
// The Router also keeps the evidence of the open mode (see evidence.go):
// each flow a sandbox begins, from the connection tracker's events, and
// each packet the table refuses, from its nflog group, become
// egress.Events for the sink OnEvent sets, and counters (Stats).
//
// Without an uplink in its Config, or when nftables is not usable, New
// fails: the open mode is then refused, never given unfiltered.
package opennet
