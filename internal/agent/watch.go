//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Watch is built on inotify directly rather than on fsnotify: fsnotify
// takes a path and resolves it again when adding a watch, following
// symlinks, which reopens the window between resolving a path inside Root
// and watching it. Here each directory is first resolved with openat2
// (pathres.go) and the watch is added through that fd's /proc magic link,
// so inotify watches exactly the inode that was resolved inside Root.
// Directories are resolved and watched as the request's user
// (files_creds.go), those that appear later too: inotify checks read
// permission when a watch is added, and a directory the user cannot read
// is not watched.

// fsWatchMask is what the agent asks inotify for.
const fsWatchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_MOVE_SELF | unix.IN_ATTRIB |
	unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK

// fsWatcher is the inotify instance of one Watch stream. Its maps are
// owned by the goroutine that runs it (or by newWatcher before that).
type fsWatcher struct {
	res       *fsResolver
	as        func(func() error) error // runs a function as the request's user
	file      *os.File                 // the inotify fd; closing it ends run
	recursive bool
	max       int
	dirs      map[int32]string // watch descriptor -> sandbox dir path
	top       int32            // descriptor of the watched directory
	closeOnce sync.Once
}

// fsWatchItem is what run hands the stream: changes, or the error that
// ends it.
type fsWatchItem struct {
	changes []*agentv1.WatchResponse_Change
	err     error
}

// newWatcher watches the clean directory p (following a symlink at p
// itself), and with recursive every directory under it, as a.
func (s *fileService) newWatcher(a fsActor, p string, recursive bool) (*fsWatcher, error) {
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fsErr("watch", p, err)
	}
	w := &fsWatcher{
		res:       s.res,
		as:        func(fn func() error) error { return s.as(a, fn) },
		file:      os.NewFile(uintptr(ifd), "inotify"),
		recursive: recursive,
		max:       s.maxWatches,
		dirs:      make(map[int32]string),
	}
	err = w.as(func() error {
		fd, err := s.res.open(p, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		w.top, err = w.addTree(fd, p)
		return err
	})
	if err != nil {
		w.close()
		return nil, fsErr("watch", p, err)
	}
	return w, nil
}

// close ends run. It is safe to call more than once.
func (w *fsWatcher) close() {
	w.closeOnce.Do(func() { _ = w.file.Close() })
}

// addTree watches the directory fd (at sandbox path p) and, when
// recursive, the directories under it, opened O_NOFOLLOW relative to their
// parent so symlinked directories are not entered.
func (w *fsWatcher) addTree(fd int, p string) (int32, error) {
	if len(w.dirs) >= w.max {
		return 0, fmt.Errorf("watch %s: more than %d directories: %w", p, w.max, errdefs.ErrResourceExhausted)
	}
	rc, err := w.file.SyscallConn()
	if err != nil {
		return 0, err
	}
	var wd int
	var addErr error
	if err := rc.Control(func(ifd uintptr) {
		wd, addErr = unix.InotifyAddWatch(int(ifd), fsProcFD(fd), fsWatchMask)
	}); err != nil {
		return 0, err
	}
	if addErr == unix.ENOSPC {
		return 0, fmt.Errorf("watch %s: the inotify watch limit is reached: %w", p, errdefs.ErrResourceExhausted)
	}
	if addErr != nil {
		return 0, addErr
	}
	w.dirs[int32(wd)] = p
	if !w.recursive {
		return int32(wd), nil
	}
	names, err := fsReadNames(fd, -1)
	if err != nil {
		return 0, err
	}
	for _, name := range names {
		sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch err {
		case nil:
		case unix.ENOTDIR, unix.ELOOP, unix.ENOENT, unix.EACCES:
			continue // not a directory, a symlink, or gone
		default:
			return 0, err
		}
		_, err = w.addTree(sub, path.Join(p, name))
		unix.Close(sub)
		if err != nil {
			return 0, err
		}
	}
	return int32(wd), nil
}

// addNew watches a directory that appeared at the clean path p, as the
// request's user.
func (w *fsWatcher) addNew(p string) error {
	err := w.as(func() error {
		fd, err := w.res.open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err != nil {
			return nil // gone again, not a directory any more, or not the user's to read
		}
		defer unix.Close(fd)
		_, err = w.addTree(fd, p)
		return err
	})
	// Too many directories, or the user's credentials could not be taken
	// (an ErrInternal the agent made, unlike a bare errno).
	if errdefs.Class(err) == errdefs.ErrResourceExhausted || errors.Is(err, errdefs.ErrInternal) {
		return err
	}
	return nil // raced with a removal
}

// forget drops the watches of the directory p and everything under it
// (it was moved away; run re-adds it under its new name if that is inside
// the watched tree).
func (w *fsWatcher) forget(p string) {
	rc, err := w.file.SyscallConn()
	if err != nil {
		return
	}
	for wd, dir := range w.dirs {
		if wd != w.top && (dir == p || strings.HasPrefix(dir, p+"/")) {
			delete(w.dirs, wd)
			_ = rc.Control(func(ifd uintptr) { _, _ = unix.InotifyRmWatch(int(ifd), uint32(wd)) })
		}
	}
}

// run reads events until the watcher is closed, the watched directory
// goes away, or an error occurs, handing them to out. It closes out when
// it returns.
func (w *fsWatcher) run(out chan<- fsWatchItem, stop <-chan struct{}) {
	defer close(out)
	send := func(it fsWatchItem) bool {
		select {
		case out <- it:
			return true
		case <-stop:
			return false
		}
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := w.file.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				send(fsWatchItem{err: fmt.Errorf("watch: read events: %w", errdefs.ErrInternal)})
			}
			return
		}
		changes, end, err := w.parse(buf[:n])
		if len(changes) > 0 && !send(fsWatchItem{changes: changes}) {
			return
		}
		if err != nil {
			send(fsWatchItem{err: err})
			return
		}
		if end {
			return
		}
	}
}

// parse turns a buffer of inotify events into changes. end reports that
// the watched directory itself is gone.
func (w *fsWatcher) parse(buf []byte) (changes []*agentv1.WatchResponse_Change, end bool, err error) {
	for len(buf) >= unix.SizeofInotifyEvent {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[0]))
		size := unix.SizeofInotifyEvent + int(ev.Len)
		if size > len(buf) {
			break
		}
		name := string(bytes.TrimRight(buf[unix.SizeofInotifyEvent:size], "\x00"))
		buf = buf[size:]
		mask := ev.Mask
		if mask&unix.IN_Q_OVERFLOW != 0 {
			return changes, false, fmt.Errorf("watch: too many changes, events were lost: %w", errdefs.ErrResourceExhausted)
		}
		dir, ok := w.dirs[ev.Wd]
		if !ok {
			continue
		}
		if mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, ev.Wd)
			if ev.Wd == w.top {
				return changes, true, nil
			}
			continue
		}
		if name == "" && ev.Wd != w.top {
			continue // a subdirectory's own event; its parent reports it
		}
		p := dir
		if name != "" {
			p = path.Join(dir, name)
		}
		if mask&unix.IN_ISDIR != 0 && w.recursive && name != "" {
			switch {
			case mask&unix.IN_MOVED_FROM != 0:
				w.forget(p)
			case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
				if err := w.addNew(p); err != nil {
					return changes, false, err
				}
			}
		}
		if op := fsWatchOp(mask); op != agentv1.WatchOp_WATCH_OP_UNSPECIFIED {
			changes = append(changes, &agentv1.WatchResponse_Change{Path: p, Op: op})
		}
	}
	return changes, false, nil
}

// fsWatchOp maps an inotify mask onto a WatchOp the way fsnotify does: a
// file moved in is a create, a file moved away a rename.
func fsWatchOp(mask uint32) agentv1.WatchOp {
	switch {
	case mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0:
		return agentv1.WatchOp_WATCH_OP_CREATE
	case mask&(unix.IN_DELETE|unix.IN_DELETE_SELF) != 0:
		return agentv1.WatchOp_WATCH_OP_REMOVE
	case mask&(unix.IN_MOVED_FROM|unix.IN_MOVE_SELF) != 0:
		return agentv1.WatchOp_WATCH_OP_RENAME
	case mask&unix.IN_MODIFY != 0:
		return agentv1.WatchOp_WATCH_OP_WRITE
	case mask&unix.IN_ATTRIB != 0:
		return agentv1.WatchOp_WATCH_OP_CHMOD
	}
	return agentv1.WatchOp_WATCH_OP_UNSPECIFIED
}

// Watch streams changes under a directory: first Started, then changes
// with absolute sandbox paths, and Keepalive after a quiet interval. It
// ends when the caller goes away, the directory is removed, or the agent
// closes.
func (s *fileService) Watch(ctx context.Context, req *connect.Request[agentv1.WatchRequest], stream *connect.ServerStream[agentv1.WatchResponse]) error {
	a, p, err := s.request(req.Msg.GetPath(), req.Msg.GetUser())
	if err != nil {
		return agentwire.ToConnect(err)
	}
	w, err := s.newWatcher(a, p, req.Msg.GetRecursive())
	if err != nil {
		return agentwire.ToConnect(err)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		w.close()
		return agentwire.ToConnect(errFSClosed)
	}
	s.watches[w] = struct{}{}
	s.mu.Unlock()

	items := make(chan fsWatchItem, 16)
	stop := make(chan struct{})
	go w.run(items, stop)
	defer func() {
		close(stop)
		w.close()
		for range items { // wait for run to return
		}
		s.mu.Lock()
		delete(s.watches, w)
		s.mu.Unlock()
	}()

	started := &agentv1.WatchResponse{Event: &agentv1.WatchResponse_Started_{Started: &agentv1.WatchResponse_Started{}}}
	if err := stream.Send(started); err != nil {
		return err
	}
	keepalive := time.NewTimer(s.keepalive)
	defer keepalive.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-keepalive.C:
			ka := &agentv1.WatchResponse{Event: &agentv1.WatchResponse_Keepalive_{Keepalive: &agentv1.WatchResponse_Keepalive{}}}
			if err := stream.Send(ka); err != nil {
				return err
			}
		case it, ok := <-items:
			if !ok {
				return nil
			}
			if it.err != nil {
				return agentwire.ToConnect(it.err)
			}
			for _, c := range it.changes {
				if err := stream.Send(&agentv1.WatchResponse{Event: &agentv1.WatchResponse_Change_{Change: c}}); err != nil {
					return err
				}
			}
		}
		keepalive.Reset(s.keepalive)
	}
}
