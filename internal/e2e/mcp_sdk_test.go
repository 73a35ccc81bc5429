package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// mcpSDKDir holds the MCP TypeScript SDK suites and their pinned npm
// packages.
var mcpSDKDir = filepath.Join("..", "mcp", "sdktest")

// mcpNpmCI installs the MCP suites' pinned packages from the lockfile
// when they are not there yet.
func mcpNpmCI(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(mcpSDKDir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err == nil {
		return
	}
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is required for the MCP SDK suites (apt-get install nodejs npm)", bin)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund", "--loglevel=error")
	cmd.Dir = mcpSDKDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", mcpSDKDir, err, out)
	}
}

// TestMCPSDK runs the official TypeScript SDK (npm @modelcontextprotocol/sdk,
// pinned in internal/mcp/sdktest/package-lock.json) against a daemon's MCP
// server: over Streamable HTTP at /mcp (http.mjs: the tools with their
// schemas and annotations, a sandbox created, code with state and a chart
// as image content, files written, edited and read, a command with
// progress notifications, an unknown tool and schema-violating arguments
// refused, an older protocol revision, a scope-limited key not offered
// create_sandbox and destroy_sandbox) and over stdio through airlock mcp
// (stdio.mjs). Each step prints ok, skip or FAIL; a skip fails the run
// where AIRLOCK_TEST_NO_SKIP is set.
func TestMCPSDK(t *testing.T) {
	mcpNpmCI(t)
	d := newEnv(t).start()
	ctx := ctxT(t, 5*time.Minute)
	limited, err := d.C.CreateKey(ctx, client.CreateKeyRequest{Name: "mcp-sdk-limited", Scopes: []string{"sandboxes:read", "exec", "files"}})
	if err != nil {
		t.Fatal(err)
	}
	suites := map[string][]string{
		"http.mjs":  {"MCP_URL=" + d.URL + "/mcp", "AIRLOCK_API_KEY=" + d.Key, "MCP_LIMITED_KEY=" + limited.Secret},
		"stdio.mjs": {"AIRLOCK_BIN=" + binPath, "AIRLOCK_URL=" + d.URL, "AIRLOCK_API_KEY=" + d.Key},
	}
	for _, script := range []string{"http.mjs", "stdio.mjs"} {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		cmd := exec.CommandContext(sctx, "node", script)
		cmd.Dir = mcpSDKDir
		cmd.Env = append(daemonEnv(), suites[script]...)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		cancel()
		t.Logf("%s (%v):\n%s", script, time.Since(start).Round(time.Millisecond), out)
		if err != nil {
			t.Errorf("%s failed: %v", script, err)
		}
		if !strings.Contains(string(out), "ok connect\n") {
			t.Errorf("%s did not connect", script)
		}
		if os.Getenv("AIRLOCK_TEST_NO_SKIP") != "" && strings.Contains("\n"+string(out), "\nskip ") {
			t.Errorf("%s skipped a step", script)
		}
	}
	// Every sandbox the suites made is gone.
	list, err := d.C.ListSandboxes(ctx, client.ListOptions{States: []client.State{client.StateRunning}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		track(sb.ID)
		t.Errorf("sandbox %s (%v) outlived the suites", sb.ID, sb.Metadata)
	}
}
