//go:build linux

package agent

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestFSCleanPath(t *testing.T) {
	tests := []struct {
		in, home, want string
		err            error
	}{
		{"/a/b", "/home/user", "/a/b", nil},
		{"a/b", "/home/user", "/home/user/a/b", nil},
		{".", "/home/user", "/home/user", nil},
		{"..", "/home/user", "/home", nil},
		{"../../../../etc/passwd", "/home/user", "/etc/passwd", nil},
		{"/../..", "/home/user", "/", nil},
		{"a//b/./c/", "/h", "/h/a/b/c", nil},
		{"x", "", "/x", nil},
		{"x", "relative-home", "/x", nil},
		{"", "/h", "", errdefs.ErrInvalidArgument},
		{"a\x00b", "/h", "", errdefs.ErrInvalidArgument},
		{"/" + strings.Repeat("a", fsMaxPathLen), "/h", "", errdefs.ErrInvalidArgument},
		{"/" + strings.Repeat("a", fsMaxPathLen-1), "/h", "/" + strings.Repeat("a", fsMaxPathLen-1), nil},
	}
	for _, tt := range tests {
		got, err := fsCleanPath(tt.in, tt.home)
		if tt.err != nil {
			fsWantClass(t, "clean "+tt.in, err, tt.err)
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("fsCleanPath(%q, %q) = %q, %v; want %q", tt.in, tt.home, got, err, tt.want)
		}
	}
}

// fsFuzzRoot builds a root full of hostile symlinks next to an outside
// directory.
func fsFuzzRoot(tb testing.TB) (root, outside string) {
	root, outside = tb.TempDir(), tb.TempDir()
	for _, d := range []string{"home/user/d", "etc", "tmp/x/y"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			tb.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("inside"), 0o644); err != nil {
		tb.Fatal(err)
	}
	links := map[string]string{
		"home/user/abs":   "/",
		"home/user/up":    "../../../../../../../..",
		"home/user/out":   outside,
		"home/user/outr":  fsUp + strings.TrimPrefix(outside, "/"),
		"home/user/etc":   "/etc",
		"home/user/loop":  "loop",
		"home/user/chain": "up/home/user/out",
		"home/user/proc":  "/proc/self/root",
		"home/user/d/dot": "..",
		"tmp/x/y/back":    "../../../home/user/up/tmp",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			tb.Fatal(err)
		}
	}
	return root, outside
}

// FuzzResolve feeds arbitrary request paths to the resolver and to the
// Write target walk, and checks that every fd they produce names a file
// under the root.
func FuzzResolve(f *testing.F) {
	for _, seed := range []string{
		"/", ".", "..", "../../../etc/passwd", "abs/etc/passwd", "up/up/up", "out/secret",
		"outr/secret", "chain/x", "loop/x", "proc/etc", "d/dot/dot/dot/up", "/tmp/x/y/back/x",
		"/home/user/out/../out/secret", "etc", "a\x00b", "//..//..//", "/proc/self/root",
	} {
		f.Add(seed)
	}
	root, _ := fsFuzzRoot(f)
	a := &Agent{opts: Options{Root: root, Users: map[string]User{"user": {Home: "/home/user"}}, DefaultUser: "user"}}
	s, err := newFileService(a)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.close() })
	host := s.res.hostRoot
	under := func(t *testing.T, what string, fd int) {
		t.Helper()
		p, err := fsFDPath(fd)
		if err != nil {
			t.Fatalf("%s: readlink: %v", what, err)
		}
		if p != host && !strings.HasPrefix(p, host+"/") {
			t.Fatalf("%s resolved outside the root: %s", what, p)
		}
	}
	f.Fuzz(func(t *testing.T, in string) {
		p, err := fsCleanPath(in, "/home/user")
		if err != nil {
			if in != "" && len(in) <= fsMaxPathLen && !strings.Contains(in, "\x00") {
				t.Fatalf("valid path %q refused: %v", in, err)
			}
			return
		}
		if !path.IsAbs(p) || path.Clean(p) != p {
			t.Fatalf("fsCleanPath(%q) = %q is not absolute and clean", in, p)
		}
		if fd, err := s.res.open(p, unix.O_PATH); err == nil {
			under(t, "open "+p, fd)
			if sp, err := s.res.sandboxPath(fd); err != nil || !path.IsAbs(sp) {
				t.Fatalf("sandboxPath of %s = %q, %v", p, sp, err)
			}
			unix.Close(fd)
		}
		if p == "/" {
			return
		}
		if fd, name, err := s.res.openParent(p); err == nil {
			under(t, "parent of "+p, fd)
			if name == "" || strings.Contains(name, "/") {
				t.Fatalf("openParent(%s) name %q", p, name)
			}
			unix.Close(fd)
		}
		if tgt, err := s.writeTarget(p); err == nil {
			under(t, "write target of "+p, tgt.dirfd)
			if strings.Contains(tgt.name, "/") || !path.IsAbs(tgt.path) {
				t.Fatalf("writeTarget(%s) = %q in %q", p, tgt.name, tgt.path)
			}
			unix.Close(tgt.dirfd)
		}
	})
}
