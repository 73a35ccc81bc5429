//go:build linux

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Descriptor-based cgroupfs primitives shared by the daemon and agent sides.
// Everything goes through *at system calls relative to directory
// descriptors, so the same code works with cgroupfs mounted (daemon) or only
// inherited descriptors (agent).

const (
	maxFileBytes = 4 << 20 // largest interface file we read (cgroup.procs of a big tree)
	dirBatch     = 1024    // directory entries read per getdents round
	// defaultWait bounds a wait whose context has no deadline.
	defaultWait = 30 * time.Second
)

// opError is a failed cgroupfs operation. It names the file relative to the
// hierarchy (never a host mount path) and matches both its errno and its
// errdefs class with errors.Is.
type opError struct {
	op, rel string
	errno   unix.Errno
	class   error
}

func (e *opError) Error() string {
	s := "cgroups: " + e.op + " " + e.rel + ": " + e.errno.Error()
	if c := e.class.Error(); c != e.errno.Error() {
		s += " (" + c + ")"
	}
	return s
}

func (e *opError) Unwrap() []error { return []error{e.errno, e.class} }

// sysErr wraps err, an errno from a system call, as an opError.
func sysErr(op, rel string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return fmt.Errorf("cgroups: %s %s: %w: %w", op, rel, err, errdefs.ErrInternal)
	}
	var class error
	switch errno {
	case unix.EACCES, unix.EPERM, unix.EROFS:
		class = errdefs.ErrPermissionDenied
	case unix.ENOENT, unix.ESRCH:
		class = errdefs.ErrNotFound
	case unix.EEXIST:
		class = errdefs.ErrAlreadyExists
	case unix.EBUSY, unix.ENOTEMPTY:
		class = errdefs.ErrFailedPrecondition
	case unix.EINVAL, unix.ERANGE:
		class = errdefs.ErrInvalidArgument
	case unix.EAGAIN, unix.ENOSPC, unix.ENOMEM, unix.EMFILE, unix.ENFILE:
		class = errdefs.ErrResourceExhausted
	case unix.ENOSYS, unix.EOPNOTSUPP:
		class = errdefs.ErrNotSupported
	default:
		class = errdefs.ErrInternal
	}
	return &opError{op: op, rel: rel, errno: errno, class: class}
}

// ctxErr converts a done context into an error of class timeout or canceled.
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("cgroups: %s: %w", what, errdefs.ErrTimeout)
	}
	return fmt.Errorf("cgroups: %s: %w", what, errdefs.ErrCanceled)
}

// withDefaultWait bounds ctx by defaultWait when it has no deadline.
func withDefaultWait(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, defaultWait)
}

// poll calls cond with a growing delay (1 ms to 50 ms) until it reports true,
// fails, or ctx is done.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	delay := time.Millisecond
	for {
		ok, err := cond()
		if err != nil || ok {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctxErr(ctx, what)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func ignoringEINTR[T any](f func() (T, error)) (T, error) {
	for {
		v, err := f()
		if err != unix.EINTR {
			return v, err
		}
	}
}

// openDirAt opens the directory name below dirfd (name "." reopens dirfd,
// with a fresh file offset).
func openDirAt(dirfd int, name string) (int, error) {
	return ignoringEINTR(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	})
}

// readAt reads the interface file name below dirfd, up to maxFileBytes.
func readAt(dirfd int, name string) ([]byte, error) {
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	})
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			if len(buf) >= maxFileBytes {
				return nil, unix.EFBIG
			}
			buf = slices.Grow(buf, min(len(buf), maxFileBytes-len(buf)))
		}
		n, err := ignoringEINTR(func() (int, error) { return unix.Read(fd, buf[len(buf):cap(buf)]) })
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// writeAt writes val to the interface file name below dirfd in one write,
// as cgroupfs requires.
func writeAt(dirfd int, name, val string) error {
	fd, err := ignoringEINTR(func() (int, error) {
		return unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	n, err := ignoringEINTR(func() (int, error) { return unix.Write(fd, []byte(val)) })
	if err != nil {
		return err
	}
	if n != len(val) {
		return unix.EIO
	}
	return nil
}

// subdirs lists the child cgroups of the cgroup dirfd, however many there
// are: a walk that gave up on a wide directory would leave processes
// unkilled.
func subdirs(dirfd int) ([]string, error) {
	fd, err := openDirAt(dirfd, ".")
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "cgroup")
	defer f.Close()
	var names []string
	for {
		ents, err := f.ReadDir(dirBatch)
		for _, e := range ents {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
		if err == io.EOF || (err == nil && len(ents) == 0) {
			return names, nil
		}
		if err != nil {
			var errno unix.Errno
			if errors.As(err, &errno) {
				return names, errno
			}
			return names, unix.EIO
		}
	}
}

// dirFD is one cgroup directory in one hierarchy.
type dirFD struct {
	h  hier
	fd int
}

// group is one cgroup: a directory descriptor in each hierarchy.
type group struct {
	v    Version
	tab  *table
	rel  string // path below the hierarchy root or delegation, for messages
	dirs []dirFD
}

func (g *group) close() {
	for i := range g.dirs {
		if g.dirs[i].fd >= 0 {
			unix.Close(g.dirs[i].fd)
			g.dirs[i].fd = -1
		}
	}
}

// dir returns the directory of the hierarchy that provides ctrl.
func (g *group) dir(ctrl string) (dirFD, bool) {
	for _, d := range g.dirs {
		if d.h.has(ctrl) {
			return d, true
		}
	}
	return dirFD{}, false
}

func (g *group) where(d dirFD, name string) string {
	return d.h.name + ":" + g.rel + "/" + name
}

func (g *group) read(f ifile) ([]byte, error) {
	d, ok := g.dir(f.ctrl)
	if !ok {
		return nil, fmt.Errorf("cgroups: no %s hierarchy: %w", f.ctrl, errdefs.ErrNotSupported)
	}
	b, err := readAt(d.fd, f.name)
	if err != nil {
		return nil, sysErr("read", g.where(d, f.name), err)
	}
	return b, nil
}

func (g *group) write(f ifile, val string) error {
	d, ok := g.dir(f.ctrl)
	if !ok {
		return fmt.Errorf("cgroups: no %s hierarchy: %w", f.ctrl, errdefs.ErrNotSupported)
	}
	if err := writeAt(d.fd, f.name, val); err != nil {
		return sysErr("write", g.where(d, f.name), err)
	}
	return nil
}

// readUint reads a counter; a file the kernel does not provide reads as 0.
// With key set the file is flat keyed and the value of key is returned.
func (g *group) readUint(f ifile, key string) (uint64, error) {
	b, err := g.read(f)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if key == "" {
		return parseUint(b)
	}
	v, _, err := parseKeyed(b, key)
	return v, err
}

// writeAll writes val to the core file name in every hierarchy (used for
// cgroup.procs and tasks, which every hierarchy has).
func (g *group) writeAll(name, val string) error {
	for _, d := range g.dirs {
		if err := writeAt(d.fd, name, val); err != nil {
			return sysErr("write", g.where(d, name), err)
		}
	}
	return nil
}

// sub opens the child cgroup name in every hierarchy.
func (g *group) sub(name string) (*group, error) {
	c := &group{v: g.v, tab: g.tab, rel: g.rel + "/" + name}
	for _, d := range g.dirs {
		fd, err := openDirAt(d.fd, name)
		if err != nil {
			c.close()
			return nil, sysErr("open", g.where(d, name), err)
		}
		c.dirs = append(c.dirs, dirFD{h: d.h, fd: fd})
	}
	return c, nil
}

// mkdir creates the child cgroup name in every hierarchy. On failure it
// removes the directories it made and none that existed before.
func (g *group) mkdir(name string) error {
	for i, d := range g.dirs {
		if err := unix.Mkdirat(d.fd, name, 0o755); err != nil {
			for _, m := range g.dirs[:i] {
				_ = unix.Unlinkat(m.fd, name, unix.AT_REMOVEDIR)
			}
			return sysErr("mkdir", g.where(d, name), err)
		}
	}
	return nil
}

// walk calls fn for the cgroup rootfd and every cgroup below it, parents
// first, whatever the depth and width of the tree: it holds at most two
// descriptors besides rootfd (it climbs back up through ".."), and it goes
// on past errors, of fn or of the walk itself, so that every cgroup it can
// reach is visited. It returns the first error. A cgroup removed meanwhile
// is skipped.
//
// Depth is no defence for a tree the sandbox built: on v1 anyone who owns
// a directory (the agent owns work/) may nest cgroups without limit, and a
// walk that stopped at some depth would leave the processes below it
// unkilled and the tree unremovable.
func walk(rootfd int, fn func(fd int) error) error {
	var first error
	note := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	note(fn(rootfd))
	kids, err := subdirs(rootfd)
	note(err)
	type frame struct {
		kids []string
		next int
	}
	stack := []frame{{kids: kids}}
	cur := rootfd
	defer func() {
		if cur != rootfd {
			unix.Close(cur)
		}
	}()
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next < len(top.kids) {
			name := top.kids[top.next]
			top.next++
			fd, err := openDirAt(cur, name)
			if err == unix.ENOENT {
				continue // removed meanwhile
			}
			if err != nil {
				note(err)
				continue
			}
			note(fn(fd))
			kids, err := subdirs(fd)
			if err != unix.ENOENT && err != unix.ENODEV {
				note(err)
			}
			if len(kids) == 0 {
				unix.Close(fd)
				continue
			}
			if cur != rootfd {
				unix.Close(cur)
			}
			cur = fd
			stack = append(stack, frame{kids: kids})
			continue
		}
		stack = stack[:len(stack)-1]
		switch {
		case len(stack) == 0:
		case len(stack) == 1:
			unix.Close(cur)
			cur = rootfd
		default:
			// Back up one level. Cgroups are renamed only within their
			// parent, so ".." is the directory we came from.
			up, err := openDirAt(cur, "..")
			unix.Close(cur)
			cur = rootfd
			if err != nil {
				note(err)
				return first // lost our place; what was reached was visited
			}
			cur = up
		}
	}
	return first
}

// walkTree walks the subtree of g in the hierarchy of d.
func (g *group) walkTree(d dirFD, fn func(fd int) error) error {
	err := walk(d.fd, fn)
	var errno unix.Errno
	if errors.As(err, &errno) {
		return sysErr("walk", d.h.name+":"+g.rel, errno)
	}
	return err
}

// treeProcs returns the processes in g and below, in every hierarchy,
// sorted and without repeats. On an error it still returns every process
// it found, so that a kill can go ahead with them.
func (g *group) treeProcs() ([]int, error) {
	var all []int
	var errs []error
	for _, d := range g.dirs {
		err := g.walkTree(d, func(fd int) error {
			b, err := readAt(fd, g.tab.procs.name)
			if err == unix.ENOENT || err == unix.ENODEV {
				return nil // cgroup removed meanwhile
			}
			if err != nil {
				return err
			}
			pids, err := parseProcs(b)
			if err != nil {
				return err
			}
			if len(all)+len(pids) > maxProcs {
				return fmt.Errorf("cgroups: more than %d processes in %s: %w", maxProcs, g.rel, errdefs.ErrResourceExhausted)
			}
			all = append(all, pids...)
			return nil
		})
		errs = append(errs, err)
	}
	slices.Sort(all)
	return slices.Compact(all), errors.Join(errs...)
}

// empty reports whether no process is left in g or below.
func (g *group) empty() (bool, error) {
	if g.v == V2 {
		b, err := g.read(g.tab.events)
		if err != nil {
			return false, err
		}
		n, _, err := parseKeyed(b, "populated")
		return n == 0, err
	}
	pids, err := g.treeProcs()
	return len(pids) == 0 && err == nil, err
}

// setFrozen writes the freezer state of g (which applies to its subtree).
func (g *group) setFrozen(frozen bool) error {
	val := g.tab.thawed
	if frozen {
		val = g.tab.frozen
	}
	return g.write(g.tab.freeze, val)
}

// frozen reports whether g and everything below it is frozen.
func (g *group) frozen() (bool, error) {
	if g.v == V2 {
		b, err := g.read(g.tab.events)
		if err != nil {
			return false, err
		}
		n, _, err := parseKeyed(b, "frozen")
		return n == 1, err
	}
	b, err := g.read(g.tab.freeze)
	if err != nil {
		return false, err
	}
	return strings.TrimSpace(string(b)) == g.tab.frozen, nil
}

// thawTree thaws g and every cgroup below it. A cgroup is frozen while it
// or any ancestor is, so thawing g alone would leave killed processes in a
// descendant frozen by its own state (by the sandbox's root, which owns
// the cgroups it makes under work/, or by an agent that died halfway
// through a kill) unable to die. Parents are thawed before their children,
// and an error does not stop the walk.
func (g *group) thawTree() error {
	d, ok := g.dir(g.tab.freeze.ctrl)
	if !ok {
		return fmt.Errorf("cgroups: no %s hierarchy: %w", g.tab.freeze.ctrl, errdefs.ErrNotSupported)
	}
	return g.walkTree(d, func(fd int) error {
		err := writeAt(fd, g.tab.freeze.name, g.tab.thawed)
		if err == unix.ENOENT || err == unix.ENODEV {
			return nil // removed meanwhile
		}
		return err
	})
}

// freeze freezes g and waits until every task in it is frozen. If that does
// not happen before ctx is done it thaws g again and fails.
func (g *group) freeze(ctx context.Context) error {
	ctx, cancel := withDefaultWait(ctx)
	defer cancel()
	if err := g.setFrozen(true); err != nil {
		return err
	}
	err := poll(ctx, "freeze "+g.rel, g.frozen)
	if err != nil {
		if terr := g.setFrozen(false); terr != nil {
			return errors.Join(err, terr)
		}
	}
	return err
}

// thaw thaws g and waits until the kernel reports it thawed.
func (g *group) thaw(ctx context.Context) error {
	ctx, cancel := withDefaultWait(ctx)
	defer cancel()
	if err := g.setFrozen(false); err != nil {
		return err
	}
	return poll(ctx, "thaw "+g.rel, func() (bool, error) {
		f, err := g.frozen()
		return !f, err
	})
}

// kill kills every process in g and below and waits until none is left or
// ctx is done. v2 uses cgroup.kill (Linux 5.14+); otherwise it freezes the
// subtree so nothing can fork or exit (pids stay valid), SIGKILLs every
// process listed, thaws every cgroup of the subtree so the signals are
// delivered, and repeats until the subtree is empty. No error on the way
// (a cgroup that cannot be read, a freeze that does not complete) stops
// it from killing what it found: errors are collected and returned only
// when the subtree is still not empty at the end.
func (g *group) kill(ctx context.Context) error {
	ctx, cancel := withDefaultWait(ctx)
	defer cancel()
	what := "kill " + g.rel
	if g.v == V2 {
		err := g.write(g.tab.kill, "1")
		if err == nil {
			return poll(ctx, what, g.empty)
		}
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	self := os.Getpid()
	if pids, _ := g.treeProcs(); slices.Contains(pids, self) {
		// Freezing a thread of our own would stall the Go runtime.
		return fmt.Errorf("cgroups: kill %s: the calling process is inside: %w", g.rel, errdefs.ErrFailedPrecondition)
	}
	settle := 20 * time.Millisecond
	var last error // of the latest round
	for {
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		ferr := g.freeze(fctx) // best effort: kill even if a task will not freeze
		fcancel()
		pids, werr := g.treeProcs()
		var kerr error
		for _, pid := range pids {
			if pid == self {
				continue // never kill ourselves (a thread of ours may be inside)
			}
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH && kerr == nil {
				kerr = sysErr("kill", "pid "+strconv.Itoa(pid)+" in "+g.rel, err)
			}
		}
		terr := g.thawTree()
		last = errors.Join(werr, kerr, terr, ferr)
		wctx, wcancel := context.WithTimeout(ctx, settle)
		err := poll(wctx, what, g.empty)
		wcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctxErr(ctx, what), last)
		}
		settle = min(2*settle, 500*time.Millisecond)
	}
}

// removeTree removes the cgroup name below parentfd and every cgroup below
// it, deepest first, whatever the depth (see walk). A cgroup that is
// already gone counts as removed; a busy one (processes left) does not
// stop the removal of the rest, and the result then wraps EBUSY.
func removeTree(parentfd int, name, rel string) error {
	if err := rmTree(parentfd, name); err != nil {
		return sysErr("remove", rel, err)
	}
	return nil
}

// removeTreeWait is removeTree retrying busy cgroups (tasks still exiting)
// until ctx is done.
func removeTreeWait(ctx context.Context, parentfd int, name, rel string) error {
	delay := time.Millisecond
	for {
		err := removeTree(parentfd, name, rel)
		if err == nil || !errors.Is(err, unix.EBUSY) {
			return err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctxErr(ctx, "remove "+rel), err)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// rmTree removes name below parentfd, children before parents, holding at
// most two descriptors whatever the depth. It returns the first error
// other than EBUSY if there was one, else EBUSY if a cgroup kept tasks.
func rmTree(parentfd int, name string) error {
	err := unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EBUSY && err != unix.ENOTEMPTY {
		return err
	}
	var hard, busy error
	note := func(err error) {
		switch {
		case err == nil || err == unix.ENOENT:
		case err == unix.EBUSY || err == unix.ENOTEMPTY:
			busy = unix.EBUSY
		case hard == nil:
			hard = err
		}
	}
	cur, err := openDirAt(parentfd, name)
	if err == unix.ENOENT {
		return nil
	}
	if err != nil {
		return err
	}
	type frame struct {
		name string
		kids []string
		next int
	}
	kids, err := subdirs(cur)
	note(err)
	stack := []frame{{name: name, kids: kids}}
	for len(stack) > 0 {
		top := &stack[len(stack)-1]
		if top.next < len(top.kids) {
			kid := top.kids[top.next]
			top.next++
			err := unix.Unlinkat(cur, kid, unix.AT_REMOVEDIR)
			if err == nil || err == unix.ENOENT {
				continue
			}
			if err != unix.EBUSY && err != unix.ENOTEMPTY {
				note(err)
				continue
			}
			// Busy: it has child cgroups, or tasks. Go down.
			fd, err := openDirAt(cur, kid)
			if err != nil {
				note(err)
				continue
			}
			grand, err := subdirs(fd)
			note(err)
			if len(grand) == 0 {
				unix.Close(fd)
				note(unix.EBUSY) // tasks, not children
				continue
			}
			unix.Close(cur)
			cur = fd
			stack = append(stack, frame{name: kid, kids: grand})
			continue
		}
		// Every child of top was tried: go up and remove top itself.
		done := top.name
		stack = stack[:len(stack)-1]
		if len(stack) == 0 {
			unix.Close(cur)
			cur = -1
			note(unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR))
			break
		}
		up, err := openDirAt(cur, "..")
		unix.Close(cur)
		cur = -1
		if err != nil {
			note(err)
			break
		}
		cur = up
		note(unix.Unlinkat(cur, done, unix.AT_REMOVEDIR))
	}
	if cur >= 0 {
		unix.Close(cur)
	}
	if hard != nil {
		return hard
	}
	return busy
}
