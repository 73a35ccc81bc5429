//go:build linux

package agent

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Path resolution for the file service.
//
// Every request path is untrusted. It is validated and cleaned lexically
// into an absolute sandbox path (fsCleanPath), then resolved by the kernel
// with openat2(RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS) relative to a
// directory fd of Root that is opened once. The kernel treats that fd as
// "/" for "..", absolute symlinks and relative symlinks alike, so no
// resolution leaves Root however the path or the symlinks it crosses are
// built, and /proc magic links (/proc/self/root, /proc/*/fd/*) are refused.
// Operations on a final component run as *at syscalls relative to the
// resolved parent fd, with AT_SYMLINK_NOFOLLOW / O_NOFOLLOW where a symlink
// must not be followed, so that swapping a directory for a symlink between
// two steps cannot redirect an operation outside Root.

const (
	// fsMaxPathLen caps request paths (PATH_MAX).
	fsMaxPathLen = 4096
	// fsResolve are the openat2 resolve flags used for every lookup.
	fsResolve = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
	// fsOpenRetries bounds the retries of openat2 when the kernel reports
	// EAGAIN (a concurrent rename or mount while resolving "..").
	fsOpenRetries = 128
	// fsMaxSymlinks bounds symlinks the agent follows itself (the
	// final-component walk of Write), matching the kernel's limit.
	fsMaxSymlinks = 40
)

// fsResolver resolves sandbox paths inside Root. It is safe for concurrent
// use; close waits for lookups in progress so that the root fd number is
// never reused under a lookup.
type fsResolver struct {
	mu       sync.RWMutex
	rootFD   int    // O_PATH directory fd of Root; -1 once closed
	hostRoot string // canonical host path of Root, "/" inside a sandbox
}

// newFSResolver opens root and checks that the kernel supports openat2.
func newFSResolver(root string) (*fsResolver, error) {
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("agent: open file root: %w", err)
	}
	r := &fsResolver{rootFD: fd}
	probe, err := r.openat2(".", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		unix.Close(fd)
		if errors.Is(err, unix.ENOSYS) {
			return nil, fmt.Errorf("agent: the kernel lacks openat2 (Linux 5.6+ required): %w", errdefs.ErrNotSupported)
		}
		return nil, fmt.Errorf("agent: probe openat2: %w", err)
	}
	unix.Close(probe)
	if host, err := fsFDPath(fd); err == nil {
		r.hostRoot = host
	} else if host, err := filepath.EvalSymlinks(root); err == nil {
		r.hostRoot, _ = filepath.Abs(host)
	} else {
		unix.Close(fd)
		return nil, fmt.Errorf("agent: resolve file root: %w", err)
	}
	return r, nil
}

// close closes the root fd once no lookup is using it.
func (r *fsResolver) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rootFD < 0 {
		return nil
	}
	err := unix.Close(r.rootFD)
	r.rootFD = -1
	return err
}

// fsCleanPath validates a request path and returns it as an absolute,
// lexically clean sandbox path. Relative paths are relative to home (a
// sandbox path). Cleaning is lexical, like path.Clean: "a/../b" is "b"
// whatever a is, and ".." never climbs above "/".
func fsCleanPath(p, home string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("path is empty: %w", errdefs.ErrInvalidArgument)
	case len(p) > fsMaxPathLen:
		return "", fmt.Errorf("path is longer than %d bytes: %w", fsMaxPathLen, errdefs.ErrInvalidArgument)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("path contains a NUL byte: %w", errdefs.ErrInvalidArgument)
	}
	if !path.IsAbs(p) {
		if !path.IsAbs(home) {
			home = "/"
		}
		p = home + "/" + p
	}
	return path.Clean(p), nil
}

// rel turns a clean sandbox path into the path handed to openat2.
func fsRel(clean string) string {
	if clean == "/" {
		return "."
	}
	return clean[1:]
}

// openat2 resolves the sandbox path p (absolute or relative to "/") inside
// Root with flags (O_CLOEXEC is added), following symlinks in every
// component unless flags has O_NOFOLLOW.
func (r *fsResolver) openat2(p string, flags int) (int, error) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.rootFD < 0 {
		return -1, errFSClosed
	}
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: fsResolve}
	for range fsOpenRetries {
		fd, err := unix.Openat2(r.rootFD, p, &how)
		if err == unix.EAGAIN || err == unix.EINTR {
			continue
		}
		return fd, err
	}
	return -1, unix.EAGAIN
}

// open resolves the whole clean path, following symlinks (inside Root),
// and opens it with flags.
func (r *fsResolver) open(clean string, flags int) (int, error) {
	return r.openat2(fsRel(clean), flags)
}

// openParent resolves the parent directory of clean (which must not be
// "/") to an O_PATH fd and returns it with the final component, which the
// caller operates on with *at syscalls.
func (r *fsResolver) openParent(clean string) (int, string, error) {
	if clean == "/" {
		return -1, "", unix.EINVAL
	}
	dir, name := path.Split(clean)
	fd, err := r.open(path.Clean(dir), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, "", err
	}
	return fd, name, nil
}

// sandboxPath returns the absolute sandbox path of the file that fd refers
// to, as the kernel sees it now (symlinks resolved). It needs /proc.
func (r *fsResolver) sandboxPath(fd int) (string, error) {
	host, err := fsFDPath(fd)
	if err != nil {
		return "", err
	}
	return r.toSandbox(host)
}

// toSandbox maps a canonical host path under Root onto a sandbox path.
func (r *fsResolver) toSandbox(host string) (string, error) {
	switch {
	case r.hostRoot == "/":
		return path.Clean(host), nil
	case host == r.hostRoot:
		return "/", nil
	case strings.HasPrefix(host, r.hostRoot+"/"):
		return path.Clean(host[len(r.hostRoot):]), nil
	}
	// A directory that was moved out of Root or deleted (" (deleted)").
	return "", unix.ENOENT
}

// fsFDPath reads the path of an open fd from /proc/self/fd.
func fsFDPath(fd int) (string, error) {
	buf := make([]byte, 512)
	for {
		n, err := unix.Readlink(fsProcFD(fd), buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			s := string(buf[:n])
			if !strings.HasPrefix(s, "/") {
				return "", unix.ENOENT
			}
			return s, nil
		}
		if len(buf) > 2*fsMaxPathLen {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// fsProcFD is the /proc magic link of fd. The agent itself opens it (for
// inotify and fchmod fallbacks) after openat2 has resolved fd safely;
// request paths can never reach magic links.
func fsProcFD(fd int) string {
	return "/proc/self/fd/" + strconv.Itoa(fd)
}

// fsReadNames reads up to max names (all if max < 0) from the directory
// fd (opened O_RDONLY) from its current offset, without "." and "..".
func fsReadNames(fd int, max int) ([]string, error) {
	buf := make([]byte, 32<<10)
	var names []string
	for max < 0 || len(names) < max {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return names, err
		}
		if n <= 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	if max >= 0 && len(names) > max {
		names = names[:max]
	}
	return names, nil
}
