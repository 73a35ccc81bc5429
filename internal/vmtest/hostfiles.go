//go:build linux

package vmtest

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// libDirs are where the host's dynamic loader finds shared libraries
// (Debian's multiarch layout first).
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// maxHostFiles caps the files FromHost may bring in, libraries included.
const maxHostFiles = 512

// hostClosure returns the host files paths need in the guest: each path and,
// for a dynamically linked x86-64 ELF, its loader and the shared libraries
// it needs, transitively. Paths are guest paths; each is copied from the
// same host path.
func hostClosure(paths []string) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	var add func(p, from string) error
	add = func(p, from string) error {
		// Two host paths of one guest file (/lib/x and /usr/lib/x) are one.
		if seen[usrPath(p)] {
			return nil
		}
		if len(seen) >= maxHostFiles {
			return fmt.Errorf("vmtest: more than %d host files: %w", maxHostFiles, errdefs.ErrResourceExhausted)
		}
		seen[usrPath(p)] = true
		fi, err := os.Stat(p)
		if err != nil {
			if from != "" {
				return fmt.Errorf("vmtest: %s, needed by %s: %w: %w", p, from, err, errdefs.ErrNotFound)
			}
			return fmt.Errorf("vmtest: host file: %w: %w", err, errdefs.ErrNotFound)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("vmtest: host file %s is not a regular file: %w", p, errdefs.ErrInvalidArgument)
		}
		out = append(out, p)
		interp, libs, err := elfNeeds(p)
		if err != nil {
			return err
		}
		if interp != "" {
			if err := add(interp, p); err != nil {
				return err
			}
		}
		for _, lib := range libs {
			lp, err := findLib(lib)
			if err != nil {
				return fmt.Errorf("%w (needed by %s)", err, p)
			}
			if err := add(lp, p); err != nil {
				return err
			}
		}
		return nil
	}
	for _, p := range paths {
		if err := add(p, ""); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// elfNeeds returns an ELF file's program interpreter and the shared
// libraries it names; nothing for a file that is not ELF (a script) or is
// static.
func elfNeeds(p string) (interp string, libs []string, err error) {
	raw, err := os.Open(p)
	if err != nil {
		return "", nil, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	defer raw.Close()
	magic := make([]byte, 4)
	if _, err := io.ReadFull(raw, magic); err != nil || string(magic) != elf.ELFMAG {
		return "", nil, nil // not ELF: a script or data
	}
	f, err := elf.NewFile(raw)
	if err != nil {
		return "", nil, fmt.Errorf("vmtest: %s: %w: %w", p, err, errdefs.ErrInvalidArgument)
	}
	if f.Machine != elf.EM_X86_64 {
		return "", nil, fmt.Errorf("vmtest: host file %s is for %v, the guest is x86-64: %w", p, f.Machine, errdefs.ErrInvalidArgument)
	}
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, min(prog.Filesz, 4096))
		if _, err := prog.ReadAt(b, 0); err != nil {
			return "", nil, fmt.Errorf("vmtest: %s: read interpreter: %w: %w", p, err, errdefs.ErrInvalidArgument)
		}
		interp = strings.TrimRight(string(b), "\x00")
	}
	libs, err = f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("vmtest: %s: %w: %w", p, err, errdefs.ErrInvalidArgument)
	}
	return interp, libs, nil
}

// findLib finds a shared library by its soname in libDirs.
func findLib(name string) (string, error) {
	if strings.Contains(name, "/") {
		return "", fmt.Errorf("vmtest: shared library %q is a path: %w", name, errdefs.ErrNotSupported)
	}
	for _, d := range libDirs {
		p := filepath.Join(d, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
		}
	}
	return "", fmt.Errorf("vmtest: shared library %s not found in %v: %w", name, libDirs, errdefs.ErrNotFound)
}
