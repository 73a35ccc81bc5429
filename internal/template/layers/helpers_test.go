package layers

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// ent is one entry of a test tar.
type ent struct {
	name   string
	typ    byte
	body   string
	link   string
	mode   int64
	uid    int
	gid    int
	major  int64
	xattrs map[string]string
}

var testTime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// makeTar returns a tar of entries.
func makeTar(t testing.TB, entries ...ent) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		h := &tar.Header{
			Name: e.name, Typeflag: typ, Linkname: e.link, Mode: mode,
			Uid: e.uid, Gid: e.gid, ModTime: testTime, Devmajor: e.major,
			Format: tar.FormatPAX,
		}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipped(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// openStore opens a store in a fresh directory.
func openStore(t testing.TB, inUse func(string) bool) *Store {
	t.Helper()
	s, err := Open(filepath.Join(t.TempDir(), "store"), Options{InUse: inUse, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// extract unpacks b into s under a fresh lease and releases it.
func extract(t testing.TB, s *Store, b []byte, opts ExtractOptions) (LayerInfo, error) {
	t.Helper()
	l := s.NewLease()
	defer l.Release()
	return l.Extract(context.Background(), bytes.NewReader(b), opts)
}

func requireRoot(t testing.TB) {
	t.Helper()
	testutil.RequireRoot(t, "needs root: layers keep file owners and create whiteout devices")
}

// errReader fails every read.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, io.ErrClosedPipe }
