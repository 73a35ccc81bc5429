// Command mcptest-server serves the gateway's test MCP server
// (internal/gateway/mcptest) on stdin and stdout.
package main

import (
	"os"

	"github.com/airlock-sandbox/airlock/internal/gateway/mcptest"
)

func main() {
	os.Setenv(mcptest.ServeEnv, "1")
	mcptest.ServeStdioIfAsked()
}
