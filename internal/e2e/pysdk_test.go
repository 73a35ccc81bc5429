package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// pySDKDir is the Python SDK, relative to this package.
var pySDKDir = filepath.Join("..", "..", "sdk", "python")

// TestPythonSDK runs the Python SDK's unittest suite (sdk/python/tests,
// standard library only) against a daemon with its admin key: sandboxes,
// exec buffered and streamed, processes, a 100 MiB file streamed both
// ways without being held in memory, a code context with a chart, errors
// as typed exceptions (a key created there without the scope), command
// and request timeouts, caller-executed tools and the asyncio client.
// The daemon's RSS must not grow by the file's size meanwhile.
func TestPythonSDK(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal("python3 is required for the Python SDK suite")
	}
	d := newEnv(t).start()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	sdk, err := filepath.Abs(pySDKDir)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", filepath.Join("sdk", "python", "tests"), "-v")
	cmd.Dir = root
	cmd.Env = append(daemonEnv(), "PYTHONPATH="+sdk, "PYTHONDONTWRITEBYTECODE=1",
		"AIRLOCK_URL="+d.URL, "AIRLOCK_API_KEY="+d.Key)
	if v := os.Getenv("AIRLOCK_TEST_NO_SKIP"); v != "" {
		cmd.Env = append(cmd.Env, "AIRLOCK_TEST_NO_SKIP="+v)
	}
	// The daemon's RSS shows whether it held the 100 MiB file whole on its
	// way (the suite checks its own side).
	base, err := procStatusKB(d.Pid(), "VmRSS")
	if err != nil {
		t.Fatal(err)
	}
	sampler := sampleRSS(d.Pid(), 20*time.Millisecond)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	peak, samples := sampler.Stop()
	t.Logf("python3 -m unittest (%v):\n%s", time.Since(start).Round(time.Millisecond), out)
	t.Logf("daemon RSS: %d MiB before, peak %d MiB (%d samples)", base>>10, peak>>10, samples)
	if grew := (peak - base) >> 10; grew > 64 {
		t.Errorf("the daemon's RSS grew by %d MiB during the suite: a 100 MiB transfer held in memory?", grew)
	}
	if ctx.Err() != nil {
		t.Fatalf("the Python suite did not finish in time")
	}
	if err != nil {
		t.Fatalf("the Python suite failed: %v", err)
	}
	if !strings.Contains(string(out), "\nOK") {
		t.Fatalf("the Python suite did not report OK")
	}
}
