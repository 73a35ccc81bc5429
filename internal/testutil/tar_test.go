package testutil

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"
)

// TestTar reads back what Tar writes: every field, and the defaults of
// the fields left zero.
func TestTar(t *testing.T) {
	when := time.Unix(1600000000, 0)
	b := Tar(t,
		Entry{Name: "etc/", Type: tar.TypeDir},
		Entry{Name: "etc/hosts", Body: "127.0.0.1 localhost\n"},
		Entry{Name: "bin/sh", Body: "#!", Mode: 0o755, UID: 1000, GID: 1001, ModTime: when},
		Entry{Name: "lib", Type: tar.TypeSymlink, Link: "usr/lib"},
		Entry{Name: "sh2", Type: tar.TypeLink, Link: "bin/sh"},
		Entry{Name: "gone", Type: tar.TypeChar},
		Entry{Name: "dev", Type: tar.TypeChar, Devmajor: 1},
		Entry{Name: "opq/", Type: tar.TypeDir, Xattrs: map[string]string{"trusted.overlay.opaque": "y"}},
	)
	var got []string
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %c %o %d:%d %d %s %q %q %q", h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid,
			h.ModTime.Unix(), fmt.Sprint(h.Devmajor), h.Linkname, body, h.PAXRecords["SCHILY.xattr.trusted.overlay.opaque"]))
	}
	want := []string{
		`etc/ 5 755 0:0 1700000000 0 "" "" ""`,
		`etc/hosts 0 644 0:0 1700000000 0 "" "127.0.0.1 localhost\n" ""`,
		`bin/sh 0 755 1000:1001 1600000000 0 "" "#!" ""`,
		`lib 2 644 0:0 1700000000 0 "usr/lib" "" ""`,
		`sh2 1 644 0:0 1700000000 0 "bin/sh" "" ""`,
		`gone 3 644 0:0 1700000000 0 "" "" ""`,
		`dev 3 644 0:0 1700000000 1 "" "" ""`,
		`opq/ 5 755 0:0 1700000000 0 "" "" "y"`,
	}
	if !slices.Equal(got, want) {
		t.Errorf("read back:\n%s\nwant:\n%s", join(got), join(want))
	}
}

func join(lines []string) string {
	var buf bytes.Buffer
	for _, l := range lines {
		buf.WriteString("  " + l + "\n")
	}
	return buf.String()
}
