package testutil

import (
	"archive/tar"
	"bytes"
	"testing"
	"time"
)

// TarTime is the modification time of every Entry that gives none.
var TarTime = time.Unix(1700000000, 0)

// Entry is one entry of a test tar. Zero fields take defaults: Type
// tar.TypeReg, Mode 0644 (0755 for a directory), ModTime TarTime.
type Entry struct {
	Name string
	Type byte
	// Body is a regular file's content (ignored for other types).
	Body string
	// Link is the target of a symlink or hard link.
	Link     string
	Mode     int64
	UID, GID int
	// Devmajor is a device node's major number (a whiteout is 0/0).
	Devmajor int64
	// Xattrs become SCHILY.xattr PAX records.
	Xattrs  map[string]string
	ModTime time.Time
}

// Tar returns the tar stream of entries, in order.
func Tar(t testing.TB, entries ...Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.header()
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.Body)); err != nil {
				t.Fatalf("tar entry %q: %v", e.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// header is e's tar header, defaults filled in.
func (e Entry) header() *tar.Header {
	h := &tar.Header{
		Name: e.Name, Typeflag: e.Type, Linkname: e.Link, Mode: e.Mode,
		Uid: e.UID, Gid: e.GID, Devmajor: e.Devmajor, ModTime: e.ModTime,
	}
	if h.Typeflag == 0 {
		h.Typeflag = tar.TypeReg
	}
	if h.Mode == 0 {
		h.Mode = 0o644
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
	}
	if h.ModTime.IsZero() {
		h.ModTime = TarTime
	}
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(e.Body))
	}
	for k, v := range e.Xattrs {
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		h.PAXRecords["SCHILY.xattr."+k] = v
	}
	return h
}
