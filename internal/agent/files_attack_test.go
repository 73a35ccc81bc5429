//go:build linux

package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Attacks on path resolution. Every harness checks on cleanup that the
// directory outside the root is unchanged; these tests also check that
// nothing outside was read and where writes landed instead.

func TestFilesAttackTraversal(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	// Reads of the host's /etc/passwd by "..": the root has no /etc.
	for _, p := range []string{"../../../etc/passwd", fsUp + "etc/passwd", "/../../../../etc/passwd", "/home/../../../etc/passwd"} {
		got, err := h.readString(ctx, p)
		fsWantClass(t, "read "+p, err, errdefs.ErrNotFound)
		if got != "" {
			t.Errorf("read %s returned %d bytes", p, len(got))
		}
		_, err = h.client.Stat(ctx, p)
		fsWantClass(t, "stat "+p, err, errdefs.ErrNotFound)
		h.noHostPath(t, err)
	}
	secret := fsEscape(filepath.Join(h.outside, "secret"))
	if got, err := h.readString(ctx, secret); err == nil || strings.Contains(got, "TOPSECRET") {
		t.Errorf("read of the outside secret: %q, %v", got, err)
	}
	if _, _, err := h.client.ListDir(ctx, fsEscape(h.outside), 1); err == nil {
		t.Error("listing the outside directory succeeded")
	}
	// Writes by ".." land inside the root, at the clamped path.
	evil := fsEscape(filepath.Join(h.outside, "evil"))
	e, err := h.writeString(ctx, evil, "evil", agentclient.WriteOptions{MakeParents: true})
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != filepath.Join(h.outside, "evil") {
		t.Errorf("write reported path %s", e.Path)
	}
	if got := h.read(t, filepath.Join(h.outside, "evil")); got != "evil" {
		t.Errorf("clamped write landed elsewhere: %q", got)
	}
	if _, err := h.client.MakeDir(ctx, fsEscape(filepath.Join(h.outside, "mk")), true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(h.host(filepath.Join(h.outside, "mk"))); err != nil {
		t.Errorf("clamped mkdir not inside the root: %v", err)
	}
}

func TestFilesAttackAbsoluteSymlink(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.symlink(t, "/etc", "/home/user/etc")
	h.symlink(t, h.outside, "/home/user/x")
	// The host's /etc is never listed or read through the link.
	if ents, _, err := h.client.ListDir(ctx, "etc", 1); err == nil {
		t.Errorf("listed /etc through a symlink: %d entries", len(ents))
	}
	if got, err := h.readString(ctx, "etc/passwd"); err == nil || got != "" {
		t.Errorf("read /etc/passwd through a symlink: %d bytes, %v", len(got), err)
	}
	if _, err := h.readString(ctx, "x/secret"); err == nil {
		t.Error("read the outside secret through an absolute symlink")
	}
	// x/evil resolves to <root><outside>/evil, whose parent does not exist.
	_, err := h.writeString(ctx, "x/evil", "evil", agentclient.WriteOptions{})
	fsWantClass(t, "write x/evil", err, errdefs.ErrNotFound)
	h.noHostPath(t, err)
	_, err = h.writeString(ctx, "x/secret", "overwritten", agentclient.WriteOptions{})
	fsWantClass(t, "write x/secret", err, errdefs.ErrNotFound)
	// make_parents does not create a dangling symlink's target (as
	// mkdir -p does not).
	_, err = h.writeString(ctx, "x/evil", "evil", agentclient.WriteOptions{MakeParents: true})
	fsWantClass(t, "write x/evil with parents", err, errdefs.ErrNotFound)
	// Once the target exists inside the root, the write lands there.
	if _, err := h.client.MakeDir(ctx, h.outside, true); err != nil {
		t.Fatal(err)
	}
	if _, err := h.writeString(ctx, "x/evil", "evil", agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.read(t, filepath.Join(h.outside, "evil")); got != "evil" {
		t.Errorf("write through the symlink landed elsewhere: %q", got)
	}
	_, err = h.client.Chmod(ctx, "x/secret", 0o777)
	fsWantClass(t, "chmod x/secret", err, errdefs.ErrNotFound)
}

func TestFilesAttackRelativeSymlinkChain(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.symlink(t, "../../..", "/home/user/a")
	h.symlink(t, "a/"+fsUp, "/home/user/b")
	h.symlink(t, "b", "/home/user/c")
	h.symlink(t, "c/"+strings.TrimPrefix(h.outside, "/"), "/home/user/d")
	for _, p := range []string{
		"a/" + fsEscape(h.outside) + "/secret",
		"c/" + strings.TrimPrefix(h.outside, "/") + "/secret",
		"d/secret",
	} {
		if got, err := h.readString(ctx, p); err == nil || got != "" {
			t.Errorf("read %s: %d bytes, %v", p, len(got), err)
		}
		_, err := h.writeString(ctx, p, "pwned", agentclient.WriteOptions{})
		fsWantClass(t, "write "+p, err, errdefs.ErrNotFound)
		_, err = h.writeString(ctx, strings.TrimSuffix(p, "secret")+"sub/keep", "pwned", agentclient.WriteOptions{})
		fsWantClass(t, "write sub/keep via "+p, err, errdefs.ErrNotFound)
		err = h.client.Remove(ctx, p, true)
		fsWantClass(t, "remove "+p, err, errdefs.ErrNotFound)
	}
	// "a" resolves to the sandbox root.
	ents, _, err := h.client.ListDir(ctx, "a", 1)
	if err != nil || len(ents) != 1 || ents[0].Path != "/home/user/a/home" {
		t.Errorf("list a = %+v, %v", ents, err)
	}
}

func TestFilesAttackFinalSymlinkWrite(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.symlink(t, filepath.Join(h.outside, "secret"), "/home/user/abs")
	h.symlink(t, fsEscape(filepath.Join(h.outside, "secret")), "/home/user/rel")
	h.symlink(t, filepath.Join(h.outside, "sub"), "/home/user/absdir")
	for _, p := range []string{"abs", "rel"} {
		for _, app := range []bool{false, true} {
			_, err := h.writeString(ctx, p, "pwned", agentclient.WriteOptions{Append: app, MakeParents: true})
			fsWantClass(t, "write "+p, err, errdefs.ErrNotFound)
		}
		if got, err := h.readString(ctx, p); err == nil || got != "" {
			t.Errorf("read %s: %q, %v", p, got, err)
		}
		_, err := h.client.Chmod(ctx, p, 0o777)
		fsWantClass(t, "chmod "+p, err, errdefs.ErrInvalidArgument)
	}
	// Once <root><outside> exists the write lands there, and the links
	// stay links.
	if err := os.MkdirAll(h.host(h.outside), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"abs", "rel"} {
		if _, err := h.writeString(ctx, p, "via "+p, agentclient.WriteOptions{}); err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
		if got := h.read(t, filepath.Join(h.outside, "secret")); got != "via "+p {
			t.Errorf("write %s landed elsewhere: %q", p, got)
		}
	}
	_, err := h.writeString(ctx, "absdir/keep", "pwned", agentclient.WriteOptions{})
	fsWantClass(t, "write absdir/keep", err, errdefs.ErrNotFound)
}

func TestFilesAttackRemoveSymlinks(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/d/f", "f")
	h.symlink(t, h.outside, "/home/user/d/abs")
	h.symlink(t, fsEscape(h.outside), "/home/user/d/sub/rel")
	h.symlink(t, filepath.Join(h.outside, "secret"), "/home/user/d/sub/file")
	h.symlink(t, h.outside, "/home/user/toplink")
	if err := h.client.Remove(ctx, "d", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(h.host("/home/user/d")); !os.IsNotExist(err) {
		t.Errorf("d still exists: %v", err)
	}
	// Removing a symlink to a directory removes the link only.
	if err := h.client.Remove(ctx, "toplink", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(h.host("/home/user/toplink")); !os.IsNotExist(err) {
		t.Errorf("toplink still exists: %v", err)
	}
	// Removing through an escaping path names nothing.
	err := h.client.Remove(ctx, fsEscape(h.outside), true)
	fsWantClass(t, "remove outside", err, errdefs.ErrNotFound)
}

func TestFilesAttackMove(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/f", "mine")
	h.symlink(t, h.outside, "/home/user/x")
	h.symlink(t, fsEscape(h.outside), "/home/user/y")
	tests := []struct{ src, dst string }{
		{fsEscape(filepath.Join(h.outside, "secret")), "/home/user/stolen"},
		{"x/secret", "/home/user/stolen"},
		{"y/secret", "/home/user/stolen"},
		{"y/sub", "/home/user/stolen"},
		{"f", fsEscape(filepath.Join(h.outside, "dropped"))},
		{"f", "x/dropped"},
		{"f", "y/sub/keep"},
	}
	for _, tt := range tests {
		_, err := h.client.Move(ctx, tt.src, tt.dst)
		fsWantClass(t, "move "+tt.src+" "+tt.dst, err, errdefs.ErrNotFound)
		h.noHostPath(t, err)
	}
	if _, err := os.Lstat(h.host("/home/user/stolen")); !os.IsNotExist(err) {
		t.Errorf("something was moved in: %v", err)
	}
	if h.read(t, "/home/user/f") != "mine" {
		t.Error("f changed")
	}
	// Moving the symlink itself moves the link, not its target.
	if _, err := h.client.Move(ctx, "x", "x2"); err != nil {
		t.Fatal(err)
	}
	if target, err := os.Readlink(h.host("/home/user/x2")); err != nil || target != h.outside {
		t.Errorf("moved link = %q, %v", target, err)
	}
}

func TestFilesAttackMagicLinks(t *testing.T) {
	if _, err := os.Stat("/proc/self/root"); err != nil {
		t.Skip("no /proc")
	}
	// Root "/" is how the agent runs inside a sandbox. Only reads here.
	a, err := New(Options{Root: "/", Users: map[string]User{"user": {Home: "/"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	s := a.files
	for _, p := range []string{"/proc/self/root/etc/passwd", "/proc/self/cwd", "/proc/1/root"} {
		fd, err := s.res.open(p, unix.O_PATH)
		if err == nil {
			unix.Close(fd)
			t.Errorf("%s resolved through a magic link", p)
		}
	}
	// The link itself can still be described (lstat does not follow it).
	if _, err := s.lstat("/proc/self/cwd"); err != nil {
		t.Errorf("lstat of a magic link: %v", err)
	}
}

// TestFilesAttackSwapRace swaps a directory with symlinks to the outside
// directory while the agent keeps writing into it. The outside directory
// must be untouched (checked by the harness on cleanup).
func TestFilesAttackSwapRace(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	home := h.host("/home/user")
	if err := os.MkdirAll(filepath.Join(home, "d", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.symlink(t, h.outside, "/home/user/s1")
	h.symlink(t, fsEscape(h.outside), "/home/user/s2")
	hfd, err := unix.Open(home, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			other := "s1"
			if i%4 >= 2 {
				other = "s2"
			}
			if err := unix.Renameat2(hfd, "d", hfd, other, unix.RENAME_EXCHANGE); err == nil {
				swaps.Add(1)
			}
		}
	}()

	deadline := time.Now().Add(time.Second)
	ops := 0
	for ; time.Now().Before(deadline); ops++ {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		switch ops % 9 {
		case 0:
			_, _ = h.writeString(c, "d/secret", "pwned", agentclient.WriteOptions{})
		case 1:
			_, _ = h.writeString(c, "d/sub/keep", "pwned", agentclient.WriteOptions{MakeParents: true})
		case 2:
			_, _ = h.writeString(c, "d/secret", "pwned", agentclient.WriteOptions{Append: true})
		case 3:
			_, _ = h.client.MakeDir(c, "d/sub/newdir", true)
		case 4:
			_ = h.client.Remove(c, "d/sub", true)
		case 5:
			_, _ = h.client.Move(c, "d/secret", "d/moved")
		case 6:
			_, _ = h.client.Chmod(c, "d/secret", 0o777)
		case 7:
			if got, err := h.readString(c, "d/secret"); err == nil && strings.Contains(got, "TOPSECRET") {
				t.Errorf("read the outside secret during the race")
			}
		case 8:
			ents, _, _ := h.client.ListDir(c, "d", 2)
			for _, e := range ents {
				if e.Name == "keep" && e.Size == 4 {
					t.Errorf("listed the outside directory during the race")
				}
			}
		}
		cancel()
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d operations, %d swaps", ops, swaps.Load())
	if swaps.Load() < 100 || ops < 100 {
		t.Fatalf("the race did not run: %d ops, %d swaps", ops, swaps.Load())
	}
}

// TestFilesAttackSwapAsUser races requests of the default (non-root) user
// against a sandboxed process that swaps the directory and the file they
// name for symlinks to /etc, /etc/passwd and /root/secret. Whatever the
// interleaving, every lookup and change is the user's: nothing lands in
// /etc, /etc/passwd keeps its content, mode and owner, and root's secret
// is never read. (When the agent acted as root, these writes replaced
// /etc/passwd.)
func TestFilesAttackSwapAsUser(t *testing.T) {
	h := newUserHarness(t)
	ctx := fsTestCtx(t)
	home := h.host("/home/user")
	if err := os.Mkdir(filepath.Join(home, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	h.put(t, "/home/user/f", "mine")
	h.put(t, "/home/user/s", "mine")
	for _, p := range []string{"d", "f", "s"} {
		if err := os.Lchown(filepath.Join(home, p), fsUserUID, fsUserGID); err != nil {
			t.Fatal(err)
		}
	}
	h.symlink(t, "/etc", "/home/user/dl")
	h.symlink(t, "/etc/passwd", "/home/user/fl")
	h.symlink(t, "../../root/secret", "/home/user/sl")
	hfd, err := unix.Open(home, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(hfd)

	var stop atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		pairs := [][2]string{{"d", "dl"}, {"f", "fl"}, {"s", "sl"}}
		for i := 0; !stop.Load(); i++ {
			p := pairs[i%len(pairs)]
			if err := unix.Renameat2(hfd, p[0], hfd, p[1], unix.RENAME_EXCHANGE); err == nil {
				swaps.Add(1)
			}
		}
	}()

	deadline := time.Now().Add(time.Second)
	ops, landed, leaked := 0, 0, 0
	for ; time.Now().Before(deadline); ops++ {
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		var err error
		switch ops % 8 {
		case 0:
			_, err = h.writeString(c, "f", "pwned", agentclient.WriteOptions{})
		case 1:
			_, err = h.writeString(c, "d/passwd", "pwned", agentclient.WriteOptions{})
		case 2:
			_, err = h.writeString(c, "f", "pwned", agentclient.WriteOptions{Append: true})
		case 3:
			_, err = h.writeString(c, "d/new", "pwned", agentclient.WriteOptions{MakeParents: true})
		case 4:
			_, err = h.client.Chmod(c, "f", 0o666)
		case 5:
			err = h.client.Remove(c, "d/passwd", false)
		case 6:
			_, err = h.client.Move(c, "d/passwd", "moved")
		case 7:
			var got string
			got, err = h.readString(c, "s")
			if strings.Contains(got, "secret") {
				leaked++
			}
		}
		if err == nil {
			landed++
		}
		cancel()
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d operations (%d succeeded), %d swaps", ops, landed, swaps.Load())
	if leaked > 0 {
		t.Errorf("read root's secret %d times during the race", leaked)
	}
	if swaps.Load() < 100 || ops < 100 || landed == 0 {
		t.Fatalf("the race did not run: %d ops (%d succeeded), %d swaps", ops, landed, swaps.Load())
	}
	if got := h.read(t, "/etc/passwd"); got != fsPasswd {
		t.Errorf("/etc/passwd holds %q", got)
	}
	var st unix.Stat_t
	if err := unix.Stat(h.host("/etc/passwd"), &st); err != nil || st.Uid != 0 || st.Mode&0o7777 != 0o644 {
		t.Errorf("/etc/passwd: uid %d mode %#o, %v", st.Uid, st.Mode&0o7777, err)
	}
	if ents, err := os.ReadDir(h.host("/etc")); err != nil || len(ents) != 1 {
		t.Errorf("/etc holds %v, %v; want passwd only", ents, err)
	}
	if got := h.read(t, "/root/secret"); got != fsRootOnly {
		t.Errorf("root's secret holds %q", got)
	}
}
