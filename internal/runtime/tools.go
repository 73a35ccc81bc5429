package runtime

import "net"

// ToolsBridgeAddr is the loopback address inside a sandbox on which its
// agent bridges connections to the sandbox's tools socket (see Tools):
// where code in the sandbox calls the tool gateway (the processes'
// AIRLOCK_TOOLS_URL).
const ToolsBridgeAddr = "127.0.0.1:3129"

// Tools is the optional ability of an instance whose agent bridges
// ToolsBridgeAddr, inside the sandbox, to a unix socket on the host that
// only that agent can reach, as Egress does for EgressBridgeAddr.
// ListenTools binds that socket (replacing a stale one a previous daemon
// left) and returns its listener: each connection accepted is one
// connection sandboxed code made to the bridge, so whoever serves it
// knows which sandbox is calling without asking the sandbox. Closing the
// listener removes the socket, and the bridge then closes every
// connection. The caller serves it (the tool gateway) for as long as the
// sandbox lives.
type Tools interface {
	ListenTools() (net.Listener, error)
}
