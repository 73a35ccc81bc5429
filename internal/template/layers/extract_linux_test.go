package layers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// testTime is the modification time of the entries of goodLayer whose
// times checkGoodLayer checks.
var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// goodLayer exercises every entry type a layer may hold.
func goodLayer(t testing.TB) []byte {
	return testutil.Tar(t, []testutil.Entry{
		{Name: "./", Type: tar.TypeDir, Mode: 0o755},
		{Name: "etc/", Type: tar.TypeDir},
		{Name: "etc/hostname", Body: "box\n", ModTime: testTime},
		{Name: "home/user/", Type: tar.TypeDir, Mode: 0o750, UID: 1000, GID: 1000, ModTime: testTime},
		{Name: "home/user/notes", Body: "hi", Mode: 0o600, UID: 1000, GID: 1001},
		{Name: "bin/sh", Body: "#!shell", Mode: 0o755},
		{Name: "bin/ls", Type: tar.TypeLink, Link: "bin/sh"},
		{Name: "lib", Type: tar.TypeSymlink, Link: "usr/lib"},
		{Name: "abs", Type: tar.TypeSymlink, Link: "/etc/passwd"},
		{Name: "run/fifo", Type: tar.TypeFifo, Mode: 0o640},
		{Name: "x/attr", Body: "a", Xattrs: map[string]string{
			"user.test": "v", "user.overlay.redirect": "/etc", "security.capability": "\x01", "trusted.overlay.opaque": "y"}},
		{Name: "gone/.wh.old"},
		{Name: "opq/", Type: tar.TypeDir},
		{Name: "opq/.wh..wh..opq"},
		{Name: "opq/new", Body: "n"},
		{Name: ".wh..wh.plnk/", Type: tar.TypeDir},
		{Name: "var/mail/", Type: tar.TypeDir, Mode: 0o2775},
		{Name: "dup", Body: "one"},
		{Name: "dup", Body: "two"},
		{Name: "d2/", Type: tar.TypeDir},
		{Name: "d2/child", Body: "c"},
		{Name: "d2", Body: "now a file"},
		{Name: "f2", Body: "file"},
		{Name: "f2/", Type: tar.TypeDir},
	}...)
}

func TestExtractLayer(t *testing.T) {
	requireRoot(t)
	plain := goodLayer(t)
	var zbuf bytes.Buffer
	zw, err := zstd.NewWriter(&zbuf)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write(plain)
	zw.Close()
	for _, tt := range []struct {
		name string
		data []byte
	}{
		{"plain", plain},
		{"gzip", gzipped(t, plain)},
		{"zstd", zbuf.Bytes()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, nil)
			info, err := extract(t, s, tt.data, ExtractOptions{DiffID: digestOf(plain)})
			if err != nil {
				t.Fatal(err)
			}
			if info.DiffID != digestOf(plain) || info.Files != 24 || info.Size != int64(len("box\n"+"hi"+"#!shell"+"a"+"n"+"one"+"two"+"c"+"now a file"+"file")) {
				t.Errorf("info = %+v", info)
			}
			dir, err := s.LayerDir(info.DiffID)
			if err != nil {
				t.Fatal(err)
			}
			checkGoodLayer(t, dir)
		})
	}
}

func checkGoodLayer(t *testing.T, dir string) {
	t.Helper()
	p := func(rel string) string { return filepath.Join(dir, rel) }
	stat := func(rel string) *unix.Stat_t {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Lstat(p(rel), &st); err != nil {
			t.Fatalf("lstat %s: %v", rel, err)
		}
		return &st
	}
	read := func(rel string) string {
		t.Helper()
		b, err := os.ReadFile(p(rel))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("etc/hostname"); got != "box\n" {
		t.Errorf("etc/hostname = %q", got)
	}
	if st := stat("home/user"); st.Uid != 1000 || st.Gid != 1000 || st.Mode&0o7777 != 0o750 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("home/user: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode)
	}
	if st := stat("home/user"); time.Unix(st.Mtim.Unix()).UTC() != testTime {
		t.Errorf("home/user mtime %v, want %v (directory times are set after their children)", time.Unix(st.Mtim.Unix()), testTime)
	}
	if st := stat("home"); st.Mode&0o7777 != 0o755 {
		t.Errorf("implicit parent home has mode %o, want 755", st.Mode&0o7777)
	}
	if st := stat("home/user/notes"); st.Uid != 1000 || st.Gid != 1001 || st.Mode&0o7777 != 0o600 {
		t.Errorf("notes: uid %d gid %d mode %o", st.Uid, st.Gid, st.Mode&0o7777)
	}
	if st := stat("etc/hostname"); time.Unix(st.Mtim.Unix()).UTC() != testTime {
		t.Errorf("etc/hostname mtime %v", time.Unix(st.Mtim.Unix()))
	}
	sh, ls := stat("bin/sh"), stat("bin/ls")
	if sh.Ino != ls.Ino || sh.Nlink != 2 || sh.Mode&0o7777 != 0o755 {
		t.Errorf("bin/ls is not a hard link of bin/sh (ino %d/%d, nlink %d)", sh.Ino, ls.Ino, sh.Nlink)
	}
	for link, want := range map[string]string{"lib": "usr/lib", "abs": "/etc/passwd"} {
		if got, err := os.Readlink(p(link)); err != nil || got != want {
			t.Errorf("readlink %s = %q, %v; want %q", link, got, err, want)
		}
	}
	if st := stat("run/fifo"); st.Mode&unix.S_IFMT != unix.S_IFIFO || st.Mode&0o7777 != 0o640 {
		t.Errorf("run/fifo mode %o", st.Mode)
	}
	if v := getXattr(t, p("x/attr"), "user.test"); v != "v" {
		t.Errorf("user.test = %q, want v", v)
	}
	for _, name := range []string{"user.overlay.redirect", "security.capability", "trusted.overlay.opaque"} {
		if v := getXattr(t, p("x/attr"), name); v != "" {
			t.Errorf("%s = %q, want it dropped", name, v)
		}
	}
	// Whiteout: character device 0:0 named after the hidden entry.
	if st := stat("gone/old"); st.Mode&unix.S_IFMT != unix.S_IFCHR || st.Rdev != 0 {
		t.Errorf("gone/old: mode %o rdev %d, want char device 0:0", st.Mode, st.Rdev)
	}
	if _, err := os.Lstat(p("gone/.wh.old")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("whiteout file itself was written: %v", err)
	}
	if v := getXattr(t, p("opq"), OpaqueXattr); v != "y" {
		t.Errorf("opq: %s = %q, want y", OpaqueXattr, v)
	}
	if _, err := os.Lstat(p("opq/.wh..wh..opq")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("opaque marker file was written: %v", err)
	}
	if read("opq/new") != "n" {
		t.Error("opq/new missing")
	}
	if _, err := os.Lstat(p(".wh..wh.plnk")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("AUFS metadata directory was written: %v", err)
	}
	if st := stat("var/mail"); st.Mode&0o7777 != 0o2775 {
		t.Errorf("var/mail mode %o, want setgid directory 2775", st.Mode&0o7777)
	}
	if read("dup") != "two" {
		t.Error("a later entry did not replace an earlier one")
	}
	if read("d2") != "now a file" {
		t.Error("a file did not replace a directory")
	}
	if st := stat("f2"); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Error("a directory did not replace a file")
	}
}

func getXattr(t *testing.T, path, name string) string {
	t.Helper()
	buf := make([]byte, 256)
	n, err := unix.Lgetxattr(path, name, buf)
	if errors.Is(err, unix.ENODATA) {
		return ""
	}
	if err != nil {
		t.Fatalf("getxattr %s %s: %v", path, name, err)
	}
	return string(buf[:n])
}

func TestExtractSetuidPolicy(t *testing.T) {
	requireRoot(t)
	layer := testutil.Tar(t, testutil.Entry{Name: "su", Body: "x", Mode: 0o4755}, testutil.Entry{Name: "wall", Body: "y", Mode: 0o2755})
	tests := []struct {
		name     string
		opts     ExtractOptions
		wantErr  error
		wantMode uint32
	}{
		{"default rejects", ExtractOptions{}, errdefs.ErrPermissionDenied, 0},
		{"strip", ExtractOptions{StripSetuid: true}, nil, 0o755},
		{"allow", ExtractOptions{AllowSetuid: true}, nil, 0o4755},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, nil)
			info, err := extract(t, s, layer, tt.opts)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			dir, _ := s.LayerDir(info.DiffID)
			fi, err := os.Stat(filepath.Join(dir, "su"))
			if err != nil {
				t.Fatal(err)
			}
			var st unix.Stat_t
			unix.Stat(filepath.Join(dir, "su"), &st)
			if st.Mode&0o7777 != tt.wantMode {
				t.Errorf("su mode %o (%v), want %o", st.Mode&0o7777, fi.Mode(), tt.wantMode)
			}
		})
	}
}

// treeSnapshot records everything observable about the files below root
// except directory times: type, mode, owner, size, content digest, link
// target and user xattrs.
func treeSnapshot(t *testing.T, root string) map[string]string {
	t.Helper()
	out := make(map[string]string)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o uid=%d gid=%d nlink=%d", st.Mode, st.Uid, st.Gid, st.Nlink)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			desc += fmt.Sprintf(" size=%d sha=%s mtime=%d", len(b), hex.EncodeToString(sum[:8]), st.Mtim.Nano())
		case unix.S_IFLNK:
			l, _ := os.Readlink(path)
			desc += " -> " + l
		case unix.S_IFDIR:
			ents, _ := os.ReadDir(path)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			sort.Strings(names)
			desc += " [" + strings.Join(names, ",") + "]"
		}
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(path, buf); err == nil {
			desc += " xattrs=" + string(buf[:n])
		}
		out[path] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHostileLayers(t *testing.T) {
	requireRoot(t)
	base := t.TempDir()
	sentinel := filepath.Join(base, "sentinel")
	if err := os.Mkdir(sentinel, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sentinel, "keep.txt"), []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Open(filepath.Join(base, "store"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Extraction happens in <base>/store/tmp/layer-*/fs: four levels
	// below base.
	up := "../../../../"
	deep := strings.Repeat("../", 30) + strings.TrimPrefix(sentinel, "/")
	var passwd unix.Stat_t
	if err := unix.Stat("/etc/passwd", &passwd); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name    string
		entries []testutil.Entry
		opts    ExtractOptions
		want    error
		msg     string
	}{
		{name: "dotdot traversal", entries: []testutil.Entry{{Name: up + "sentinel/pwned", Body: "x"}}, want: errdefs.ErrInvalidArgument, msg: `".." is not allowed`},
		{name: "deep traversal", entries: []testutil.Entry{{Name: deep + "/pwned", Body: "x"}}, want: errdefs.ErrInvalidArgument, msg: `".." is not allowed`},
		{name: "traversal after a dir", entries: []testutil.Entry{{Name: "a/", Type: tar.TypeDir}, {Name: "a/../" + up + "sentinel/pwned", Body: "x"}}, want: errdefs.ErrInvalidArgument},
		{name: "absolute path", entries: []testutil.Entry{{Name: sentinel + "/pwned", Body: "x"}}, want: errdefs.ErrInvalidArgument, msg: "absolute paths are not allowed"},
		{name: "absolute symlink escape then write", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: sentinel},
			{Name: "esc/pwned", Body: "x"}}, want: errdefs.ErrInvalidArgument, msg: "symlink"},
		{name: "absolute symlink escape then overwrite", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: sentinel},
			{Name: "esc/keep.txt", Body: "x"}}, want: errdefs.ErrInvalidArgument, msg: "symlink"},
		{name: "relative symlink escape then write", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: up + "sentinel"},
			{Name: "esc/pwned", Body: "x"}}, want: errdefs.ErrInvalidArgument, msg: "symlink"},
		{name: "symlink escape then mkdir", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: sentinel},
			{Name: "esc/sub/", Type: tar.TypeDir}}, want: errdefs.ErrInvalidArgument},
		{name: "nested symlink escape", entries: []testutil.Entry{
			{Name: "a/", Type: tar.TypeDir},
			{Name: "a/b", Type: tar.TypeSymlink, Link: "../../../../../.." + sentinel},
			{Name: "a/b/c/d", Body: "x"}}, want: errdefs.ErrInvalidArgument},
		{name: "symlink loop", entries: []testutil.Entry{
			{Name: "l1", Type: tar.TypeSymlink, Link: "l2"},
			{Name: "l2", Type: tar.TypeSymlink, Link: "l1"},
			{Name: "l1/x", Body: "x"}}, want: errdefs.ErrInvalidArgument},
		{name: "whiteout through symlink", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: sentinel},
			{Name: "esc/.wh.keep.txt"}}, want: errdefs.ErrInvalidArgument},
		{name: "opaque through symlink", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: sentinel},
			{Name: "esc/.wh..wh..opq"}}, want: errdefs.ErrInvalidArgument},
		{name: "hardlink through symlink", entries: []testutil.Entry{
			{Name: "esc", Type: tar.TypeSymlink, Link: sentinel},
			{Name: "grab", Type: tar.TypeLink, Link: "esc/keep.txt"}}, want: errdefs.ErrInvalidArgument, msg: "not in this layer"},
		{name: "hardlink to host file", entries: []testutil.Entry{{Name: "passwd", Type: tar.TypeLink, Link: "/etc/passwd"}}, want: errdefs.ErrInvalidArgument, msg: "outside the layer"},
		{name: "hardlink traversal", entries: []testutil.Entry{{Name: "keep", Type: tar.TypeLink, Link: up + "sentinel/keep.txt"}}, want: errdefs.ErrInvalidArgument, msg: "outside the layer"},
		{name: "hardlink to missing entry", entries: []testutil.Entry{{Name: "passwd", Type: tar.TypeLink, Link: "etc/passwd"}}, want: errdefs.ErrInvalidArgument, msg: "not in this layer"},
		{name: "hardlink to directory", entries: []testutil.Entry{{Name: "d/", Type: tar.TypeDir}, {Name: "l", Type: tar.TypeLink, Link: "d"}}, want: errdefs.ErrInvalidArgument},
		{name: "char device", entries: []testutil.Entry{{Name: "dev/mem", Type: tar.TypeChar, Devmajor: 1}}, want: errdefs.ErrPermissionDenied, msg: "device nodes"},
		{name: "block device", entries: []testutil.Entry{{Name: "dev/sda", Type: tar.TypeBlock, Devmajor: 8}}, want: errdefs.ErrPermissionDenied, msg: "device nodes"},
		{name: "setuid file", entries: []testutil.Entry{{Name: "bin/rootshell", Body: "x", Mode: 0o4755}}, want: errdefs.ErrPermissionDenied, msg: "set-user-ID"},
		{name: "setgid file", entries: []testutil.Entry{{Name: "bin/g", Body: "x", Mode: 0o2755}}, want: errdefs.ErrPermissionDenied},
		{name: "uid out of range", entries: []testutil.Entry{{Name: "f", Body: "x", UID: 70000}}, want: errdefs.ErrInvalidArgument, msg: "outside 0..65535"},
		{name: "gid out of range", entries: []testutil.Entry{{Name: "f", Body: "x", GID: 65536}}, want: errdefs.ErrInvalidArgument},
		{name: "too many files", entries: manyFiles(11), opts: ExtractOptions{Limits: Limits{MaxFiles: 10}}, want: errdefs.ErrResourceExhausted, msg: "more than 10 entries"},
		{name: "too large", entries: []testutil.Entry{{Name: "f", Body: strings.Repeat("x", 8192)}}, opts: ExtractOptions{Limits: Limits{MaxBytes: 4096}}, want: errdefs.ErrResourceExhausted},
		{name: "path too long", entries: []testutil.Entry{{Name: strings.Repeat("d/", 60) + "f", Body: "x"}}, opts: ExtractOptions{Limits: Limits{MaxPathLen: 100}}, want: errdefs.ErrInvalidArgument, msg: "longer than 100"},
		{name: "digest mismatch", entries: []testutil.Entry{{Name: "f", Body: "x"}}, opts: ExtractOptions{DiffID: digestOf([]byte("other"))}, want: errdefs.ErrInvalidArgument, msg: "digest"},
		{name: "bad whiteout", entries: []testutil.Entry{{Name: "d/.wh.."}}, want: errdefs.ErrInvalidArgument},
		{name: "root is a file", entries: []testutil.Entry{{Name: ".", Body: "x"}}, want: errdefs.ErrInvalidArgument},
	}
	before := treeSnapshot(t, base)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			layer := testutil.Tar(t, tt.entries...)
			_, err := extract(t, s, layer, tt.opts)
			if err == nil {
				t.Fatal("hostile layer was accepted")
			}
			if !errors.Is(err, tt.want) {
				t.Errorf("err = %v, want class %v", err, tt.want)
			}
			if tt.msg != "" && !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("err = %q, want it to mention %q", err, tt.msg)
			}
			if strings.Contains(err.Error(), s.Root()) {
				t.Errorf("error %q names a host path", err)
			}
			after := treeSnapshot(t, base)
			for p, d := range before {
				if after[p] != d {
					t.Errorf("%s changed: %s -> %s", p, d, after[p])
				}
			}
			for p, d := range after {
				if _, ok := before[p]; !ok {
					t.Errorf("%s appeared: %s", p, d)
				}
			}
			var st unix.Stat_t
			if err := unix.Stat("/etc/passwd", &st); err != nil || st.Nlink != passwd.Nlink {
				t.Errorf("/etc/passwd link count changed")
			}
		})
	}
	if u := s.Usage(); u.Layers != 0 {
		t.Errorf("store holds %d layers after only hostile imports", u.Layers)
	}
}

func manyFiles(n int) []testutil.Entry {
	var out []testutil.Entry
	for i := range n {
		out = append(out, testutil.Entry{Name: fmt.Sprintf("f%d", i), Body: "x"})
	}
	return out
}

func TestNotATar(t *testing.T) {
	requireRoot(t)
	s := openStore(t, nil)
	for _, data := range [][]byte{
		[]byte("this is not a tar archive, but it is long enough to fill a header block" + strings.Repeat("!", 600)),
		gzipped(t, []byte(strings.Repeat("garbage", 200))),
		{0x1f, 0x8b, 0x08, 0x00, 0xff}, // truncated gzip
	} {
		if _, err := extract(t, s, data, ExtractOptions{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("err = %v, want ErrInvalidArgument", err)
		}
	}
	assertTmpEmpty(t, s)
}

// bombStream streams gzip(tar header + size bytes of zeros) without ever
// holding more than a buffer of it. With header false it is only zeros.
func bombStream(size int64, header bool) (*io.PipeReader, chan struct{}) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		zw, _ := gzip.NewWriterLevel(pw, gzip.BestSpeed)
		var w io.Writer = zw
		var tw *tar.Writer
		if header {
			tw = tar.NewWriter(zw)
			if err := tw.WriteHeader(&tar.Header{Name: "bomb", Typeflag: tar.TypeReg, Size: size, Mode: 0o644}); err != nil {
				pw.CloseWithError(err)
				return
			}
			w = tw
		}
		zeros := make([]byte, 1<<20)
		for n := int64(0); n < size; n += int64(len(zeros)) {
			if _, err := w.Write(zeros); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		if tw != nil {
			tw.Close()
		}
		zw.Close()
		pw.Close()
	}()
	return pr, done
}

// countingReader counts bytes read.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func TestDecompressionBomb(t *testing.T) {
	requireRoot(t)
	for _, header := range []bool{true, false} {
		t.Run(fmt.Sprintf("tar_header_%v", header), func(t *testing.T) {
			s := openStore(t, nil)
			pr, done := bombStream(2<<30, header)
			cr := &countingReader{r: pr}
			start := time.Now()
			l := s.NewLease()
			_, err := l.Extract(context.Background(), cr, ExtractOptions{Limits: Limits{MaxBytes: 8 << 20}})
			l.Release()
			pr.CloseWithError(errors.New("test done"))
			<-done
			if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "8388608-byte limit") {
				t.Fatalf("err = %v, want the size limit (ErrResourceExhausted)", err)
			}
			if cr.n > 1<<20 {
				t.Errorf("read %d compressed bytes; a bomb should be tiny", cr.n)
			}
			t.Logf("stopped after %d compressed bytes in %v", cr.n, time.Since(start))
			assertTmpEmpty(t, s)
			if u := s.Usage(); u.Layers != 0 {
				t.Errorf("store holds %d layers", u.Layers)
			}
		})
	}
}

func TestExtractCanceled(t *testing.T) {
	requireRoot(t)
	s := openStore(t, nil)
	pr, done := bombStream(1<<30, true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	l := s.NewLease()
	_, err := l.Extract(ctx, pr, ExtractOptions{})
	l.Release()
	pr.CloseWithError(errors.New("test done"))
	<-done
	if !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", err)
	}
	assertTmpEmpty(t, s)
}

func assertTmpEmpty(t *testing.T, s *Store) {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(s.Root(), tmpDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("tmp holds %d entries after a failed extraction", len(ents))
	}
}

// TestSparseBomb checks that a sparse entry (PAX sparse format 1.0),
// tiny in the stream but huge once its holes are written out, is stopped
// by the size limit.
func TestSparseBomb(t *testing.T) {
	requireRoot(t)
	s := openStore(t, nil)
	buf := bytes.NewBuffer(sparseStream(2 << 30))

	// The stream is a valid sparse entry: the reader sees a 2 GiB file.
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	if h, err := tr.Next(); err != nil || h.Size != 2<<30 || h.Name != "big" {
		t.Fatalf("test stream is not a 2 GiB sparse entry: %+v, %v", h, err)
	}
	l := s.NewLease()
	defer l.Release()
	_, err := l.Extract(context.Background(), buf, ExtractOptions{Limits: Limits{MaxBytes: 8 << 20}})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("err = %v, want the size limit (ErrResourceExhausted)", err)
	}
	assertTmpEmpty(t, s)
}

// sparseStream is a tar of one sparse entry (PAX sparse format 1.0),
// "big", of size bytes with one 512-byte data region at offset 0.
// archive/tar's writer drops GNU.sparse records, so the stream is built by
// hand: a PAX header, then the entry whose data starts with the sparse
// map.
func sparseStream(size int64) []byte {
	var records string
	for _, kv := range [][2]string{{"GNU.sparse.major", "1"}, {"GNU.sparse.minor", "0"}, {"GNU.sparse.name", "big"}, {"GNU.sparse.realsize", strconv.FormatInt(size, 10)}} {
		rec := " " + kv[0] + "=" + kv[1] + "\n"
		n := len(rec)
		for len(strconv.Itoa(n+len(strconv.Itoa(n))))+len(rec) != n+len(strconv.Itoa(n)) {
			n++
		}
		records += strconv.Itoa(len(strconv.Itoa(n+len(strconv.Itoa(n))))+len(rec)) + rec
	}
	var buf bytes.Buffer
	buf.Write(rawTarHeader("PaxHeaders/big", 'x', int64(len(records))))
	buf.Write(pad512([]byte(records)))
	sparseMap := pad512([]byte("1\n0\n512\n")) // one 512-byte data region at offset 0
	buf.Write(rawTarHeader("GNUSparseFile.0/big", '0', int64(len(sparseMap)+512)))
	buf.Write(sparseMap)
	buf.Write(make([]byte, 512))
	buf.Write(make([]byte, 1024)) // end of archive
	return buf.Bytes()
}

// rawTarHeader returns a ustar header block.
func rawTarHeader(name string, typ byte, size int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	copy(b[124:136], fmt.Sprintf("%011o\x00", size))
	copy(b[136:148], "00000000000\x00")
	b[156] = typ
	copy(b[257:265], "ustar\x0000")
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		sum += int(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

func pad512(b []byte) []byte {
	if r := len(b) % 512; r != 0 {
		b = append(b, make([]byte, 512-r)...)
	}
	return b
}
