package agent

import (
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The forking thread.
//
// Between fork and execve a child runs Go's fixed code (setsid, the user's
// ids, chdir, dup2, execve) with a copy of the agent's descriptor table and
// with the credentials of the thread that forked it. The agent holds every
// capability of the sandbox's user namespace, and its table holds
// directories outside the sandbox's root (its delegated cgroups, the
// writable layer). Two path lookups in that window are the caller's or the
// sandbox's to choose: the working directory and the executable (with its
// script or ELF interpreter). With the agent's CAP_SYS_PTRACE and
// CAP_DAC_OVERRIDE, a cwd of /proc/1/fd/N, /proc/self/fd/N or a symlink to
// either led a root command into a cgroup directory, and from there into
// the cgroup's task list and the host's mount tree.
//
// So the forking thread first drops from its effective set every capability
// but the two the child needs to take its user's ids, and takes the user's
// filesystem ids and groups; it resolves the working directory itself,
// inside Root with RESOLVE_IN_ROOT|RESOLVE_NO_MAGICLINKS, as that user;
// it takes the agent's ids back for the fork (the capabilities stay
// narrowed); and the child enters the directory through its own
// descriptor. No lookup
// made for a child can use the agent's privileges or follow a /proc magic
// link the agent did not pick. Every credential is per thread in Linux; the
// thread is locked while they differ and gets its own back before it is
// unlocked (or, should that fail, ends with its goroutine).

// capMask is a set of capabilities: bit n%32 of word n/32 is capability
// n, as in the kernel's capability structures.
type capMask [2]uint32

// capsOf returns the mask of caps.
func capsOf(caps ...uint) capMask {
	var m capMask
	for _, c := range caps {
		m[c/32] |= 1 << (c % 32)
	}
	return m
}

// forkCaps are the capabilities the forking thread keeps effective: the
// child's setgroups, setgid and setuid need them.
var forkCaps = capsOf(unix.CAP_SETGID, unix.CAP_SETUID)

// threadCreds are the credentials of the calling thread that dropToUser
// changes, to be restored.
type threadCreds struct {
	hdr    unix.CapUserHeader
	caps   [2]unix.CapUserData // as found
	narrow [2]unix.CapUserData // as dropToUser left them
	groups []int
	ids    bool // the filesystem ids and groups were changed
}

// dropToUser narrows the calling (locked) thread's effective capabilities
// to keep and, with ids, takes u's filesystem ids and groups. The ids go
// first, while CAP_SETUID and CAP_SETGID are still effective. (Taking a
// non-zero filesystem uid also makes the kernel clear the filesystem
// capabilities, CAP_DAC_OVERRIDE, CAP_FOWNER and the others, from the
// effective set; the narrowing below does not rely on it.) On an error
// with non-nil creds the thread may be left changed: it must end with its
// goroutine.
func dropToUser(u User, ids bool, keep capMask) (*threadCreds, error) {
	c := &threadCreds{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}
	if err := unix.Capget(&c.hdr, &c.caps[0]); err != nil {
		return nil, fmt.Errorf("capget: %w", err)
	}
	c.narrow = c.caps
	for i := range c.narrow {
		c.narrow[i].Effective &= keep[i]
	}
	if ids {
		groups, err := unix.Getgroups()
		if err != nil {
			return nil, fmt.Errorf("getgroups: %w", err)
		}
		c.groups, c.ids = groups, true
		gids := make([]int, len(u.Groups))
		for i, g := range u.Groups {
			gids[i] = int(g)
		}
		// x/sys/unix makes these calls on the calling thread only
		// (package syscall would change every thread of the agent).
		if err := unix.Setgroups(gids); err != nil {
			return c, errors.Join(fmt.Errorf("setgroups: %w", err), c.restore())
		}
		if err := setFSIDs(int(u.UID), int(u.GID)); err != nil {
			return c, errors.Join(err, c.restore())
		}
	}
	hdr := c.hdr
	if err := unix.Capset(&hdr, &c.narrow[0]); err != nil {
		return c, errors.Join(fmt.Errorf("capset: %w", err), c.restore())
	}
	return c, nil
}

// restore gives the thread back the credentials dropToUser found: the
// filesystem ids first (the agent's own ids need no capability), then the
// capabilities (raising what the permitted set holds needs none either),
// which gives setgroups its CAP_SETGID whatever was kept.
func (c *threadCreds) restore() error {
	if !c.ids {
		return c.setCaps(&c.caps)
	}
	var errs []error
	if err := setFSIDs(0, 0); err != nil {
		errs = append(errs, err)
	}
	if err := c.setCaps(&c.caps); err != nil {
		errs = append(errs, err)
	}
	if err := unix.Setgroups(c.groups); err != nil {
		errs = append(errs, fmt.Errorf("setgroups: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.ids = false
	return nil
}

// setCaps makes caps the thread's capabilities.
func (c *threadCreds) setCaps(caps *[2]unix.CapUserData) error {
	hdr := c.hdr
	if err := unix.Capset(&hdr, &caps[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// setFSIDs sets the calling thread's filesystem gid and uid. setfsuid and
// setfsgid report no failure (each returns the previous id), so it reads
// them back with -1, which is never valid and changes nothing.
func setFSIDs(uid, gid int) error {
	_ = unix.Setfsgid(gid)
	_ = unix.Setfsuid(uid)
	if got, _ := unix.SetfsgidRetGid(-1); got != gid {
		return fmt.Errorf("setfsgid %d: the thread has %d", gid, got)
	}
	if got, _ := unix.SetfsuidRetUid(-1); got != uid {
		return fmt.Errorf("setfsuid %d: the thread has %d", uid, got)
	}
	return nil
}

// restoreIDs gives the thread back its filesystem ids and groups (it
// needs CAP_SETGID effective), keeping the narrowed capabilities: a
// filesystem uid that returns to 0 makes the kernel raise the filesystem
// capabilities from the permitted set again, so the narrowed set is
// applied once more.
func (c *threadCreds) restoreIDs() error {
	if !c.ids {
		return nil
	}
	if err := c.resetIDs(); err != nil {
		return err
	}
	return c.setCaps(&c.narrow)
}

// resetIDs gives the thread back its filesystem ids and groups.
func (c *threadCreds) resetIDs() error {
	if !c.ids {
		return nil
	}
	var errs []error
	if err := setFSIDs(0, 0); err != nil {
		errs = append(errs, err)
	}
	if err := unix.Setgroups(c.groups); err != nil {
		errs = append(errs, fmt.Errorf("setgroups: %w", err))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	c.ids = false
	return nil
}

// forkAs forks and execs spec's process with attr on a thread that holds
// only the privileges the child needs and spec.user's filesystem ids, in
// the working directory that childDir resolves as that user. Errors of the
// fork itself are *forkError; a working directory that does not resolve is
// an invalid-argument error.
func (t *processTable) forkAs(spec *procSpec, attr *syscall.ProcAttr) (pid int, err error) {
	runtime.LockOSThread()
	creds, err := dropToUser(spec.user, t.opts.SwitchUser, forkCaps)
	if err != nil {
		if creds == nil {
			runtime.UnlockOSThread()
		}
		// Otherwise the thread may keep reduced credentials: it stays
		// locked and ends with its goroutine.
		return 0, fmt.Errorf("prepare the forking thread: %w", err)
	}
	defer func() {
		if rerr := creds.restore(); rerr != nil {
			// The thread stays locked, and ends with its goroutine. A
			// child that started is still reported with its pid.
			t.log.Error("restore the forking thread's credentials", "err", rerr)
			if err == nil {
				err = fmt.Errorf("restore the forking thread: %w", rerr)
			}
			return
		}
		runtime.UnlockOSThread()
	}()
	dir, err := t.childDir(spec)
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	// The fork itself runs as the agent's ids again (capabilities stay
	// narrowed): on cgroup v2, clone3's CLONE_INTO_CGROUP needs write
	// access to cgroup.procs files the sandbox's root owns, and the child
	// takes its user's ids before anything of its own runs.
	if err := creds.restoreIDs(); err != nil {
		return 0, fmt.Errorf("restore the forking thread's ids: %w", err)
	}
	// The child enters the directory through its own copy of the
	// descriptor, after it has taken its user's ids.
	a := *attr
	a.Dir = "/proc/self/fd/" + strconv.Itoa(dir)
	pid, err = syscall.ForkExec(spec.path, spec.argv, &a)
	if err != nil {
		return 0, &forkError{err: err}
	}
	return pid, nil
}

// childDir opens spec's working directory (O_PATH, close-on-exec): the
// first of spec.dirs that resolves inside Root, without /proc magic links,
// to a directory the calling thread, which has taken the user's
// filesystem ids, may enter. A request's own cwd has no fallback.
func (t *processTable) childDir(spec *procSpec) (int, error) {
	var first error
	for _, d := range spec.dirs {
		fd, err := t.root.open(d, unix.O_PATH|unix.O_DIRECTORY)
		if err == nil {
			err = unix.Faccessat2(fd, "", unix.X_OK, unix.AT_EMPTY_PATH|unix.AT_EACCESS)
			if err == nil {
				return fd, nil
			}
			unix.Close(fd)
		}
		if first == nil {
			first = dirError(d, spec.user.Name, err)
		}
	}
	if first == nil {
		first = invalidf("no working directory")
	}
	return -1, first
}

// dirError explains why the working directory d cannot be used.
func dirError(d, user string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return invalidf("cwd %q is not a directory", d)
	case errors.Is(err, unix.EACCES), errors.Is(err, unix.EPERM):
		return invalidf("cwd %q is not accessible to user %q", d, user)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return invalidf("cwd %q does not resolve inside the sandbox (a /proc link, or too many symlinks)", d)
	}
	return invalidf("cwd %q cannot be used: %v", d, err)
}
