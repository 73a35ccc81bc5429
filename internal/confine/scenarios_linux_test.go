package confine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// controlKind says what the unconfined control run of a scenario must show.
type controlKind int

const (
	// controlStrict: the unconfined result must differ from want.
	controlStrict controlKind = iota
	// controlLoose: it should differ, but may not on some hosts (sysctls
	// such as kernel.io_uring_disabled give the same errno).
	controlLoose
	// controlNone: no control run (the scenario checks an allowed path).
	controlNone
)

// scenario is one child test; run returns a short outcome string.
type scenario struct {
	run        func(*scenarioEnv) string
	want       string
	control    controlKind
	landlock   bool // needs Landlock (ABI >= minABI)
	minABI     int
	before     func(*scenarioEnv) error // runs before Apply
	standalone bool                     // not part of TestScenarios
	keep       uint64                   // Policy.KeepBounding
}

// scenarioEnv is the child's view of the fixture.
type scenarioEnv struct {
	dir string
	// work and result talk to a goroutine locked to an OS thread that
	// existed before Apply (see startLockedThread).
	work   chan func() string
	result chan string
}

func (e *scenarioEnv) path(p ...string) string {
	return filepath.Join(append([]string{e.dir}, p...)...)
}

func scenarioNames() []string {
	var names []string
	for n, sc := range scenarios {
		if !sc.standalone {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names
}

// errnoString names the outcome of a call: "ok" or the errno's name.
func errnoString(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		if e == 0 {
			return "ok"
		}
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// sys makes a raw system call and names its outcome.
func sys(nr uintptr, args ...uintptr) string {
	var a [6]uintptr
	copy(a[:], args)
	_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	return errnoString(e)
}

// cstr returns a pointer to a NUL-terminated copy of s, kept alive by the
// returned slice's backing array for the caller's statement.
func cstr(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	keep = append(keep, p)
	return uintptr(unsafe.Pointer(p))
}

// keep holds cstr's buffers alive until the child exits.
var keep []*byte

func siblingPid() uintptr {
	pid, _ := strconv.Atoi(os.Getenv(envSibling))
	return uintptr(pid)
}

// Flags used in deliberately invalid clone calls: even if the filter let
// them through, the kernel refuses CLONE_NEWUSER or CLONE_NEWNS combined
// with CLONE_FS (EINVAL), so no child is ever created.
const cloneFS = unix.CLONE_FS

var scenarios = map[string]scenario{
	// --- system calls the filter refuses ---
	"mount": {want: "EPERM", run: func(e *scenarioEnv) string {
		return sys(unix.SYS_MOUNT, cstr("none"), cstr(e.path("nonexistent")), cstr("tmpfs"), 0, 0)
	}},
	"umount2": {want: "EPERM", run: func(e *scenarioEnv) string {
		return sys(unix.SYS_UMOUNT2, cstr(e.path("nonexistent")), 0)
	}},
	"pivot_root": {want: "EPERM", run: func(e *scenarioEnv) string {
		return sys(unix.SYS_PIVOT_ROOT, cstr(e.path("nonexistent")), cstr(e.path("nonexistent")))
	}},
	"unshare_user": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_UNSHARE, unix.CLONE_NEWUSER)
	}},
	"unshare_mount": {want: "EPERM", run: func(*scenarioEnv) string {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		return sys(unix.SYS_UNSHARE, unix.CLONE_NEWNS)
	}},
	"clone_newuser": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_CLONE, unix.CLONE_NEWUSER|cloneFS|uintptr(unix.SIGCHLD), 0, 0, 0, 0)
	}},
	"clone_newns": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_CLONE, unix.CLONE_NEWNS|cloneFS|uintptr(unix.SIGCHLD), 0, 0, 0, 0)
	}},
	"clone3": {want: "ENOSYS", run: func(*scenarioEnv) string {
		return sys(unix.SYS_CLONE3, 0, 0)
	}},
	"setns": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_SETNS, ^uintptr(0), 0)
	}},
	"ptrace_traceme": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_PTRACE, unix.PTRACE_TRACEME, 0, 0, 0)
	}},
	"ptrace_sibling": {want: "EPERM", run: func(*scenarioEnv) string {
		// PTRACE_SEIZE does not stop the tracee; the control run's tracer
		// detaches by exiting.
		return sys(unix.SYS_PTRACE, unix.PTRACE_SEIZE, siblingPid(), 0, 0)
	}},
	"process_vm_readv": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_PROCESS_VM_READV, siblingPid(), 0, 0, 0, 0, 0)
	}},
	"kcmp": {want: "EPERM", run: func(*scenarioEnv) string {
		pid := uintptr(os.Getpid())
		return sys(unix.SYS_KCMP, pid, pid, 1 /* KCMP_FILE */, 0, 0)
	}},
	"pidfd_getfd": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_PIDFD_GETFD, ^uintptr(0), 0, 0)
	}},
	"keyctl": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_KEYCTL, 9999, 0, 0, 0, 0)
	}},
	"add_key": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_ADD_KEY, 0, 0, 0, 0, 0)
	}},
	"request_key": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_REQUEST_KEY, 0, 0, 0, 0)
	}},
	"io_uring_setup": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return sys(unix.SYS_IO_URING_SETUP, 0, 0)
	}},
	"bpf": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return sys(unix.SYS_BPF, 9999, 0, 0)
	}},
	"perf_event_open": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return sys(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0)
	}},
	"userfaultfd": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return sys(unix.SYS_USERFAULTFD, 0xffff)
	}},
	"kexec_load": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return sys(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0x80 /* invalid flag: EINVAL if it got through */)
	}},
	"chroot": {want: "EPERM", run: func(e *scenarioEnv) string {
		return sys(unix.SYS_CHROOT, cstr(e.path("nonexistent")))
	}},
	"sethostname": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_SETHOSTNAME, 0, 1<<20)
	}},
	"fsopen": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_FSOPEN, 0, 0)
	}},
	"syslog": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return sys(unix.SYS_SYSLOG, 10 /* SYSLOG_ACTION_SIZE_BUFFER */, 0, 0)
	}},
	"reboot": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_REBOOT, 0, 0, 0, 0) // bad magic: EINVAL if it got through
	}},
	"personality": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_PERSONALITY, 0x0400000) // READ_IMPLIES_EXEC
	}},
	"socket_vsock": {want: "EPERM", run: func(*scenarioEnv) string {
		return socketResult(unix.AF_VSOCK, unix.SOCK_STREAM)
	}},
	"socket_alg": {want: "EPERM", run: func(*scenarioEnv) string {
		return socketResult(unix.AF_ALG, unix.SOCK_SEQPACKET)
	}},
	"socket_packet": {want: "EPERM", run: func(*scenarioEnv) string {
		return socketResult(unix.AF_PACKET, unix.SOCK_RAW)
	}},
	"socket_unix_high_bits": {want: "EPERM", run: func(*scenarioEnv) string {
		return socketResult(1<<32|unix.AF_UNIX, unix.SOCK_STREAM)
	}},
	"tiocsti": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return tiocsti(unix.TIOCSTI)
	}},
	"tiocsti_high_bits": {want: "EPERM", control: controlLoose, run: func(*scenarioEnv) string {
		return tiocsti(1<<32 | unix.TIOCSTI)
	}},

	// --- harming a process one may signal (the agent, for sandbox root) ---
	// The targets do not exist, so that the control run, which the filter
	// does not stop, ends with ESRCH (or EBADF) rather than a crash.
	"sigqueue_fault": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_RT_SIGQUEUEINFO, noSuchPid, uintptr(unix.SIGSEGV), queuedInfo(unix.SIGSEGV))
	}},
	"sigqueue_fault_high_bits": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_RT_SIGQUEUEINFO, noSuchPid, 1<<32|uintptr(unix.SIGBUS), queuedInfo(unix.SIGBUS))
	}},
	"tgsigqueue_fault": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_RT_TGSIGQUEUEINFO, noSuchPid, noSuchPid, uintptr(unix.SIGFPE), queuedInfo(unix.SIGFPE))
	}},
	"pidfd_send_signal_fault_info": {want: "EPERM", run: func(*scenarioEnv) string {
		return sys(unix.SYS_PIDFD_SEND_SIGNAL, ^uintptr(0), uintptr(unix.SIGSEGV), queuedInfo(unix.SIGSEGV), 0)
	}},
	"pidfd_send_signal_fault_no_info": {want: "EBADF", control: controlNone, run: func(*scenarioEnv) string {
		return sys(unix.SYS_PIDFD_SEND_SIGNAL, ^uintptr(0), uintptr(unix.SIGSEGV), 0, 0)
	}},
	"fsetsig_fault": {want: "EPERM", run: func(*scenarioEnv) string {
		return fSetSig(unix.SIGSEGV)
	}},
	"fsetsig_sigio": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		return fSetSig(unix.SIGIO)
	}},
	"prlimit_other": {want: "EPERM", run: func(*scenarioEnv) string {
		lim := unix.Rlimit{Cur: 8, Max: 8}
		return sys(unix.SYS_PRLIMIT64, noSuchPid, unix.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&lim)), 0)
	}},
	"own_limits_and_reading_others": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		return ownLimits(int(siblingPid()))
	}},
	"signals_between_processes": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		return signalsBetweenProcesses()
	}},

	// --- process state ---
	"status": {want: "ok", run: func(*scenarioEnv) string {
		return checkAllThreads(func(st State) error {
			if !st.NoNewPrivs || st.CapBnd != 0 || st.SeccompMode != 2 || st.CapAmb != 0 || st.CapInh != 0 {
				return fmt.Errorf("%+v", st)
			}
			if st.CapEff&(1<<unix.CAP_SETUID) == 0 {
				return fmt.Errorf("lost CAP_SETUID: %+v", st)
			}
			return nil
		})
	}},
	"threads_after_apply": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		var wg sync.WaitGroup
		release := make(chan struct{})
		for range 20 {
			wg.Go(func() {
				runtime.LockOSThread() // forces new OS threads
				<-release
			})
		}
		time.Sleep(50 * time.Millisecond)
		runtime.GC()
		res := checkAllThreads(func(st State) error {
			if !st.NoNewPrivs || st.CapBnd != 0 || st.SeccompMode != 2 {
				return fmt.Errorf("%+v", st)
			}
			return nil
		})
		close(release)
		wg.Wait()
		return res
	}},

	// --- Landlock ---
	"landlock_write_outside": {want: "EACCES", landlock: true, minABI: 1, run: func(e *scenarioEnv) string {
		return errnoString(os.WriteFile(e.path("outside", "new"), []byte("x"), 0o644))
	}},
	"landlock_read_outside": {want: "EACCES", landlock: true, minABI: 1, run: func(e *scenarioEnv) string {
		_, err := os.ReadFile(e.path("outside", "file"))
		return errnoString(err)
	}},
	"landlock_write_readonly": {want: "EACCES", landlock: true, minABI: 1, run: func(e *scenarioEnv) string {
		// Not ro/file: the control run really writes, concurrently with
		// landlock_read_readonly.
		return errnoString(os.WriteFile(e.path("ro", "victim"), []byte("x"), 0o644))
	}},
	"landlock_read_readonly": {want: "content of ro", control: controlNone, landlock: true, minABI: 1, run: func(e *scenarioEnv) string {
		b, err := os.ReadFile(e.path("ro", "file"))
		if err != nil {
			return errnoString(err)
		}
		return string(b)
	}},
	"landlock_writable": {want: "ok", control: controlNone, landlock: true, minABI: 1, run: func(e *scenarioEnv) string {
		return writableOps(e.path("rw"))
	}},
	"landlock_exec_writable": {want: "hi", control: controlNone, landlock: true, minABI: 1, run: func(e *scenarioEnv) string {
		script := e.path("rw", "s.sh")
		if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
			return errnoString(err)
		}
		return output(exec.Command(script))
	}},
	"landlock_fd": {want: "ok", control: controlNone, landlock: true, minABI: 1, run: func(*scenarioEnv) string {
		if err := unix.Mkdirat(childFD, "cg", 0o755); err != nil {
			return "mkdirat: " + errnoString(err)
		}
		fd, err := unix.Openat(childFD, "cg/tasks", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			return "openat: " + errnoString(err)
		}
		_, err = unix.Write(fd, []byte("1\n"))
		unix.Close(fd)
		if err != nil {
			return "write: " + errnoString(err)
		}
		if err := unix.Unlinkat(childFD, "cg/tasks", 0); err != nil {
			return "unlink: " + errnoString(err)
		}
		return errnoString(unix.Unlinkat(childFD, "cg", unix.AT_REMOVEDIR))
	}},
	"landlock_thread_before_apply": {want: "EACCES", landlock: true, minABI: 1,
		before: startLockedThread,
		run: func(e *scenarioEnv) string {
			e.work <- func() string {
				return errnoString(os.WriteFile(e.path("outside", "from-thread"), []byte("x"), 0o644))
			}
			return <-e.result
		}},
	"landlock_dev_null_truncate": {want: "ok", control: controlNone, landlock: true, minABI: 3, run: func(*scenarioEnv) string {
		return output(exec.Command("/bin/sh", "-c", "echo x > /dev/null && echo ok"))
	}},
	"landlock_scope_signal": {want: "EPERM", landlock: true, minABI: 6, run: func(*scenarioEnv) string {
		return errnoString(unix.Kill(int(siblingPid()), 0))
	}},
	"landlock_scope_abstract_unix": {want: "EPERM", landlock: true, minABI: 6, run: func(*scenarioEnv) string {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return "socket: " + errnoString(err)
		}
		defer unix.Close(fd)
		return errnoString(unix.Connect(fd, &unix.SockaddrUnix{Name: os.Getenv(envAbstract)}))
	}},

	// --- what must keep working ---
	"exec_shell": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		return output(exec.Command("/bin/sh", "-c", "echo ok"))
	}},
	"exec_as_uid_1000": {want: "1000 1000 0", control: controlNone, run: func(*scenarioEnv) string {
		cmd := exec.Command("/bin/sh", "-c", `echo "$(id -u) $(id -g) $(grep CapEff /proc/self/status | tr -dc 1-9 | wc -c)"`)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000, Groups: []uint32{}}}
		return output(cmd)
	}},
	"exec_as_root_no_caps": {want: "CapInh=0 CapPrm=0 CapEff=0 CapBnd=0 CapAmb=0 NoNewPrivs=1 Seccomp=2",
		before: raiseInheritable,
		run:    func(*scenarioEnv) string { return childCaps(0) }},
	// A build sandbox's root keeps exactly the kept capabilities; uid 1000
	// still gets none.
	"exec_as_root_kept_caps": {want: "CapInh=0 CapPrm=9 CapEff=9 CapBnd=9 CapAmb=0 NoNewPrivs=1 Seccomp=2",
		before: raiseInheritable,
		keep:   1<<unix.CAP_CHOWN | 1<<unix.CAP_FOWNER,
		run:    func(*scenarioEnv) string { return childCaps(0) }},
	"exec_as_uid_1000_kept_caps": {want: "CapInh=0 CapPrm=0 CapEff=0 CapBnd=9 CapAmb=0 NoNewPrivs=1 Seccomp=2",
		keep: 1<<unix.CAP_CHOWN | 1<<unix.CAP_FOWNER,
		run:  func(*scenarioEnv) string { return childCaps(1000) }},
	"signal_own_child": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		cmd := exec.Command("sleep", "60")
		if err := cmd.Start(); err != nil {
			return errnoString(err)
		}
		err := cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		return errnoString(err)
	}},
	"pty": {want: "ok", control: controlNone, run: func(*scenarioEnv) string {
		master, slave, err := openPTY()
		if err != nil {
			return err.Error()
		}
		defer master.Close()
		defer slave.Close()
		want := unix.Winsize{Row: 42, Col: 132}
		if err := unix.IoctlSetWinsize(int(master.Fd()), unix.TIOCSWINSZ, &want); err != nil {
			return "TIOCSWINSZ: " + errnoString(err)
		}
		got, err := unix.IoctlGetWinsize(int(slave.Fd()), unix.TIOCGWINSZ)
		if err != nil {
			return "TIOCGWINSZ: " + errnoString(err)
		}
		if got.Row != want.Row || got.Col != want.Col {
			return fmt.Sprintf("size %dx%d", got.Row, got.Col)
		}
		return "ok"
	}},
	"sockets": {want: "ok", control: controlNone, run: func(e *scenarioEnv) string {
		return socketOps(e.path("rw", "sock"))
	}},
	"bad_fd": {standalone: true, run: func(e *scenarioEnv) string {
		f, err := os.Open(e.path("ro", "file"))
		if err != nil {
			return err.Error()
		}
		p := testPolicy(e.dir)
		p.WritableFDs = []int{int(f.Fd())}
		_, err = Apply(p)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			return fmt.Sprintf("Apply: %v", err)
		}
		st, err := Status()
		if err != nil || st.SeccompMode != 0 || st.NoNewPrivs || st.CapBnd == 0 {
			return fmt.Sprintf("changed: %+v %v", st, err)
		}
		return "invalid argument, unconfined"
	}},
}

func socketResult(domain uint64, typ int) string {
	fd, _, e := unix.Syscall(unix.SYS_SOCKET, uintptr(domain), uintptr(typ|unix.SOCK_CLOEXEC), 0)
	if e == 0 {
		unix.Close(int(fd))
	}
	return errnoString(e)
}

func tiocsti(request uint64) string {
	master, slave, err := openPTY()
	if err != nil {
		return err.Error()
	}
	defer master.Close()
	defer slave.Close()
	c := byte('x')
	_, _, e := unix.Syscall(unix.SYS_IOCTL, slave.Fd(), uintptr(request), uintptr(unsafe.Pointer(&c)))
	return errnoString(e)
}

// openPTY opens a new pty pair through /dev/ptmx.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open ptmx: %s", errnoString(err))
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock: %s", errnoString(err))
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("ptsname: %s", errnoString(err))
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.Itoa(n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open pts: %s", errnoString(err))
	}
	return master, slave, nil
}

func output(cmd *exec.Cmd) string {
	out, err := cmd.Output()
	if err != nil {
		return fmt.Sprintf("%v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

// checkAllThreads applies check to the status of every thread.
func checkAllThreads(check func(State) error) string {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return errnoString(err)
	}
	for _, task := range tasks {
		f, err := os.Open("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			return errnoString(err)
		}
		st, err := parseStatus(f)
		f.Close()
		if err != nil {
			return err.Error()
		}
		if err := check(st); err != nil {
			return fmt.Sprintf("thread %s: %v", task.Name(), err)
		}
	}
	return "ok"
}

// writableOps exercises every right a Writable tree grants.
func writableOps(dir string) string {
	steps := []struct {
		name string
		do   func() error
	}{
		{"create", func() error { return os.WriteFile(filepath.Join(dir, "a"), []byte("hello"), 0o644) }},
		{"truncate", func() error { return os.WriteFile(filepath.Join(dir, "a"), []byte("hi"), 0o644) }},
		{"mkdir", func() error { return os.Mkdir(filepath.Join(dir, "d"), 0o755) }},
		{"rename", func() error { return os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "d", "b")) }},
		{"symlink", func() error { return os.Symlink("b", filepath.Join(dir, "d", "l")) }},
		{"mkfifo", func() error { return unix.Mkfifo(filepath.Join(dir, "d", "p"), 0o644) }},
		{"read", func() error {
			b, err := os.ReadFile(filepath.Join(dir, "d", "l"))
			if err == nil && string(b) != "hi" {
				err = fmt.Errorf("read %q", b)
			}
			return err
		}},
		{"remove", func() error { return os.RemoveAll(filepath.Join(dir, "d")) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return s.name + ": " + errnoString(err)
		}
	}
	return "ok"
}

// socketOps creates the socket kinds the agent needs and talks over the
// unix and TCP ones. It uses raw sockets: importing net would link cgo
// into the test binary, and Apply cannot run in a cgo binary.
func socketOps(unixPath string) string {
	if err := talk(unix.AF_UNIX, &unix.SockaddrUnix{Name: unixPath}); err != nil {
		return "unix: " + err.Error()
	}
	if err := talk(unix.AF_INET, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return "tcp: " + err.Error()
	}
	for _, s := range []struct {
		name           string
		domain, typ, p int
	}{
		{"inet6", unix.AF_INET6, unix.SOCK_DGRAM, 0},
		{"netlink", unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE},
	} {
		fd, err := unix.Socket(s.domain, s.typ|unix.SOCK_CLOEXEC, s.p)
		if err != nil {
			return s.name + ": " + errnoString(err)
		}
		unix.Close(fd)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "socketpair: " + errnoString(err)
	}
	unix.Close(fds[0])
	unix.Close(fds[1])
	if _, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC); err != nil {
		return "netlink dump: " + errnoString(err)
	}
	return "ok"
}

// talk listens on addr, connects to it and passes one message.
func talk(domain int, addr unix.Sockaddr) error {
	ln, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %s", errnoString(err))
	}
	defer unix.Close(ln)
	if err := unix.Bind(ln, addr); err != nil {
		return fmt.Errorf("bind: %s", errnoString(err))
	}
	if err := unix.Listen(ln, 1); err != nil {
		return fmt.Errorf("listen: %s", errnoString(err))
	}
	bound, err := unix.Getsockname(ln)
	if err != nil {
		return fmt.Errorf("getsockname: %s", errnoString(err))
	}
	c, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %s", errnoString(err))
	}
	defer unix.Close(c)
	if err := unix.Connect(c, bound); err != nil {
		return fmt.Errorf("connect: %s", errnoString(err))
	}
	s, _, err := unix.Accept4(ln, unix.SOCK_CLOEXEC)
	if err != nil {
		return fmt.Errorf("accept: %s", errnoString(err))
	}
	defer unix.Close(s)
	if _, err := unix.Write(s, []byte("pong")); err != nil {
		return fmt.Errorf("write: %s", errnoString(err))
	}
	buf := make([]byte, 8)
	n, err := unix.Read(c, buf)
	if err != nil || string(buf[:n]) != "pong" {
		return fmt.Errorf("read %q: %s", buf[:n], errnoString(err))
	}
	return nil
}

// startLockedThread parks a goroutine on an OS thread created before Apply;
// the scenario sends it work through e.work.
func startLockedThread(e *scenarioEnv) error {
	e.work, e.result = make(chan func() string), make(chan string)
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		close(ready)
		f := <-e.work
		e.result <- f()
	}()
	<-ready
	return nil
}

// raiseInheritable puts capabilities in the inheritable set of every thread,
// so that exec_as_root_no_caps shows Apply clears it: with an empty bounding
// set, a root execve still gets P(inheritable).
// childCaps runs cat /proc/self/status as uid and reports its capability
// sets, no_new_privs and seccomp mode.
func childCaps(uid uint32) string {
	cmd := exec.Command("/bin/cat", "/proc/self/status")
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid, Groups: []uint32{}}}
	out, err := cmd.Output()
	if err != nil {
		return errnoString(err)
	}
	st, err := parseStatus(strings.NewReader(string(out)))
	if err != nil {
		return err.Error()
	}
	nnp := 0
	if st.NoNewPrivs {
		nnp = 1
	}
	return fmt.Sprintf("CapInh=%x CapPrm=%x CapEff=%x CapBnd=%x CapAmb=%x NoNewPrivs=%d Seccomp=%d",
		st.CapInh, st.CapPrm, st.CapEff, st.CapBnd, st.CapAmb, nnp, st.SeccompMode)
}

func raiseInheritable(*scenarioEnv) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	data[0].Inheritable = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_SYS_ADMIN
	_, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0)
	if e == syscall.ENOTSUP {
		return nil // cgo build: Apply will report the skip
	}
	if e != 0 {
		return e
	}
	return nil
}
