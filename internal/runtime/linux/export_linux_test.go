package linux

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// TestExportChanges checks that the writable layer comes out as an OCI
// layer: new files with their content and in-sandbox owners, symlinks,
// hard links, deletions of template files as whiteouts and a directory
// replaced over a template one as opaque.
func TestExportChanges(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	sb := runtimetest.Create(t, ctx, newRuntime(t), hostRootfsFor(t), runtime.Spec{})
	script := `set -e
echo hello > /root/a.txt
ln -s a.txt /root/link
ln /root/a.txt /root/hard
mkfifo /root/fifo
rm /etc/debian_version
rm -rf /etc/apt && mkdir /etc/apt && echo new > /etc/apt/only
`
	var stderr strings.Builder
	res, err := sb.Client.Exec(ctx, agentclient.ExecRequest{Shell: script, User: "root", Stderr: &stderr})
	if err != nil || res.Status != agentclient.StatusSuccess {
		t.Fatalf("setup: %v %+v %s", err, res, stderr.String())
	}
	// The user's own file, to check owners.
	if _, err := sb.Client.Exec(ctx, agentclient.ExecRequest{Shell: "echo mine > /home/user/mine"}); err != nil {
		t.Fatal(err)
	}

	var buf bytes.Buffer
	if err := sb.Client.ExportChanges(ctx, &buf); err != nil {
		t.Fatalf("ExportChanges: %v", err)
	}
	type entry struct {
		hdr  *tar.Header
		data string
	}
	got := map[string]entry{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		b, _ := io.ReadAll(tr)
		got[h.Name] = entry{h, string(b)}
	}
	want := []struct {
		name     string
		typ      byte
		data     string
		link     string
		uid      int
		checkUID bool
	}{
		{name: "root/a.txt", typ: tar.TypeReg, data: "hello\n", uid: 0, checkUID: true},
		{name: "home/user/mine", typ: tar.TypeReg, data: "mine\n", uid: 1000, checkUID: true},
		{name: "root/link", typ: tar.TypeSymlink, link: "a.txt"},
		{name: "root/fifo", typ: tar.TypeFifo},
		{name: "etc/.wh.debian_version", typ: tar.TypeReg},
		{name: "etc/apt/.wh..wh..opq", typ: tar.TypeReg},
		{name: "etc/apt/only", typ: tar.TypeReg, data: "new\n"},
		{name: "home/user/", typ: tar.TypeDir, uid: 1000, checkUID: true},
	}
	for _, w := range want {
		e, ok := got[w.name]
		if !ok {
			t.Errorf("%s missing from the export", w.name)
			continue
		}
		if e.hdr.Typeflag != w.typ || e.data != w.data || e.hdr.Linkname != w.link {
			t.Errorf("%s: type %c data %q link %q; want %c %q %q", w.name, e.hdr.Typeflag, e.data, e.hdr.Linkname, w.typ, w.data, w.link)
		}
		if w.checkUID && e.hdr.Uid != w.uid {
			t.Errorf("%s: uid %d, want %d (the sandbox's own ids)", w.name, e.hdr.Uid, w.uid)
		}
	}
	// Exactly one of the two names of the hard-linked file carries the
	// data; the other links to it.
	a, h := got["root/a.txt"], got["root/hard"]
	if h.hdr == nil || a.hdr == nil || h.hdr.Typeflag != tar.TypeLink || h.hdr.Linkname != "root/a.txt" || a.hdr.Typeflag != tar.TypeReg {
		t.Errorf("hard link: %+v", h.hdr)
	}
	for name := range got {
		if strings.HasPrefix(name, "etc/apt/") && name != "etc/apt/" && name != "etc/apt/only" && name != "etc/apt/.wh..wh..opq" {
			t.Errorf("unexpected entry %s under the replaced directory", name)
		}
	}
}
