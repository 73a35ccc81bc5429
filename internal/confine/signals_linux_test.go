package confine

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// noSuchPid is above any pid_max (4194304), so signals to it fail with
// ESRCH once past the filter.
const noSuchPid = 0x3fffffff

// siQueue is si_code SI_QUEUE: what sigqueue(3) sends, and what makes the
// Go runtime take a SIGSEGV for a fault of its own.
const siQueue = -1

// queuedInfo returns a pointer to a siginfo_t for sig with si_code
// SI_QUEUE, kept alive like cstr's buffers.
func queuedInfo(sig unix.Signal) uintptr {
	b := make([]byte, 128)
	*(*int32)(unsafe.Pointer(&b[0])) = int32(sig)
	*(*int32)(unsafe.Pointer(&b[8])) = siQueue
	keep = append(keep, &b[0])
	return uintptr(unsafe.Pointer(&b[0]))
}

// fSetSig sets the I/O signal of a pipe to sig.
func fSetSig(sig unix.Signal) string {
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return "pipe: " + errnoString(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	_, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETSIG, int(sig))
	return errnoString(err)
}

// ownLimits changes the process's own limits both ways the C library does
// (setrlimit, prlimit64 with pid 0) and reads another process's.
func ownLimits(other int) string {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return "getrlimit: " + errnoString(err)
	}
	lower := unix.Rlimit{Cur: lim.Cur - 1, Max: lim.Max}
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lower); err != nil {
		return "setrlimit: " + errnoString(err)
	}
	if err := unix.Prlimit(0, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
		return "prlimit(0): " + errnoString(err)
	}
	var theirs unix.Rlimit
	if err := unix.Prlimit(other, unix.RLIMIT_NOFILE, nil, &theirs); err != nil {
		return "read another process's limit: " + errnoString(err)
	}
	if theirs.Max == 0 {
		return "read a zero limit"
	}
	return "ok"
}

// signalsBetweenProcesses checks that a confined process still signals its
// children every ordinary way, fault signals included where the kernel
// fixes si_code, and that only a queued fault signal is refused.
func signalsBetweenProcesses() string {
	sends := []struct {
		name string
		sig  unix.Signal
		send func(pid int) error
	}{
		{"kill SIGTERM", unix.SIGTERM, func(pid int) error { return unix.Kill(pid, unix.SIGTERM) }},
		{"kill SIGSEGV", unix.SIGSEGV, func(pid int) error { return unix.Kill(pid, unix.SIGSEGV) }},
		{"tgkill SIGUSR1", unix.SIGUSR1, func(pid int) error { return unix.Tgkill(pid, pid, unix.SIGUSR1) }},
		{"sigqueue SIGTERM", unix.SIGTERM, func(pid int) error {
			return errnoOf(unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(pid), uintptr(unix.SIGTERM), queuedInfo(unix.SIGTERM)))
		}},
		{"tgsigqueue SIGUSR2", unix.SIGUSR2, func(pid int) error {
			return errnoOf(unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, uintptr(pid), uintptr(pid), uintptr(unix.SIGUSR2), queuedInfo(unix.SIGUSR2), 0, 0))
		}},
		{"pidfd SIGTERM with info", unix.SIGTERM, func(pid int) error {
			return pidfdSend(pid, unix.SIGTERM, queuedInfo(unix.SIGTERM))
		}},
		{"pidfd SIGSEGV without info", unix.SIGSEGV, func(pid int) error { return pidfdSend(pid, unix.SIGSEGV, 0) }},
	}
	for _, s := range sends {
		if got := signalChild(s.send, s.sig); got != "ok" {
			return s.name + ": " + got
		}
	}
	// The refused case, on a live child of the caller's.
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		return errnoString(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	err := errnoOf(unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, uintptr(cmd.Process.Pid), uintptr(unix.SIGSEGV), queuedInfo(unix.SIGSEGV)))
	if !errors.Is(err, unix.EPERM) {
		return "sigqueue SIGSEGV to a child: " + errnoString(err)
	}
	return "ok"
}

// signalChild starts a child, sends it a signal and checks that the
// signal killed it.
func signalChild(send func(pid int) error, want unix.Signal) string {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		return errnoString(err)
	}
	stop := time.AfterFunc(10*time.Second, func() { _ = cmd.Process.Kill() })
	defer stop.Stop()
	if err := send(cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return errnoString(err)
	}
	_ = cmd.Wait()
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ok || !ws.Signaled() || ws.Signal() != want {
		return fmt.Sprintf("child ended with %v, want signal %v", cmd.ProcessState, want)
	}
	return "ok"
}

func pidfdSend(pid int, sig unix.Signal, info uintptr) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return errnoOf(unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(fd), uintptr(sig), info, 0, 0, 0))
}

// errnoOf turns a raw system call's outcome into an error (nil on success).
func errnoOf(_, _ uintptr, e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}
