package agent

import (
	"errors"
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// killNamespace sends SIGKILL to every process of the agent's PID
// namespace but the agent itself. It must only be called by PID 1 of
// that namespace: from anywhere else kill(-1) reaches every process the
// caller may signal on the host.
func killNamespace() error {
	err := unix.Kill(-1, unix.SIGKILL)
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("kill every process: %w", sysClass(err))
	}
	return nil
}

// signalOne sends sig to pid if in(its stat) holds. It pins the process
// with a pidfd before it checks, so that the signal can only reach the
// process that was checked, never one that reused its pid.
func signalOne(pid int, sig syscall.Signal, in func(procStat) bool) error {
	notFound := fmt.Errorf("process %d: %w", pid, errdefs.ErrNotFound)
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return notFound
	}
	if err != nil {
		return fmt.Errorf("open process %d: %w", pid, sysClass(err))
	}
	defer unix.Close(fd)
	st, err := readStat(pid)
	if err != nil || !in(st) {
		return notFound
	}
	err = unix.PidfdSendSignal(fd, sig, nil, 0)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ESRCH):
		return notFound
	case errors.Is(err, unix.EPERM):
		return fmt.Errorf("signal process %d: %w", pid, errdefs.ErrPermissionDenied)
	}
	return fmt.Errorf("signal process %d: %w", pid, errdefs.ErrInternal)
}

// reapNow collects the exit statuses of the agent's children that have
// ended, when the agent reaps every child (as PID 1), without waiting for
// the reaper's next SIGCHLD.
func (t *processTable) reapNow() {
	if t.reaper.all {
		t.reaper.reap()
	}
}
