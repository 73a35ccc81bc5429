//go:build linux

package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Read streams a regular file (following symlinks inside Root) in chunks
// of fsChunkSize; the first message carries the entry. Directories, FIFOs,
// devices and sockets are refused.
func (s *fileService) Read(ctx context.Context, req *connect.Request[agentv1.ReadRequest], stream *connect.ServerStream[agentv1.ReadResponse]) error {
	a, p, err := s.request(req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return agentwire.ToConnect(err)
	}
	off, limit := req.Msg.GetOffset(), req.Msg.GetLimit()
	if off < 0 || limit < 0 {
		return agentwire.ToConnect(fsInvalid("read", p, "offset and limit must not be negative"))
	}
	// The open runs as the user; reading the open file needs no more
	// permission checks.
	fd := -1
	var st unix.Stat_t
	err = s.as(a, func() (err error) {
		fd, err = openRegular(s.res, p, &st)
		return err
	})
	if err != nil {
		return agentwire.ToConnect(err)
	}
	defer unix.Close(fd)
	first := &agentv1.ReadResponse{Entry: fsEntry(p, &st, "")}
	buf := make([]byte, fsChunkSize)
	for {
		if err := ctx.Err(); err != nil {
			return agentwire.ToConnect(fmt.Errorf("read %s: %w", p, errdefs.ErrCanceled))
		}
		want := int64(len(buf))
		if limit > 0 && want > limit {
			want = limit
		}
		n := 0
		if want > 0 {
			n, err = unix.Pread(fd, buf[:want], off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return agentwire.ToConnect(fsErr("read", p, err))
			}
		}
		if n == 0 && first == nil {
			return nil
		}
		msg := first
		if msg == nil {
			msg = &agentv1.ReadResponse{}
		}
		first = nil
		msg.Data = buf[:n]
		if err := stream.Send(msg); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		off += int64(n)
		if limit > 0 {
			if limit -= int64(n); limit == 0 {
				return nil
			}
		}
	}
}

// openRegular opens the clean path p for reading, following symlinks
// inside Root, and fills st; anything but a regular file is refused.
func openRegular(res *fsResolver, p string, st *unix.Stat_t) (int, error) {
	// O_NONBLOCK keeps a FIFO from blocking the open; O_NOCTTY keeps a
	// terminal from becoming ours. Both are refused below.
	fd, err := res.open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY)
	if err != nil {
		return -1, fsErr("read", p, err)
	}
	if err := unix.Fstat(fd, st); err != nil {
		unix.Close(fd)
		return -1, fsErr("read", p, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return fd, nil
	case unix.S_IFDIR:
		err = fsErr("read", p, unix.EISDIR)
	default:
		err = fsInvalid("read", p, "not a regular file")
	}
	unix.Close(fd)
	return -1, err
}

// fsWriteHeader is the validated header of a Write stream.
type fsWriteHeader struct {
	path    string // clean sandbox path as requested
	mode    uint32 // 0 means: keep the old file's, or fsDefaultFileMode
	parents bool
	append  bool
}

// Write writes a file from a client stream. Unless appending, it writes a
// temporary file next to the target and renames it over the target once
// the stream ends cleanly, so readers see the old or the new content and a
// failed or cancelled write leaves the old file untouched and no temporary
// file behind. A final-component symlink is followed inside Root; the
// file it finally names must be a regular file or not exist. Everything
// but the copying of data runs as the request's user (files_creds.go):
// the file is opened, created, renamed or removed with that user's
// permissions, and the data goes through the descriptor it opened.
func (s *fileService) Write(ctx context.Context, stream *connect.ClientStream[agentv1.WriteRequest]) (*connect.Response[agentv1.WriteResponse], error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, err
		}
		return nil, agentwire.ToConnect(fmt.Errorf("write: the stream carried no header: %w", errdefs.ErrInvalidArgument))
	}
	m := stream.Msg()
	a, p, err := s.request(m.GetPath(), m.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	h := fsWriteHeader{path: p, mode: m.GetMode(), parents: m.GetMakeParents(), append: m.GetAppend()}
	if h.mode&^fsModeMask != 0 {
		return nil, agentwire.ToConnect(fsInvalid("write", p, fmt.Sprintf("mode %#o has bits outside 07777", h.mode)))
	}
	if p == "/" {
		return nil, agentwire.ToConnect(fsErr("write", p, unix.EISDIR))
	}
	var w *fsWrite
	err = s.as(a, func() (err error) {
		w, err = s.beginWrite(h)
		return err
	})
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	n, err := s.copyStream(ctx, w.fd, m.GetData(), stream, w.t.path)
	var e *agentv1.EntryInfo
	ferr := s.as(a, func() (ferr error) {
		if err != nil {
			w.abort()
			return nil
		}
		e, ferr = w.finish()
		return ferr
	})
	w.release() // in case the credentials could not be taken
	if err == nil {
		err = ferr
	}
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.WriteResponse{Entry: e, BytesWritten: n}), nil
}

// fsWriteTarget is the file a Write goes to once final symlinks are
// followed: name in the directory dirfd (an O_PATH fd), at sandbox path
// path. old is its stat, nil when it does not exist yet.
type fsWriteTarget struct {
	dirfd int
	name  string
	path  string
	old   *unix.Stat_t
}

// writeTarget follows symlinks in the final component of the clean path
// p, each resolved from Root, until it reaches a regular file or a name
// that does not exist. Anything else is refused.
func (s *fileService) writeTarget(p string) (fsWriteTarget, error) {
	for range fsMaxSymlinks {
		if p == "/" {
			return fsWriteTarget{}, fsErr("write", p, unix.EISDIR)
		}
		dirfd, name, err := s.res.openParent(p)
		if err != nil {
			return fsWriteTarget{}, fsErr("write", p, err)
		}
		var st unix.Stat_t
		err = unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == unix.ENOENT {
			return fsWriteTarget{dirfd: dirfd, name: name, path: p}, nil
		}
		if err != nil {
			unix.Close(dirfd)
			return fsWriteTarget{}, fsErr("write", p, err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			return fsWriteTarget{dirfd: dirfd, name: name, path: p, old: &st}, nil
		case unix.S_IFDIR:
			unix.Close(dirfd)
			return fsWriteTarget{}, fsErr("write", p, unix.EISDIR)
		case unix.S_IFLNK:
		default:
			unix.Close(dirfd)
			return fsWriteTarget{}, fsInvalid("write", p, "not a regular file")
		}
		// A symlink: its target is relative to the directory's real
		// location, and resolves from Root again on the next round.
		target, err := fsReadlinkAt(dirfd, name)
		if err == nil && !path.IsAbs(target) {
			var dir string
			if dir, err = s.res.sandboxPath(dirfd); err == nil {
				target = path.Join(dir, target)
			}
		}
		unix.Close(dirfd)
		if err != nil {
			return fsWriteTarget{}, fsErr("write", p, err)
		}
		next, err := fsCleanPath(target, "/")
		if err != nil {
			return fsWriteTarget{}, fsInvalid("write", p, "bad symlink target")
		}
		p = next
	}
	return fsWriteTarget{}, fsErr("write", p, unix.ELOOP)
}

// fsWrite is a Write in progress: the descriptor the data goes to and
// what becomes of it at the end.
type fsWrite struct {
	t    fsWriteTarget
	fd   int    // the temporary file, or the target when appending
	tmp  string // the temporary file's name in t.dirfd; "" when appending
	mode uint32 // the mode the temporary file gets before the rename
}

// beginWrite makes the parents (if asked), finds the target and opens the
// file the data goes to: a new temporary file next to the target, or the
// target itself when appending.
func (s *fileService) beginWrite(h fsWriteHeader) (*fsWrite, error) {
	if h.parents {
		fd, err := s.mkdirAll(path.Dir(h.path), fsDefaultDirMode)
		if err != nil {
			return nil, err
		}
		unix.Close(fd)
	}
	t, err := s.writeTarget(h.path)
	if err != nil {
		return nil, err
	}
	w := &fsWrite{t: t, fd: -1}
	if h.append {
		const flags = unix.O_WRONLY | unix.O_APPEND | unix.O_NOFOLLOW | unix.O_NOCTTY | unix.O_NONBLOCK | unix.O_CLOEXEC
		w.fd, err = openAppend(t, h, flags)
	} else {
		err = w.createTemp(h)
	}
	if err != nil {
		w.abort()
		return nil, err
	}
	return w, nil
}

// createTemp creates the temporary file next to the target. Replacing a
// file needs write permission on it as well as on its directory: a
// request never replaces a file its user could not write. The new file
// keeps the owner and the permission bits (but not setuid/setgid) of the
// file it replaces unless told otherwise; where the user may not give the
// file away (without CAP_CHOWN), it stays the user's, in the old file's
// group if the user is in that group.
func (w *fsWrite) createTemp(h fsWriteHeader) error {
	t := w.t
	if t.old != nil {
		if err := unix.Faccessat2(t.dirfd, t.name, unix.W_OK, unix.AT_EACCESS|unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fsErr("write", t.path, err)
		}
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := ".airlock-write-" + hex.EncodeToString(rnd[:]) + ".tmp"
	fd, err := unix.Openat(t.dirfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fsErr("write", t.path, err)
	}
	w.fd, w.tmp = fd, tmp
	w.mode = h.mode
	if t.old != nil {
		if w.mode == 0 {
			w.mode = t.old.Mode & 0o1777
		}
		var st unix.Stat_t
		err := unix.Fstat(fd, &st)
		if err == nil && (st.Uid != t.old.Uid || st.Gid != t.old.Gid) {
			if err = unix.Fchown(fd, int(t.old.Uid), int(t.old.Gid)); err == unix.EPERM {
				// Not the user's to give away: keep at least the group,
				// if the user is in it.
				if err = unix.Fchown(fd, -1, int(t.old.Gid)); err == unix.EPERM {
					err = nil
				}
			}
		}
		if err != nil {
			w.abort()
			return fsErr("write", t.path, err)
		}
	}
	if w.mode == 0 {
		w.mode = fsDefaultFileMode
	}
	return nil
}

// finish completes the write: the temporary file gets its mode and is
// renamed over the target. It returns the target's entry.
func (w *fsWrite) finish() (*agentv1.EntryInfo, error) {
	t := w.t
	if w.tmp != "" {
		if err := unix.Fchmod(w.fd, w.mode); err != nil {
			w.abort()
			return nil, fsErr("write", t.path, err)
		}
	}
	err := unix.Close(w.fd)
	w.fd = -1
	if err == nil && w.tmp != "" {
		err = unix.Renameat(t.dirfd, w.tmp, t.dirfd, t.name)
	}
	if err != nil {
		w.abort()
		return nil, fsErr("write", t.path, err)
	}
	w.tmp = "" // renamed
	defer w.release()
	e, err := fsLstatAt(t.dirfd, t.name, t.path)
	return e, fsErr("write", t.path, err)
}

// abort removes the temporary file and releases the descriptors. A
// failed append keeps what was written.
func (w *fsWrite) abort() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
	if w.tmp != "" {
		_ = unix.Unlinkat(w.t.dirfd, w.tmp, 0)
		w.tmp = ""
	}
	w.release()
}

// release closes the descriptors the write still holds.
func (w *fsWrite) release() {
	if w.fd >= 0 {
		unix.Close(w.fd)
		w.fd = -1
	}
	if w.t.dirfd >= 0 {
		unix.Close(w.t.dirfd)
		w.t.dirfd = -1
	}
}

// openAppend opens (or creates) the target for appending.
func openAppend(t fsWriteTarget, h fsWriteHeader, flags int) (int, error) {
	if t.old == nil {
		fd, err := unix.Openat(t.dirfd, t.name, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
		if err != nil {
			return -1, fsErr("write", t.path, err)
		}
		mode := h.mode
		if mode == 0 {
			mode = fsDefaultFileMode
		}
		if err := unix.Fchmod(fd, mode); err != nil {
			unix.Close(fd)
			return -1, fsErr("write", t.path, err)
		}
		return fd, nil
	}
	// O_NOFOLLOW fails if the name became a symlink; the fstat refuses
	// anything else that is not a regular file.
	fd, err := unix.Openat(t.dirfd, t.name, flags, 0)
	if err != nil {
		return -1, fsErr("write", t.path, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, fsErr("write", t.path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return -1, fsInvalid("write", t.path, "not a regular file")
	}
	return fd, nil
}

// copyStream writes first and then the data of every further message to
// fd. It fails if the stream ends with an error (a cancelled or broken
// upload), and, before a chunk that would not fit below the sandbox's
// memory cap less fsMemoryReserve, with an error of class
// ErrResourceExhausted: the sandbox's files live in memory, and the
// kernel charges what the agent writes to the agent.
func (s *fileService) copyStream(ctx context.Context, fd int, first []byte, stream *connect.ClientStream[agentv1.WriteRequest], p string) (uint64, error) {
	var total uint64
	data := first
	for {
		if err := s.checkMemory(len(data), p); err != nil {
			return total, err
		}
		for len(data) > 0 {
			n, err := unix.Write(fd, data)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return total, fsErr("write", p, err)
			}
			total += uint64(n)
			data = data[n:]
		}
		if !stream.Receive() {
			break
		}
		data = stream.Msg().GetData()
	}
	if err := stream.Err(); err != nil {
		if ctx.Err() != nil {
			return total, fmt.Errorf("write %s: %w", p, errdefs.ErrCanceled)
		}
		return total, err
	}
	return total, nil
}

// checkMemory fails when n more bytes would not fit below the sandbox's
// memory cap less fsMemoryReserve.
func (s *fileService) checkMemory(n int, p string) error {
	if s.memRoom == nil || n == 0 {
		return nil
	}
	room, known, err := s.memRoom.MemoryRoom()
	if err != nil {
		return &fsError{op: "write", path: p, err: errors.New("cannot read the sandbox's memory use"), class: errdefs.ErrInternal}
	}
	if known && room-fsMemoryReserve < int64(n) {
		return &fsError{op: "write", path: p, err: errors.New("the sandbox's memory limit is reached (its files are held in memory)"), class: errdefs.ErrResourceExhausted}
	}
	return nil
}
