package linux

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Template layers hold files owned by the ids the sandbox should see
// (0..65535: an unpacked image keeps its own owners). Each sandbox's root
// maps to a different host range, so the layers cannot be owned by any one
// of them; instead the daemon gives the agent an id-mapped, read-only,
// detached mount of every layer, made with the agent's own user namespace
// as the mapping: a file owned by 1000 on disk is owned by uid 1000 inside
// the sandbox, whatever host range the sandbox has.
//
// Only the daemon can make them (the kernel wants CAP_SYS_ADMIN over the
// filesystem, which lives in the initial user namespace), and only the
// agent can use them: overlayfs refuses a detached mount from another
// owner, so the agent first attaches each one in its own mount namespace
// (move_mount), then stacks them.

// idmapLayers returns a detached, read-only mount of each layer, id-mapped
// through the user namespace of process pid. ok is false, with no error,
// when the filesystem holding the layers cannot be id-mapped (the kernel
// answers EINVAL or EOPNOTSUPP): the caller then uses the layers as they
// are, and their files keep the overflow owner inside the sandbox. The
// caller closes the files.
func idmapLayers(pid int, layers []string) (files []*os.File, ok bool, err error) {
	if len(layers) == 0 {
		return nil, true, nil
	}
	ns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, false, fmt.Errorf("user namespace of the agent: %w", err)
	}
	defer unix.Close(ns)
	closeAll := func() {
		for _, f := range files {
			f.Close()
		}
	}
	for i, l := range layers {
		fd, err := unix.OpenTree(unix.AT_FDCWD, l, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			closeAll()
			return nil, false, fmt.Errorf("layer %d: open_tree: %w", i, err)
		}
		attr := unix.MountAttr{
			Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
			Userns_fd: uint64(ns),
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			unix.Close(fd)
			closeAll()
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EOPNOTSUPP) {
				return nil, false, nil
			}
			return nil, false, fmt.Errorf("layer %d: id-map: %w", i, err)
		}
		files = append(files, os.NewFile(uintptr(fd), "layer"))
	}
	return files, true, nil
}

// CanIDMap reports whether dir's filesystem can be id-mapped through the
// user namespace of process pid, as the daemon id-maps template layers at
// every create: false, with no error, where the kernel refuses (sandboxes
// then use their layers as they are). The mount it makes is detached and
// released before it returns. Host checks call it.
func CanIDMap(pid int, dir string) (bool, error) {
	files, ok, err := idmapLayers(pid, []string{dir})
	for _, f := range files {
		f.Close()
	}
	return ok, err
}

// sendConfig writes b to the socket f and closes its write side; the
// files ride along with the first bytes (SCM_RIGHTS).
func sendConfig(f *os.File, b []byte, files []*os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	fds := make([]int, len(files))
	for i, lf := range files {
		fds[i] = int(lf.Fd())
	}
	var serr error
	cerr := rc.Write(func(fd uintptr) bool {
		for len(b) > 0 {
			var oob []byte
			if fds != nil {
				oob = unix.UnixRights(fds...)
			}
			n, err := unix.SendmsgN(int(fd), b, oob, nil, 0)
			if err == unix.EINTR {
				continue
			}
			if err == unix.EAGAIN {
				return false // wait until writable
			}
			if err != nil {
				serr = err
				return true
			}
			fds = nil // sent with the first chunk
			b = b[n:]
		}
		serr = unix.Shutdown(int(fd), unix.SHUT_WR)
		return true
	})
	return errors.Join(cerr, serr)
}

// readConfigFD reads fd to its end, at most max bytes, and collects the
// descriptors passed along (close-on-exec). fd may be a socket (the setup
// stage's channel from the daemon) or a plain file (the serve stage's
// memfd).
func readConfigFD(fd, max int) (b []byte, fds []int, err error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*runtime.MaxLayers))
	sock := true
	defer func() {
		if err != nil {
			for _, f := range fds {
				unix.Close(f)
			}
			fds = nil
		}
	}()
	for {
		var n, oobn int
		var rerr error
		if sock {
			n, oobn, _, _, rerr = unix.Recvmsg(fd, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if rerr == unix.ENOTSOCK {
				sock = false
				continue
			}
		} else {
			n, rerr = unix.Read(fd, buf)
		}
		if rerr == unix.EINTR {
			continue
		}
		if rerr != nil {
			return nil, fds, rerr
		}
		if oobn > 0 {
			msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
			if err != nil {
				return nil, fds, err
			}
			for _, m := range msgs {
				got, err := unix.ParseUnixRights(&m)
				if err != nil {
					return nil, fds, err
				}
				fds = append(fds, got...)
			}
		}
		if n == 0 {
			return b, fds, nil
		}
		if len(b)+n > max {
			return nil, fds, fmt.Errorf("longer than %d bytes", max)
		}
		b = append(b, buf[:n]...)
	}
}

// socketPair returns the two ends of a unix stream socket: the first for
// the child, the second for the daemon; both close-on-exec.
func socketPair() (child, parent *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "config"), os.NewFile(uintptr(fds[1]), "config"), nil
}
