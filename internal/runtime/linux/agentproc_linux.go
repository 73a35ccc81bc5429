package linux

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// agentProc is a sandbox's agent process as the daemon holds it: one
// pidfd, non-blocking and registered with the Go netpoller, and one
// goroutine parked in the netpoller until the process exits. No OS thread
// waits for it: os/exec's Cmd.Wait would block one thread per sandbox in
// wait4 (and the os.Process behind it holds a pidfd of its own, a second
// descriptor per sandbox).
//
// The pidfd is also how the daemon signals the agent: it names the
// process it was opened for even after that pid is reused.
type agentProc struct {
	f       *os.File
	rc      syscall.RawConn
	exited  chan struct{} // closed once the process has exited (and, for a child, been reaped)
	closing atomic.Bool
}

// newAgentProc takes ownership of pidfd, a pidfd of the agent, and
// starts watching it. child says that the agent is this process's child:
// the watcher then reaps it, as the daemon that started it must. An
// adopted agent is init's child after the restart, and init reaps it.
func newAgentProc(pidfd int, child bool) (*agentProc, error) {
	if err := unix.SetNonblock(pidfd, true); err != nil {
		unix.Close(pidfd)
		return nil, fmt.Errorf("pidfd: %w: %v", errdefs.ErrInternal, err)
	}
	// A non-blocking descriptor that epoll accepts is registered with
	// the netpoller; SetReadDeadline fails for one it did not take.
	f := os.NewFile(uintptr(pidfd), "pidfd")
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		f.Close()
		return nil, fmt.Errorf("pidfd cannot be polled: %w", errdefs.ErrNotSupported)
	}
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pidfd: %w: %v", errdefs.ErrInternal, err)
	}
	p := &agentProc{f: f, rc: rc, exited: make(chan struct{})}
	go p.wait(child)
	return p, nil
}

// wait closes p.exited once the process has exited. A pidfd polls
// readable when its process has exited; until then Read parks the
// goroutine in the netpoller.
func (p *agentProc) wait(child bool) {
	err := p.rc.Read(func(fd uintptr) bool {
		if !pidfdExited(int(fd)) {
			return false
		}
		if child {
			// Reap it; WNOHANG because it may have been reaped already.
			var info unix.Siginfo
			_ = unix.Waitid(unix.P_PIDFD, int(fd), &info, unix.WEXITED|unix.WNOHANG, nil)
		}
		return true
	})
	if err != nil {
		// Only close makes Read fail (the descriptor was checked to be
		// pollable): whoever closed it no longer waits for the exit.
		return
	}
	close(p.exited)
}

// signal sends sig to the agent. It does nothing once p is closed.
func (p *agentProc) signal(sig unix.Signal) {
	_ = p.rc.Control(func(fd uintptr) {
		_ = unix.PidfdSendSignal(int(fd), sig, nil, 0)
	})
}

// hasExited reports whether the agent has exited (and been reaped, if it
// is our child).
func (p *agentProc) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// close releases the pidfd and ends the watcher.
func (p *agentProc) close() {
	p.closing.Store(true)
	_ = p.f.Close()
}

// pidfdExited reports whether the process of pidfd has exited. A PID
// namespace's init exits only once every other process of the namespace
// is gone.
func pidfdExited(pidfd int) bool {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n > 0
}

// openAgentProc returns the agentProc of the agent recorded in st, not
// our child, or nil when that process is gone (its pid free or reused) or
// cannot be watched.
func openAgentProc(st *state) *agentProc {
	if st == nil || st.Pid <= 0 {
		return nil
	}
	fd, err := unix.PidfdOpen(st.Pid, 0)
	if err != nil {
		return nil
	}
	// Checked after the open: the pidfd pins the process it names.
	if start, err := procStartTime(st.Pid); err != nil || start != st.PidStart {
		unix.Close(fd)
		return nil
	}
	p, err := newAgentProc(fd, false)
	if err != nil {
		return nil
	}
	return p
}
