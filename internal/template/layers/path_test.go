package layers

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestCleanEntryPath(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "usr/bin/sh", want: "usr/bin/sh"},
		{in: "./usr//bin/", want: "usr/bin"},
		{in: "./", want: ""},
		{in: ".", want: ""},
		{in: "a/./b", want: "a/b"},
		{in: ".wh..wh..opq", want: ".wh..wh..opq"},
		{in: "...", want: "..."},
		{in: "a..b/..c", want: "a..b/..c"},
		{in: "", wantErr: true},
		{in: "/etc/passwd", wantErr: true},
		{in: "//etc", wantErr: true},
		{in: "../x", wantErr: true},
		{in: "a/../../x", wantErr: true},
		{in: "a/..", wantErr: true},
		{in: "./..", wantErr: true},
		{in: "a\x00b", wantErr: true},
		{in: strings.Repeat("a", 256), wantErr: true},
		{in: strings.Repeat("a/", 2049), wantErr: true}, // over maxLen
	}
	for _, tt := range tests {
		got, err := cleanEntryPath(tt.in, 4096)
		if tt.wantErr {
			if err == nil {
				t.Errorf("cleanEntryPath(%q) = %q, want error", tt.in, got)
			} else if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("cleanEntryPath(%q) error %v, want ErrInvalidArgument", tt.in, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("cleanEntryPath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestSplitPath(t *testing.T) {
	tests := []struct{ in, dir, base string }{
		{"a", "", "a"},
		{"a/b", "a", "b"},
		{"a/b/c", "a/b", "c"},
	}
	for _, tt := range tests {
		if d, b := splitPath(tt.in); d != tt.dir || b != tt.base {
			t.Errorf("splitPath(%q) = %q, %q; want %q, %q", tt.in, d, b, tt.dir, tt.base)
		}
	}
}

// FuzzCleanEntryPath checks that whatever a tar entry is called, an
// accepted name stays below the layer root and is already clean.
func FuzzCleanEntryPath(f *testing.F) {
	for _, s := range []string{"usr/bin", "./a//b/", "../x", "/abs", "a/../../b", ".wh.x", "a\x00", "....//..", strings.Repeat("x/", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := cleanEntryPath(name, 4096)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not ErrInvalidArgument", err)
			}
			return
		}
		if got == "" {
			return
		}
		if strings.HasPrefix(got, "/") || strings.Contains(got, "\x00") || len(got) > 4096 {
			t.Fatalf("cleanEntryPath(%q) = %q: not a relative clean name", name, got)
		}
		for _, part := range strings.Split(got, "/") {
			if part == "" || part == "." || part == ".." || len(part) > maxNameLen {
				t.Fatalf("cleanEntryPath(%q) = %q: bad component %q", name, got, part)
			}
		}
		root := "/layer/root"
		joined := filepath.Join(root, got)
		if !strings.HasPrefix(joined, root+"/") {
			t.Fatalf("cleanEntryPath(%q) = %q escapes the root (%s)", name, got, joined)
		}
		if again, err := cleanEntryPath(got, 4096); err != nil || again != got {
			t.Fatalf("cleanEntryPath not idempotent on %q: %q, %v", got, again, err)
		}
	})
}
