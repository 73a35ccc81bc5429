package build

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

func statFrom(st *unix.Stat_t) fileStat {
	return fileStat{
		typ:   st.Mode & unix.S_IFMT,
		perm:  st.Mode & 0o7777,
		uid:   int(st.Uid),
		gid:   int(st.Gid),
		size:  st.Size,
		mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
		rdev:  st.Rdev,
		dev:   st.Dev,
		ino:   st.Ino,
		nlink: uint64(st.Nlink),
	}
}

// resolveInLayer: lookups inside a layer directory never follow a
// symlink, never leave the directory and never cross a mount.
const resolveInLayer = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// openInLayer opens rel (slash-separated, relative; "" for the root)
// inside the layer directory root.
func openInLayer(root, rel string, flags uint64) (int, error) {
	rfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(rfd)
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(rfd, rel, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolveInLayer})
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return fd, err
	}
}

// statInLayer describes rel inside the layer directory root without
// following a symlink anywhere. A missing entry (or one below a
// non-directory) is fs.ErrNotExist.
func statInLayer(root, rel string) (fileStat, error) {
	fd, err := openInLayer(root, rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
			return fileStat{}, fs.ErrNotExist
		}
		return fileStat{}, fmt.Errorf("layer lookup: %v: %w", err, errdefs.ErrInternal)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fileStat{}, fmt.Errorf("layer lookup: %v: %w", err, errdefs.ErrInternal)
	}
	return statFrom(&st), nil
}

// opaqueInLayer reports whether the directory rel of the layer root is
// marked opaque (it hides the layers below).
func opaqueInLayer(root, rel string) bool {
	fd, err := openInLayer(root, rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	buf := make([]byte, 4)
	n, err := unix.Fgetxattr(fd, layers.OpaqueXattr, buf)
	return err == nil && n == 1 && buf[0] == 'y'
}

// readlinkInLayer returns the target of the symlink rel of the layer root.
func readlinkInLayer(root, rel string) (string, error) {
	fd, err := openInLayer(root, rel, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return "", fmt.Errorf("layer lookup: %v: %w", err, errdefs.ErrInternal)
	}
	defer unix.Close(fd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", fmt.Errorf("layer lookup: %v: %w", err, errdefs.ErrInternal)
	}
	if n == len(buf) {
		return "", fmt.Errorf("symlink target too long: %w", errdefs.ErrInvalidArgument)
	}
	return string(buf[:n]), nil
}

// openFileInLayer opens the regular file rel of the layer root for
// reading.
func openFileInLayer(root, rel string) (*os.File, error) {
	fd, err := openInLayer(root, rel, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("layer lookup: %v: %w", err, errdefs.ErrInternal)
	}
	f := os.NewFile(uintptr(fd), rel)
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file: %w", clip(rel, 100), errdefs.ErrInvalidArgument)
	}
	return f, nil
}

// lstatHost describes the host file p without following a final symlink.
func lstatHost(p string) (fileStat, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fileStat{}, err
	}
	return statFrom(&st), nil
}

// oNoFollow opens a file without following a final symlink.
const oNoFollow = unix.O_NOFOLLOW
