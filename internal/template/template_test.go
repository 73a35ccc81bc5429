package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

type fakeSource struct{ name string }

func (f fakeSource) Name() string { return f.name }
func (f fakeSource) Resolve(context.Context) (runtime.Rootfs, error) {
	return runtime.Rootfs{Layers: []string{"/x"}}, nil
}

func TestRegistry(t *testing.T) {
	r, err := NewRegistry(fakeSource{"b"}, fakeSource{"a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Add(fakeSource{"a"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate Add = %v, want ErrAlreadyExists", err)
	}
	for _, bad := range []Source{nil, fakeSource{""}, fakeSource{"Upper"}, fakeSource{"../x"}, fakeSource{strings.Repeat("a", 64)}} {
		if err := r.Add(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Add(%v) = %v, want ErrInvalidArgument", bad, err)
		}
	}
	if _, err := r.Get("missing"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get(missing) = %v, want ErrNotFound", err)
	}
	s, err := r.Get("a")
	if err != nil || s.Name() != "a" {
		t.Fatalf("Get(a) = %v, %v", s, err)
	}
	var names []string
	for _, s := range r.List() {
		names = append(names, s.Name())
	}
	if strings.Join(names, ",") != "a,b" {
		t.Errorf("List = %v, want sorted [a b]", names)
	}
	if _, err := NewRegistry(fakeSource{"a"}, fakeSource{"a"}); err == nil {
		t.Error("NewRegistry accepted duplicate names")
	}
}

func TestRegistryNamespaces(t *testing.T) {
	r, err := NewRegistry(fakeSource{"py"}, fakeSource{"base"},
		fakeSource{StoreName("tenant-a", "py")}, fakeSource{StoreName("tenant-b", "own")})
	if err != nil {
		t.Fatal(err)
	}
	if got := StoreName("tenant-a", "py"); got != "tenant-a~py" {
		t.Errorf("StoreName = %q", got)
	}
	if o, n := SplitStoreName("tenant-a~py"); o != "tenant-a" || n != "py" {
		t.Errorf("SplitStoreName = %q, %q", o, n)
	}
	if o, n := SplitStoreName("py"); o != "" || n != "py" {
		t.Errorf("SplitStoreName(shared) = %q, %q", o, n)
	}
	tests := []struct {
		owner, name, want string
	}{
		{"tenant-a", "py", "tenant-a~py"}, // its own first
		{"tenant-b", "py", "py"},          // else the shared one
		{"", "py", "py"},
		{"tenant-a", "base", "base"},
		{"tenant-b", "own", "tenant-b~own"},
		{"bad owner", "py", "py"}, // not an owner: shared only
	}
	for _, tt := range tests {
		s, err := r.Lookup(tt.owner, tt.name)
		if err != nil || s.Name() != tt.want {
			t.Errorf("Lookup(%q, %q) = %v, %v; want %s", tt.owner, tt.name, s, err, tt.want)
		}
	}
	// Another owner's template is not found, whatever the owner.
	for _, owner := range []string{"tenant-a", "", "tenant-b~x"} {
		if _, err := r.Lookup(owner, "own"); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Lookup(%q, own) = %v, want ErrNotFound", owner, err)
		}
	}
	// A request cannot name a store name.
	for _, name := range []string{"tenant-b~own", "~own", "tenant-b~"} {
		if _, err := r.Lookup("tenant-a", name); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Lookup(tenant-a, %q) = %v, want ErrInvalidArgument", name, err)
		}
		if err := ValidateName(name); err == nil {
			t.Errorf("ValidateName(%q) accepted a store name", name)
		}
	}
	for _, bad := range []string{"a~b~c", "~x", "x~", "a b~x", "x~Upper", strings.Repeat("o", 65) + "~x"} {
		if err := r.Add(fakeSource{bad}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Add(%q) = %v, want ErrInvalidArgument", bad, err)
		}
	}
}

func TestDir(t *testing.T) {
	good := t.TempDir()
	mustMkdir(t, filepath.Join(good, "etc"), 0o755)
	mustMkdir(t, filepath.Join(good, "usr/bin"), 0o755)
	mustWrite(t, filepath.Join(good, "usr/bin/sh"), "", 0o755)
	mustSymlink(t, "usr/bin", filepath.Join(good, "bin"))

	noShell := t.TempDir()
	mustMkdir(t, filepath.Join(noShell, "etc"), 0o755)

	// bin -> /usr/bin would find the host's shell if followed.
	escaping := t.TempDir()
	mustMkdir(t, filepath.Join(escaping, "etc"), 0o755)
	mustSymlink(t, "/usr/bin", filepath.Join(escaping, "bin"))

	noEtc := t.TempDir()
	mustMkdir(t, filepath.Join(noEtc, "bin"), 0o755)
	mustWrite(t, filepath.Join(noEtc, "bin/sh"), "", 0o755)

	file := filepath.Join(t.TempDir(), "file")
	mustWrite(t, file, "", 0o644)
	link := filepath.Join(t.TempDir(), "link")
	mustSymlink(t, good, link)

	tests := []struct {
		name, path string
		want       error
	}{
		{"ok", good, nil},
		{"Bad Name", good, errdefs.ErrInvalidArgument},
		{"rel", "relative/path", errdefs.ErrInvalidArgument},
		{"unclean", good + "/../" + filepath.Base(good), errdefs.ErrInvalidArgument},
		{"root", "/", errdefs.ErrInvalidArgument},
		{"missing", filepath.Join(good, "nope"), errdefs.ErrFailedPrecondition},
		{"file", file, errdefs.ErrFailedPrecondition},
		{"link", link, errdefs.ErrFailedPrecondition},
		{"noshell", noShell, errdefs.ErrFailedPrecondition},
		{"escaping", escaping, errdefs.ErrFailedPrecondition},
		{"noetc", noEtc, errdefs.ErrFailedPrecondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := NewDir(tt.name, tt.path)
			if !errors.Is(err, tt.want) || (tt.want == nil) != (err == nil) {
				t.Fatalf("NewDir = %v, want %v", err, tt.want)
			}
			if err != nil {
				return
			}
			rfs, err := d.Resolve(context.Background())
			if err != nil || len(rfs.Layers) != 1 || rfs.Layers[0] != tt.path || len(rfs.Binds) != 0 {
				t.Fatalf("Resolve = %+v, %v", rfs, err)
			}
		})
	}

	// A directory removed after registration fails Resolve without
	// revealing its host path.
	gone := t.TempDir()
	mustMkdir(t, filepath.Join(gone, "etc"), 0o755)
	mustMkdir(t, filepath.Join(gone, "bin"), 0o755)
	mustWrite(t, filepath.Join(gone, "bin/sh"), "", 0o755)
	d, err := NewDir("gone", gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(gone); err != nil {
		t.Fatal(err)
	}
	_, err = d.Resolve(context.Background())
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || strings.Contains(err.Error(), gone) {
		t.Fatalf("Resolve of removed dir = %v", err)
	}
}

func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"host", "python-3.12", "", "..", "a/b", "A", strings.Repeat("x", 70)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if ValidateName(name) != nil {
			return
		}
		if len(name) == 0 || len(name) > 63 || strings.ContainsAny(name, "/\\\x00 ") || name[0] == '.' || name[0] == '-' {
			t.Fatalf("accepted unsafe name %q", name)
		}
	})
}
