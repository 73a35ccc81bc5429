package airfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// writeTree creates files (path → content; a content starting with "->"
// makes a symlink to the rest) under dir.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func keys(t *testing.T, src, ctxDir, base string) []string {
	t.Helper()
	k, err := mustParse(t, src).CacheKeys(context.Background(), ctxDir, base)
	if err != nil {
		t.Fatalf("CacheKeys: %v", err)
	}
	return k
}

const keyFile = `DEBIAN bookworm python3
RUN apt-get update
COPY app/ /srv/app/
RUN make -C /srv/app
ENV A=1
`

func TestCacheKeysChain(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"app/main.py": "print(1)\n", "app/lib/x.py": "x = 1\n", "other": "o"})
	base := keys(t, keyFile, dir, "base1")
	if len(base) != 5 {
		t.Fatalf("got %d keys", len(base))
	}
	for i, k := range base {
		if len(k) != 64 {
			t.Fatalf("key %d = %q", i, k)
		}
	}
	// Layout (comments, continuations, keyword case, blank lines) does not
	// matter.
	relaid := "# header\nDEBIAN \\\n  bookworm \\\n  python3\n\nrun apt-get update\ncopy app/   /srv/app/\n# x\nRUN make -C /srv/app\nENV A=1\n"
	if got := keys(t, relaid, dir, "base1"); !reflect.DeepEqual(got, base) {
		t.Errorf("relaid file changed keys")
	}
	// Stable across calls.
	if got := keys(t, keyFile, dir, "base1"); !reflect.DeepEqual(got, base) {
		t.Errorf("keys are not stable")
	}
	// A different base changes every key.
	other := keys(t, keyFile, dir, "base2")
	for i := range base {
		if other[i] == base[i] {
			t.Errorf("base change kept key %d", i)
		}
	}
	// Changing one RUN changes its key and every later one, not earlier.
	changed := keys(t, strings.Replace(keyFile, "make -C", "make -j2 -C", 1), dir, "base1")
	for i := range base {
		if same := changed[i] == base[i]; same != (i < 3) {
			t.Errorf("after changing step 3, key %d same=%v", i, same)
		}
	}
	// Files outside the copied directory do not matter.
	writeTree(t, dir, map[string]string{"other": "changed"})
	if got := keys(t, keyFile, dir, "base1"); !reflect.DeepEqual(got, base) {
		t.Errorf("an unrelated file changed keys")
	}
	// Modification times do not matter.
	future := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(dir, "app/main.py"), future, future); err != nil {
		t.Fatal(err)
	}
	if got := keys(t, keyFile, dir, "base1"); !reflect.DeepEqual(got, base) {
		t.Errorf("an mtime changed keys")
	}
}

func TestCacheKeysContent(t *testing.T) {
	setups := []struct {
		name   string
		change func(t *testing.T, dir string)
	}{
		{"content", func(t *testing.T, dir string) { writeTree(t, dir, map[string]string{"app/main.py": "print(2)\n"}) }},
		{"new file", func(t *testing.T, dir string) { writeTree(t, dir, map[string]string{"app/new": ""}) }},
		{"new empty dir", func(t *testing.T, dir string) {
			if err := os.Mkdir(filepath.Join(dir, "app/empty"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"mode", func(t *testing.T, dir string) {
			if err := os.Chmod(filepath.Join(dir, "app/main.py"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"rename", func(t *testing.T, dir string) {
			if err := os.Rename(filepath.Join(dir, "app/main.py"), filepath.Join(dir, "app/main2.py")); err != nil {
				t.Fatal(err)
			}
		}},
		{"file to symlink", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "app/main.py")); err != nil {
				t.Fatal(err)
			}
			writeTree(t, dir, map[string]string{"app/main.py": "->lib/x.py"})
		}},
		{"symlink target", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "app/link")); err != nil {
				t.Fatal(err)
			}
			writeTree(t, dir, map[string]string{"app/link": "->elsewhere"})
		}},
	}
	for _, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			dir := t.TempDir()
			writeTree(t, dir, map[string]string{"app/main.py": "print(1)\n", "app/lib/x.py": "x = 1\n", "app/link": "->main.py"})
			before := keys(t, keyFile, dir, "b")
			s.change(t, dir)
			after := keys(t, keyFile, dir, "b")
			for i := range before {
				if same := before[i] == after[i]; same != (i < 2) {
					t.Errorf("key %d same=%v after the change", i, same)
				}
			}
		})
	}
}

func TestCacheKeysNoContextNeeded(t *testing.T) {
	if k := keys(t, "FROM template:host\nRUN true\n", "", "b"); len(k) != 2 {
		t.Fatalf("keys = %q", k)
	}
	_, err := mustParse(t, "FROM template:host\nCOPY a /a\n").CacheKeys(context.Background(), "", "b")
	var pe *Error
	if !errors.As(err, &pe) || pe.Line != 2 {
		t.Fatalf("CacheKeys without a context = %v", err)
	}
}

func TestResolveSources(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{
		"app/a.py": "a", "app/sub/b.py": "bb", "app/in-link": "->a.py", "app/out-link": "->/etc/passwd",
		"top.py": "t", "other.py": "o", "readme.md": "r",
		"dirlink": "->app/sub", "escape": "->../../../../etc", "escape-file": "->/etc/passwd",
	})
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	ctx := context.Background()
	got, err := ResolveSources(ctx, root, []string{"app", "/top.py", "*.md", "dirlink"})
	if err != nil {
		t.Fatal(err)
	}
	type ent struct {
		Arg       int
		Path, Rel string
		Kind      string
		Link      string
		Size      int64
	}
	var simple []ent
	for _, e := range got {
		simple = append(simple, ent{e.Arg, e.Path, e.Rel, e.Mode.Type().String(), e.Link, e.Size})
	}
	want := []ent{
		{0, "app", ".", "d---------", "", 0},
		{0, "app/a.py", "a.py", "----------", "", 1},
		{0, "app/in-link", "in-link", "L---------", "a.py", 0},
		{0, "app/out-link", "out-link", "L---------", "/etc/passwd", 0},
		{0, "app/sub", "sub", "d---------", "", 0},
		{0, "app/sub/b.py", "sub/b.py", "----------", "", 2},
		{1, "top.py", ".", "----------", "", 1},
		{2, "readme.md", ".", "----------", "", 1},
		{3, "dirlink", ".", "d---------", "", 0},
		{3, "dirlink/b.py", "b.py", "----------", "", 2},
	}
	if !reflect.DeepEqual(simple, want) {
		t.Errorf("ResolveSources =\n%+v\nwant\n%+v", simple, want)
	}

	all, err := ResolveSources(ctx, root, []string{"."})
	if err != nil {
		t.Fatal(err)
	}
	if all[0].Path != "." || all[0].Rel != "." || all[1].Rel != all[1].Path {
		t.Errorf("whole context: %+v", all[:2])
	}

	bad := []struct {
		src   string
		class error
	}{
		{"escape", errdefs.ErrInvalidArgument},
		{"escape/passwd", errdefs.ErrInvalidArgument},
		{"escape-file", errdefs.ErrInvalidArgument},
		{"../x", errdefs.ErrInvalidArgument},
		{"missing", errdefs.ErrNotFound},
		{"*.none", errdefs.ErrNotFound},
	}
	for _, b := range bad {
		_, err := ResolveSources(ctx, root, []string{b.src})
		if !errors.Is(err, b.class) {
			t.Errorf("ResolveSources(%q) = %v, want %v", b.src, err, b.class)
			continue
		}
		if strings.Contains(err.Error(), dir) {
			t.Errorf("ResolveSources(%q) error names a host path: %v", b.src, err)
		}
	}
}

func TestCacheKeysRejectsEscapesAndSpecialFiles(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"link": "->/etc", "ok/f": "x"})
	if err := syscall.Mkfifo(filepath.Join(dir, "ok/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{"FROM template:host\nCOPY link /x/\n", "FROM template:host\nCOPY link/passwd /x\n", "FROM template:host\nCOPY ok /x/\n"} {
		done := make(chan error, 1)
		go func() {
			_, err := mustParse(t, src).CacheKeys(context.Background(), dir, "b")
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "line 2") {
				t.Errorf("%q: err = %v, want ErrInvalidArgument at line 2", src, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q: CacheKeys hung", src)
		}
	}
}

func TestCacheKeysCaps(t *testing.T) {
	dir := t.TempDir()
	writeTree(t, dir, map[string]string{"d/a": "12345", "d/b": "12345", "d/c": "12345"})
	src := "FROM template:host\nCOPY d /d/\n"

	oldFiles, oldBytes := maxContextFiles, maxContextBytes
	defer func() { maxContextFiles, maxContextBytes = oldFiles, oldBytes }()

	maxContextFiles = 3
	if _, err := mustParse(t, src).CacheKeys(context.Background(), dir, "b"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("file cap: %v", err)
	}
	maxContextFiles = 4
	if _, err := mustParse(t, src).CacheKeys(context.Background(), dir, "b"); err != nil {
		t.Errorf("at the file cap: %v", err)
	}
	// Two steps share the cap.
	if _, err := mustParse(t, src+"COPY d /e/\n").CacheKeys(context.Background(), dir, "b"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("shared file cap: %v", err)
	}
	maxContextFiles = oldFiles
	maxContextBytes = 14
	if _, err := mustParse(t, src).CacheKeys(context.Background(), dir, "b"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("byte cap: %v", err)
	}
	maxContextBytes = 15
	if _, err := mustParse(t, src).CacheKeys(context.Background(), dir, "b"); err != nil {
		t.Errorf("at the byte cap: %v", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := mustParse(t, src).CacheKeys(ctx, dir, "b"); !errors.Is(err, errdefs.ErrCanceled) {
		t.Errorf("canceled: %v", err)
	}
}
