package oci

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// overlayHelperEnv makes the test binary act as the overlay helper: in a
// new user and mount namespace (as the runtime's agent is), it mounts the
// layers with overlayfs and prints the merged tree as JSON.
const overlayHelperEnv = "AIRLOCK_OCI_OVERLAY_HELPER"

func TestMain(m *testing.M) {
	if spec := os.Getenv(overlayHelperEnv); spec != "" {
		os.Exit(overlayHelper(spec))
	}
	os.Exit(m.Run())
}

type overlaySpec struct {
	Lowers []string `json:"lowers"` // lowest first, as runtime.Rootfs.Layers
	Mount  string   `json:"mount"`
}

func overlayHelper(spec string) int {
	var s overlaySpec
	if err := json.Unmarshal([]byte(spec), &s); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	lowers := slices.Clone(s.Lowers)
	slices.Reverse(lowers) // overlayfs lists the top layer first
	// userxattr: inside a user namespace overlayfs reads user.overlay.*
	// (the opaque marker), exactly as the runtime mounts templates.
	opts := "lowerdir=" + strings.Join(lowers, ":") + ",userxattr"
	if err := unix.Mount("overlay", s.Mount, "overlay", unix.MS_RDONLY, opts); err != nil {
		fmt.Fprintln(os.Stderr, "mount overlay:", err)
		return 1
	}
	view := map[string]string{}
	err := filepath.WalkDir(s.Mount, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == s.Mount {
			return err
		}
		rel, _ := filepath.Rel(s.Mount, p)
		switch {
		case d.IsDir():
			view[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			view[rel] = "link:" + l
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			view[rel] = "file:" + string(b)
		default:
			view[rel] = "other:" + d.Type().String()
		}
		return nil
	})
	unix.Unmount(s.Mount, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "walk:", err)
		return 1
	}
	json.NewEncoder(os.Stdout).Encode(view)
	return 0
}

// checkOverlayView mounts the template's layers with overlayfs in a user
// namespace (ids 0..65535 mapped to themselves) and compares the merged
// tree with want.
func checkOverlayView(t *testing.T, s *layers.Store, name string, want map[string]string) {
	t.Helper()
	dirs, _, err := s.Rootfs(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	spec, _ := json.Marshal(overlaySpec{Lowers: dirs, Mount: mnt})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), overlayHelperEnv+"="+string(spec))
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 65536}},
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("overlay helper: %v: %s", err, stderr.String())
	}
	var got map[string]string
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("overlay helper output %q: %v", stdout.String(), err)
	}
	for p, w := range want {
		if got[p] != w {
			t.Errorf("overlay view %s = %q, want %q", p, got[p], w)
		}
	}
	for p, g := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("overlay view has %s (%s), which the whiteouts should hide", p, g)
		}
	}
}
