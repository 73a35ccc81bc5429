// Package sdk holds the libraries code inside a sandbox calls its tools
// with, and writes them where the daemon mounts them into every sandbox.
//
// There are three, each using only its language's standard library:
// python/tools.py (Python 3.9+: call, acall, a function per granted tool
// through `from tools import NAME`, ToolError subclasses per error code,
// stubs() for a .pyi), node/tools.js with node/tools.mjs and
// node/tools.d.ts (Node 18+: call, load, tools.NAME, dts() for a .d.ts)
// and bin/tool (a Python 3 command: tool list, tool call NAME ARGS).
//
// They all speak one protocol to the sandbox's gateway endpoint, whose
// base URL is AIRLOCK_TOOLS_URL (default http://127.0.0.1:3129): HTTP/1.1
// and JSON, never through a proxy, no credentials (the channel the call
// arrives on identifies the sandbox):
//
//	GET  /v1/tools  → 200 {"tools":[{"name","description","input_schema","output_schema"}]}
//	POST /v1/call   {"tool":"NAME","args":{...}}
//	                → 200 {"result":JSON} or an error status with {"error":{"code","message"}}
package sdk

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/fsutil"
)

//go:embed files
var embedded embed.FS

// Manifest is the file WriteDir keeps in the directory it writes: the
// paths it wrote, one a line, so that a later WriteDir removes the files
// a newer set no longer has, and nothing else.
const Manifest = ".airlock-sdk"

// maxManifest caps the manifest read back from a directory.
const maxManifest = 64 << 10

// Files returns the libraries: a path relative to the directory they
// are placed in ("python/tools.py", "node/tools.js", "node/tools.mjs",
// "node/tools.d.ts", "bin/tool") to its content. The map is the
// caller's to keep.
func Files() map[string][]byte {
	out := map[string][]byte{}
	err := fs.WalkDir(embedded, "files", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := embedded.ReadFile(p)
		if err != nil {
			return err
		}
		out[strings.TrimPrefix(p, "files/")] = b
		return nil
	})
	if err != nil {
		// The embedded tree is part of the binary; reading it fails only
		// if the build is broken.
		panic("sdk: embedded files: " + err.Error())
	}
	return out
}

// Mode is the permission a file of Files is written with: 0755 for
// the commands under bin/, 0644 for the rest.
func Mode(rel string) os.FileMode {
	if strings.HasPrefix(rel, "bin/") {
		return 0o755
	}
	return 0o644
}

// WriteDir writes Files into dir (made if missing, 0755), for a
// read-only mount into sandboxes. Each file is replaced atomically (a
// temporary file beside it, synced, renamed over it), so a sandbox that
// already mounts dir sees the old or the new file, never a part of one;
// directories are kept, not replaced, so existing mounts see the new
// files. A file an earlier WriteDir wrote (its Manifest) that the new
// set lacks is removed; nothing else in dir is touched. An unchanged
// file is not rewritten.
func WriteDir(dir string) error {
	if dir == "" {
		return fmt.Errorf("sdk: no directory to write the tool libraries into: %w", errdefs.ErrInvalidArgument)
	}
	files := Files()
	names := make([]string, 0, len(files))
	for rel := range files {
		names = append(names, rel)
	}
	sort.Strings(names)

	if err := mkdir(dir); err != nil {
		return err
	}
	old, err := readManifest(dir)
	if err != nil {
		return err
	}
	dirs := map[string]struct{}{}
	for _, rel := range names {
		sub := filepath.Join(dir, filepath.FromSlash(path.Dir(rel)))
		if err := mkdir(sub); err != nil {
			return err
		}
		if err := replace(filepath.Join(dir, filepath.FromSlash(rel)), files[rel], Mode(rel)); err != nil {
			return err
		}
		dirs[sub] = struct{}{}
	}
	for _, rel := range old {
		if _, ok := files[rel]; ok {
			continue
		}
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("sdk: remove the stale %s: %v: %w", p, err, errdefs.ErrInternal)
		}
		// Its directory goes too once empty; one still holding files stays.
		if sub := filepath.Dir(p); sub != filepath.Clean(dir) {
			_ = os.Remove(sub)
		}
	}
	if err := replace(filepath.Join(dir, Manifest), []byte(strings.Join(names, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	dirs[filepath.Clean(dir)] = struct{}{}
	for d := range dirs {
		if err := syncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// mkdir makes dir 0755 whatever the umask, since sandbox users read it
// as others.
func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("sdk: make %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("sdk: chmod %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	return nil
}

// readManifest returns the paths an earlier WriteDir wrote in dir, only
// those that are local paths below it.
func readManifest(dir string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, Manifest))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: read the manifest in %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifest+1))
	if err == nil && len(b) > maxManifest {
		err = fmt.Errorf("over %d bytes", maxManifest)
	}
	if err != nil {
		return nil, fmt.Errorf("sdk: read the manifest in %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	var out []string
	for _, rel := range strings.Split(string(b), "\n") {
		if rel != "" && rel != Manifest && filepath.IsLocal(filepath.FromSlash(rel)) {
			out = append(out, rel)
		}
	}
	return out, nil
}

// replace puts data at p with mode perm atomically, unless p already
// holds exactly that.
func replace(p string, data []byte, perm os.FileMode) error {
	if st, err := os.Lstat(p); err == nil && st.Mode().IsRegular() && st.Mode().Perm() == perm && st.Size() == int64(len(data)) {
		if cur, err := os.ReadFile(p); err == nil && bytes.Equal(cur, data) {
			return nil
		}
	}
	if err := fsutil.Replace(p, data, perm); err != nil {
		return fmt.Errorf("sdk: write %s: %v: %w", p, err, errdefs.ErrInternal)
	}
	return nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sdk: sync %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("sdk: sync %s: %v: %w", dir, err, errdefs.ErrInternal)
	}
	return nil
}
