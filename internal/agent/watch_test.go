//go:build linux

package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fsExpect waits for an event with path and op, skipping others.
func fsExpect(t *testing.T, ch <-chan agentclient.WatchEvent, p string, op agentclient.WatchOp) {
	t.Helper()
	timeout := time.After(5 * time.Second)
	var seen []agentclient.WatchEvent
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch ended waiting for %s %s; saw %v", op, p, seen)
			}
			if ev.Err != nil {
				t.Fatalf("watch failed waiting for %s %s: %v", op, p, ev.Err)
			}
			if ev.Path == p && ev.Op == op {
				return
			}
			seen = append(seen, ev)
		case <-timeout:
			t.Fatalf("no %s %s; saw %v", op, p, seen)
		}
	}
}

// fsExpectNone fails if an event for path arrives within a short while.
func fsExpectNone(t *testing.T, ch <-chan agentclient.WatchEvent, p string) {
	t.Helper()
	timeout := time.After(300 * time.Millisecond)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				return
			}
			if ev.Path == p {
				t.Errorf("unexpected event %+v", ev)
			}
		case <-timeout:
			return
		}
	}
}

func TestWatchEvents(t *testing.T) {
	h := newFSHarness(t)
	ctx, cancel := context.WithCancel(fsTestCtx(t))
	defer cancel()
	if err := os.Mkdir(h.host("/home/user/w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ch, err := h.client.Watch(ctx, "w", false)
	if err != nil {
		t.Fatal(err)
	}
	f := h.host("/home/user/w/f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w/f", agentclient.WatchCreate)
	fsExpect(t, ch, "/home/user/w/f", agentclient.WatchWrite)
	if err := os.Chmod(f, 0o600); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w/f", agentclient.WatchChmod)
	if err := os.Rename(f, h.host("/home/user/w/g")); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w/f", agentclient.WatchRename)
	fsExpect(t, ch, "/home/user/w/g", agentclient.WatchCreate)
	if err := os.Remove(h.host("/home/user/w/g")); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w/g", agentclient.WatchRemove)
	// Non-recursive: changes in a new subdirectory are not reported.
	if err := os.Mkdir(h.host("/home/user/w/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w/sub", agentclient.WatchCreate)
	if err := os.WriteFile(h.host("/home/user/w/sub/x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fsExpectNone(t, ch, "/home/user/w/sub/x")
	// Removing the watched directory ends the stream.
	if err := os.RemoveAll(h.host("/home/user/w")); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w", agentclient.WatchRemove)
	for range ch {
	}
}

func TestWatchRecursive(t *testing.T) {
	h := newFSHarness(t)
	ctx, cancel := context.WithCancel(fsTestCtx(t))
	defer cancel()
	h.put(t, "/r/old/deep/f", "")
	h.symlink(t, h.outside, "/r/out") // never entered
	ch, err := h.client.Watch(ctx, "/r", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(h.host("/r/old/deep/g"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/r/old/deep/g", agentclient.WatchCreate)
	if err := os.Mkdir(h.host("/r/new"), 0o755); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/r/new", agentclient.WatchCreate)
	// The agent adds the watch before reporting the directory.
	if err := os.WriteFile(h.host("/r/new/x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/r/new/x", agentclient.WatchCreate)
	// A directory moved within the tree is watched under its new name.
	if err := os.Rename(h.host("/r/new"), h.host("/r/old/moved")); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/r/old/moved", agentclient.WatchCreate)
	if err := os.WriteFile(h.host("/r/old/moved/y"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/r/old/moved/y", agentclient.WatchCreate)
	// Changes outside, reachable only through the symlink, are not seen.
	if err := os.WriteFile(filepath.Join(h.outside, "sub", "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	fsExpectNone(t, ch, "/r/out/sub/keep")
}

func TestWatchErrors(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/file", "")
	h.symlink(t, h.outside, "/home/user/out")
	h.symlink(t, fsEscape(h.outside), "/home/user/outr")
	tests := []struct {
		path string
		want error
	}{
		{"missing", errdefs.ErrNotFound},
		{"file", errdefs.ErrInvalidArgument},
		{"out", errdefs.ErrNotFound},
		{"outr", errdefs.ErrNotFound},
		{"", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		_, err := h.client.Watch(ctx, tt.path, true)
		fsWantClass(t, "watch "+tt.path, err, tt.want)
		h.noHostPath(t, err)
	}
}

func TestWatchLimit(t *testing.T) {
	h := newFSHarness(t)
	ctx, cancel := context.WithCancel(fsTestCtx(t))
	defer cancel()
	if h.agent.files.maxWatches != 1000 {
		t.Errorf("default watch cap = %d", h.agent.files.maxWatches)
	}
	h.agent.files.maxWatches = 5
	for i := range 4 {
		h.put(t, "/lim/d"+strconv.Itoa(i)+"/f", "")
	}
	h.put(t, "/lim/d4/f", "")
	_, err := h.client.Watch(ctx, "/lim", true)
	fsWantClass(t, "watch 6 dirs", err, errdefs.ErrResourceExhausted)
	if err := os.RemoveAll(h.host("/lim/d4")); err != nil {
		t.Fatal(err)
	}
	ch, err := h.client.Watch(ctx, "/lim", true)
	if err != nil {
		t.Fatalf("watch 5 dirs: %v", err)
	}
	// Growing past the cap ends the stream with ResourceExhausted.
	for _, d := range []string{"/lim/n1", "/lim/n2"} {
		if err := os.Mkdir(h.host(d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var last error
	for ev := range ch {
		last = ev.Err
	}
	fsWantClass(t, "growing past the cap", last, errdefs.ErrResourceExhausted)
}

func TestWatchKeepaliveAndCleanup(t *testing.T) {
	h := newFSHarness(t)
	h.agent.files.keepalive = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(fsTestCtx(t))
	stream, err := h.raw.Watch(ctx, connect.NewRequest(&agentv1.WatchRequest{Path: "/home/user"}))
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for len(kinds) < 3 && stream.Receive() {
		switch {
		case stream.Msg().GetStarted() != nil:
			kinds = append(kinds, "started")
		case stream.Msg().GetKeepalive() != nil:
			kinds = append(kinds, "keepalive")
		default:
			kinds = append(kinds, "change")
		}
	}
	if len(kinds) != 3 || kinds[0] != "started" || kinds[1] != "keepalive" || kinds[2] != "keepalive" {
		t.Errorf("events = %v, %v", kinds, stream.Err())
	}
	if n := h.activeWatches(); n != 1 {
		t.Errorf("%d active watches, want 1", n)
	}
	cancel()
	stream.Close()
	deadline := time.Now().Add(5 * time.Second)
	for h.activeWatches() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.activeWatches(); n != 0 {
		t.Errorf("%d watches left after the caller went away", n)
	}
}

func TestWatchEndsOnClose(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	ch, err := h.client.Watch(ctx, "/home/user", false)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.agent.files.close(); err != nil {
		t.Fatal(err)
	}
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch still running after the file service closed")
	}
}

func (h *fsHarness) activeWatches() int {
	h.agent.files.mu.Lock()
	defer h.agent.files.mu.Unlock()
	return len(h.agent.files.watches)
}
