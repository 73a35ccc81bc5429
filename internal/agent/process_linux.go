package agent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// cloexecInherited marks every descriptor above stderr close-on-exec, so
// that descriptors the agent inherited (such as the listening socket the
// runtime passed in) never reach the processes it starts. Descriptors Go
// opens are close-on-exec already.
func cloexecInherited() error {
	err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	if err == nil {
		return nil
	}
	// Before Linux 5.11: walk /proc/self/fd.
	entries, rerr := os.ReadDir("/proc/self/fd")
	if rerr != nil {
		return fmt.Errorf("mark inherited descriptors close-on-exec: %w", errors.Join(err, rerr))
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		// The directory's own descriptor is gone by now: EBADF.
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("mark descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}

// forkError marks an error of the fork/exec itself, as opposed to one of
// the cgroup placement around it.
type forkError struct{ err error }

func (e *forkError) Error() string { return e.err.Error() }
func (e *forkError) Unwrap() error { return e.err }

// spawn forks and execs spec's process for p: in its own session and
// process group, as spec's user when Options.SwitchUser, inside p's cgroup
// when it has one, with stdin, stdout and stderr as the only open
// descriptors (every descriptor the agent opens is close-on-exec). On
// success it sets p's pid, pidfd, stdin and output streams and the reaper
// delivers the exit status on p.exitCh. Exec failures are *startError.
func (t *processTable) spawn(spec *procSpec, p *process) (err error) {
	var child, parent []*os.File
	defer func() {
		for _, f := range child {
			_ = f.Close()
		}
		if err != nil {
			for _, f := range parent {
				_ = f.Close()
			}
		}
	}()
	var fds [3]uintptr
	if spec.pty != nil {
		ptmx, tty, err := openPty(*spec.pty)
		if err != nil {
			return fmt.Errorf("open terminal: %w", sysClass(err))
		}
		parent, child = append(parent, ptmx), append(child, tty)
		p.stdin, p.terminal = ptmx, true
		p.stdout = newOutStream(ptmx, false, spec.limit)
		// Fd puts the child's end in blocking mode, as programs expect.
		fd := tty.Fd()
		fds = [3]uintptr{fd, fd, fd}
	} else {
		if spec.stdin {
			r, w, err := os.Pipe()
			if err != nil {
				return fmt.Errorf("create stdin pipe: %w", sysClass(err))
			}
			parent, child = append(parent, w), append(child, r)
			p.stdin = w
			fds[0] = r.Fd()
		} else {
			null, err := os.Open(os.DevNull)
			if err != nil {
				// No /dev/null: an empty pipe reads as EOF just the same.
				r, w, perr := os.Pipe()
				if perr != nil {
					return fmt.Errorf("create stdin pipe: %w", sysClass(perr))
				}
				_ = w.Close()
				null = r
			}
			child = append(child, null)
			fds[0] = null.Fd()
		}
		for i, isErr := range []bool{false, true} {
			r, w, err := os.Pipe()
			if err != nil {
				return fmt.Errorf("create output pipe: %w", sysClass(err))
			}
			parent, child = append(parent, r), append(child, w)
			s := newOutStream(r, isErr, spec.limit)
			if isErr {
				p.stderr = s
			} else {
				p.stdout = s
			}
			fds[1+i] = w.Fd()
		}
	}

	sys := &syscall.SysProcAttr{Setsid: true}
	if spec.pty != nil {
		sys.Setctty = true
		sys.Ctty = 0
	}
	if t.opts.SwitchUser {
		sys.Credential = &syscall.Credential{Uid: spec.user.UID, Gid: spec.user.GID, Groups: spec.user.Groups}
	}
	pidfd := -1
	sys.PidFD = &pidfd
	attr := &syscall.ProcAttr{Env: spec.env, Files: fds[:], Sys: sys}
	fork := func() (int, error) { return t.forkAs(spec, attr) }
	if cg := p.cg; cg != nil {
		plain := fork
		fork = func() (int, error) { return cg.Start(sys, plain) }
	}
	pid, err := t.reaper.start(fork, p.exitCh)
	if pid > 0 && err != nil {
		// The child runs; only the cgroup bookkeeping after the fork
		// failed. Track it like any other.
		t.log.Warn("start process in its cgroup", "pid", pid, "err", err)
		err = nil
	}
	if err != nil {
		if fe := (*forkError)(nil); errors.As(err, &fe) {
			return execFailure(fe.err)
		}
		if errdefs.Class(err) == errdefs.ErrInvalidArgument {
			return err // the working directory
		}
		t.log.Warn("start process in its cgroup", "err", err)
		return fmt.Errorf("start process in its cgroup: %w", errdefs.Class(err))
	}
	p.pid = pid
	p.pidfd = pidfd
	return nil
}

// execFailure describes a failed exec the way shells do: 127 for a missing
// executable, 126 for one that cannot be run.
func execFailure(err error) *startError {
	switch {
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENOTDIR):
		return &startError{code: 127, msg: "executable file not found"}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &startError{code: 126, msg: "permission denied"}
	case errors.Is(err, syscall.ENOEXEC):
		return &startError{code: 126, msg: "exec format error"}
	}
	if errno := syscall.Errno(0); errors.As(err, &errno) {
		return &startError{code: 126, msg: "cannot start process: " + errno.Error()}
	}
	return &startError{code: 126, msg: "cannot start process"}
}

// sysClass classifies an error from a system call that ran out of
// something (descriptors, memory, processes) or failed otherwise.
func sysClass(err error) error {
	switch {
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE),
		errors.Is(err, syscall.ENOMEM), errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOSPC):
		return errdefs.ErrResourceExhausted
	case errors.Is(err, syscall.ENOENT), errors.Is(err, syscall.ENODEV), errors.Is(err, syscall.ENXIO):
		return errdefs.ErrNotSupported
	}
	return errdefs.ErrInternal
}

// signal sends sig to p's main process only. It uses the pidfd, so it can
// never hit a process that reused the pid.
func (p *process) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return fmt.Errorf("process %d has exited: %w", p.pid, errdefs.ErrFailedPrecondition)
	}
	var err error
	if p.pidfd >= 0 {
		err = unix.PidfdSendSignal(p.pidfd, sig, nil, 0)
	} else {
		err = syscall.Kill(p.pid, sig)
	}
	switch {
	case err == nil:
		return nil
	case errors.Is(err, syscall.ESRCH):
		return fmt.Errorf("process %d has exited: %w", p.pid, errdefs.ErrFailedPrecondition)
	case errors.Is(err, syscall.EPERM):
		return fmt.Errorf("signal process %d: %w", p.pid, errdefs.ErrPermissionDenied)
	}
	return fmt.Errorf("signal process %d: %w", p.pid, errdefs.ErrInternal)
}

// killGroup sends SIGKILL to p's process group (the session it leads). It
// does nothing once the main process was reaped: its pid, and so the group
// id, could then name another group.
func (p *process) killGroup() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exited {
		return nil
	}
	if err := syscall.Kill(-p.pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill process group %d: %w", p.pid, err)
	}
	return nil
}

func (p *process) closePidfdLocked() {
	if p.pidfd >= 0 {
		_ = unix.Close(p.pidfd)
		p.pidfd = -1
	}
}

// pendingBytes returns how many bytes are queued (FIONREAD, alias
// TIOCINQ) in the pipe or terminal f,
// or 0 when that cannot be told (for example f was closed at EOF).
func pendingBytes(f *os.File) uint64 {
	rc, err := f.SyscallConn()
	if err != nil {
		return 0
	}
	n, ierr := 0, error(nil)
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.TIOCINQ) }); err != nil || ierr != nil || n < 0 {
		return 0
	}
	return uint64(n)
}

// resourceSignal reports whether sig is how the kernel enforces a resource
// limit (RLIMIT_CPU, RLIMIT_FSIZE).
func resourceSignal(sig int) bool {
	return sig == int(syscall.SIGXCPU) || sig == int(syscall.SIGXFSZ)
}

// limitReason says which limit a command that ended with
// EXIT_STATUS_RESOURCE_EXCEEDED ran into, in its caller's terms.
func limitReason(u ExecUsage, sig int) string {
	switch {
	case u.OOMKills > 0:
		return fmt.Sprintf("out of memory: the kernel killed %d process(es) of the command when it reached the sandbox's memory limit (peak %d MiB)",
			u.OOMKills, u.PeakMemoryBytes>>20)
	case sig == int(syscall.SIGXFSZ):
		return "file size limit: the command wrote a file larger than its limit allows (SIGXFSZ)"
	case sig == int(syscall.SIGXCPU):
		return "CPU time limit: the command used more CPU time than its limit allows (SIGXCPU)"
	}
	return "a resource limit of the sandbox"
}
