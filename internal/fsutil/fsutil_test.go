package fsutil

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteNew(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "key")
	if err := WriteNew(p, []byte("one"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stat: %v, %v; want mode 0600", st, err)
	}
	// An existing file is never replaced.
	if err := WriteNew(p, []byte("two"), 0o644); !errors.Is(err, os.ErrExist) {
		t.Errorf("second WriteNew: %v, want os.ErrExist", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Errorf("content %q, want the first write's", b)
	}
	// No temporary file is left either way.
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("%d entries in the directory, want only the file", len(ents))
	}
	if err := WriteNew(filepath.Join(dir, "missing", "key"), nil, 0o600); err == nil {
		t.Error("WriteNew into a missing directory succeeded")
	}
}

// TestReplace checks that Replace writes a new file and replaces an
// existing one whole, with the mode asked for, leaving no temporary file.
func TestReplace(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	for i, data := range []string{"first", "second, longer"} {
		if err := Replace(p, []byte(data), 0o644); err != nil {
			t.Fatalf("replace %d: %v", i, err)
		}
		got, err := os.ReadFile(p)
		st, _ := os.Stat(p)
		if err != nil || string(got) != data || st.Mode().Perm() != 0o644 {
			t.Errorf("after replace %d: %q %v mode %v", i, got, err, st.Mode())
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries in the directory, want 1", len(ents))
	}
}
