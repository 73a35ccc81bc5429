// Package agentclient is the daemon's typed client for the in-sandbox agent
// (internal/agent). It speaks the Connect protocol over HTTP/2 on
// connections obtained from a dial function, normally
// runtime.Instance.Dial.
package agentclient

import (
	"context"
	"net"
	"net/http"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
)

// DialFunc opens a connection to the agent.
type DialFunc func(ctx context.Context) (net.Conn, error)

// Client talks to one agent. It is safe for concurrent use; Close releases
// its idle connections.
type Client struct {
	httpc *http.Client
	info  agentv1connect.AgentServiceClient
	proc  agentv1connect.ProcessServiceClient
	files agentv1connect.FileServiceClient
}

// baseURL is a placeholder host: every request goes to the dialled agent.
const baseURL = "http://agent"

// New returns a client that reaches the agent through dial.
func New(dial DialFunc) *Client {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext:     func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		Protocols:       &protocols,
		IdleConnTimeout: 90 * time.Second,
		HTTP2:           agentwire.HTTP2Config(),
	}
	hc := &http.Client{Transport: tr}
	// Everything crosses a local socket: gzip would only cost CPU (a
	// quarter of an exec's, and 5x slower reads of incompressible files).
	noGzip := connect.WithAcceptCompression("gzip", nil, nil)
	return &Client{
		httpc: hc,
		info:  agentv1connect.NewAgentServiceClient(hc, baseURL, noGzip),
		proc:  agentv1connect.NewProcessServiceClient(hc, baseURL, noGzip),
		files: agentv1connect.NewFileServiceClient(hc, baseURL, noGzip),
	}
}

// StreamWindow is how much the agent may send on one stream that the
// daemon has not read yet: what a stream whose reader is slow can hold in
// the daemon.
func StreamWindow() int64 { return int64(agentwire.HTTP2Config().MaxReceiveBufferPerStream) }

// Close releases idle connections.
func (c *Client) Close() {
	c.httpc.CloseIdleConnections()
}

// Info asks the agent about itself; it doubles as the health check.
func (c *Client) Info(ctx context.Context) (*agentv1.InfoResponse, error) {
	res, err := c.info.Info(ctx, connect.NewRequest(&agentv1.InfoRequest{}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return res.Msg, nil
}
