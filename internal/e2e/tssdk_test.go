package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// tsSDKDir is the TypeScript SDK: its sources, its node:test suites and
// its pinned compiler (package-lock.json).
var tsSDKDir = filepath.Join("..", "..", "sdk", "typescript")

// skippedTests is the spec reporter's count of skipped tests.
var skippedTests = regexp.MustCompile(`(?m)^ℹ skipped (\d+)$`)

// buildTSSDK installs the SDK's pinned compiler and compiles it to dist/
// when dist/ is not there yet.
func buildTSSDK(t *testing.T) {
	t.Helper()
	for _, bin := range []string{"node", "npm", "npx"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is required for the TypeScript SDK suites (apt-get install nodejs npm)", bin)
		}
	}
	if _, err := os.Stat(filepath.Join(tsSDKDir, "dist", "index.js")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"},
		{"npx", "--no-install", "tsc", "-p", "."},
	} {
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Dir = tsSDKDir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s in %s: %v\n%s", strings.Join(args, " "), tsSDKDir, err, out)
		}
	}
}

// TestTSSDK runs the TypeScript SDK's node:test suites
// (sdk/typescript/test) against a real daemon: sandboxes created, got,
// listed and deleted; exec buffered and streamed (the pid first, the
// output, the exit); processes followed, fed stdin and signalled; a
// 100 MB file uploaded from a generated stream and downloaded while
// hashed, with the node process's peak RSS well below the file's size;
// a code context keeping state across cells and a matplotlib chart as
// PNG bytes; the API's errors as typed errors (a missing sandbox, a bad
// request, a key without the scope, a bad key); an exec killed by its
// timeout and client-side timeouts and aborts; a run whose
// caller-executed tool the SDK answers. A skipped step fails the run
// where AIRLOCK_TEST_NO_SKIP is set.
func TestTSSDK(t *testing.T) {
	buildTSSDK(t)
	// Upstreams on loopback: a program of the Anthropic suite calls a tool
	// served by the suite itself.
	e := newEnv(t, "--gateway-allow", "127.0.0.1/32")
	d := e.start()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-reporter=spec", "--test-concurrency=1", "test/")
	cmd.Dir = tsSDKDir
	cmd.Env = append(os.Environ(), "AIRLOCK_URL="+d.URL, "AIRLOCK_API_KEY="+d.Key)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("node --test test/ (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the TypeScript SDK suites failed: %v", err)
	}
	if m := skippedTests.FindSubmatch(out); os.Getenv("AIRLOCK_TEST_NO_SKIP") != "" && (m == nil || string(m[1]) != "0") {
		t.Errorf("the TypeScript SDK suites skipped a step (or did not say): %q", m)
	}
	// Every sandbox the suites made is gone.
	list, err := d.C.ListSandboxes(ctxT(t, time.Minute), client.ListOptions{States: []client.State{client.StateRunning}})
	if err != nil {
		t.Fatal(err)
	}
	for _, sb := range list {
		track(sb.ID)
		t.Errorf("sandbox %s (%v) outlived the suites", sb.ID, sb.Metadata)
	}
}
