package runtime

import "net"

// EgressBridgeAddr is the loopback address inside a sandbox on which its
// agent bridges connections to the sandbox's egress socket (see Egress).
// Sandboxed code reaches the network only through it, as a proxy.
const EgressBridgeAddr = "127.0.0.1:3128"

// Egress is the optional ability of an instance whose agent bridges
// EgressBridgeAddr, inside the sandbox, to a unix socket on the host that
// only that agent can reach. ListenEgress binds that socket (replacing a
// stale one a previous daemon left) and returns its listener: each
// connection accepted is one connection sandboxed code made to the
// bridge. Closing the listener removes the socket, and the bridge then
// refuses every connection. The caller serves it (the egress proxy) for
// as long as the sandbox may reach the network.
type Egress interface {
	ListenEgress() (net.Listener, error)
}
