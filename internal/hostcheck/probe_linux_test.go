package hostcheck

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestMain lets the test binary serve as the probe's child, as the airlock
// binary does (main calls RunProbe for ProbeCommand).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ProbeCommand {
		os.Exit(RunProbe())
	}
	os.Exit(m.Run())
}

// traversableDir is a data dir that the probe's unprivileged root can
// traverse, as it does a real one (0711).
func traversableDir(t *testing.T) string {
	t.Helper()
	testutil.RequireRoot(t, "the namespace probe needs root")
	dir, err := os.MkdirTemp("", "airlock-hostcheck-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	return dir
}

// requireClean fails when the probe left a scratch directory in dir or a
// mount of it on the host.
func requireClean(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".hostcheck-") {
			t.Errorf("left behind: %s", filepath.Join(dir, e.Name()))
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), ".hostcheck-") {
		t.Errorf("a probe mount is on the host:\n%s", mi)
	}
}

func TestSandboxProbe(t *testing.T) {
	dir := traversableDir(t)
	r := sandboxProbe(context.Background(), dir)
	if r.UserNS != nil || r.Overlay != nil || r.Seccomp != nil {
		t.Fatalf("probe on a host that runs sandboxes: %+v", r)
	}
	// id-mapping depends on the filesystem of the temporary directory.
	if r.IDMap != nil && !errors.Is(r.IDMap, errdefs.ErrNotSupported) {
		t.Errorf("id-map: %v", r.IDMap)
	}
	requireClean(t, dir)
}

// A data dir that does not exist yet is probed through its parent.
func TestSandboxProbeMissingDataDir(t *testing.T) {
	dir := traversableDir(t)
	r := sandboxProbe(context.Background(), filepath.Join(dir, "not", "yet"))
	if r.UserNS != nil || r.Overlay != nil {
		t.Fatalf("probe: %+v", r)
	}
	requireClean(t, dir)
	if _, err := os.Stat(filepath.Join(dir, "not")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the probe created the data dir's parents: %v", err)
	}
}

// What the overlay step reports when it fails: a data dir whose path
// overlayfs cannot take, and one that sandbox uids cannot traverse.
func TestSandboxProbeOverlayFails(t *testing.T) {
	base := traversableDir(t)
	comma := filepath.Join(base, "a,b")
	if err := os.Mkdir(comma, 0o711); err != nil {
		t.Fatal(err)
	}
	r := sandboxProbe(context.Background(), comma)
	if r.UserNS != nil || r.Overlay == nil || !strings.Contains(r.Overlay.Error(), "overlayfs cannot take") {
		t.Errorf("comma in the path: %+v", r)
	}
	requireClean(t, comma)

	closed := filepath.Join(base, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	r = sandboxProbe(context.Background(), closed)
	if r.UserNS != nil || r.Overlay == nil || !strings.Contains(r.Overlay.Error(), "permission denied") {
		t.Errorf("untraversable data dir: %+v", r)
	}
	requireClean(t, closed)
}

// The real checks on this host: every check answers, and the probes
// (which the runtime's own tests rely on) work.
func TestRunOnThisHost(t *testing.T) {
	dir := traversableDir(t)
	r := Run(context.Background(), Options{DataDir: dir, MaxSandboxes: 10})
	if len(r.Checks) != len(Names()) {
		t.Fatalf("%d checks", len(r.Checks))
	}
	for _, c := range r.Checks {
		t.Logf("%-18s %-4s %s", c.Name, c.Status, c.Found)
		if c.Found == "" || c.Meaning == "" || (c.Status != OK && c.Status != Warn && c.Status != Fail) {
			t.Errorf("check %+v", c)
		}
		switch c.Name {
		case "root", "kernel", "user_namespaces", "seccomp", "overlay_userns":
			if c.Status != OK {
				t.Errorf("%s on a host that runs sandboxes: %+v", c.Name, c)
			}
		}
	}
	requireClean(t, dir)
}
