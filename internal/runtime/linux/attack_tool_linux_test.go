package linux

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// attackCommand makes the test binary act as an attacker inside a
// sandbox. The sandbox sees the agent binary — in tests, this test
// binary — at agentBinaryPath, so `airlock attack NAME` runs one escape
// attempt from inside and prints "blocked: <errno>" or "ALLOWED".
const attackCommand = "attack"

// attacks are syscall-level escape attempts. Each returns nil only if the
// attempt succeeded, which the tests treat as a breach.
var attacks = map[string]func() error{
	"mount": func() error {
		return unix.Mount("none", "/tmp", "tmpfs", 0, "")
	},
	"unshare-user":  func() error { return unix.Unshare(unix.CLONE_NEWUSER) },
	"unshare-mount": func() error { return unix.Unshare(unix.CLONE_NEWNS) },
	"unshare-net":   func() error { return unix.Unshare(unix.CLONE_NEWNET) },
	"clone-newuser": func() error {
		pid, _, errno := unix.RawSyscall6(unix.SYS_CLONE, unix.CLONE_NEWUSER|uintptr(unix.SIGCHLD), 0, 0, 0, 0, 0)
		if errno != 0 {
			return errno
		}
		if pid == 0 {
			unix.Exit(0)
		}
		return nil
	},
	"clone3": func() error { return clone3NS(unix.CLONE_NEWUSER) },
	// clone3's flags are beyond seccomp; every namespace flag fails on
	// the sandbox's namespace limits instead (all 0).
	"clone3-newns":       func() error { return clone3NS(unix.CLONE_NEWNS) },
	"clone3-newnet":      func() error { return clone3NS(unix.CLONE_NEWNET) },
	"clone3-newpid":      func() error { return clone3NS(unix.CLONE_NEWPID) },
	"clone3-newcgroup":   func() error { return clone3NS(unix.CLONE_NEWCGROUP) },
	"clone3-newipc":      func() error { return clone3NS(unix.CLONE_NEWIPC) },
	"clone3-newuts":      func() error { return clone3NS(unix.CLONE_NEWUTS) },
	"clone3-newtime":     func() error { return clone3NS(unix.CLONE_NEWTIME) },
	"clone3-user-and-ns": func() error { return clone3NS(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWNET) },
	"raise-max-userns": func() error {
		return os.WriteFile("/proc/sys/user/max_user_namespaces", []byte("1000"), 0)
	},
	"setns": func() error {
		fd, err := unix.Open("/proc/1/ns/mnt", unix.O_RDONLY, 0)
		if err != nil {
			return err
		}
		return unix.Setns(fd, 0)
	},
	"ptrace-agent": func() error {
		return unix.PtraceAttach(1)
	},
	"ptrace-traceme": func() error {
		_, _, errno := unix.RawSyscall(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0)
		if errno != 0 {
			return errno
		}
		return nil
	},
	"keyctl": func() error {
		_, err := unix.KeyctlJoinSessionKeyring("attack")
		return err
	},
	"add_key": func() error {
		_, err := unix.AddKey("user", "attack", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		return err
	},
	"io_uring": func() error {
		params := make([]byte, 120)
		fd, _, errno := unix.RawSyscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&params[0])), 0)
		if errno != 0 {
			return errno
		}
		unix.Close(int(fd))
		return nil
	},
	"bpf": func() error {
		attr := make([]byte, 128)
		_, _, errno := unix.RawSyscall(unix.SYS_BPF, 0 /* BPF_MAP_CREATE */, uintptr(unsafe.Pointer(&attr[0])), 128)
		if errno != 0 {
			return errno
		}
		return nil
	},
	"perf_event_open": func() error {
		attr := unix.PerfEventAttr{Type: unix.PERF_TYPE_SOFTWARE, Config: unix.PERF_COUNT_SW_CPU_CLOCK}
		attr.Size = uint32(unsafe.Sizeof(attr))
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	"userfaultfd": func() error {
		fd, _, errno := unix.RawSyscall(unix.SYS_USERFAULTFD, 0, 0, 0)
		if errno != 0 {
			return errno
		}
		unix.Close(int(fd))
		return nil
	},
	"vsock": func() error {
		fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0)
		if err == nil {
			unix.Close(fd)
		}
		return err
	},
	"write-proc-sys": func() error {
		return os.WriteFile("/proc/sys/kernel/hostname", []byte("pwned"), 0)
	},
	"write-sysrq": func() error {
		// Masked by /dev/null: a write that lands there is harmless (and
		// allowed where the kernel has no Landlock).
		var st unix.Stat_t
		if err := unix.Stat("/proc/sysrq-trigger", &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == unix.Mkdev(1, 3) {
			return errors.New("masked by /dev/null")
		}
		return os.WriteFile("/proc/sysrq-trigger", []byte("h"), 0)
	},
	"read-kcore": func() error {
		b := make([]byte, 16)
		f, err := os.Open("/proc/kcore")
		if err != nil {
			return err
		}
		defer f.Close()
		n, _ := f.Read(b)
		if n == 0 {
			return errors.New("empty (masked)")
		}
		return nil
	},
	"open-agent-exe": func() error {
		f, err := os.Open("/proc/1/exe")
		if err == nil {
			f.Close()
		}
		return err
	},
	"agent-fds": func() error {
		// Root inside may list the fd numbers (the directory belongs to
		// the userns root), but must not resolve or open any of them.
		for fd := 0; fd < 64; fd++ {
			p := "/proc/1/fd/" + strconv.Itoa(fd)
			if _, err := os.Readlink(p); err == nil {
				return nil
			}
			if f, err := os.Open(p); err == nil {
				f.Close()
				return nil
			}
		}
		return errors.New("fd links unreadable")
	},
	"agent-environ": func() error {
		_, err := os.ReadFile("/proc/1/environ")
		return err
	},
	"agent-mem": func() error {
		f, err := os.Open("/proc/1/mem")
		if err == nil {
			f.Close()
		}
		return err
	},
	"write-self-exe": func() error {
		f, err := os.OpenFile("/proc/self/exe", os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err
	},
	"write-agent-binary": func() error {
		f, err := os.OpenFile(agentBinaryPath, os.O_WRONLY, 0)
		if err == nil {
			f.Close()
		}
		return err
	},
	"pidfd-getfd-agent": func() error {
		pidfd, err := unix.PidfdOpen(1, 0)
		if err != nil {
			return err
		}
		defer unix.Close(pidfd)
		for fd := 3; fd < 16; fd++ {
			if got, err := unix.PidfdGetfd(pidfd, fd, 0); err == nil {
				unix.Close(got)
				return nil
			} else if !errors.Is(err, unix.EBADF) {
				return err
			}
		}
		return unix.EBADF
	},
	"find-control-socket": func() error {
		// Any unix socket reachable by path would be a way to the agent or
		// the host. There must be none.
		var found string
		var walk func(dir string, depth int)
		walk = func(dir string, depth int) {
			if depth > 6 || found != "" {
				return
			}
			entries, err := os.ReadDir(dir)
			if err != nil {
				return
			}
			for _, e := range entries {
				p := dir + "/" + e.Name()
				if dir == "/" {
					p = "/" + e.Name()
				}
				if p == "/proc" || p == "/sys" {
					continue
				}
				if e.Type()&os.ModeSocket != 0 {
					found = p
					return
				}
				if e.IsDir() {
					walk(p, depth+1)
				}
			}
		}
		walk("/", 0)
		if found == "" {
			return errors.New("no socket found")
		}
		c, err := net.Dial("unix", found)
		if err != nil {
			return fmt.Errorf("found %s but: %w", found, err)
		}
		c.Close()
		return nil
	},
	// Sandbox root has the agent's uid, so the kernel lets it signal the
	// agent and change its limits. The agent swallows every signal it can
	// (SI_USER and SI_TKILL ones included), but the Go runtime takes a
	// fault signal with any other si_code for a fault of its own and
	// crashes; a lowered limit makes every later exec fail. The filter
	// refuses the calls that do either.
	"sigqueue-segv-agent": func() error {
		return errnoErr(unix.Syscall(unix.SYS_RT_SIGQUEUEINFO, 1, uintptr(unix.SIGSEGV), queuedSiginfo(unix.SIGSEGV)))
	},
	"tgsigqueue-segv-agent": func() error {
		// Every thread of the agent: a fault on one crashes them all.
		err := error(unix.ESRCH)
		for _, tid := range agentThreads() {
			if err = errnoErr(unix.Syscall6(unix.SYS_RT_TGSIGQUEUEINFO, 1, uintptr(tid), uintptr(unix.SIGBUS), queuedSiginfo(unix.SIGBUS), 0, 0)); err == nil {
				return nil
			}
		}
		return err
	},
	"pidfd-send-signal-info": func() error {
		pidfd, err := unix.PidfdOpen(1, 0)
		if err != nil {
			return err
		}
		defer unix.Close(pidfd)
		return errnoErr(unix.Syscall6(unix.SYS_PIDFD_SEND_SIGNAL, uintptr(pidfd), uintptr(unix.SIGSEGV), queuedSiginfo(unix.SIGSEGV), 0, 0, 0))
	},
	"fsetsig-segv-agent": func() error {
		// The kernel sends the F_SETSIG signal to the F_SETOWN owner with
		// si_code POLL_IN when the pipe becomes readable.
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return err
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETOWN, 1); err != nil {
			return err
		}
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETSIG, int(unix.SIGSEGV)); err != nil {
			return err
		}
		if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_ASYNC); err != nil {
			return err
		}
		_, err := unix.Write(p[1], []byte("x"))
		return err
	},
	"prlimit-agent-nofile": func() error {
		return unix.Prlimit(1, unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 8, Max: 8}, nil)
	},
	"prlimit-agent-cpu": func() error {
		// At the hard limit the kernel kills the agent with SIGKILL.
		return unix.Prlimit(1, unix.RLIMIT_CPU, &unix.Rlimit{Cur: 1, Max: 1}, nil)
	},
	// Scheduling the agent out: the kernel refuses these to sandbox root
	// because the agent holds capabilities it lacks (a target whose
	// permitted set is not a subset of the caller's needs CAP_SYS_NICE);
	// they stay here in case the agent ever drops them.
	"renice-agent": func() error { return unix.Setpriority(unix.PRIO_PROCESS, 1, 19) },
	"sched-idle-agent": func() error {
		var param [8]byte
		return errnoErr(unix.Syscall(unix.SYS_SCHED_SETSCHEDULER, 1, 5 /* SCHED_IDLE */, uintptr(unsafe.Pointer(&param[0]))))
	},
	"pin-agent": func() error {
		var set unix.CPUSet
		set.Set(0)
		return unix.SchedSetaffinity(1, &set)
	},
	"ioprio-idle-agent": func() error {
		const whoProcess, classIdle = 1, 3
		return errnoErr(unix.Syscall(unix.SYS_IOPRIO_SET, whoProcess, 1, classIdle<<13))
	},
	"oom-score-adj-agent": func() error {
		return os.WriteFile("/proc/1/oom_score_adj", []byte("1000"), 0)
	},
	"chroot": func() error { return unix.Chroot("/tmp") },
	"setuid-0": func() error {
		if os.Getuid() == 0 {
			return errors.New("already root (no capabilities: checked by the status test)")
		}
		return syscall.Setuid(0)
	},
}

// queuedSiginfo returns a pointer to a siginfo_t for sig with si_code
// SI_QUEUE (-1), as sigqueue(3) sends it. The buffer is never freed: each
// attack runs once in a short-lived process.
func queuedSiginfo(sig unix.Signal) uintptr {
	b := make([]int32, 32) // 128 bytes
	b[0], b[2] = int32(sig), -1
	heldSiginfos = append(heldSiginfos, b)
	return uintptr(unsafe.Pointer(&b[0]))
}

var heldSiginfos [][]int32

// agentThreads lists the agent's thread ids, or just 1 if /proc/1/task
// cannot be read.
func agentThreads() []int {
	entries, err := os.ReadDir("/proc/1/task")
	if err != nil {
		return []int{1}
	}
	var tids []int
	for _, e := range entries {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids
}

// errnoErr turns a raw system call's outcome into an error (nil on
// success).
func errnoErr(_, _ uintptr, e unix.Errno) error {
	if e != 0 {
		return e
	}
	return nil
}

// runAttack runs one attack and prints its outcome; it returns the exit
// code.
func runAttack(name string) int {
	fn, ok := attacks[name]
	if !ok {
		fmt.Println("unknown attack", name)
		return 2
	}
	if err := fn(); err != nil {
		fmt.Printf("blocked: %v\n", err)
		return 0
	}
	fmt.Println("ALLOWED")
	return 0
}

// clone3NS calls clone3 with flags (namespace flags) and SIGCHLD; a child
// that starts exits at once.
func clone3NS(flags uint64) error {
	args := make([]uint64, 11)
	args[0] = flags
	args[4] = uint64(unix.SIGCHLD) // exit_signal
	pid, _, errno := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(&args[0])), uintptr(len(args)*8), 0)
	if errno != 0 {
		return errno
	}
	if pid == 0 {
		unix.Exit(0)
	}
	return nil
}
