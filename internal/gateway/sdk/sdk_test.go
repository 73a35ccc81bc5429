package sdk

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestFiles(t *testing.T) {
	files := Files()
	var names []string
	for rel := range files {
		names = append(names, rel)
	}
	sort.Strings(names)
	want := []string{"bin/tool", "node/tools.d.ts", "node/tools.js", "node/tools.mjs", "python/tools.py"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("Files() = %v, want %v", names, want)
	}
	if !bytes.HasPrefix(files["bin/tool"], []byte("#!/usr/bin/env python3\n")) {
		t.Error("bin/tool does not start with a python3 shebang")
	}
	// The map is the caller's: changing it changes no later result.
	files["python/tools.py"] = nil
	if len(Files()["python/tools.py"]) == 0 {
		t.Error("Files() shares its map or contents between calls")
	}
}

// inode is the inode number of p, to tell a replaced file from one
// rewritten in place or kept.
func inode(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

func TestWriteDir(t *testing.T) {
	// Files and directories are readable by others whatever the umask:
	// sandbox users read them as others.
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)

	dir := filepath.Join(t.TempDir(), "lib")
	if err := WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	files := Files()
	check := func() {
		t.Helper()
		for rel, data := range files {
			p := filepath.Join(dir, rel)
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := st.Mode().Perm(), Mode(rel); got != want {
				t.Errorf("%s: mode %v, want %v", rel, got, want)
			}
			if b, _ := os.ReadFile(p); !bytes.Equal(b, data) {
				t.Errorf("%s: content differs from Files()", rel)
			}
			if st, _ := os.Stat(filepath.Dir(p)); st.Mode().Perm() != 0o755 {
				t.Errorf("%s: mode %v, want 0755", filepath.Dir(p), st.Mode().Perm())
			}
		}
		if st, _ := os.Stat(dir); st.Mode().Perm() != 0o755 {
			t.Errorf("%s: mode %v, want 0755", dir, st.Mode().Perm())
		}
		m, err := os.ReadFile(filepath.Join(dir, Manifest))
		if err != nil || string(m) != "bin/tool\nnode/tools.d.ts\nnode/tools.js\nnode/tools.mjs\npython/tools.py\n" {
			t.Errorf("manifest %q, %v", m, err)
		}
	}
	check()
	if Mode("bin/tool") != 0o755 || Mode("python/tools.py") != 0o644 {
		t.Error("Mode: bin/ is not 0755 or the rest not 0644")
	}

	// An unchanged file is left alone.
	py := filepath.Join(dir, "python", "tools.py")
	keptIno := inode(t, py)
	dirIno := inode(t, filepath.Join(dir, "python"))

	// An older copy: a changed file (held open, as a sandbox's process
	// reading it would), a wrong mode, a file an earlier set had and
	// this one lacks, files that are not WriteDir's, and a manifest
	// entry that points outside dir.
	js := filepath.Join(dir, "node", "tools.js")
	if err := os.WriteFile(js, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.Chmod(filepath.Join(dir, "bin", "tool"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(filepath.Dir(dir), "outside")
	for _, p := range []string{
		filepath.Join(dir, "python", "stale.py"), filepath.Join(dir, "gone", "x.js"),
		filepath.Join(dir, "python", "mine.py"), filepath.Join(dir, "keep.txt"), outside,
	} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	manifest := "bin/tool\nnode/tools.js\npython/tools.py\npython/stale.py\ngone/x.js\n../outside\n/etc/passwd\n" + Manifest + "\n"
	if err := os.WriteFile(filepath.Join(dir, Manifest), []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}

	if err := WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	check()
	if inode(t, py) != keptIno {
		t.Error("an unchanged file was rewritten")
	}
	if inode(t, filepath.Join(dir, "python")) != dirIno {
		t.Error("a directory was replaced: a sandbox mounting the old one would not see the new files")
	}
	// The old file was replaced by a rename, not overwritten: a reader
	// that had it open still reads it whole.
	b := make([]byte, 8)
	if n, _ := held.ReadAt(b, 0); string(b[:n]) != "old" {
		t.Errorf("the open old file reads %q: it was rewritten in place", b[:n])
	}
	for _, gone := range []string{filepath.Join(dir, "python", "stale.py"), filepath.Join(dir, "gone")} {
		if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: %v, want it removed", gone, err)
		}
	}
	for _, kept := range []string{filepath.Join(dir, "python", "mine.py"), filepath.Join(dir, "keep.txt"), outside} {
		if _, err := os.Lstat(kept); err != nil {
			t.Errorf("%s, not WriteDir's: %v", kept, err)
		}
	}
	// No temporary file is left.
	for _, sub := range []string{dir, filepath.Join(dir, "python"), filepath.Join(dir, "node"), filepath.Join(dir, "bin")} {
		ents, _ := os.ReadDir(sub)
		for _, e := range ents {
			if strings.Contains(e.Name(), ".tmp-") {
				t.Errorf("temporary file %s left in %s", e.Name(), sub)
			}
		}
	}

	// Refusals.
	if err := WriteDir(""); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("WriteDir(\"\"): %v, want ErrInvalidArgument", err)
	}
	if err := WriteDir(filepath.Join(dir, "keep.txt")); !errors.Is(err, errdefs.ErrInternal) {
		t.Errorf("WriteDir over a file: %v, want ErrInternal", err)
	}
	big := filepath.Join(t.TempDir(), "big")
	if err := os.MkdirAll(big, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(big, Manifest), bytes.Repeat([]byte("a\n"), maxManifest), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteDir(big); err == nil || !strings.Contains(err.Error(), "manifest") {
		t.Errorf("WriteDir with a manifest over the cap: %v, want an error naming it", err)
	}
}
