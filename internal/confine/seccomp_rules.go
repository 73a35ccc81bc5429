package confine

import (
	"fmt"
	"slices"
	"sort"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The seccomp allowlist starts from Docker's default profile
// (moby/profiles seccomp/default.json, the unconditional SCMP_ACT_ALLOW
// group), restricted to the system calls that exist on amd64 and arm64 and
// with these removed: adjtimex and clock_adjtime (clock tuning),
// name_to_handle_at (file handles). Docker's capability-gated groups (mount,
// unshare, setns, bpf, perf_event_open, ptrace, process_vm_*, chroot,
// reboot, modules, ...) are not granted at all: the sandbox has no
// capabilities to justify them. Names are those of the kernel's syscall
// tables as go-seccomp-bpf spells them.

// allowCommon is allowed unconditionally on amd64 and arm64.
var allowCommon = []string{
	"accept", "accept4", "bind", "brk", "cachestat", "capget", "capset", "chdir",
	"clock_getres", "clock_gettime", "clock_nanosleep", "close", "close_range", "connect",
	"copy_file_range", "dup", "dup3", "epoll_create1", "epoll_ctl", "epoll_pwait",
	"epoll_pwait2", "eventfd2", "execve", "execveat", "exit", "exit_group", "faccessat",
	"faccessat2", "fadvise64", "fallocate", "fanotify_mark", "fchdir", "fchmod", "fchmodat",
	"fchmodat2", "fchown", "fchownat", "fcntl", "fdatasync", "fgetxattr", "flistxattr",
	"flock", "fremovexattr", "fsetxattr", "fstat", "fstatfs", "fsync", "ftruncate", "futex",
	"futex_requeue", "futex_wait", "futex_waitv", "futex_wake", "get_robust_list", "getcpu",
	"getcwd", "getdents64", "getegid", "geteuid", "getgid", "getgroups", "getitimer",
	"getpeername", "getpgid", "getpid", "getppid", "getpriority", "getrandom", "getresgid",
	"getresuid", "getrlimit", "getrusage", "getsid", "getsockname", "getsockopt", "gettid",
	"gettimeofday", "getuid", "getxattr", "getxattrat", "inotify_add_watch", "inotify_init1",
	"inotify_rm_watch", "io_cancel", "io_destroy", "io_getevents", "io_pgetevents", "io_setup",
	"io_submit", "ioctl", "ioprio_get", "ioprio_set", "kill", "landlock_add_rule",
	"landlock_create_ruleset", "landlock_restrict_self", "lgetxattr", "linkat", "listen",
	"listmount", "listxattr", "listxattrat", "llistxattr", "lremovexattr", "lseek",
	"lsetxattr", "madvise", "map_shadow_stack", "membarrier", "memfd_create", "memfd_secret",
	"mincore", "mkdirat", "mknodat", "mlock", "mlock2", "mlockall", "mmap", "mprotect",
	"mq_getsetattr", "mq_notify", "mq_open", "mq_timedreceive", "mq_timedsend", "mq_unlink",
	"mremap", "mseal", "msgctl", "msgget", "msgrcv", "msgsnd", "msync", "munlock",
	"munlockall", "munmap", "nanosleep", "openat", "openat2", "pidfd_open",
	"pidfd_send_signal", "pipe2", "pkey_alloc", "pkey_free", "pkey_mprotect", "ppoll", "prctl",
	"pread64", "preadv", "preadv2", "prlimit64", "process_mrelease", "pselect6", "pwrite64",
	"pwritev", "pwritev2", "read", "readahead", "readlinkat", "readv", "recvfrom", "recvmmsg",
	"recvmsg", "remap_file_pages", "removexattr", "removexattrat", "renameat", "renameat2",
	"restart_syscall", "rseq", "rt_sigaction", "rt_sigpending", "rt_sigprocmask",
	"rt_sigqueueinfo", "rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
	"sched_get_priority_max", "sched_get_priority_min", "sched_getaffinity", "sched_getattr",
	"sched_getparam", "sched_getscheduler", "sched_rr_get_interval", "sched_setaffinity",
	"sched_setattr", "sched_setparam", "sched_setscheduler", "sched_yield", "seccomp",
	"semctl", "semget", "semop", "semtimedop", "sendfile", "sendmmsg", "sendmsg", "sendto",
	"set_robust_list", "set_tid_address", "setfsgid", "setfsuid", "setgid", "setgroups",
	"setitimer", "setpgid", "setpriority", "setregid", "setresgid", "setresuid", "setreuid",
	"setrlimit", "setsid", "setsockopt", "setuid", "setxattr", "setxattrat", "shmat", "shmctl",
	"shmdt", "shmget", "shutdown", "sigaltstack", "signalfd4", "socketpair", "splice",
	"statfs", "statmount", "statx", "symlinkat", "sync", "sync_file_range", "syncfs",
	"sysinfo", "tee", "tgkill", "timer_create", "timer_delete", "timer_getoverrun",
	"timer_gettime", "timer_settime", "timerfd_create", "timerfd_gettime", "timerfd_settime",
	"times", "tkill", "truncate", "umask", "uname", "unlinkat", "utimensat", "vmsplice",
	"wait4", "waitid", "write", "writev",
}

// allowAMD64 is allowed unconditionally on amd64 only (legacy calls that
// arm64 never had, and the x86-specific thread-area calls).
var allowAMD64 = []string{
	"access", "alarm", "arch_prctl", "chmod", "chown", "creat", "dup2", "epoll_create",
	"epoll_ctl_old", "epoll_wait", "epoll_wait_old", "eventfd", "fork", "futimesat",
	"get_thread_area", "getdents", "getpgrp", "inotify_init", "lchown", "link", "lstat",
	"mkdir", "mknod", "modify_ldt", "newfstatat", "open", "pause", "pipe", "poll", "readlink",
	"rename", "rmdir", "select", "set_thread_area", "signalfd", "stat", "symlink", "time",
	"unlink", "uretprobe", "utime", "utimes", "vfork",
}

// allowARM64 is allowed unconditionally on arm64 only. fstatat is arm64's
// name for what amd64 and Docker call newfstatat.
var allowARM64 = []string{"fstatat"}

// Socket address families a sandboxed process may create sockets of. Every
// other family (AF_PACKET 17, AF_ALG 38, AF_VSOCK 40, ...) is refused. The
// comparison is on the full 64-bit argument, so a value with high bits set
// never matches and is refused too.
var allowedSocketFamilies = []uint64{
	1,  // AF_UNIX
	2,  // AF_INET
	10, // AF_INET6
	16, // AF_NETLINK
}

// allowedPersonalities are the personality(2) values Docker allows: PER_LINUX,
// PER_LINUX32, UNAME26, UNAME26|PER_LINUX32 and 0xffffffff (query only).
var allowedPersonalities = []uint64{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}

// cloneNamespaceMask covers CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS,
// CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID and CLONE_NEWNET: clone(2) is
// allowed only when none of these is set (Docker's rule). The flags are the
// first argument on both amd64 and arm64 (s390 is the exception).
const cloneNamespaceMask = 0x7E020000

// Terminal ioctls refused on every file descriptor: both inject input into a
// terminal (CVE-2017-5226 class). Only the low 32 bits of the request are
// compared, as the kernel truncates the argument to unsigned int.
const (
	ioctlTIOCSTI   = 0x5412
	ioctlTIOCLINUX = 0x541C
)

// faultSignals are the signals a runtime takes for a fault of its own
// (SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV, SIGSTKFLT, SIGSYS) when their
// si_code is not SI_USER or SI_TKILL: the Go runtime then panics or throws
// whatever handler the program installed, so a queued SIGSEGV crashes the
// agent (PID 1). kill and tgkill always send SI_USER or SI_TKILL; the
// calls that let the sender choose si_code (rt_sigqueueinfo,
// rt_tgsigqueueinfo, pidfd_send_signal with a siginfo) or have the kernel
// send a signal of the sender's choosing with a POLL_* code (fcntl
// F_SETSIG, then F_SETOWN to another process) are refused for these
// signals. These are exactly the entries of Go's signal table
// (runtime/sigtab_linux_generic.go) that have no _SigNotify flag but throw
// or panic.
var faultSignals = []uint32{4, 5, 7, 8, 11, 16, 31}

// fcntlSETSIG is F_SETSIG: the signal sent when I/O is possible on a file
// whose owner (F_SETOWN) may be another process.
const fcntlSETSIG = 10

// argKind is what an argTest checks.
type argKind int

const (
	// lowIn holds when the low 32 bits of the argument are one of values.
	// System calls whose parameter is an int (a signal, a pid, an fcntl or
	// ioctl command) see only those bits, so a test of all 64 could be
	// dodged by setting high bits.
	lowIn argKind = iota
	// lowNonzero holds when the low 32 bits are not 0.
	lowNonzero
	// nonzero holds when any of the 64 bits is set (a pointer is not NULL).
	nonzero
)

// argTest is one test on a system call argument.
type argTest struct {
	arg    int // index of the argument, 0..5
	kind   argKind
	values []uint32 // for lowIn
}

// argDenial refuses a system call with EPERM when all its tests hold.
// Denials are checked before the allowlist, so a call they refuse fails
// even though its name is allowed.
type argDenial struct {
	name      string
	tests     []argTest
	condition string // for SeccompRules
}

// argDenials refuse, whatever the caller's uid, the argument values that
// let a sandboxed process harm a process it may signal or whose limits it
// may change — the agent above all: sandbox root has the agent's uid.
var argDenials = []argDenial{
	{name: "ioctl", tests: []argTest{{arg: 1, kind: lowIn, values: []uint32{ioctlTIOCSTI, ioctlTIOCLINUX}}},
		condition: fmt.Sprintf("low 32 bits of request == TIOCSTI (%#x) or TIOCLINUX (%#x)", ioctlTIOCSTI, ioctlTIOCLINUX)},
	{name: "rt_sigqueueinfo", tests: []argTest{{arg: 1, kind: lowIn, values: faultSignals}},
		condition: fmt.Sprintf("low 32 bits of sig in %v (fault signals)", faultSignals)},
	{name: "rt_tgsigqueueinfo", tests: []argTest{{arg: 2, kind: lowIn, values: faultSignals}},
		condition: fmt.Sprintf("low 32 bits of sig in %v (fault signals)", faultSignals)},
	{name: "pidfd_send_signal", tests: []argTest{{arg: 1, kind: lowIn, values: faultSignals}, {arg: 2, kind: nonzero}},
		condition: fmt.Sprintf("low 32 bits of sig in %v (fault signals) and info != NULL", faultSignals)},
	{name: "fcntl", tests: []argTest{{arg: 1, kind: lowIn, values: []uint32{fcntlSETSIG}}, {arg: 2, kind: lowIn, values: faultSignals}},
		condition: fmt.Sprintf("low 32 bits of cmd == F_SETSIG and of the signal in %v (fault signals)", faultSignals)},
	// Reading another process's limits (new_rlim NULL) stays allowed, as
	// does changing one's own (pid 0; setrlimit).
	{name: "prlimit64", tests: []argTest{{arg: 0, kind: lowNonzero}, {arg: 2, kind: nonzero}},
		condition: "low 32 bits of pid != 0 and new_rlim != NULL (another process's limits)"},
}

// deniedSyscalls must never be allowed by the filter; the tests check the
// tables against it. It is not used to build the filter (which is an
// allowlist), only to keep the allowlist honest.
var deniedSyscalls = []string{
	"io_uring_setup", "io_uring_enter", "io_uring_register", "keyctl", "add_key",
	"request_key", "bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load",
	"mount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick", "move_mount",
	"open_tree", "open_tree_attr", "mount_setattr", "unshare", "setns", "ptrace",
	"process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "swapon", "swapoff",
	"reboot", "init_module", "finit_module", "delete_module", "acct", "quotactl",
	"quotactl_fd", "syslog", "iopl", "ioperm", "settimeofday", "clock_settime", "adjtimex",
	"clock_adjtime", "setdomainname", "sethostname", "vhangup", "lookup_dcookie",
	"name_to_handle_at", "open_by_handle_at", "chroot", "uselib", "ustat", "sysfs",
	"_sysctl", "nfsservctl", "vm86", "vm86old", "fanotify_init", "process_madvise",
	"migrate_pages", "move_pages", "mbind", "set_mempolicy", "get_mempolicy",
}

// Actions of a SyscallRule.
const (
	ActionAllow  = "allow"
	ActionEPERM  = "errno(EPERM)"
	ActionENOSYS = "errno(ENOSYS)"
)

// SyscallRule is one rule of the seccomp filter. Rules are evaluated in
// order and the first whose name and condition match decides; a system call
// that no rule matches fails with EPERM, as does every call made through a
// foreign ABI (i386 or x32 on amd64, AArch32 on arm64; x32 gets ENOSYS).
type SyscallRule struct {
	// Name is the system call's name in the architecture's table.
	Name string
	// Action is ActionAllow, ActionEPERM or ActionENOSYS.
	Action string
	// Condition describes the argument test; empty means unconditional.
	Condition string
}

// SeccompRules returns the filter's rules for goarch ("amd64" or "arm64"),
// in evaluation order, for documentation and tests.
func SeccompRules(goarch string) ([]SyscallRule, error) {
	allow, err := AllowedSyscalls(goarch)
	if err != nil {
		return nil, err
	}
	var rules []SyscallRule
	for _, d := range argDenials {
		rules = append(rules, SyscallRule{Name: d.name, Action: ActionEPERM, Condition: d.condition})
	}
	rules = append(rules, SyscallRule{Name: "clone3", Action: ActionENOSYS})
	for _, name := range allow {
		rules = append(rules, SyscallRule{Name: name, Action: ActionAllow})
	}
	rules = append(rules,
		SyscallRule{Name: "clone", Action: ActionAllow, Condition: fmt.Sprintf("flags & %#x == 0 (no new namespaces)", cloneNamespaceMask)},
		SyscallRule{Name: "socket", Action: ActionAllow, Condition: fmt.Sprintf("domain in %v (AF_UNIX, AF_INET, AF_INET6, AF_NETLINK)", allowedSocketFamilies)},
		SyscallRule{Name: "personality", Action: ActionAllow, Condition: fmt.Sprintf("persona in %#x", allowedPersonalities)},
	)
	return rules, nil
}

// AllowedSyscalls returns, sorted, the system calls the filter allows
// unconditionally on goarch ("amd64" or "arm64"). Calls some of whose
// arguments are refused (ioctl, rt_sigqueueinfo, prlimit64, ...; see
// SeccompRules) are listed too.
func AllowedSyscalls(goarch string) ([]string, error) {
	var extra []string
	switch goarch {
	case "amd64":
		extra = allowAMD64
	case "arm64":
		extra = allowARM64
	default:
		return nil, fmt.Errorf("confine: seccomp filter for %s: %w", goarch, errdefs.ErrNotSupported)
	}
	names := slices.Concat(allowCommon, extra)
	sort.Strings(names)
	return names, nil
}
