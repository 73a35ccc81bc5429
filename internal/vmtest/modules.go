//go:build linux

package vmtest

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxModuleBytes caps one decompressed kernel module.
const maxModuleBytes = 64 << 20

// module is a kernel module ready for the initramfs: its name and its
// uncompressed object.
type module struct {
	name string
	obj  []byte
}

// moduleName normalizes a module name: the kernel treats '-' and '_' alike.
func moduleName(s string) string {
	s = filepath.Base(s)
	for _, ext := range []string{".xz", ".zst", ".gz"} {
		s = strings.TrimSuffix(s, ext)
	}
	return strings.ReplaceAll(strings.TrimSuffix(s, ".ko"), "-", "_")
}

// indexModules maps each module name under dir (a /lib/modules/<release>
// tree) to its file.
func indexModules(dir string) (map[string]string, error) {
	idx := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		n := d.Name()
		if d.Type().IsRegular() && (strings.HasSuffix(n, ".ko") || strings.Contains(n, ".ko.")) {
			idx[moduleName(n)] = p
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("vmtest: index kernel modules in %s: %w: %w", dir, err, errdefs.ErrUnavailable)
	}
	return idx, nil
}

// resolveModules returns the modules names need, dependencies first (the
// order to load them in), leaving out those built into the kernel. load
// reads one module's object by name.
func resolveModules(names []string, builtin map[string]bool, load func(name string) ([]byte, error)) ([]module, error) {
	var out []module
	state := map[string]int{} // 1: being visited, 2: done
	var visit func(name, from string) error
	visit = func(name, from string) error {
		if builtin[name] {
			return nil
		}
		switch state[name] {
		case 1:
			return fmt.Errorf("vmtest: kernel module %s depends on itself (via %s): %w", name, from, errdefs.ErrInvalidArgument)
		case 2:
			return nil
		}
		state[name] = 1
		obj, err := load(name)
		if err != nil {
			if from != "" {
				return fmt.Errorf("%w (needed by %s)", err, from)
			}
			return err
		}
		deps, err := moduleDepends(obj)
		if err != nil {
			return fmt.Errorf("vmtest: kernel module %s: %w", name, err)
		}
		for _, d := range deps {
			if err := visit(d, name); err != nil {
				return err
			}
		}
		state[name] = 2
		out = append(out, module{name: name, obj: obj})
		return nil
	}
	for _, n := range names {
		if err := visit(moduleName(n), ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// moduleDepends reads the "depends=" entry of a module's .modinfo section.
func moduleDepends(obj []byte) ([]string, error) {
	f, err := elf.NewFile(bytes.NewReader(obj))
	if err != nil {
		return nil, fmt.Errorf("not an ELF object: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("no .modinfo section: %w", errdefs.ErrInvalidArgument)
	}
	info, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("read .modinfo: %w: %w", err, errdefs.ErrInvalidArgument)
	}
	return parseModinfoDepends(info), nil
}

// parseModinfoDepends returns the module names of the "depends=" entry of a
// .modinfo section (NUL-separated key=value strings).
func parseModinfoDepends(info []byte) []string {
	var deps []string
	for _, kv := range bytes.Split(info, []byte{0}) {
		v, ok := bytes.CutPrefix(kv, []byte("depends="))
		if !ok {
			continue
		}
		for _, d := range strings.Split(string(v), ",") {
			if d = strings.TrimSpace(d); d != "" {
				deps = append(deps, moduleName(d))
			}
		}
	}
	return deps
}

// readModule reads a module file, decompressing .ko.xz (with busybox's xz),
// .ko.zst and .ko.gz.
func readModule(ctx context.Context, p, busybox string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	defer f.Close()
	var r io.Reader = f
	switch {
	case strings.HasSuffix(p, ".ko"):
	case strings.HasSuffix(p, ".ko.gz"):
		zr, err := gzip.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("vmtest: %s: %w: %w", p, err, errdefs.ErrInvalidArgument)
		}
		r = zr
	case strings.HasSuffix(p, ".ko.zst"):
		zr, err := zstd.NewReader(f)
		if err != nil {
			return nil, fmt.Errorf("vmtest: %s: %w: %w", p, err, errdefs.ErrInvalidArgument)
		}
		defer zr.Close()
		r = zr
	case strings.HasSuffix(p, ".ko.xz"):
		var out, stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, busybox, "xz", "-dc", p)
		cmd.Stdout, cmd.Stderr = &limitedWriter{w: &out, n: maxModuleBytes + 1}, &limitedWriter{w: &stderr, n: 4096}
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("vmtest: decompress %s: %v: %s: %w", p, err, strings.TrimSpace(stderr.String()), errdefs.ErrUnavailable)
		}
		r = &out
	default:
		return nil, fmt.Errorf("vmtest: %s: unknown module compression: %w", p, errdefs.ErrNotSupported)
	}
	obj, err := io.ReadAll(io.LimitReader(r, maxModuleBytes+1))
	if err != nil {
		return nil, fmt.Errorf("vmtest: read %s: %w: %w", p, err, errdefs.ErrUnavailable)
	}
	if len(obj) > maxModuleBytes {
		return nil, fmt.Errorf("vmtest: %s is over %d bytes: %w", p, maxModuleBytes, errdefs.ErrResourceExhausted)
	}
	return obj, nil
}

// kernelModules resolves names (and what they depend on) in the module tree
// dir.
func kernelModules(ctx context.Context, dir, busybox string, names []string) ([]module, error) {
	if len(names) == 0 {
		return nil, nil
	}
	if dir == "" {
		return nil, fmt.Errorf("vmtest: modules %v asked for, but the kernel has no module tree: %w", names, errdefs.ErrInvalidArgument)
	}
	idx, err := indexModules(dir)
	if err != nil {
		return nil, err
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, line := range strings.Fields(string(b)) {
			builtin[moduleName(line)] = true
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	return resolveModules(names, builtin, func(name string) ([]byte, error) {
		p, ok := idx[name]
		if !ok {
			return nil, fmt.Errorf("vmtest: kernel module %s: not in %s: %w", name, dir, errdefs.ErrNotFound)
		}
		return readModule(ctx, p, busybox)
	})
}

// limitedWriter keeps the first n bytes written and drops the rest, so a
// chatty child cannot grow the parent's memory without bound.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(int64(len(p)), l.n)
		if _, err := l.w.Write(p[:k]); err != nil {
			return 0, err
		}
		l.n -= k
	}
	return len(p), nil
}
