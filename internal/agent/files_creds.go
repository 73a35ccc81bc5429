//go:build linux

package agent

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The credentials of file operations.
//
// The agent holds every capability of the sandbox's user namespace
// (CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_SYS_PTRACE, ...). A file request acts
// with the permissions of the user it names instead, the same a command
// of that user has: every syscall of the request that resolves, opens,
// creates, renames, removes or changes a path runs on an OS thread that
// is locked for it and holds the user's filesystem uid and gid and
// supplementary groups, with its effective capabilities narrowed to what
// that user's commands keep after execve (none for a non-root user; for
// root, the agent's bounding set: nothing in an ordinary sandbox, the
// build capabilities in a build sandbox). The kernel then checks every
// lookup and change as it would for that command, and what the request
// creates belongs to the user. The thread gets the agent's credentials
// back before it is unlocked; if that fails it stays locked and ends with
// its goroutine (each operation runs on a goroutine of its own for that
// reason).
//
// Only syscalls on descriptors that were opened that way run outside the
// thread: pread and write on a file the user opened (the kernel checked
// the access at open), inotify reads, and the sandbox's memory-room check,
// which reads the agent's own cgroup files. Without Options.SwitchUser
// (the fake runtime, not running as root) nothing is switched.

// fsActor is who a file request acts as.
type fsActor struct {
	user User
	keep capMask // the capabilities left effective
}

// actor returns the account a request names ("" is the default user) and
// the capabilities it acts with.
func (s *fileService) actor(name string) (fsActor, error) {
	u, err := s.user(name)
	if err != nil {
		return fsActor{}, err
	}
	a := fsActor{user: u}
	if u.UID == 0 {
		a.keep = s.rootCaps
	}
	return a, nil
}

// as runs fn with a's credentials (see above) and returns its error.
func (s *fileService) as(a fsActor, fn func() error) error {
	if !s.switchUser {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		creds, err := dropToUser(a.user, true, a.keep)
		if err != nil {
			if creds == nil {
				runtime.UnlockOSThread()
			}
			s.log.Error("take a user's credentials for a file operation", "user", a.user.Name, "err", err)
			errc <- fmt.Errorf("cannot act as user %q: %w", a.user.Name, errdefs.ErrInternal)
			return
		}
		ferr := fn()
		if err := creds.restore(); err != nil {
			// The thread stays locked and ends with this goroutine.
			s.log.Error("restore the agent's credentials after a file operation", "err", err)
			errc <- fmt.Errorf("cannot act as user %q: %w", a.user.Name, errdefs.ErrInternal)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

// boundingCaps returns the calling thread's capability bounding set: what
// a root command keeps after execve. Every thread of the agent has the
// same (the sandbox's init narrows them all).
func boundingCaps() capMask {
	var m capMask
	for c := uint(0); c < 64; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			break // EINVAL past the last capability the kernel knows
		}
		if in == 1 {
			m[c/32] |= 1 << (c % 32)
		}
	}
	return m
}
