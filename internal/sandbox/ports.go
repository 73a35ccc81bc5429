package sandbox

import (
	"context"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

// DialPort connects to TCP port (1..65535) on the loopback of sandbox id,
// inside its network namespace, through its agent (see
// agentclient.Client.DialPort). The sandbox counts as active while the
// connection is open (the idle reaper leaves it alone; its expiry still
// applies, and the agent's idle timeout ends a quiet connection); Close
// ends that.
func (m *Manager) DialPort(ctx context.Context, id string, port int) (*agentclient.PortConn, error) {
	rec, done, err := m.acquire(id)
	if err != nil {
		return nil, err
	}
	conn, err := rec.client.DialPort(ctx, port)
	if err != nil {
		done()
		return nil, err
	}
	conn.OnClose(done)
	return conn, nil
}
