//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fsHarness is an in-process agent serving on a unix socket, with a
// client, a sandbox root and a directory outside the root that attacks
// aim at.
type fsHarness struct {
	root    string // host path of the sandbox root
	outside string // host directory outside root, holding secret
	agent   *Agent
	client  *agentclient.Client
	raw     agentv1connect.FileServiceClient // for protocol-level checks
	sock    string
}

const fsSecret = "TOPSECRET outside the sandbox\n"

func newFSHarness(tb testing.TB, mutate ...func(*Options)) *fsHarness {
	tb.Helper()
	root := tb.TempDir()
	outside := tb.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "home", "user"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte(fsSecret), 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(outside, "sub"), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "sub", "keep"), []byte("keep"), 0o644); err != nil {
		tb.Fatal(err)
	}
	// As root the file service switches credentials for every request
	// (to the test's own uid 0 and capabilities unless a test names
	// another user), so every test goes through that path.
	opts := Options{
		Root:       root,
		SwitchUser: os.Geteuid() == 0,
		Users: map[string]User{
			"user": {Name: "user", UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), Home: "/home/user"},
			"root": {Name: "root", UID: 0, GID: 0, Home: "/root"},
		},
	}
	for _, m := range mutate {
		m(&opts)
	}
	a, err := New(opts)
	if err != nil {
		tb.Fatal(err)
	}
	srv := serveAgent(tb, a)
	h := &fsHarness{root: root, outside: outside, agent: a, client: srv.client, sock: srv.sock}
	h.raw = agentv1connect.NewFileServiceClient(srv.http, "http://agent")
	snap := fsSnapshot(tb, outside)
	tb.Cleanup(func() {
		// Let Watch streams the test cancelled wind down first: a
		// connection still busy when Serve shuts down holds it up for a
		// second.
		for deadline := time.Now().Add(2 * time.Second); h.activeWatches() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(5 * time.Millisecond)
		if _, err := srv.stop(); err != nil {
			tb.Errorf("agent Close: %v", err)
		}
		// Whatever a test did, nothing outside the root may change.
		h.assertOutsideUntouched(tb, snap)
	})
	return h
}

// host returns the host path of a sandbox path.
func (h *fsHarness) host(p string) string {
	return filepath.Join(h.root, filepath.FromSlash(p))
}

// put creates a file inside the sandbox directly on the host.
func (h *fsHarness) put(tb testing.TB, p, content string) {
	tb.Helper()
	hp := h.host(p)
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(hp, []byte(content), 0o644); err != nil {
		tb.Fatal(err)
	}
}

// symlink creates a symlink inside the sandbox directly on the host.
func (h *fsHarness) symlink(tb testing.TB, target, p string) {
	tb.Helper()
	hp := h.host(p)
	if err := os.MkdirAll(filepath.Dir(hp), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.Symlink(target, hp); err != nil {
		tb.Fatal(err)
	}
}

// read returns the content of a sandbox file read directly on the host.
func (h *fsHarness) read(tb testing.TB, p string) string {
	tb.Helper()
	b, err := os.ReadFile(h.host(p))
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// up is a relative path that climbs from anywhere in the sandbox to the
// host's "/" if ".." were not stopped at the root.
var fsUp = strings.Repeat("../", 24)

// escape is a relative path from the sandbox home that would name host
// path p (absolute) if resolution escaped the root.
func fsEscape(p string) string { return fsUp + strings.TrimPrefix(p, "/") }

// fsSnapshot records every entry under dir (type, mode, content or
// target) to detect any change.
func fsSnapshot(tb testing.TB, dir string) map[string]string {
	tb.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		desc := info.Mode().String()
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			t, _ := os.Readlink(p)
			desc += " -> " + t
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " " + string(b)
		}
		snap[p] = desc
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return snap
}

func (h *fsHarness) assertOutsideUntouched(tb testing.TB, before map[string]string) {
	tb.Helper()
	after := fsSnapshot(tb, h.outside)
	var diffs []string
	for p, d := range before {
		if after[p] != d {
			diffs = append(diffs, fmt.Sprintf("%s: %q -> %q", p, d, after[p]))
		}
	}
	for p, d := range after {
		if _, ok := before[p]; !ok {
			diffs = append(diffs, fmt.Sprintf("%s: new %q", p, d))
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		tb.Errorf("the directory outside the sandbox root changed:\n%s", strings.Join(diffs, "\n"))
	}
}

// writeString writes content to p with opts.
func (h *fsHarness) writeString(ctx context.Context, p, content string, opts agentclient.WriteOptions) (*agentclient.EntryInfo, error) {
	return h.client.WriteFile(ctx, p, strings.NewReader(content), opts)
}

// readString reads p through the agent.
func (h *fsHarness) readString(ctx context.Context, p string) (string, error) {
	var buf bytes.Buffer
	_, err := h.client.ReadFile(ctx, p, &buf)
	return buf.String(), err
}

// wantClass fails unless err has class want.
func fsWantClass(tb testing.TB, what string, err, want error) {
	tb.Helper()
	if err == nil {
		tb.Errorf("%s: got no error, want %v", what, want)
		return
	}
	if !errors.Is(err, want) {
		tb.Errorf("%s: got %v (class %v), want class %v", what, err, errdefs.Class(err), want)
	}
}

// testCtx is a context that ends with the test or after a timeout.
func fsTestCtx(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

// noHostPath fails if err mentions the host path of the root. (The
// outside directory's path may appear: attacks use it as a sandbox path.)
func (h *fsHarness) noHostPath(tb testing.TB, err error) {
	tb.Helper()
	if err != nil && strings.Contains(err.Error(), h.root) {
		tb.Errorf("error reveals a host path: %v", err)
	}
}
