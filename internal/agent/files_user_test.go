//go:build linux

package agent

import (
	"bytes"
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// The file service acts with the permissions of the request's user.

const (
	fsUserUID   = 1000
	fsUserGID   = 1001
	fsUserGroup = 1002 // a supplementary group of the user
	fsPasswd    = "root:x:0:0:root:/root:/bin/sh\n"
	fsRootOnly  = "root's secret\n"
)

// newUserHarness is a harness whose default user is an ordinary one
// (uid 1000, gid 1001, also in group 1002) that owns its home, on a root
// laid out as a sandbox's: /etc/passwd root's 0644, /root 0700 holding a
// secret 0600, /tmp 1777. "root" is the test's own uid 0 with its
// capabilities (a build sandbox's root, as far as files go).
func newUserHarness(t *testing.T) *fsHarness {
	t.Helper()
	testutil.RequireRoot(t, "needs root to act as another user")
	h := newFSHarness(t, func(o *Options) {
		o.SwitchUser = true
		o.Users["user"] = User{Name: "user", UID: fsUserUID, GID: fsUserGID, Groups: []uint32{fsUserGID, fsUserGroup}, Home: "/home/user"}
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(h.root, 0o755))
	must(os.Chmod(h.host("/home"), 0o755))
	must(os.Chown(h.host("/home/user"), fsUserUID, fsUserGID))
	must(os.Chmod(h.host("/home/user"), 0o755))
	h.put(t, "/etc/passwd", fsPasswd)
	must(os.Chmod(h.host("/etc"), 0o755))
	must(os.Mkdir(h.host("/root"), 0o700))
	must(os.WriteFile(h.host("/root/secret"), []byte(fsRootOnly), 0o600))
	must(os.Mkdir(h.host("/tmp"), 0o755))
	must(os.Chmod(h.host("/tmp"), 0o1777))
	return h
}

// owner returns the uid and gid of the sandbox path p.
func (h *fsHarness) owner(t *testing.T, p string) (uint32, uint32) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(h.host(p), &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}

// wantDenied fails unless err is a permission error in the system's words.
func wantDenied(t *testing.T, what string, err error) {
	t.Helper()
	fsWantClass(t, what, err, errdefs.ErrPermissionDenied)
	if err != nil && !strings.Contains(err.Error(), "permission denied") && !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("%s: %v does not say why", what, err)
	}
}

func TestFilesActAsUser(t *testing.T) {
	h := newUserHarness(t)
	ctx := fsTestCtx(t)
	root := agentclient.AsUser("root")
	h.put(t, "/home/user/rootro", "root's, read-only") // root's 0644 in the user's directory

	// The default user cannot change or read what only root may.
	_, err := h.writeString(ctx, "/etc/passwd", "pwned", agentclient.WriteOptions{})
	wantDenied(t, "write /etc/passwd", err)
	_, err = h.writeString(ctx, "/etc/passwd", "pwned", agentclient.WriteOptions{Append: true})
	wantDenied(t, "append /etc/passwd", err)
	_, err = h.writeString(ctx, "/etc/new", "x", agentclient.WriteOptions{})
	wantDenied(t, "write /etc/new", err)
	_, err = h.writeString(ctx, "/home/user/rootro", "pwned", agentclient.WriteOptions{})
	wantDenied(t, "replace a file the user cannot write", err)
	_, err = h.readString(ctx, "/root/secret")
	wantDenied(t, "read /root/secret", err)
	_, err = h.client.Stat(ctx, "/root/secret")
	wantDenied(t, "stat /root/secret", err)
	_, _, err = h.client.ListDir(ctx, "/root", 1)
	wantDenied(t, "list /root", err)
	// A deep listing shows /root but not what it holds.
	ents, _, err := h.client.ListDir(ctx, "/", 3)
	if err != nil {
		t.Errorf("list / to depth 3: %v", err)
	}
	var sawRoot bool
	for _, e := range ents {
		sawRoot = sawRoot || e.Path == "/root"
		if strings.HasPrefix(e.Path, "/root/") {
			t.Errorf("the user's listing shows %s", e.Path)
		}
	}
	if !sawRoot {
		t.Errorf("the user's listing of / lacks /root: %v", ents)
	}
	_, err = h.client.Chmod(ctx, "/etc/passwd", 0o666)
	wantDenied(t, "chmod /etc/passwd", err)
	err = h.client.Remove(ctx, "/etc/passwd", false)
	wantDenied(t, "remove /etc/passwd", err)
	_, err = h.client.Move(ctx, "/etc/passwd", "/home/user/passwd")
	wantDenied(t, "move /etc/passwd", err)
	_, err = h.client.MakeDir(ctx, "/etc/d", true)
	wantDenied(t, "mkdir /etc/d", err)
	_, err = h.client.Watch(ctx, "/root", false)
	wantDenied(t, "watch /root", err)
	if got := h.read(t, "/etc/passwd"); got != fsPasswd {
		t.Errorf("/etc/passwd changed: %q", got)
	}
	if got := h.read(t, "/home/user/rootro"); got != "root's, read-only" {
		t.Errorf("the read-only file changed: %q", got)
	}
	if st, err := os.Stat(h.host("/etc/passwd")); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("/etc/passwd: %v, %v", st.Mode(), err)
	}
	if ents, err := os.ReadDir(h.host("/etc")); err != nil || len(ents) != 1 {
		t.Errorf("/etc holds %v, %v; want passwd only", ents, err)
	}
	h.assertNoTemp(t, "/home/user")

	// Root, when asked, can; its relative paths start at /root.
	if _, err := h.writeString(ctx, "/etc/passwd", "replaced\n", agentclient.WriteOptions{User: "root"}); err != nil {
		t.Fatal(err)
	}
	if got := h.read(t, "/etc/passwd"); got != "replaced\n" {
		t.Errorf("root's write: /etc/passwd holds %q", got)
	}
	var buf bytes.Buffer
	if _, err := h.client.ReadFile(ctx, "secret", &buf, root); err != nil || buf.String() != fsRootOnly {
		t.Errorf("root's read of secret: %q, %v", buf.String(), err)
	}
	if ents, _, err := h.client.ListDir(ctx, "/root", 1, root); err != nil || len(ents) != 1 {
		t.Errorf("root's listing of /root: %v, %v", ents, err)
	}

	// Streams keep working as the user: a file of several chunks, read
	// back whole and in a range, then appended to.
	data := bytes.Repeat([]byte("0123456789abcdef"), (3*fsChunkSize+1000)/16)
	if _, err := h.client.WriteFile(ctx, "big", bytes.NewReader(data), agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if _, err := h.client.ReadFile(ctx, "big", &buf); err != nil || !bytes.Equal(buf.Bytes(), data) {
		t.Fatalf("read back %d bytes, %v", buf.Len(), err)
	}
	buf.Reset()
	if _, err := h.client.ReadFileRange(ctx, "big", fsChunkSize-5, 10, &buf); err != nil || !bytes.Equal(buf.Bytes(), data[fsChunkSize-5:fsChunkSize+5]) {
		t.Errorf("range: %q, %v", buf.String(), err)
	}
	if _, err := h.writeString(ctx, "big", "tail", agentclient.WriteOptions{Append: true}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(h.host("/home/user/big")); err != nil || st.Size() != int64(len(data)+4) {
		t.Errorf("after append: %v, %v", st, err)
	}
	// A relative symlink is followed as the user too (its directory is
	// found through /proc/self/fd, which the user's thread may read).
	h.symlink(t, "sub/target", "/home/user/rel-link")
	if _, err := h.writeString(ctx, "rel-link", "through", agentclient.WriteOptions{MakeParents: true}); err == nil {
		t.Error("wrote through a link into a missing directory")
	}
	if err := os.Mkdir(h.host("/home/user/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(h.host("/home/user/sub"), fsUserUID, fsUserGID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.writeString(ctx, "rel-link", "through", agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.read(t, "/home/user/sub/target"); got != "through" {
		t.Errorf("write through a relative link: %q", got)
	}
	// A failed stream as the user leaves no temporary file.
	if _, err := h.client.WriteFile(ctx, "big", io.MultiReader(bytes.NewReader(data), fsErrReader{}), agentclient.WriteOptions{}); err == nil {
		t.Error("a broken upload succeeded")
	}
	h.assertNoTemp(t, "/home/user")

	// Watch as the user: events, and directories made later are watched.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := h.client.Watch(wctx, "/home/user", true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.MakeDir(ctx, "w/sub", true); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w", agentclient.WatchCreate)
	if _, err := h.writeString(ctx, "w/sub/f", "x", agentclient.WriteOptions{MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	fsExpect(t, ch, "/home/user/w/sub/f", agentclient.WatchCreate)
}

func TestFilesOwnership(t *testing.T) {
	h := newUserHarness(t)
	ctx := fsTestCtx(t)
	root := agentclient.AsUser("root")
	want := func(p string, uid, gid uint32) {
		t.Helper()
		if u, g := h.owner(t, p); u != uid || g != gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", p, u, g, uid, gid)
		}
	}
	// What the user creates is the user's; existing parents keep theirs.
	if _, err := h.writeString(ctx, "/home/user/new/deep/f", "x", agentclient.WriteOptions{MakeParents: true}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/home/user/new", "/home/user/new/deep", "/home/user/new/deep/f"} {
		want(p, fsUserUID, fsUserGID)
	}
	if _, err := h.writeString(ctx, "/tmp/f", "x", agentclient.WriteOptions{Append: true}); err != nil {
		t.Fatal(err)
	}
	want("/tmp/f", fsUserUID, fsUserGID)
	want("/tmp", 0, 0)
	if _, err := h.client.MakeDir(ctx, "md", false); err != nil {
		t.Fatal(err)
	}
	want("/home/user/md", fsUserUID, fsUserGID)
	// What root creates is root's.
	if _, err := h.writeString(ctx, "/etc/rootfile", "x", agentclient.WriteOptions{User: "root"}); err != nil {
		t.Fatal(err)
	}
	want("/etc/rootfile", 0, 0)
	if _, err := h.client.MakeDir(ctx, "/etc/rootdir", true, root); err != nil {
		t.Fatal(err)
	}
	want("/etc/rootdir", 0, 0)

	// A replacement keeps the owner and mode where its user may give them:
	// root (with CAP_CHOWN here) replacing the user's file keeps the user's.
	if _, err := h.writeString(ctx, "/home/user/mine", "v1", agentclient.WriteOptions{Mode: 0o640}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.writeString(ctx, "/home/user/mine", "v2", agentclient.WriteOptions{User: "root"}); err != nil {
		t.Fatal(err)
	}
	want("/home/user/mine", fsUserUID, fsUserGID)
	if st, err := os.Stat(h.host("/home/user/mine")); err != nil || st.Mode().Perm() != 0o640 {
		t.Errorf("replaced file's mode %v, %v; want 0640 kept", st.Mode(), err)
	}
	// The user may write a group-writable file of root's, but cannot give
	// the new file to root: it becomes the user's, in the file's group.
	shared := h.host("/home/user/shared")
	if err := os.WriteFile(shared, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(shared, 0, fsUserGroup); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(shared, 0o664); err != nil {
		t.Fatal(err)
	}
	if _, err := h.writeString(ctx, "shared", "new", agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	want("/home/user/shared", fsUserUID, fsUserGroup)
	if got := h.read(t, "/home/user/shared"); got != "new" {
		t.Errorf("shared holds %q", got)
	}
	h.assertNoTemp(t, "/home/user")
}
