package main

import (
	"context"
	"net/http"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/internal/daemon"
	"github.com/airlock-sandbox/airlock/internal/mcp"
)

const mcpUsage = `usage: airlock mcp

Serves Airlock's sandbox tools to an MCP client over stdio (newline-
delimited JSON-RPC on standard input and output): configure your client
to run "airlock mcp" with AIRLOCK_URL and AIRLOCK_API_KEY set. The tools
are those of the daemon's /mcp endpoint, offered by the key's scopes,
and each call is made through the daemon's API with the key. Logs go to
standard error.
`

func (c *cli) mcpCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("mcp", mcpUsage)
	rest, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(rest) != 0 {
		return 2, usagef("airlock mcp takes no arguments")
	}
	key, err := c.apiKey()
	if err != nil {
		return 2, err
	}
	hc := c.hc
	if hc == nil {
		hc = &http.Client{}
	}
	var t sdk.Transport = &sdk.StdioTransport{}
	if c.mcpTransport != nil {
		t = c.mcpTransport
	}
	if err := mcp.ServeStdio(ctx, mcp.Config{APIURL: c.url, HTTPClient: hc, Version: daemon.Version()}, key, t); err != nil && ctx.Err() == nil {
		return 1, friendly(err)
	}
	return 0, nil
}
