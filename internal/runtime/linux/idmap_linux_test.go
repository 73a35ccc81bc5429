package linux

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// TestLayerOwnersIDMapped checks that files in a template layer keep the
// owners they have on disk inside the sandbox (uid 1000 is the sandbox's
// user, uid 0 its root), whatever host range the sandbox runs as; that
// the user can change its files (copy-up) and not root's; and that the
// layer on disk is never written.
func TestLayerOwnersIDMapped(t *testing.T) {
	setupBase(t)
	ctx := context.Background()
	layer := filepath.Join(baseDir(t), "idmap-layer")
	if err := os.MkdirAll(filepath.Join(layer, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := []struct {
		path string
		mode os.FileMode
		uid  int
	}{
		{"data", 0o755, 1000},
		{"data/owned", 0o644, 1000},
		{"data/secret", 0o600, 0},
	}
	for _, f := range files {
		p := filepath.Join(layer, f.path)
		if f.path != "data" {
			if err := os.WriteFile(p, []byte("original\n"), f.mode); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(p, f.mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, f.uid, f.uid); err != nil {
			t.Fatal(err)
		}
	}
	rootfs := hostRootfsFor(t)
	rootfs.Layers = append(append([]string{}, rootfs.Layers...), layer)
	rt := newRuntime(t)
	// Two sandboxes: two different host ranges see the same owners.
	for range 2 {
		sb := runtimetest.Create(t, ctx, rt, rootfs, runtime.Spec{})
		type result struct {
			Status         agentclient.Status
			Stdout, Stderr string
		}
		run := func(user, shell string) result {
			t.Helper()
			var stdout, stderr strings.Builder
			res, err := sb.Client.Exec(ctx, agentclient.ExecRequest{Shell: shell, User: user, Stdout: &stdout, Stderr: &stderr})
			if err != nil {
				t.Fatalf("exec %q: %v", shell, err)
			}
			return result{res.Status, stdout.String(), stderr.String()}
		}
		res := run("user", "stat -c %u:%g /data /data/owned /data/secret")
		if got, want := res.Stdout, "1000:1000\n1000:1000\n0:0\n"; got != want {
			t.Errorf("owners inside the sandbox = %q, want %q", got, want)
		}
		if res := run("user", "echo changed > /data/owned && touch /data/new && cat /data/owned"); res.Status != agentclient.StatusSuccess || res.Stdout != "changed\n" {
			t.Errorf("user writing its own files: %+v (stderr %q)", res.Status, res.Stderr)
		}
		if res := run("user", "cat /data/secret"); res.Status == agentclient.StatusSuccess || !strings.Contains(res.Stderr, "Permission denied") {
			t.Errorf("user reading root's 0600 file: %+v %q", res.Status, res.Stderr)
		}
		if res := run("root", "cat /data/secret"); res.Stdout != "original\n" {
			t.Errorf("root reading its file: %+v %q", res.Status, res.Stderr)
		}
	}
	if b, err := os.ReadFile(filepath.Join(layer, "data/owned")); err != nil || string(b) != "original\n" {
		t.Errorf("layer on disk changed: %q, %v", b, err)
	}
	if _, err := os.Lstat(filepath.Join(layer, "data/new")); !os.IsNotExist(err) {
		t.Errorf("a file created in the sandbox appeared in the layer: %v", err)
	}
}
