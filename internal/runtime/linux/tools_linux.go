package linux

import (
	"context"
	"log/slog"
	"net"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// toolsSockName is the sandbox's tools socket, in its egress directory
// (see egressDir): the agent reaches it through the descriptor of that
// directory it already holds, so it needs no mount of its own, and no
// sandboxed process can name it.
const toolsSockName = "tools.sock"

var _ runtime.Tools = (*Instance)(nil)

// ListenTools implements runtime.Tools: it binds the sandbox's tools
// socket, 0600 and owned by the sandbox's root (the agent's host uid),
// replacing any stale one. Closing the listener removes the socket.
func (i *Instance) ListenTools() (net.Listener, error) {
	return i.listenAgentSocket("tools", toolsSockName)
}

// startToolsBridge starts the agent's tools bridge:
// runtime.ToolsBridgeAddr, on the sandbox's loopback, joined byte for
// byte to the tools socket in the egress directory (the daemon's tool
// gateway for this sandbox). A connection made while nothing listens
// there (a daemon without a gateway, or one restarting) is closed at
// once. Every sandbox but a build's has it, whatever its network mode.
// Called by startEgressBridge, which has checked cfg.EgressFD.
func startToolsBridge(cfg *initConfig, log *slog.Logger) error {
	path := "/proc/self/fd/" + strconv.Itoa(cfg.EgressFD) + "/" + toolsSockName
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
	ln, err := net.Listen("tcp", runtime.ToolsBridgeAddr)
	if err != nil {
		return err
	}
	go func() {
		if err := agent.ServeEgressBridge(context.Background(), ln, dial); err != nil {
			log.Warn("tools bridge stopped", "err", err)
		}
	}()
	return nil
}
