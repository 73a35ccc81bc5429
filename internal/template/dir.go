package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Dir is a template whose root filesystem is an existing directory on the
// host (an unpacked image, a debootstrap tree, ...). The directory is used
// as the sandbox's only read-only layer and is never written.
type Dir struct {
	name string
	path string
}

var _ Source = (*Dir)(nil)

// NewDir returns a template called name over the root filesystem at path.
// path must be absolute and hold a plausible root filesystem (see
// ValidateRootfsDir).
func NewDir(name, path string) (*Dir, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	if err := ValidateRootfsDir(path); err != nil {
		return nil, fmt.Errorf("template %q: %w", name, err)
	}
	return &Dir{name: name, path: filepath.Clean(path)}, nil
}

// Name returns the template name.
func (d *Dir) Name() string { return d.name }

// Path is the root filesystem directory.
func (d *Dir) Path() string { return d.path }

// Resolve re-checks the directory (it may have been removed since NewDir)
// and returns it as the single layer.
func (d *Dir) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	if err := ctx.Err(); err != nil {
		return runtime.Rootfs{}, ctxClass(err)
	}
	if err := ValidateRootfsDir(d.path); err != nil {
		// The detailed reason names host paths; keep it out of the message.
		return runtime.Rootfs{}, fmt.Errorf("template %q: root filesystem is no longer usable: %w", d.name, errdefs.Class(err))
	}
	return runtime.Rootfs{Layers: []string{d.path}}, nil
}

// ValidateRootfsDir checks that dir looks like a root filesystem: an
// absolute, clean path other than "/", a real directory (not a symlink),
// with an etc directory and a shell at bin/sh or usr/bin/sh (which may be
// a symlink, resolved inside the rootfs by the sandbox, so only its
// presence is checked; the directories leading to it must be real
// directories, so a bin -> /usr/bin link never reaches into the host). Errors wrap ErrInvalidArgument or
// ErrFailedPrecondition.
func ValidateRootfsDir(dir string) error {
	if dir == "" || !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return fmt.Errorf("rootfs path must be absolute and clean: %w", errdefs.ErrInvalidArgument)
	}
	if dir == "/" {
		return fmt.Errorf("rootfs cannot be the host root: %w", errdefs.ErrInvalidArgument)
	}
	fi, err := os.Lstat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("rootfs %s does not exist: %w", dir, errdefs.ErrFailedPrecondition)
	case err != nil:
		return fmt.Errorf("rootfs %s: %v: %w", dir, err, errdefs.ErrFailedPrecondition)
	case !fi.IsDir():
		return fmt.Errorf("rootfs %s is not a directory: %w", dir, errdefs.ErrFailedPrecondition)
	}
	if fi, err := os.Lstat(filepath.Join(dir, "etc")); err != nil || !fi.IsDir() {
		return fmt.Errorf("rootfs %s has no etc directory: %w", dir, errdefs.ErrFailedPrecondition)
	}
	for _, sh := range []string{"bin/sh", "usr/bin/sh"} {
		if existsInside(dir, sh) {
			return nil
		}
	}
	return fmt.Errorf("rootfs %s has no /bin/sh: %w", dir, errdefs.ErrFailedPrecondition)
}

// existsInside reports whether rel exists under dir without following any
// symlink on the way (the last component may itself be a symlink).
func existsInside(dir, rel string) bool {
	p := dir
	parts := strings.Split(rel, "/")
	for i, part := range parts {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if err != nil {
			return false
		}
		if i < len(parts)-1 && !fi.IsDir() {
			return false
		}
	}
	return true
}
