package testutil

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// nobody is the uid and gid the test binary runs as in
// TestRequireRootFailsLoudly.
const nobody = 65534

// TestRequireRootFailsLoudly runs this package's own root-only test as an
// ordinary user: with AIRLOCK_TEST_ROOT=1 (as scripts/test runs) the run
// fails and says why; without it the test skips.
func TestRequireRootFailsLoudly(t *testing.T) {
	RequireRoot(t, "needs root to run a child as another user")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The build cache is root's alone: copy the binary where nobody may
	// run it.
	dir, err := os.MkdirTemp("", "airlock-testutil-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "testutil.test")
	copyFile(t, self, bin)

	tests := []struct {
		demand   string
		wantFail bool
		says     string
	}{
		{"1", true, "AIRLOCK_TEST_ROOT=1 demands root"},
		{"", false, "--- SKIP: TestRequireRootLetsRootThrough"},
	}
	for _, tt := range tests {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, bin, "-test.run=^TestRequireRootLetsRootThrough$", "-test.v", "-test.count=1")
		cmd.Dir = dir
		cmd.Env = []string{"PATH=/usr/bin:/bin", RootEnv + "=" + tt.demand}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
		out, err := cmd.CombinedOutput()
		cancel()
		failed := err != nil
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("run the test binary as uid %d: %v", nobody, err)
		}
		if failed != tt.wantFail || !strings.Contains(string(out), tt.says) {
			t.Errorf("%s=%q as uid %d: failed %v (want %v), output:\n%s\nwant it to say %q", RootEnv, tt.demand, nobody, failed, tt.wantFail, out, tt.says)
		}
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
