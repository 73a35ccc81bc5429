package build

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// layerSpec describes a layer directory: "dir/" is a directory, "name"
// a file, "name->target" a symlink, "name!" a whiteout, "dir/^" marks
// dir opaque.
func makeLayer(t *testing.T, specs ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, s := range specs {
		switch {
		case strings.HasSuffix(s, "/^"):
			if err := unix.Setxattr(filepath.Join(root, strings.TrimSuffix(s, "/^")), layers.OpaqueXattr, []byte("y"), 0); err != nil {
				t.Fatal(err)
			}
		case strings.HasSuffix(s, "/"):
			if err := os.MkdirAll(filepath.Join(root, s), 0o755); err != nil {
				t.Fatal(err)
			}
		case strings.Contains(s, "->"):
			name, target, _ := strings.Cut(s, "->")
			if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
				t.Fatal(err)
			}
		case strings.HasSuffix(s, "!"):
			if err := unix.Mknod(filepath.Join(root, strings.TrimSuffix(s, "!")), unix.S_IFCHR, 0); err != nil {
				t.Fatal(err)
			}
		default:
			if err := os.WriteFile(filepath.Join(root, s), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

func testStack(t *testing.T) *stack {
	requireRoot(t) // whiteouts are device nodes
	lower := makeLayer(t,
		"a/", "a/x", "b->a", "c/", "c/old", "d", "abs->/a", "up->../../a",
		"usr/", "usr/bin/", "usr/bin/sh", "bin->usr/bin", "loop1->loop2", "loop2->loop1",
		"etc/", "etc/passwd", "file", "dirlink->usr")
	upper := makeLayer(t,
		"a/", "a/y", "c/", "c/new", "c/^", "d!", "e/", "file/", "file/inner", "dirlink/")
	return newStack([]string{lower, upper})
}

func TestStackLookup(t *testing.T) {
	s := testStack(t)
	tests := []struct {
		rel   string
		found bool
		typ   uint32
	}{
		{"a", true, typDir},
		{"a/x", true, typReg}, // merged from the lower layer
		{"a/y", true, typReg},
		{"c/new", true, typReg},
		{"c/old", false, 0}, // hidden by the opaque directory
		{"d", false, 0},     // whited out
		{"e", true, typDir},
		{"b", true, typLnk},
		{"file", true, typDir}, // an upper directory over a lower file
		{"file/inner", true, typReg},
		{"dirlink", true, typDir}, // an upper directory over a lower symlink
		{"missing", false, 0},
		{"a/x/deeper", false, 0},
	}
	for _, tc := range tests {
		h, found, err := s.lookup(tc.rel)
		if err != nil || found != tc.found || (found && h.st.typ != tc.typ) {
			t.Errorf("lookup(%q) = %o, %v, %v; want %o, %v", tc.rel, h.st.typ, found, err, tc.typ, tc.found)
		}
	}
}

func TestStackResolve(t *testing.T) {
	s := testStack(t)
	tests := []struct {
		path       string
		followLast bool
		want       string
		found      bool
	}{
		{"/b/x", false, "a/x", true},
		{"/b/y", false, "a/y", true},
		{"/b", false, "b", true},
		{"/b", true, "a", true},
		{"/abs/y", false, "a/y", true},
		{"/up/x", false, "a/x", true}, // ".." stops at the root
		{"/bin/sh", false, "usr/bin/sh", true},
		{"/bin/new", false, "usr/bin/new", false},
		{"/bin/new/deeper", false, "usr/bin/new/deeper", false},
		{"/a/../b/x", false, "a/x", true},
		{"/", false, "", true},
		{"relative/path", false, "relative/path", false},
	}
	for _, tc := range tests {
		rel, _, found, err := s.resolve(tc.path, tc.followLast)
		if err != nil || rel != tc.want || found != tc.found {
			t.Errorf("resolve(%q, %v) = %q, %v, %v; want %q, %v", tc.path, tc.followLast, rel, found, err, tc.want, tc.found)
		}
	}
	for _, bad := range []string{"/loop1/x", "/a/x/y"} {
		if _, _, _, err := s.resolve(bad, true); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("resolve(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	// Pending entries of the layer being written count.
	s.pending["usr/bin/new"] = true
	if rel, h, found, err := s.resolve("/bin/new", true); err != nil || rel != "usr/bin/new" || !found || !h.pending {
		t.Errorf("resolve of a pending directory = %q %+v %v %v", rel, h, found, err)
	}
}

func TestChownIDs(t *testing.T) {
	requireRoot(t)
	layer := makeLayer(t, "etc/")
	if err := os.WriteFile(filepath.Join(layer, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\napp:x:1234:999::/app:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(layer, "etc/group"), []byte("root:x:0:\nstaff:x:50:\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStack([]string{layer})
	tests := []struct {
		chown    string
		uid, gid int
		ok       bool
	}{
		{"", 0, 0, true},
		{"1000", 1000, 1000, true},
		{"1000:50", 1000, 50, true},
		{"app", 1234, 1234, true},
		{"app:staff", 1234, 50, true},
		{"nobody", 0, 0, false},
		{"app:nogroup", 0, 0, false},
	}
	for _, tc := range tests {
		uid, gid, err := chownIDs(s, tc.chown)
		if (err == nil) != tc.ok || (tc.ok && (uid != tc.uid || gid != tc.gid)) {
			t.Errorf("chownIDs(%q) = %d:%d, %v", tc.chown, uid, gid, err)
		}
	}
}

// copyTar plans and writes a COPY over the test stack and returns the
// tar's entries as "name mode uid:gid" lines.
func copyTar(t *testing.T, s *stack, ctxDir string, sources []string, dest string) ([]string, error) {
	t.Helper()
	root, err := os.OpenRoot(ctxDir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	entries, err := airfile.ResolveSources(context.Background(), root, sources)
	if err != nil {
		return nil, err
	}
	destAbs := dest
	if !strings.HasPrefix(dest, "/") {
		destAbs = "/work/" + dest
	}
	var buf bytes.Buffer
	c := &copier{st: s, uid: 7, gid: 8, now: time.Unix(1, 0), tw: tar.NewWriter(&buf)}
	p, err := c.plan(destAbs, isDirDest(dest, sources), entries)
	if err != nil {
		return nil, err
	}
	if err := c.copy(context.Background(), root, p, entries); err != nil {
		return nil, err
	}
	if err := c.tw.Close(); err != nil {
		t.Fatal(err)
	}
	var out []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		line := fmt.Sprintf("%s %o %d:%d", h.Name, h.Mode, h.Uid, h.Gid)
		if h.Typeflag == tar.TypeSymlink {
			line += " -> " + h.Linkname
		}
		out = append(out, line)
	}
	return out, nil
}

func TestCopyPlan(t *testing.T) {
	s := testStack(t)
	// The existing directories of the test stack have mode 0755 and owner
	// 0:0; what the copy creates is 7:8.
	ctxDir := t.TempDir()
	for rel, mode := range map[string]os.FileMode{"f.txt": 0o640, "dir/g.txt": 0o600, "dir/sub/h": 0o755} {
		p := filepath.Join(ctxDir, rel)
		os.MkdirAll(filepath.Dir(p), 0o750)
		if err := os.WriteFile(p, []byte(rel), mode); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, mode)
	}
	os.Chmod(filepath.Join(ctxDir, "dir"), 0o750)
	os.Chmod(filepath.Join(ctxDir, "dir/sub"), 0o750)
	if err := os.Symlink("g.txt", filepath.Join(ctxDir, "dir/link")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		sources []string
		dest    string
		want    []string
	}{
		{"file into a symlinked dir", []string{"f.txt"}, "/bin/", []string{
			"usr/ 755 0:0", "usr/bin/ 755 0:0", "usr/bin/f.txt 640 7:8"}},
		{"file as a new name", []string{"f.txt"}, "/new/name", []string{
			"new/ 755 7:8", "new/name 640 7:8"}},
		{"file into an existing dir without slash", []string{"f.txt"}, "/a", []string{
			"a/ 755 0:0", "a/f.txt 640 7:8"}},
		{"dir contents", []string{"dir"}, "/opt/d", []string{
			"opt/ 755 7:8", "opt/d/ 750 7:8", "opt/d/g.txt 600 7:8",
			"opt/d/link 777 7:8 -> g.txt", "opt/d/sub/ 750 7:8", "opt/d/sub/h 755 7:8"}},
		{"dir contents into a symlinked dir", []string{"dir"}, "/dirlink/../b", []string{
			"a/ 755 0:0", "a/g.txt 600 7:8", "a/link 777 7:8 -> g.txt", "a/sub/ 750 7:8", "a/sub/h 755 7:8"}},
		{"relative to the workdir", []string{"f.txt"}, "rel/", []string{
			"work/ 755 7:8", "work/rel/ 755 7:8", "work/rel/f.txt 640 7:8"}},
		{"wildcard", []string{"*.txt"}, "/e/", []string{
			"e/ 755 0:0", "e/f.txt 640 7:8"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.pending = make(map[string]bool)
			got, err := copyTar(t, s, ctxDir, tc.sources, tc.dest)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("tar entries:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	s.pending = make(map[string]bool)
	if _, err := copyTar(t, s, ctxDir, []string{"dir"}, "/etc/passwd"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("copying a directory over a file: %v", err)
	}
}
