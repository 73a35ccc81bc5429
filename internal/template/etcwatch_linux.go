package template

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// etcWatch watches a directory tree with inotify and calls changed on any
// change in it. Directories created later are watched as they appear;
// etcDenied ones are not watched at all.
type etcWatch struct {
	f       *os.File
	root    string
	changed func()
	log     *slog.Logger

	mu    sync.Mutex
	dirs  map[int32]string // watch descriptor → directory
	done  chan struct{}
	limit bool // the watch limit was hit (logged once)
}

// maxEtcWatches bounds the directories watched (inotify watches are a
// per-user kernel resource).
const maxEtcWatches = 4096

const etcWatchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MODIFY | unix.IN_ATTRIB |
	unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

// watchEtc starts watching root.
func watchEtc(root string, changed func(), log *slog.Logger) (*etcWatch, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w: %w", err, errdefs.ErrUnavailable)
	}
	// Non-blocking, so reads wait in the runtime's poller, not a thread,
	// and Close ends a read in progress.
	w := &etcWatch{f: os.NewFile(uintptr(fd), "inotify"), root: root, changed: changed, log: log,
		dirs: map[int32]string{}, done: make(chan struct{})}
	if err := w.addTree(root); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.loop()
	return w, nil
}

// addTree watches dir and every directory below it that etcDenied allows.
func (w *etcWatch) addTree(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == dir && !errors.Is(err, fs.ErrPermission) {
				return err
			}
			return skipEntry(d)
		}
		if !d.IsDir() {
			return nil
		}
		if rel, rerr := filepath.Rel(w.root, p); rerr == nil && rel != "." && etcDenied(filepath.ToSlash(rel)) {
			return fs.SkipDir
		}
		return w.add(p)
	})
}

func (w *etcWatch) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.dirs) >= maxEtcWatches {
		if !w.limit {
			w.limit = true
			w.log.Warn("the host's /etc has too many directories to watch all; the rest is fingerprinted periodically", "max", maxEtcWatches)
		}
		return fs.SkipDir
	}
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir, etcWatchMask)
	switch {
	case err == nil:
		w.dirs[int32(wd)] = dir
		return nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EACCES):
		return nil // gone or replaced meanwhile: the change itself was seen
	}
	return fmt.Errorf("inotify watch %s: %w: %w", dir, err, errdefs.ErrUnavailable)
}

// loop reads events until the watch is closed.
func (w *etcWatch) loop() {
	defer close(w.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			return // closed
		}
		w.changed()
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			nameLen := int(ev.Len)
			name := ""
			if nameLen > 0 && off+unix.SizeofInotifyEvent+nameLen <= n {
				b := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+nameLen]
				for i, c := range b {
					if c == 0 {
						b = b[:i]
						break
					}
				}
				name = string(b)
			}
			off += unix.SizeofInotifyEvent + nameLen
			if ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && name != "" {
				w.mu.Lock()
				parent, ok := w.dirs[ev.Wd]
				w.mu.Unlock()
				if ok {
					if err := w.addTree(filepath.Join(parent, name)); err != nil {
						w.log.Warn("cannot watch a new directory of the host's /etc", "err", err)
					}
				}
			}
			if ev.Mask&unix.IN_IGNORED != 0 {
				w.mu.Lock()
				delete(w.dirs, ev.Wd)
				w.mu.Unlock()
			}
		}
	}
}

// close stops the watch and waits for its loop to end.
func (w *etcWatch) close() error {
	err := w.f.Close()
	<-w.done
	return err
}
