//go:build linux

package agent

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The file service: reads and writes the sandbox filesystem for the daemon.
//
// Every path resolves inside Options.Root (see pathres.go). Each request
// acts with the permissions of the user it names, "" being the sandbox's
// default user (see files_creds.go): the kernel checks its lookups and
// changes as that user's, what it creates belongs to that user, and
// relative paths start at that user's home.
//
// Errors name the sandbox path and map errno onto classes as documented
// on fsErrnoClass.

const (
	// fsMaxListEntries caps one ListDir response.
	fsMaxListEntries = 10000
	// fsMaxListDepth caps ListDir's depth (each level holds a dir fd).
	fsMaxListDepth = 256
	// fsMaxRemoveDepth caps the nesting a recursive Remove descends into.
	fsMaxRemoveDepth = 1024
	// fsChunkSize is the data size of one Read or Write message.
	fsChunkSize = 256 << 10
	// fsDefaultFileMode and fsDefaultDirMode apply when a request gives 0.
	fsDefaultFileMode = 0o644
	fsDefaultDirMode  = 0o755
	// fsModeMask is what Chmod and the mode fields accept.
	fsModeMask = 0o7777
	// fsKeepalive is how long a Watch stream may stay silent.
	fsKeepalive = 15 * time.Second
	// fsMaxWatches caps the directories one Watch observes.
	fsMaxWatches = 1000
	// fsMemoryReserve is the memory a file write leaves free below the
	// sandbox's memory cap (see MemoryRoomer), for the agent's own work
	// and whatever sandboxed code allocates meanwhile: at the cap itself
	// the kernel would OOM-kill a process of the sandbox, maybe the
	// agent.
	fsMemoryReserve = 64 << 20
)

var _ agentv1connect.FileServiceHandler = (*fileService)(nil)

// fileService implements agentv1connect.FileServiceHandler.
type fileService struct {
	res         *fsResolver
	users       map[string]User
	defaultUser string
	switchUser  bool
	keepalive   time.Duration
	maxWatches  int
	maxList     int
	changes     *os.File     // writable layer for ExportChanges; nil without one
	memRoom     MemoryRoomer // the sandbox's memory headroom; nil when unknown
	rootCaps    capMask      // the capabilities root's requests keep
	log         *slog.Logger

	mu      sync.Mutex
	watches map[*fsWatcher]struct{} // active Watch streams
	closed  bool
}

// newFileService opens Options.Root for resolution.
func newFileService(a *Agent) (*fileService, error) {
	res, err := newFSResolver(a.opts.Root)
	if err != nil {
		return nil, err
	}
	memRoom, _ := a.opts.Cgroups.(MemoryRoomer)
	return &fileService{
		memRoom:     memRoom,
		res:         res,
		users:       a.opts.Users,
		defaultUser: a.opts.DefaultUser,
		switchUser:  a.opts.SwitchUser,
		keepalive:   fsKeepalive,
		maxWatches:  fsMaxWatches,
		maxList:     fsMaxListEntries,
		changes:     a.opts.Changes,
		rootCaps:    boundingCaps(),
		log:         a.log,
		watches:     make(map[*fsWatcher]struct{}),
	}, nil
}

// close ends every Watch stream and releases the root fd. Later requests
// fail with Unavailable.
func (s *fileService) close() error {
	s.mu.Lock()
	s.closed = true
	for w := range s.watches {
		w.close()
	}
	s.mu.Unlock()
	if s.changes != nil {
		s.changes.Close()
	}
	return s.res.close()
}

// user returns the account a request names ("" is the default user).
func (s *fileService) user(name string) (User, error) {
	if name == "" {
		name = s.defaultUser
	}
	u, ok := s.users[name]
	if !ok {
		return User{}, fmt.Errorf("unknown user %q: %w", name, errdefs.ErrInvalidArgument)
	}
	return u, nil
}

// request returns who a request acts as and its path, validated and
// clean; a relative path starts at that user's home.
func (s *fileService) request(p, userName string) (fsActor, string, error) {
	a, err := s.actor(userName)
	if err != nil {
		return fsActor{}, "", err
	}
	p, err = fsCleanPath(p, a.user.Home)
	return a, p, err
}

// fsEntry describes a file from its stat.
func fsEntry(p string, st *unix.Stat_t, target string) *agentv1.EntryInfo {
	e := &agentv1.EntryInfo{
		Name:             path.Base(p),
		Path:             p,
		Size:             st.Size,
		Mode:             st.Mode & fsModeMask,
		Uid:              st.Uid,
		Gid:              st.Gid,
		ModifiedUnixNano: st.Mtim.Nano(),
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.Type = agentv1.FileType_FILE_TYPE_FILE
	case unix.S_IFDIR:
		e.Type = agentv1.FileType_FILE_TYPE_DIRECTORY
	case unix.S_IFLNK:
		e.Type = agentv1.FileType_FILE_TYPE_SYMLINK
		e.SymlinkTarget = target
	default:
		e.Type = agentv1.FileType_FILE_TYPE_OTHER
	}
	return e
}

// fsReadlinkAt reads the target of the symlink name in dirfd. It refuses
// (ELOOP) procfs's magic links (/proc/<pid>/{fd/*,cwd,root,exe}, ...):
// read by the agent they would name host paths, pipes and namespaces,
// which are nothing to follow and nobody's to know; only the plain
// symlinks at the top of procfs are read.
func fsReadlinkAt(dirfd int, name string) (string, error) {
	var sfs unix.Statfs_t
	if err := unix.Fstatfs(dirfd, &sfs); err != nil {
		return "", err
	}
	if sfs.Type == unix.PROC_SUPER_MAGIC && !procPlainLinks[name] {
		return "", unix.ELOOP
	}
	buf := make([]byte, 256)
	for {
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < len(buf) {
			return string(buf[:n]), nil
		}
		if len(buf) > 2*fsMaxPathLen {
			return "", unix.ENAMETOOLONG
		}
		buf = make([]byte, 2*len(buf))
	}
}

// procPlainLinks are the symlinks at the top of procfs, which name only
// other procfs paths.
var procPlainLinks = map[string]bool{"self": true, "thread-self": true, "mounts": true, "net": true}

// lstatAt describes name in dirfd without following a symlink; p is its
// sandbox path.
func fsLstatAt(dirfd int, name, p string) (*agentv1.EntryInfo, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, err
	}
	target := ""
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		t, err := fsReadlinkAt(dirfd, name)
		// EINVAL: replaced meanwhile; ELOOP: a magic link, listed
		// without its target.
		if err != nil && err != unix.EINVAL && err != unix.ELOOP {
			return nil, err
		}
		target = t
	}
	return fsEntry(p, &st, target), nil
}

// lstat describes the clean sandbox path p (lstat semantics).
func (s *fileService) lstat(p string) (*agentv1.EntryInfo, error) {
	if p == "/" {
		fd, err := s.res.open("/", unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return nil, err
		}
		e := fsEntry(p, &st, "")
		e.Name = "/"
		return e, nil
	}
	pfd, name, err := s.res.openParent(p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(pfd)
	return fsLstatAt(pfd, name, p)
}

// Stat describes a path without following a final symlink.
func (s *fileService) Stat(ctx context.Context, req *connect.Request[agentv1.StatRequest]) (*connect.Response[agentv1.StatResponse], error) {
	a, p, err := s.request(req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	var e *agentv1.EntryInfo
	err = s.as(a, func() (err error) {
		e, err = s.lstat(p)
		return err
	})
	if err != nil {
		return nil, agentwire.ToConnect(fsErr("stat", p, err))
	}
	return connect.NewResponse(&agentv1.StatResponse{Entry: e}), nil
}

// ListDir lists a directory (following a symlink at the path itself) to
// the requested depth, never descending into symlinked directories.
func (s *fileService) ListDir(ctx context.Context, req *connect.Request[agentv1.ListDirRequest]) (*connect.Response[agentv1.ListDirResponse], error) {
	a, p, err := s.request(req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > fsMaxListDepth {
		return nil, agentwire.ToConnect(fmt.Errorf("depth %d is more than %d: %w", depth, fsMaxListDepth, errdefs.ErrInvalidArgument))
	}
	l := fsLister{ctx: ctx, max: s.maxList}
	err = s.as(a, func() error {
		fd, err := s.res.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return fsErr("list", p, err)
		}
		defer unix.Close(fd)
		return l.walk(fd, p, depth)
	})
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.ListDirResponse{Entries: l.entries, Truncated: l.truncated}), nil
}

// fsLister collects a depth-first listing, parents before children, each
// directory's entries sorted by name.
type fsLister struct {
	ctx       context.Context
	max       int
	entries   []*agentv1.EntryInfo
	truncated bool
}

func (l *fsLister) walk(dirfd int, dir string, depth int) error {
	if err := l.ctx.Err(); err != nil {
		return fmt.Errorf("list %s: %w", dir, errdefs.ErrCanceled)
	}
	// One name more than fits tells whether the listing is truncated.
	names, err := fsReadNames(dirfd, l.max-len(l.entries)+1)
	if err != nil {
		return fsErr("list", dir, err)
	}
	sort.Strings(names)
	for _, name := range names {
		if len(l.entries) >= l.max {
			l.truncated = true
			return nil
		}
		p := path.Join(dir, name)
		e, err := fsLstatAt(dirfd, name, p)
		if err == unix.ENOENT {
			continue // removed since the directory was read
		}
		if err != nil {
			return fsErr("list", p, err)
		}
		l.entries = append(l.entries, e)
		if depth <= 1 || e.Type != agentv1.FileType_FILE_TYPE_DIRECTORY {
			continue
		}
		// O_NOFOLLOW: a directory swapped for a symlink since the stat is
		// not followed (ELOOP or ENOTDIR) and simply not descended into;
		// nor is one the user may not read (it is listed, its entries
		// are not).
		sub, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
		case unix.ENOENT, unix.ELOOP, unix.ENOTDIR, unix.EACCES, unix.EPERM:
			continue
		default:
			return fsErr("list", p, err)
		}
		err = l.walk(sub, p, depth-1)
		unix.Close(sub)
		if err != nil || l.truncated {
			return err
		}
	}
	return nil
}

// MakeDir creates a directory; with parents, missing parents too and an
// existing directory is not an error.
func (s *fileService) MakeDir(ctx context.Context, req *connect.Request[agentv1.MakeDirRequest]) (*connect.Response[agentv1.MakeDirResponse], error) {
	m := req.Msg
	a, p, err := s.request(m.GetPath(), m.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	mode := m.GetMode()
	if mode&^fsModeMask != 0 {
		return nil, agentwire.ToConnect(fsInvalid("mkdir", p, fmt.Sprintf("mode %#o has bits outside 07777", mode)))
	}
	if mode == 0 {
		mode = fsDefaultDirMode
	}
	var e *agentv1.EntryInfo
	err = s.as(a, func() error {
		if err := s.makeDir(p, mode, m.GetParents()); err != nil {
			return err
		}
		var err error
		e, err = s.lstat(p)
		return fsErr("mkdir", p, err)
	})
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.MakeDirResponse{Entry: e}), nil
}

// makeDir creates the directory p with mode; with parents, missing
// parents too, and an existing directory is not an error.
func (s *fileService) makeDir(p string, mode uint32, parents bool) error {
	if parents {
		fd, err := s.mkdirAll(p, mode)
		if err != nil {
			return err
		}
		return unix.Close(fd)
	}
	if p == "/" {
		return fsErr("mkdir", p, unix.EEXIST)
	}
	pfd, name, err := s.res.openParent(p)
	if err != nil {
		return fsErr("mkdir", p, err)
	}
	defer unix.Close(pfd)
	return fsErr("mkdir", p, mkdirAt(pfd, name, mode))
}

// mkdirAt creates the directory name in dirfd with exactly mode. It
// belongs to the thread's filesystem ids: the request's user.
func mkdirAt(dirfd int, name string, mode uint32) error {
	if err := unix.Mkdirat(dirfd, name, 0o700); err != nil {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, mode) // not subject to umask
}

// mkdirAll makes sure the clean path p is a directory, creating missing
// components (the last with mode, the others 0755), and returns an O_PATH
// fd of it. Every component is resolved from Root, so symlinks on the way
// resolve inside Root.
func (s *fileService) mkdirAll(p string, mode uint32) (int, error) {
	fd, err := s.res.open(p, unix.O_PATH|unix.O_DIRECTORY)
	if err == nil {
		return fd, nil
	}
	if err != unix.ENOENT {
		return -1, fsErr("mkdir", p, err)
	}
	cur, err := s.res.open("/", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, fsErr("mkdir", "/", err)
	}
	dir := "/"
	comps := strings.Split(strings.TrimPrefix(p, "/"), "/")
	for i, c := range comps {
		next := path.Join(dir, c)
		fd, err := s.res.open(next, unix.O_PATH|unix.O_DIRECTORY)
		if err == unix.ENOENT {
			m := uint32(fsDefaultDirMode)
			if i == len(comps)-1 {
				m = mode
			}
			if err = mkdirAt(cur, c, m); err == nil || err == unix.EEXIST {
				fd, err = s.res.open(next, unix.O_PATH|unix.O_DIRECTORY)
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, fsErr("mkdir", next, err)
		}
		cur, dir = fd, next
	}
	return cur, nil
}

// Move renames a file or directory. Both paths resolve inside Root; an
// existing destination file is replaced as by rename(2).
func (s *fileService) Move(ctx context.Context, req *connect.Request[agentv1.MoveRequest]) (*connect.Response[agentv1.MoveResponse], error) {
	a, src, err := s.request(req.Msg.GetSource(), req.Msg.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	dst, err := fsCleanPath(req.Msg.GetDestination(), a.user.Home)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if src == "/" || dst == "/" {
		return nil, agentwire.ToConnect(fsInvalid("move", "/", "cannot move the root directory"))
	}
	var e *agentv1.EntryInfo
	err = s.as(a, func() (err error) {
		e, err = s.move(src, dst)
		return err
	})
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.MoveResponse{Entry: e}), nil
}

// move renames the clean path src to dst and describes dst.
func (s *fileService) move(src, dst string) (*agentv1.EntryInfo, error) {
	sfd, sname, err := s.res.openParent(src)
	if err != nil {
		return nil, fsErr("move", src, err)
	}
	defer unix.Close(sfd)
	dfd, dname, err := s.res.openParent(dst)
	if err != nil {
		return nil, fsErr("move", dst, err)
	}
	defer unix.Close(dfd)
	if err := unix.Renameat2(sfd, sname, dfd, dname, 0); err != nil {
		p := src
		if err == unix.EISDIR || err == unix.ENOTEMPTY || err == unix.EEXIST {
			p = dst
		}
		return nil, fsErr("move", p, err)
	}
	e, err := fsLstatAt(dfd, dname, dst)
	return e, fsErr("move", dst, err)
}

// Remove deletes a file, symlink (not its target) or, with recursive, a
// directory tree. Removing "/" is refused.
func (s *fileService) Remove(ctx context.Context, req *connect.Request[agentv1.RemoveRequest]) (*connect.Response[agentv1.RemoveResponse], error) {
	a, p, err := s.request(req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if p == "/" {
		return nil, agentwire.ToConnect(fsInvalid("remove", p, "refusing to remove the root directory"))
	}
	err = s.as(a, func() error { return s.remove(ctx, p, req.Msg.GetRecursive()) })
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.RemoveResponse{}), nil
}

// remove deletes the clean path p (not "/").
func (s *fileService) remove(ctx context.Context, p string, recursive bool) error {
	pfd, name, err := s.res.openParent(p)
	if err != nil {
		return fsErr("remove", p, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fsErr("remove", p, err)
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		err = unix.Unlinkat(pfd, name, 0)
	case !recursive:
		err = unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR)
		if err == unix.ENOTEMPTY || err == unix.EEXIST {
			return &fsError{op: "remove", path: p,
				err: fmt.Errorf("directory not empty (remove it recursively)"), class: errdefs.ErrFailedPrecondition}
		}
	default:
		err = fsRemoveTree(ctx, pfd, name, 0)
	}
	return fsErr("remove", p, err)
}

// fsRemoveTree removes name in dirfd and, if it is a directory, everything
// under it. It walks with directory fds opened O_NOFOLLOW and unlinkat, so
// a symlink anywhere in the tree is removed, never followed, even if it
// replaces a directory mid-walk.
func fsRemoveTree(ctx context.Context, dirfd int, name string, depth int) error {
	for range 8 { // retries when the tree changes under the walk
		err := unix.Unlinkat(dirfd, name, 0)
		if err == nil || err == unix.ENOENT {
			return nil
		}
		if err != unix.EISDIR {
			return err
		}
		if depth >= fsMaxRemoveDepth {
			return unix.ENAMETOOLONG
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("remove: %w", errdefs.ErrCanceled)
		}
		fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
		case unix.ENOENT:
			return nil
		case unix.ELOOP, unix.ENOTDIR:
			continue // swapped for a symlink or file: unlink it
		default:
			return err
		}
		err = fsEmptyDir(ctx, fd, depth+1)
		unix.Close(fd)
		if err != nil {
			return err
		}
		err = unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
		switch err {
		case nil, unix.ENOENT:
			return nil
		case unix.ENOTEMPTY, unix.EEXIST, unix.ENOTDIR:
			continue // something was created meanwhile
		default:
			return err
		}
	}
	return unix.EBUSY
}

// fsEmptyDir removes everything in the directory fd.
func fsEmptyDir(ctx context.Context, fd int, depth int) error {
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("remove: %w", errdefs.ErrCanceled)
		}
		if _, err := unix.Seek(fd, 0, 0); err != nil {
			return err
		}
		names, err := fsReadNames(fd, 1024)
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return nil
		}
		for _, n := range names {
			if err := fsRemoveTree(ctx, fd, n, depth); err != nil {
				return err
			}
		}
	}
}

// Chmod sets the permission bits (07777) of a file or directory. Symlinks
// are refused rather than followed.
func (s *fileService) Chmod(ctx context.Context, req *connect.Request[agentv1.ChmodRequest]) (*connect.Response[agentv1.ChmodResponse], error) {
	a, p, err := s.request(req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	mode := req.Msg.GetMode()
	if mode&^fsModeMask != 0 {
		return nil, agentwire.ToConnect(fsInvalid("chmod", p, fmt.Sprintf("mode %#o has bits outside 07777", mode)))
	}
	var e *agentv1.EntryInfo
	err = s.as(a, func() (err error) {
		e, err = s.chmod(p, mode)
		return err
	})
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.ChmodResponse{Entry: e}), nil
}

// chmod sets the mode of the clean path p and describes it.
func (s *fileService) chmod(p string, mode uint32) (*agentv1.EntryInfo, error) {
	var fd int
	var err error
	if p == "/" {
		fd, err = s.res.open(p, unix.O_PATH|unix.O_DIRECTORY)
	} else {
		var pfd int
		var name string
		if pfd, name, err = s.res.openParent(p); err == nil {
			fd, err = unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			unix.Close(pfd)
		}
	}
	if err != nil {
		return nil, fsErr("chmod", p, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fsErr("chmod", p, err)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil, fsInvalid("chmod", p, "is a symlink")
	}
	if err := fsChmodFD(fd, mode); err != nil {
		return nil, fsErr("chmod", p, err)
	}
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, fsErr("chmod", p, err)
	}
	e := fsEntry(p, &st, "")
	if p == "/" {
		e.Name = "/"
	}
	return e, nil
}

// fsChmodFD changes the mode of the file an O_PATH fd refers to: with
// fchmodat2(AT_EMPTY_PATH) (Linux 6.6+), else through its /proc magic
// link, which names exactly that inode.
func fsChmodFD(fd int, mode uint32) error {
	err := unix.Fchmodat(fd, "", mode, unix.AT_EMPTY_PATH)
	if err == unix.EOPNOTSUPP || err == unix.ENOSYS {
		err = unix.Chmod(fsProcFD(fd), mode)
	}
	return err
}
