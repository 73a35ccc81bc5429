package layers

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// treeDir is an empty directory to extract a tree into, alone in its
// parent (so that a write beside it shows).
func treeDir(t testing.TB) (parent, dir string) {
	t.Helper()
	parent = t.TempDir()
	dir = filepath.Join(parent, "ctx")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return parent, dir
}

// plainSnapshot describes the files under dir: "dir", "link:TARGET" or
// "MODE:content".
func plainSnapshot(dir string) map[string]string {
	out := map[string]string{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fi, _ := d.Info()
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link:" + l
		default:
			b, _ := os.ReadFile(p)
			out[rel] = fmt.Sprintf("%o:%s", fi.Mode().Perm(), b)
		}
		return nil
	})
	return out
}

var treeOpts = TreeOptions{Name: "build context", MaxEntries: 100, MaxBytes: 1 << 20}

// TestExtractTreeLinks: a link inside the tree; a replaced file; a hard
// link; set-id bits dropped; owner access added; owners, whiteout names
// and extended attributes of no account.
func TestExtractTreeLinks(t *testing.T) {
	_, dir := treeDir(t)
	st, err := ExtractTree(context.Background(), dir, bytes.NewReader(testutil.Tar(t,
		testutil.Entry{Name: "./", Type: tar.TypeDir},
		testutil.Entry{Name: "sub/", Type: tar.TypeDir, Mode: 0o500},
		testutil.Entry{Name: "sub/f", Body: "one", Mode: 0o6755},
		testutil.Entry{Name: "sub/f", Body: "two"},
		testutil.Entry{Name: "alias", Type: tar.TypeSymlink, Link: "sub"},
		testutil.Entry{Name: "hard", Type: tar.TypeLink, Link: "sub/f"},
		testutil.Entry{Name: ".wh.x", Body: "plain", UID: 100000, GID: 100000, Xattrs: map[string]string{"user.a": "b"}},
		testutil.Entry{Name: "ro", Body: "r", Mode: 0o400},
	)), treeOpts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 8 || st.Bytes != 12 {
		t.Errorf("stats %+v", st)
	}
	snap := plainSnapshot(dir)
	want := map[string]string{"sub": "dir", "sub/f": "644:two", "alias": "link:sub", "hard": "644:two", ".wh.x": "644:plain", "ro": "600:r"}
	if len(snap) != len(want) {
		t.Errorf("tree %v, want %v", snap, want)
	}
	for k, v := range want {
		if snap[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, snap[k], v, snap)
		}
	}
	fi, _ := os.Stat(filepath.Join(dir, "sub"))
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("sub mode %v, want owner access added", fi.Mode())
	}
	buf := make([]byte, 256)
	if n, _ := unix.Llistxattr(filepath.Join(dir, ".wh.x"), buf); n > 0 {
		t.Errorf("extended attributes kept: %q", buf[:n])
	}
}

// TestExtractTreeThroughLink: a later entry may not be written through a
// symbolic link of the tree, even one that points inside it.
func TestExtractTreeThroughLink(t *testing.T) {
	_, dir := treeDir(t)
	_, err := ExtractTree(context.Background(), dir, bytes.NewReader(testutil.Tar(t,
		testutil.Entry{Name: "sub/", Type: tar.TypeDir},
		testutil.Entry{Name: "alias", Type: tar.TypeSymlink, Link: "sub"},
		testutil.Entry{Name: "alias/g", Body: "via link"},
	)), treeOpts)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("err = %v, want a refused write through a symlink", err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "sub", "g")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("sub/g was written through the link: %v", err)
	}
}

// TestExtractTreeHostile: what a tree may not hold, each refused with its
// class and a message naming the tree, and nothing written beside it.
func TestExtractTreeHostile(t *testing.T) {
	many := []testutil.Entry{}
	for i := range 60 {
		many = append(many, testutil.Entry{Name: "f" + strings.Repeat("x", i)})
	}
	tests := []struct {
		name  string
		body  []byte
		class error
		msg   string
	}{
		{"dotdot", testutil.Tar(t, testutil.Entry{Name: "../evil", Body: "x"}), errdefs.ErrInvalidArgument, "build context entry \"../evil\": names with .. are not allowed"},
		{"nested dotdot", testutil.Tar(t, testutil.Entry{Name: "a/../../evil", Body: "x"}), errdefs.ErrInvalidArgument, "names with .."},
		{"absolute", testutil.Tar(t, testutil.Entry{Name: "/etc/evil", Body: "x"}), errdefs.ErrInvalidArgument, "absolute names"},
		{"absolute symlink", testutil.Tar(t, testutil.Entry{Name: "l", Type: tar.TypeSymlink, Link: "/etc"}), errdefs.ErrInvalidArgument, "absolute link"},
		{"escaping symlink", testutil.Tar(t, testutil.Entry{Name: "a/l", Type: tar.TypeSymlink, Link: "../../x"}), errdefs.ErrInvalidArgument, "outside the build context"},
		{"hardlink out", testutil.Tar(t, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "../x"}), errdefs.ErrInvalidArgument, "names with .."},
		{"hardlink absolute", testutil.Tar(t, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "/etc/shadow"}), errdefs.ErrInvalidArgument, "absolute"},
		{"hardlink missing", testutil.Tar(t, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "nope"}), errdefs.ErrInvalidArgument, "hard link target \"nope\" is not in the build context"},
		{"device", testutil.Tar(t, testutil.Entry{Name: "dev", Type: tar.TypeChar}), errdefs.ErrInvalidArgument, "only files, directories and links"},
		{"fifo", testutil.Tar(t, testutil.Entry{Name: "p", Type: tar.TypeFifo}), errdefs.ErrInvalidArgument, "only files"},
		{"file over dir", testutil.Tar(t, testutil.Entry{Name: "d/", Type: tar.TypeDir}, testutil.Entry{Name: "d/x", Body: "x"}, testutil.Entry{Name: "d", Body: "x"}), errdefs.ErrInvalidArgument, "directory of that name"},
		{"link over dir", testutil.Tar(t, testutil.Entry{Name: "d/", Type: tar.TypeDir}, testutil.Entry{Name: "d", Type: tar.TypeSymlink, Link: "."}), errdefs.ErrInvalidArgument, "directory of that name"},
		{"file as root", testutil.Tar(t, testutil.Entry{Name: ".", Body: "x"}), errdefs.ErrInvalidArgument, "cannot be the build context's root"},
		{"too many", testutil.Tar(t, many...), errdefs.ErrResourceExhausted, "the build context has more than 50 entries"},
		{"too big", testutil.Tar(t, testutil.Entry{Name: "big", Body: strings.Repeat("x", 70<<10)}), errdefs.ErrResourceExhausted, "larger than the limit of 65536 bytes"},
		{"sparse bomb", sparseStream(10_000_000_000), errdefs.ErrResourceExhausted, "files of the build context are larger"},
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), errdefs.ErrInvalidArgument, "the build context is not a valid tar"},
		{"truncated", testutil.Tar(t, testutil.Entry{Name: "f", Body: strings.Repeat("y", 5000)})[:3000], errdefs.ErrInvalidArgument, "not a valid tar"},
		{"gzip", gzipped(t, testutil.Tar(t, testutil.Entry{Name: "f", Body: "x"})), errdefs.ErrInvalidArgument, "not a valid tar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, dir := treeDir(t)
			_, err := ExtractTree(context.Background(), dir, bytes.NewReader(tt.body), TreeOptions{Name: "build context", MaxEntries: 50, MaxBytes: 64 << 10})
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v with %q", err, tt.class, tt.msg)
			}
			if tt.class == errdefs.ErrResourceExhausted {
				var le *LimitError
				if !errors.As(err, &le) || !strings.Contains(le.Msg, tt.msg) {
					t.Errorf("err = %#v, want a *LimitError", err)
				}
			}
			if strings.Contains(err.Error(), parent) {
				t.Errorf("the message shows a host path: %v", err)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("something was written beside the tree: %v", ents)
			}
		})
	}
}

// layoutOpts is a FilesOnly tree's options, as an image import gives.
var layoutOpts = TreeOptions{Name: "image layout", MaxEntries: 50, MaxBytes: 64 << 10, FilesOnly: true}

// TestExtractTreeFilesOnly: a FilesOnly tree (an OCI image layout) holds
// directories and regular files, each 0700 or 0600 whatever its header
// says (implied parents too); a directory may be declared again; ".wh."
// names are plain names.
func TestExtractTreeFilesOnly(t *testing.T) {
	_, dir := treeDir(t)
	st, err := ExtractTree(context.Background(), dir, bytes.NewReader(testutil.Tar(t,
		testutil.Entry{Name: "./", Type: tar.TypeDir, Mode: 0o755},
		testutil.Entry{Name: "oci-layout", Body: "{}", Mode: 0o6755, UID: 100000},
		testutil.Entry{Name: "blobs/sha256/ab", Body: "blob", Mode: 0o444},
		testutil.Entry{Name: "blobs/", Type: tar.TypeDir, Mode: 0o555},
		testutil.Entry{Name: "blobs/", Type: tar.TypeDir, Mode: 0o777},
		testutil.Entry{Name: ".wh..wh..opq", Body: "plain"},
	)), layoutOpts)
	if err != nil {
		t.Fatal(err)
	}
	if st.Entries != 6 || st.Bytes != 11 {
		t.Errorf("stats %+v", st)
	}
	snap := plainSnapshot(dir)
	want := map[string]string{"oci-layout": "600:{}", "blobs": "dir", "blobs/sha256": "dir", "blobs/sha256/ab": "600:blob", ".wh..wh..opq": "600:plain"}
	if len(snap) != len(want) {
		t.Errorf("tree %v, want %v", snap, want)
	}
	for k, v := range want {
		if snap[k] != v {
			t.Errorf("%s = %q, want %q (all: %v)", k, snap[k], v, snap)
		}
	}
	for _, d := range []string{".", "blobs", "blobs/sha256"} {
		if fi, err := os.Stat(filepath.Join(dir, d)); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v %v, want 0700", d, fi.Mode(), err)
		}
	}
}

// TestExtractTreeFilesOnlyHostile: what a FilesOnly tree refuses on top
// of the tree policy (links, an entry that appears twice), and that the
// tree policy's checks and caps hold there too; nothing is written beside
// the tree.
func TestExtractTreeFilesOnlyHostile(t *testing.T) {
	many := []testutil.Entry{}
	for i := range 60 {
		many = append(many, testutil.Entry{Name: "f" + strings.Repeat("x", i)})
	}
	tests := []struct {
		name  string
		body  []byte
		class error
		msg   string
	}{
		{"symlink", testutil.Tar(t, testutil.Entry{Name: "blobs/sha256/link", Type: tar.TypeSymlink, Link: "/etc/shadow"}), errdefs.ErrInvalidArgument, `image layout entry "blobs/sha256/link": only files and directories are allowed (type "2")`},
		{"relative symlink", testutil.Tar(t, testutil.Entry{Name: "a", Body: "x"}, testutil.Entry{Name: "l", Type: tar.TypeSymlink, Link: "a"}), errdefs.ErrInvalidArgument, "only files and directories"},
		{"hard link", testutil.Tar(t, testutil.Entry{Name: "a", Body: "x"}, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "a"}), errdefs.ErrInvalidArgument, `image layout entry "h": only files and directories are allowed (type "1")`},
		{"fifo", testutil.Tar(t, testutil.Entry{Name: "p", Type: tar.TypeFifo}), errdefs.ErrInvalidArgument, "only files and directories"},
		{"device", testutil.Tar(t, testutil.Entry{Name: "dev", Type: tar.TypeChar}), errdefs.ErrInvalidArgument, "only files and directories"},
		{"file twice", testutil.Tar(t, testutil.Entry{Name: "index.json", Body: "{}"}, testutil.Entry{Name: "./index.json", Body: "{\"evil\":1}"}), errdefs.ErrInvalidArgument, `image layout entry "index.json" appears twice`},
		{"dir over file", testutil.Tar(t, testutil.Entry{Name: "blobs", Body: "x"}, testutil.Entry{Name: "blobs/", Type: tar.TypeDir}), errdefs.ErrInvalidArgument, `image layout entry "blobs" appears twice`},
		{"file over dir", testutil.Tar(t, testutil.Entry{Name: "blobs/", Type: tar.TypeDir}, testutil.Entry{Name: "blobs", Body: "x"}), errdefs.ErrInvalidArgument, `image layout entry "blobs" appears twice`},
		{"file under file", testutil.Tar(t, testutil.Entry{Name: "a", Body: "x"}, testutil.Entry{Name: "a/b", Body: "y"}), errdefs.ErrInvalidArgument, "not a directory"},
		{"file as root", testutil.Tar(t, testutil.Entry{Name: ".", Body: "x"}), errdefs.ErrInvalidArgument, "a file cannot be the image layout's root"},
		{"dotdot", testutil.Tar(t, testutil.Entry{Name: "a/../../evil", Body: "x"}), errdefs.ErrInvalidArgument, "names with .."},
		{"absolute", testutil.Tar(t, testutil.Entry{Name: "/etc/evil", Body: "x"}), errdefs.ErrInvalidArgument, "absolute names"},
		{"too many", testutil.Tar(t, many...), errdefs.ErrResourceExhausted, "the image layout has more than 50 entries"},
		{"too big", testutil.Tar(t, testutil.Entry{Name: "big", Body: strings.Repeat("x", 70<<10)}), errdefs.ErrResourceExhausted, "files of the image layout are larger than the limit of 65536 bytes"},
		{"sparse bomb", sparseStream(10_000_000_000), errdefs.ErrResourceExhausted, "files of the image layout are larger"},
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), errdefs.ErrInvalidArgument, "the image layout is not a valid tar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent, dir := treeDir(t)
			_, err := ExtractTree(context.Background(), dir, bytes.NewReader(tt.body), layoutOpts)
			if !errors.Is(err, tt.class) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("err = %v, want %v with %q", err, tt.class, tt.msg)
			}
			if tt.class == errdefs.ErrResourceExhausted {
				var le *LimitError
				if !errors.As(err, &le) {
					t.Errorf("err = %#v, want a *LimitError", err)
				}
			}
			if strings.Contains(err.Error(), parent) {
				t.Errorf("the message shows a host path: %v", err)
			}
			if ents, _ := os.ReadDir(parent); len(ents) != 1 {
				t.Errorf("something was written beside the tree: %v", ents)
			}
			if _, err := os.Lstat(filepath.Join(dir, "l")); err == nil {
				t.Error("a link was made")
			}
		})
	}
	// A canceled extraction stops with its class.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, dir := treeDir(t)
	if _, err := ExtractTree(ctx, dir, bytes.NewReader(testutil.Tar(t, testutil.Entry{Name: "a", Body: "x"})), layoutOpts); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("canceled: %v", err)
	}
}

// TestExtractTreeBadOptions: caps are required.
func TestExtractTreeBadOptions(t *testing.T) {
	_, dir := treeDir(t)
	if _, err := ExtractTree(context.Background(), dir, bytes.NewReader(nil), TreeOptions{MaxEntries: 1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no byte cap: %v", err)
	}
}

// FuzzExtractTree: whatever the tar stream, under the tree policy and
// under the FilesOnly one, nothing is written outside the target
// directory and a failure is the stream's fault (invalid argument, or a
// cap), never an internal error. What a success leaves is directories,
// regular files and relative symbolic links only. The stricter policy
// wins: what FilesOnly accepts the tree policy accepts too, with the same
// names and contents; it holds only the stream's directories (0700) and
// regular files (0600), each file named once and never also a directory.
func FuzzExtractTree(f *testing.F) {
	f.Add(testutil.Tar(f, testutil.Entry{Name: "Airfile", Body: "FROM template:host\n"}, testutil.Entry{Name: "a/b", Body: "x"}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "l", Type: tar.TypeSymlink, Link: "../x"}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "l", Type: tar.TypeSymlink, Link: "."}, testutil.Entry{Name: "l/l/f", Body: "x"}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "d/", Type: tar.TypeDir}, testutil.Entry{Name: "d/../../x", Body: "x"}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "f", Body: "x"}, testutil.Entry{Name: "h", Type: tar.TypeLink, Link: "f"}, testutil.Entry{Name: "f/", Type: tar.TypeDir}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: ".wh..wh..opq"}, testutil.Entry{Name: "d/.wh.f"}, testutil.Entry{Name: "p", Type: tar.TypeFifo}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "oci-layout", Body: "{}"}, testutil.Entry{Name: "blobs/sha256/ab", Body: "b"}, testutil.Entry{Name: "blobs/", Type: tar.TypeDir}, testutil.Entry{Name: "./index.json", Body: "{}"}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "index.json", Body: "a"}, testutil.Entry{Name: "./index.json", Body: "b"}))
	f.Add(testutil.Tar(f, testutil.Entry{Name: "a", Body: "x"}, testutil.Entry{Name: "a/", Type: tar.TypeDir}, testutil.Entry{Name: "a/b", Body: "y"}))
	f.Add(sparseStream(10_000_000_000))
	f.Fuzz(func(t *testing.T, data []byte) {
		plain := fuzzTree(t, data, TreeOptions{Name: "build context", MaxEntries: 1000, MaxBytes: 1 << 20})
		strict := fuzzTree(t, data, TreeOptions{Name: "image layout", MaxEntries: 1000, MaxBytes: 1 << 20, FilesOnly: true})
		if strict == nil {
			return
		}
		if plain == nil {
			t.Fatalf("FilesOnly accepted what the tree policy refused: %v", strict)
		}
		want, ok := filesOnlyNames(data)
		if !ok {
			t.Fatalf("FilesOnly accepted a link, another type, or a name twice: %v", strict)
		}
		if len(strict) != len(want)+1 || len(plain) != len(want)+1 {
			t.Errorf("FilesOnly tree %v, tree %v; the stream names %v", strict, plain, want)
		}
		for name, kind := range want {
			got := strict[name]
			if kind == "dir" && got != "dir" || kind == "file" && !strings.HasPrefix(got, "600:") {
				t.Errorf("%s: %q, want a %s", name, got, kind)
			}
			// The tree policy keeps permission bits: compare contents.
			_, content, _ := strings.Cut(got, ":")
			if _, pc, _ := strings.Cut(plain[name], ":"); pc != content {
				t.Errorf("%s: %q under FilesOnly, %q under the tree policy", name, got, plain[name])
			}
		}
		if strict["."] != "root:700" {
			t.Errorf("FilesOnly root: %s", strict["."])
		}
	})
}

// fuzzTree extracts data into a new directory under opts, checks what
// holds whatever the stream, and returns plainSnapshot of the tree with
// the root's mode ("." is "root:MODE"), or nil if the extraction failed.
func fuzzTree(t *testing.T, data []byte, opts TreeOptions) map[string]string {
	t.Helper()
	parent, dir := treeDir(t)
	_, err := ExtractTree(context.Background(), dir, bytes.NewReader(data), opts)
	if err != nil {
		if c := errdefs.Class(err); c != errdefs.ErrInvalidArgument && c != errdefs.ErrResourceExhausted {
			t.Errorf("%s: error %v has class %v", opts.Name, err, c)
		}
	}
	if ents, _ := os.ReadDir(parent); len(ents) != 1 {
		t.Errorf("%s: written outside the tree: %v", opts.Name, ents)
	}
	if err != nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch typ := d.Type(); {
		case typ.IsDir(), typ.IsRegular():
		case typ&fs.ModeSymlink != 0:
			if l, _ := os.Readlink(p); strings.HasPrefix(l, "/") {
				t.Errorf("%s: absolute link %q", p, l)
			}
		default:
			t.Errorf("%s: type %v", p, typ)
		}
		return nil
	})
	snap := plainSnapshot(dir)
	if fi, err := os.Stat(dir); err == nil {
		snap["."] = fmt.Sprintf("root:%o", fi.Mode().Perm())
	}
	return snap
}

// filesOnlyNames reads the headers of the tar stream data and returns
// the names a FilesOnly tree of it holds ("dir" or "file" each, parents
// included, the root left out), or false if such a tree may not hold it:
// a type other than a directory or regular file, a file named twice, or
// a name both a file and a directory.
func filesOnlyNames(data []byte) (map[string]string, bool) {
	names := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return names, true
		}
		if err != nil {
			return nil, false
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name := path.Clean(hdr.Name)
		for d := path.Dir(name); d != "." && d != "/"; d = path.Dir(d) {
			if names[d] == "file" {
				return nil, false
			}
			names[d] = "dir"
		}
		switch {
		case hdr.Typeflag == tar.TypeDir && names[name] != "file":
			if name != "." {
				names[name] = "dir"
			}
		case hdr.Typeflag == tar.TypeReg && names[name] == "" && name != ".":
			names[name] = "file"
		default:
			return nil, false
		}
	}
}
