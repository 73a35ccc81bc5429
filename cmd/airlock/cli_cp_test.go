package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestCLICopyEmptyDirs: uploading a tree makes its directories in the
// sandbox, empty ones and nested empty ones included, and an empty
// source directory becomes an empty directory.
func TestCLICopyEmptyDirs(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	tree := filepath.Join(t.TempDir(), "tree")
	for _, d := range []string{"empty", "deep/x/y", "sub/inner-empty"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tree, "sub", "f.txt"), []byte("F"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := e.ok("", "cp", tree, id+":up")
	if !strings.Contains(r.stderr, "copied 1 files") || !strings.Contains(r.stderr, "made 3 empty directories") {
		t.Errorf("stderr %q", r.stderr)
	}
	entries, _, err := e.mgr.ListDir(context.Background(), id, "up", 8)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, en := range entries {
		rel, _ := strings.CutPrefix(en.Path, entries[0].Path[:strings.LastIndex(entries[0].Path, "/")+1])
		got = append(got, string(en.Type)+":"+rel)
	}
	slices.Sort(got)
	want := []string{"dir:deep", "dir:deep/x", "dir:deep/x/y", "dir:empty", "dir:sub", "dir:sub/inner-empty", "file:sub/f.txt"}
	if !slices.Equal(got, want) {
		t.Errorf("sandbox tree %v, want %v", got, want)
	}

	// An empty source directory.
	bare := filepath.Join(t.TempDir(), "bare")
	if err := os.Mkdir(bare, 0o755); err != nil {
		t.Fatal(err)
	}
	e.ok("", "cp", bare, id+":bare-copy")
	fi, err := e.mgr.Stat(context.Background(), id, "bare-copy")
	if err != nil || fi.Type != "dir" {
		t.Errorf("empty source directory: %+v, %v", fi, err)
	}
}

func TestEmptyLeaves(t *testing.T) {
	tests := []struct {
		dirs   []string
		filled []string
		want   []string
	}{
		{[]string{"."}, nil, []string{"."}},
		{[]string{"."}, []string{"."}, nil},
		{[]string{".", "a", "a/b", "c"}, []string{".", "c"}, []string{"a/b"}},
		{[]string{".", "a", "a/b", "a/c"}, nil, []string{"a/b", "a/c"}},
		{[]string{".", "a", "a/b"}, []string{".", "a", "a/b"}, nil},
		{[]string{".", "a", "a/b", "a/b/c", "d"}, []string{".", "a"}, []string{"a/b/c", "d"}},
	}
	for _, tt := range tests {
		filled := map[string]bool{}
		for _, f := range tt.filled {
			filled[f] = true
		}
		if got := emptyLeaves(tt.dirs, filled); !slices.Equal(got, tt.want) {
			t.Errorf("emptyLeaves(%v, %v) = %v, want %v", tt.dirs, tt.filled, got, tt.want)
		}
	}
}
