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
	maxTreeDepth = 32      // deepest cgroup subtree we walk
	maxTreeNodes = 4096    // most cgroups in a subtree we walk
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

// subdirs lists the child cgroups of the cgroup dirfd.
func subdirs(dirfd int) ([]string, error) {
	fd, err := openDirAt(dirfd, ".")
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "cgroup")
	defer f.Close()
	ents, err := f.ReadDir(maxTreeNodes + 1)
	if err != nil && err != io.EOF {
		var errno unix.Errno
		if errors.As(err, &errno) {
			return nil, errno
		}
		return nil, unix.EIO
	}
	if len(ents) > maxTreeNodes {
		return nil, unix.E2BIG
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
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

// walk calls fn for the cgroup dirfd and every cgroup below it, parents
// first.
func walk(dirfd int, depth int, budget *int, fn func(fd int) error) error {
	if err := fn(dirfd); err != nil {
		return err
	}
	*budget--
	if *budget < 0 || depth >= maxTreeDepth {
		return unix.E2BIG
	}
	names, err := subdirs(dirfd)
	if err != nil {
		return err
	}
	for _, n := range names {
		fd, err := openDirAt(dirfd, n)
		if err == unix.ENOENT {
			continue // removed meanwhile
		}
		if err != nil {
			return err
		}
		err = walk(fd, depth+1, budget, fn)
		unix.Close(fd)
		if err != nil {
			return err
		}
	}
	return nil
}

// walkTree walks the subtree of g in the hierarchy of d.
func (g *group) walkTree(d dirFD, fn func(fd int) error) error {
	budget := maxTreeNodes
	err := walk(d.fd, 0, &budget, fn)
	var errno unix.Errno
	if errors.As(err, &errno) {
		return sysErr("walk", d.h.name+":"+g.rel, errno)
	}
	return err
}

// treeProcs returns the processes in g and below, in every hierarchy,
// sorted and without repeats.
func (g *group) treeProcs() ([]int, error) {
	var all []int
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
				return unix.E2BIG
			}
			all = append(all, pids...)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(all)
	return slices.Compact(all), nil
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
	return len(pids) == 0, err
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
// descendant frozen by its own state (say, by an agent that died halfway
// through a kill) unable to die.
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
// process listed, thaws so the signals are delivered, and repeats until the
// subtree is empty.
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
	if pids, err := g.treeProcs(); err != nil {
		return err
	} else if slices.Contains(pids, self) {
		// Freezing a thread of our own would stall the Go runtime.
		return fmt.Errorf("cgroups: kill %s: the calling process is inside: %w", g.rel, errdefs.ErrFailedPrecondition)
	}
	settle := 20 * time.Millisecond
	for {
		fctx, fcancel := context.WithTimeout(ctx, time.Second)
		ferr := g.freeze(fctx) // best effort: kill even if a task will not freeze
		fcancel()
		pids, err := g.treeProcs()
		if err != nil {
			return errors.Join(err, g.thawTree())
		}
		var kerr error
		for _, pid := range pids {
			if pid == self {
				continue // never kill ourselves (a thread of ours may be inside)
			}
			if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
				kerr = sysErr("kill", "pid "+strconv.Itoa(pid)+" in "+g.rel, err)
			}
		}
		if err := g.thawTree(); err != nil {
			return errors.Join(err, ferr)
		}
		wctx, wcancel := context.WithTimeout(ctx, settle)
		err = poll(wctx, what, g.empty)
		wcancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return errors.Join(ctxErr(ctx, what), kerr)
		}
		settle = min(2*settle, 500*time.Millisecond)
	}
}

// removeTree removes the cgroup name below parentfd and every cgroup below
// it, deepest first. A cgroup that is already gone counts as removed; a busy
// one (processes left) fails at once with EBUSY.
func removeTree(parentfd int, name, rel string) error {
	budget := maxTreeNodes
	if err := rmTree(parentfd, name, 0, &budget); err != nil {
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

func rmTree(parentfd int, name string, depth int, budget *int) error {
	err := unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EBUSY && err != unix.ENOTEMPTY {
		return err
	}
	// Busy: maybe it has child cgroups. Remove those and try again.
	*budget--
	if *budget < 0 || depth >= maxTreeDepth {
		return unix.E2BIG
	}
	fd, oerr := openDirAt(parentfd, name)
	if oerr == unix.ENOENT {
		return nil
	}
	if oerr != nil {
		return oerr
	}
	names, lerr := subdirs(fd)
	var cerr error
	for _, n := range names {
		if e := rmTree(fd, n, depth+1, budget); e != nil && cerr == nil {
			cerr = e
		}
	}
	unix.Close(fd)
	if lerr != nil {
		return lerr
	}
	if cerr != nil {
		return cerr
	}
	if len(names) == 0 {
		return err // busy with tasks, not children
	}
	if err := unix.Unlinkat(parentfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}
