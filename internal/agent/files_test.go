//go:build linux

package agent

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestFilesRoundTrip(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	binary := make([]byte, 3*fsChunkSize+17)
	if _, err := rand.Read(binary); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantPath string
		content              []byte
	}{
		{"text absolute", "/home/user/a.txt", "/home/user/a.txt", []byte("hello\n")},
		{"relative to home", "rel.txt", "/home/user/rel.txt", []byte("relative")},
		{"relative with dots", "./x/../dots.txt", "/home/user/dots.txt", []byte("dots")},
		{"empty", "/home/user/empty", "/home/user/empty", nil},
		{"binary multi-chunk", "/tmp/bin", "/tmp/bin", binary},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := h.client.WriteFile(ctx, tt.path, bytes.NewReader(tt.content), agentclient.WriteOptions{MakeParents: true})
			if err != nil {
				t.Fatal(err)
			}
			if e.Path != tt.wantPath || e.Type != agentclient.FileTypeFile || e.Size != int64(len(tt.content)) || e.Mode != 0o644 {
				t.Errorf("write entry = %+v", e)
			}
			if got, _ := os.ReadFile(h.host(tt.wantPath)); !bytes.Equal(got, tt.content) {
				t.Errorf("host content differs (%d bytes, want %d)", len(got), len(tt.content))
			}
			var buf bytes.Buffer
			re, err := h.client.ReadFile(ctx, tt.path, &buf)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), tt.content) {
				t.Errorf("read back %d bytes, want %d", buf.Len(), len(tt.content))
			}
			if re.Path != tt.wantPath || re.Size != int64(len(tt.content)) {
				t.Errorf("read entry = %+v", re)
			}
			st, err := h.client.Stat(ctx, tt.path)
			if err != nil || st.Path != tt.wantPath || st.Name != filepath.Base(tt.wantPath) {
				t.Errorf("stat = %+v, %v", st, err)
			}
		})
	}
}

func TestFilesLargeStream(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	const size = 20 << 20
	src := io.LimitReader(fsPattern{}, size)
	sum := sha256.New()
	if _, err := h.client.WriteFile(ctx, "big", io.TeeReader(src, sum), agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	want := sum.Sum(nil)
	got := sha256.New()
	n := &fsCountWriter{w: got}
	e, err := h.client.ReadFile(ctx, "big", n)
	if err != nil {
		t.Fatal(err)
	}
	if e.Size != size || n.n != size || !bytes.Equal(got.Sum(nil), want) {
		t.Fatalf("read %d bytes (entry size %d), hash equal %v", n.n, e.Size, bytes.Equal(got.Sum(nil), want))
	}
	// The largest message the client saw stays within the chunk size:
	// data is streamed, not sent in one piece.
	if n.max > fsChunkSize {
		t.Errorf("largest write to the reader was %d bytes, want <= %d", n.max, fsChunkSize)
	}
}

// fsPattern is an endless, non-repeating-per-chunk byte source.
type fsPattern struct{}

func (fsPattern) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(i*7 + i>>9)
	}
	return len(p), nil
}

type fsCountWriter struct {
	w      io.Writer
	n, max int
}

func (c *fsCountWriter) Write(p []byte) (int, error) {
	c.n += len(p)
	c.max = max(c.max, len(p))
	return c.w.Write(p)
}

func TestFilesReadRange(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/r", "0123456789")
	tests := []struct {
		off, limit int64
		want       string
	}{
		{0, 0, "0123456789"},
		{3, 0, "3456789"},
		{3, 4, "3456"},
		{8, 100, "89"},
		{10, 0, ""},
		{50, 0, ""},
	}
	for _, tt := range tests {
		var buf bytes.Buffer
		if _, err := h.client.ReadFileRange(ctx, "r", tt.off, tt.limit, &buf); err != nil {
			t.Errorf("range %d+%d: %v", tt.off, tt.limit, err)
		} else if buf.String() != tt.want {
			t.Errorf("range %d+%d = %q, want %q", tt.off, tt.limit, buf.String(), tt.want)
		}
	}
	_, err := h.client.ReadFileRange(ctx, "r", -1, 0, io.Discard)
	fsWantClass(t, "negative offset", err, errdefs.ErrInvalidArgument)
}

func TestFilesReadRefusesNonRegular(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	if err := syscall.Mkfifo(h.host("/home/user/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.symlink(t, "fifo", "/home/user/fifolink")
	for _, p := range []string{"/home/user", "fifo", "fifolink", "/"} {
		done := make(chan error, 1)
		go func() { _, err := h.readString(ctx, p); done <- err }()
		select {
		case err := <-done:
			fsWantClass(t, "read "+p, err, errdefs.ErrInvalidArgument)
		case <-time.After(5 * time.Second):
			t.Fatalf("read %s hangs", p)
		}
	}
	_, err := h.readString(ctx, "missing")
	fsWantClass(t, "read missing", err, errdefs.ErrNotFound)
}

func TestFilesReplaceIsAtomic(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/f", "old content")
	if err := os.Chmod(h.host("/home/user/f"), 0o640); err != nil {
		t.Fatal(err)
	}

	t.Run("reader fails midway", func(t *testing.T) {
		r := io.MultiReader(io.LimitReader(fsPattern{}, 3*fsChunkSize), fsErrReader{})
		_, err := h.client.WriteFile(ctx, "f", r, agentclient.WriteOptions{})
		if err == nil {
			t.Fatal("write succeeded although the reader failed")
		}
		h.assertNoTemp(t, "/home/user")
		if got := h.read(t, "/home/user/f"); got != "old content" {
			t.Errorf("content = %q after a failed write", got)
		}
	})

	t.Run("context cancelled midway", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		r := &fsCancelReader{r: io.LimitReader(fsPattern{}, 64<<20), after: 2 * fsChunkSize, cancel: cancel}
		_, err := h.client.WriteFile(cctx, "f", r, agentclient.WriteOptions{})
		if err == nil {
			t.Fatal("write succeeded although it was cancelled")
		}
		h.assertNoTemp(t, "/home/user")
		if got := h.read(t, "/home/user/f"); got != "old content" {
			t.Errorf("content = %q after a cancelled write", got)
		}
	})

	t.Run("clean replace keeps mode", func(t *testing.T) {
		e, err := h.writeString(ctx, "f", "new", agentclient.WriteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if e.Mode != 0o640 {
			t.Errorf("mode = %v, want 0640 kept", e.Mode)
		}
		if got := h.read(t, "/home/user/f"); got != "new" {
			t.Errorf("content = %q", got)
		}
		e, err = h.writeString(ctx, "f", "newer", agentclient.WriteOptions{Mode: 0o600})
		if err != nil || e.Mode != 0o600 {
			t.Errorf("explicit mode: %+v, %v", e, err)
		}
		h.assertNoTemp(t, "/home/user")
	})
}

type fsErrReader struct{}

func (fsErrReader) Read([]byte) (int, error) { return 0, errors.New("source broke") }

// fsCancelReader cancels a context once after bytes were read.
type fsCancelReader struct {
	r      io.Reader
	n      int
	after  int
	cancel context.CancelFunc
}

func (c *fsCancelReader) Read(p []byte) (int, error) {
	if c.n >= c.after {
		c.cancel()
		time.Sleep(10 * time.Millisecond)
	}
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

// assertNoTemp waits briefly for the agent to finish cleaning up and then
// fails if a temporary file of Write is left in dir.
func (h *fsHarness) assertNoTemp(tb testing.TB, dir string) {
	tb.Helper()
	var left []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		left = left[:0]
		ents, err := os.ReadDir(h.host(dir))
		if err != nil {
			tb.Fatal(err)
		}
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), ".airlock-write-") {
				left = append(left, e.Name())
			}
		}
		if len(left) == 0 {
			return
		}
	}
	tb.Errorf("temporary files left in %s: %v", dir, left)
}

func TestFilesWriteErrors(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/file", "x")
	if err := os.Mkdir(h.host("/home/user/dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(h.host("/home/user/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.symlink(t, "dir", "/home/user/linkdir")
	h.symlink(t, "fifo", "/home/user/linkfifo")
	h.symlink(t, "loop2", "/home/user/loop1")
	h.symlink(t, "loop1", "/home/user/loop2")
	tests := []struct {
		name, path string
		opts       agentclient.WriteOptions
		want       error
	}{
		{"empty path", "", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"NUL", "a\x00b", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"too long", strings.Repeat("a", fsMaxPathLen+1), agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"root", "/", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"directory", "dir", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"symlink to dir", "linkdir", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"symlink to fifo", "linkfifo", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"fifo append", "fifo", agentclient.WriteOptions{Append: true}, errdefs.ErrInvalidArgument},
		{"symlink loop", "loop1", agentclient.WriteOptions{}, errdefs.ErrInvalidArgument},
		{"missing parent", "no/such/file", agentclient.WriteOptions{}, errdefs.ErrNotFound},
		{"parent is a file", "file/x", agentclient.WriteOptions{MakeParents: true}, errdefs.ErrInvalidArgument},
		{"unknown user", "u", agentclient.WriteOptions{User: "mallory"}, errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		_, err := h.writeString(ctx, tt.path, "data", tt.opts)
		fsWantClass(t, tt.name, err, tt.want)
		h.noHostPath(t, err)
	}
	if got := h.read(t, "/home/user/file"); got != "x" {
		t.Errorf("file changed to %q", got)
	}
	h.assertNoTemp(t, "/home/user")
	h.assertNoTemp(t, "/home/user/dir")
}

func TestFilesWriteThroughSymlink(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/data/real/target", "old")
	h.symlink(t, "/data/real", "/data/dirlink")
	// Relative to the link's real directory (/data/real), not to the
	// path it was reached by (/data/dirlink).
	h.symlink(t, "../real/target", "/data/real/rel")
	h.symlink(t, "/data/real/target", "/home/user/abs")
	h.symlink(t, "newfile", "/home/user/dangling")
	for _, p := range []string{"/home/user/abs", "/data/dirlink/rel"} {
		e, err := h.writeString(ctx, p, "via "+p, agentclient.WriteOptions{})
		if err != nil {
			t.Fatalf("write %s: %v", p, err)
		}
		if e.Path != "/data/real/target" {
			t.Errorf("write %s reports path %s", p, e.Path)
		}
		if got := h.read(t, "/data/real/target"); got != "via "+p {
			t.Errorf("target = %q", got)
		}
	}
	if fi, err := os.Lstat(h.host("/home/user/abs")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the symlink was replaced: %v %v", fi, err)
	}
	if _, err := h.writeString(ctx, "dangling", "made", agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.read(t, "/home/user/newfile"); got != "made" {
		t.Errorf("dangling target = %q", got)
	}
}

func TestFilesAppend(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	for i, part := range []string{"one,", "two,", "three"} {
		e, err := h.writeString(ctx, "log", part, agentclient.WriteOptions{Append: true, Mode: 0o600})
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 && e.Mode != 0o600 {
			t.Errorf("new file mode = %v", e.Mode)
		}
	}
	if got := h.read(t, "/home/user/log"); got != "one,two,three" {
		t.Errorf("appended = %q", got)
	}
}

func TestFilesStatAndList(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/p/a", "aa")
	h.put(t, "/home/user/p/b/c", "ccc")
	h.put(t, "/home/user/p/b/d/e", "e")
	h.put(t, "/other/x", "x")
	h.symlink(t, "/other", "/home/user/p/l")

	st, err := h.client.Stat(ctx, "p/l")
	if err != nil {
		t.Fatal(err)
	}
	if st.Type != agentclient.FileTypeSymlink || st.SymlinkTarget != "/other" || st.Path != "/home/user/p/l" {
		t.Errorf("stat symlink = %+v", st)
	}
	root, err := h.client.Stat(ctx, "/")
	if err != nil || root.Type != agentclient.FileTypeDir || root.Path != "/" || root.Name != "/" {
		t.Errorf("stat / = %+v, %v", root, err)
	}

	tests := []struct {
		depth int
		want  []string
	}{
		{0, []string{"/home/user/p/a", "/home/user/p/b", "/home/user/p/l"}},
		{1, []string{"/home/user/p/a", "/home/user/p/b", "/home/user/p/l"}},
		{2, []string{"/home/user/p/a", "/home/user/p/b", "/home/user/p/b/c", "/home/user/p/b/d", "/home/user/p/l"}},
		{10, []string{"/home/user/p/a", "/home/user/p/b", "/home/user/p/b/c", "/home/user/p/b/d", "/home/user/p/b/d/e", "/home/user/p/l"}},
	}
	for _, tt := range tests {
		ents, trunc, err := h.client.ListDir(ctx, "p", tt.depth)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Path)
		}
		if strings.Join(got, " ") != strings.Join(tt.want, " ") || trunc {
			t.Errorf("depth %d: got %v (truncated %v), want %v", tt.depth, got, trunc, tt.want)
		}
	}
	// Listing through a symlinked directory is allowed at the top.
	ents, _, err := h.client.ListDir(ctx, "p/l", 1)
	if err != nil || len(ents) != 1 || ents[0].Path != "/home/user/p/l/x" {
		t.Errorf("list via symlink = %+v, %v", ents, err)
	}
	_, _, err = h.client.ListDir(ctx, "p/a", 1)
	fsWantClass(t, "list a file", err, errdefs.ErrInvalidArgument)
	_, _, err = h.client.ListDir(ctx, "p", fsMaxListDepth+1)
	fsWantClass(t, "list too deep", err, errdefs.ErrInvalidArgument)
	_, err = h.client.Stat(ctx, "nope")
	fsWantClass(t, "stat missing", err, errdefs.ErrNotFound)
	h.noHostPath(t, err)
}

func TestFilesListTruncates(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	if h.agent.files.maxList != 10000 {
		t.Errorf("default entry cap = %d, want 10000", h.agent.files.maxList)
	}
	const max = 50
	h.agent.files.maxList = max
	for i := range 30 {
		h.put(t, "/many/f"+strconv.Itoa(i), "")
		h.put(t, "/many/d"+strconv.Itoa(i)+"/x", "")
	}
	for _, depth := range []int{1, 2} { // 60 and 120 entries
		ents, trunc, err := h.client.ListDir(ctx, "/many", depth)
		if err != nil {
			t.Fatal(err)
		}
		if len(ents) != max || !trunc {
			t.Errorf("depth %d: got %d entries, truncated %v; want %d, true", depth, len(ents), trunc, max)
		}
	}
	// Exactly at the cap is not truncated.
	h.agent.files.maxList = 60
	ents, trunc, err := h.client.ListDir(ctx, "/many", 1)
	if err != nil || len(ents) != 60 || trunc {
		t.Errorf("exactly at the cap: %d entries, truncated %v, %v", len(ents), trunc, err)
	}
}

func TestFilesMakeDir(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	e, err := h.client.MakeDir(ctx, "a", false)
	if err != nil || e.Type != agentclient.FileTypeDir || e.Path != "/home/user/a" || e.Mode != 0o755 {
		t.Fatalf("mkdir = %+v, %v", e, err)
	}
	_, err = h.client.MakeDir(ctx, "a", false)
	fsWantClass(t, "mkdir existing", err, errdefs.ErrAlreadyExists)
	if _, err := h.client.MakeDir(ctx, "a", true); err != nil {
		t.Errorf("mkdir -p existing: %v", err)
	}
	_, err = h.client.MakeDir(ctx, "x/y/z", false)
	fsWantClass(t, "mkdir without parents", err, errdefs.ErrNotFound)
	if _, err := h.client.MakeDir(ctx, "x/y/z", true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(h.host("/home/user/x/y/z")); err != nil || !fi.IsDir() {
		t.Errorf("x/y/z: %v %v", fi, err)
	}
	_, err = h.client.MakeDir(ctx, "/", false)
	fsWantClass(t, "mkdir /", err, errdefs.ErrAlreadyExists)
	h.put(t, "/home/user/file", "")
	_, err = h.client.MakeDir(ctx, "file/sub", true)
	fsWantClass(t, "mkdir under a file", err, errdefs.ErrInvalidArgument)
	// The raw mode field is validated.
	_, err = h.raw.MakeDir(ctx, connect.NewRequest(&agentv1.MakeDirRequest{Path: "m", Mode: 0o10000}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("mkdir bad mode: %v", err)
	}
}

func TestFilesMoveRemoveChmod(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.put(t, "/home/user/src", "content")
	_, err := h.client.Move(ctx, "src", "/tmp2/dst")
	fsWantClass(t, "move into missing dir", err, errdefs.ErrNotFound)
	if err := os.Mkdir(h.host("/tmp2"), 0o755); err != nil {
		t.Fatal(err)
	}
	e, err := h.client.Move(ctx, "src", "/tmp2/dst")
	if err != nil || e.Path != "/tmp2/dst" {
		t.Fatalf("move = %+v, %v", e, err)
	}
	if h.read(t, "/tmp2/dst") != "content" {
		t.Error("moved content differs")
	}
	_, err = h.client.Move(ctx, "/", "/x")
	fsWantClass(t, "move /", err, errdefs.ErrInvalidArgument)

	e, err = h.client.Chmod(ctx, "/tmp2/dst", 0o600|os.ModeSetgid)
	if err != nil || e.Mode != 0o600|os.ModeSetgid {
		t.Fatalf("chmod = %+v, %v", e, err)
	}
	if fi, _ := os.Stat(h.host("/tmp2/dst")); fi.Mode()&os.ModePerm != 0o600 {
		t.Errorf("host mode %v", fi.Mode())
	}
	h.symlink(t, "/tmp2/dst", "/home/user/ln")
	_, err = h.client.Chmod(ctx, "ln", 0o777)
	fsWantClass(t, "chmod symlink", err, errdefs.ErrInvalidArgument)
	_, err = h.raw.Chmod(ctx, connect.NewRequest(&agentv1.ChmodRequest{Path: "/tmp2/dst", Mode: 0o170000}))
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("chmod type bits: %v", err)
	}

	h.put(t, "/tree/a/b/c", "c")
	h.put(t, "/tree/d", "d")
	err = h.client.Remove(ctx, "/tree", false)
	fsWantClass(t, "remove non-empty", err, errdefs.ErrFailedPrecondition)
	if err := h.client.Remove(ctx, "/tree", true); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(h.host("/tree")); !os.IsNotExist(err) {
		t.Errorf("tree still there: %v", err)
	}
	if err := h.client.Remove(ctx, "/tmp2/dst", false); err != nil {
		t.Fatal(err)
	}
	err = h.client.Remove(ctx, "/tmp2/dst", false)
	fsWantClass(t, "remove missing", err, errdefs.ErrNotFound)
	for _, p := range []string{"/", "/..", "../../..", "/home/.."} {
		err = h.client.Remove(ctx, p, true)
		fsWantClass(t, "remove "+p, err, errdefs.ErrInvalidArgument)
	}
	if _, err := os.Stat(h.host("/home/user")); err != nil {
		t.Errorf("home is gone: %v", err)
	}
}

func TestFilesDiskFull(t *testing.T) {
	testutil.RequireRoot(t, "needs root to mount a small tmpfs")
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	mnt := h.host("/small")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=1m"); err != nil {
		t.Skipf("cannot mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	h.put(t, "/small/f", "old")
	_, err := h.client.WriteFile(ctx, "/small/f", io.LimitReader(fsPattern{}, 4<<20), agentclient.WriteOptions{})
	fsWantClass(t, "write past a full disk", err, errdefs.ErrFailedPrecondition)
	if err == nil || !strings.Contains(err.Error(), "no space left on device: the sandbox's disk is full") {
		t.Errorf("write past a full disk: %v, want it to say the sandbox's disk is full", err)
	}
	h.noHostPath(t, err)
	h.assertNoTemp(t, "/small")
	if got := h.read(t, "/small/f"); got != "old" {
		t.Errorf("content = %q after ENOSPC", got)
	}
}

func TestFilesClosed(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	if err := h.agent.files.close(); err != nil {
		t.Fatal(err)
	}
	_, err := h.client.Stat(ctx, "/")
	fsWantClass(t, "stat after close", err, errdefs.ErrUnavailable)
}

func BenchmarkWriteRead1MiB(b *testing.B) {
	h := newFSHarness(b)
	ctx := context.Background()
	data := make([]byte, 1<<20)
	if _, err := rand.Read(data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(2 << 20)
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.client.WriteFile(ctx, "bench", bytes.NewReader(data), agentclient.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := h.client.ReadFile(ctx, "bench", io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

func TestFilesReadStopsOnWriterError(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	if _, err := h.client.WriteFile(ctx, "big", io.LimitReader(fsPattern{}, 8<<20), agentclient.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &fsFailWriter{}
	_, err := h.client.ReadFile(ctx, "big", w)
	if err == nil || !strings.Contains(err.Error(), "sink full") {
		t.Fatalf("err = %v", err)
	}
	if w.calls != 1 {
		t.Errorf("writer called %d times after failing", w.calls)
	}
}

type fsFailWriter struct{ calls int }

func (w *fsFailWriter) Write([]byte) (int, error) {
	w.calls++
	return 0, errors.New("sink full")
}

// TestFilesNoFDLeak runs every operation, including failing ones, and
// checks that the process holds no more file descriptors afterwards.
func TestFilesNoFDLeak(t *testing.T) {
	h := newFSHarness(t)
	ctx := fsTestCtx(t)
	h.symlink(t, h.outside, "/home/user/out")
	round := func() {
		_, _ = h.writeString(ctx, "d/f", "x", agentclient.WriteOptions{MakeParents: true})
		_, _ = h.writeString(ctx, "d/f", "y", agentclient.WriteOptions{Append: true})
		_, _ = h.writeString(ctx, "d", "x", agentclient.WriteOptions{})
		_, _ = h.writeString(ctx, "out/x", "x", agentclient.WriteOptions{})
		_, _ = h.readString(ctx, "d/f")
		_, _ = h.readString(ctx, "d")
		_, _ = h.client.Stat(ctx, "d/f")
		_, _, _ = h.client.ListDir(ctx, "/", 5)
		_, _ = h.client.MakeDir(ctx, "d/e/f", true)
		_, _ = h.client.Chmod(ctx, "d/f", 0o600)
		_, _ = h.client.Chmod(ctx, "out", 0o600)
		_, _ = h.client.Move(ctx, "d/f", "d/g")
		_ = h.client.Remove(ctx, "d", false)
		_ = h.client.Remove(ctx, "d", true)
		wctx, cancel := context.WithCancel(ctx)
		if ch, err := h.client.Watch(wctx, "/home", true); err == nil {
			cancel()
			for range ch {
			}
		}
		cancel()
		for deadline := time.Now().Add(2 * time.Second); h.activeWatches() > 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	round()
	before := fsCountFDs(t)
	for range 10 {
		round()
	}
	if after := fsCountFDs(t); after > before+2 {
		t.Errorf("open fds grew from %d to %d", before, after)
	}
}

func fsCountFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}
