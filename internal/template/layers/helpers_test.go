package layers

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// gzipped is b compressed with gzip.
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
