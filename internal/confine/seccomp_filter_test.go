package confine

import (
	"encoding/binary"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/elastic/go-seccomp-bpf/arch"
	"golang.org/x/net/bpf"
)

const (
	wantAllow  = int(retAllow)
	wantEPERM  = int(retErrno | errEPERM)
	wantENOSYS = int(retErrno | errNOSYS)
)

// TestAllowlistTables checks the hand-written tables against the kernel's
// syscall tables (as go-seccomp-bpf has them) and against the deny list.
func TestAllowlistTables(t *testing.T) {
	tables := []struct {
		goarch string
		info   *arch.Info
	}{{"amd64", arch.X86_64}, {"arm64", arch.AARCH64}}
	for _, tt := range tables {
		t.Run(tt.goarch, func(t *testing.T) {
			names, err := AllowedSyscalls(tt.goarch)
			if err != nil {
				t.Fatal(err)
			}
			if len(names) < 250 {
				t.Fatalf("only %d allowed syscalls", len(names))
			}
			seen := map[string]bool{}
			for _, n := range names {
				if seen[n] {
					t.Errorf("%s listed twice", n)
				}
				seen[n] = true
				if _, ok := tt.info.SyscallNames[n]; !ok {
					t.Errorf("%s does not exist on %s", n, tt.goarch)
				}
				if strings.HasSuffix(n, "_time64") || strings.HasSuffix(n, "32") {
					t.Errorf("%s is a 32-bit-only call", n)
				}
			}
			for _, n := range deniedSyscalls {
				if seen[n] {
					t.Errorf("denied syscall %s is allowed", n)
				}
			}
			// Argument-checked calls must not also be unconditional.
			for _, n := range []string{"clone", "clone3", "socket", "personality"} {
				if seen[n] {
					t.Errorf("%s is allowed unconditionally", n)
				}
			}
			// What the agent itself needs after Apply.
			for _, n := range []string{"execve", "wait4", "waitid", "setresuid", "setresgid", "setgroups",
				"kill", "tgkill", "pidfd_open", "pidfd_send_signal", "ioctl", "openat", "openat2",
				"mkdirat", "unlinkat", "renameat2", "fchownat", "fchmodat", "inotify_init1",
				"inotify_add_watch", "epoll_pwait", "eventfd2", "timer_create", "prctl", "socketpair",
				"accept4", "bind", "listen", "connect", "sched_getaffinity", "rt_sigaction",
				"sigaltstack", "futex", "mmap", "madvise", "getrandom", "close_range", "pipe2"} {
				if !seen[n] {
					t.Errorf("%s is not allowed", n)
				}
			}
			rules, err := SeccompRules(tt.goarch)
			if err != nil {
				t.Fatal(err)
			}
			if len(rules) != len(argDenials)+len(names)+4 || rules[0].Name != "ioctl" || rules[0].Action != ActionEPERM {
				t.Errorf("SeccompRules: %d rules, first %+v", len(rules), rules[0])
			}
			for i, d := range argDenials {
				if r := rules[i]; r.Name != d.name || r.Action != ActionEPERM || r.Condition == "" {
					t.Errorf("rule %d = %+v, want the denial of %s", i, r, d.name)
				}
				if !seen[d.name] {
					t.Errorf("%s is denied by argument but not allowed otherwise", d.name)
				}
			}
		})
	}
	if _, err := AllowedSyscalls("riscv64"); err == nil {
		t.Error("AllowedSyscalls(riscv64) succeeded")
	}
}

// seccompData encodes struct seccomp_data for x/net/bpf's VM, which loads
// words big-endian: each 32-bit word is stored big-endian where a
// little-endian kernel would put it.
func seccompData(auditArch uint32, nr uint32, args ...uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint32(b[dataNR:], nr)
	binary.BigEndian.PutUint32(b[dataArch:], auditArch)
	for i, a := range args {
		off := dataArgs + 8*i
		binary.BigEndian.PutUint32(b[off:], uint32(a))
		binary.BigEndian.PutUint32(b[off+4:], uint32(a>>32))
	}
	return b
}

// filterVM loads the filter for this machine into a BPF interpreter, going
// through the raw encoding the kernel receives.
func filterVM(t *testing.T) (*bpf.VM, *arch.Info) {
	t.Helper()
	return filterVMWith(t, false)
}

// filterVMWith is filterVM for the filter with or without clone3.
func filterVMWith(t *testing.T, clone3 bool) (*bpf.VM, *arch.Info) {
	t.Helper()
	if runtime.GOARCH != "amd64" && runtime.GOARCH != "arm64" {
		t.Skipf("no seccomp filter for %s", runtime.GOARCH)
	}
	info, err := archInfo(runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := seccompProgram(clone3)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := bpf.Assemble(prog)
	if err != nil {
		t.Fatal(err)
	}
	back, allDecoded := bpf.Disassemble(raw)
	if !allDecoded {
		t.Fatal("filter has instructions x/net/bpf cannot decode")
	}
	vm, err := bpf.NewVM(back)
	if err != nil {
		t.Fatal(err)
	}
	return vm, info
}

func run(t *testing.T, vm *bpf.VM, data []byte) int {
	t.Helper()
	got, err := vm.Run(data)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestFilterEveryNumber runs every syscall number (all arguments zero)
// through the filter and compares with the tables.
func TestFilterEveryNumber(t *testing.T) {
	vm, info := filterVM(t)
	allowed, _ := AllowedSyscalls(runtime.GOARCH)
	maxNR := 0
	for nr := range info.SyscallNumbers {
		maxNR = max(maxNR, nr)
	}
	counts := map[int]int{}
	for nr := 0; nr <= maxNR+64; nr++ {
		name := info.SyscallNumbers[nr]
		want := wantEPERM
		switch {
		case name == "clone3":
			want = wantENOSYS
		case name == "clone", name == "personality": // flags 0 / PER_LINUX
			want = wantAllow
		case slices.Contains(allowed, name):
			want = wantAllow
		}
		got := run(t, vm, seccompData(uint32(info.ID), uint32(nr)))
		if got != want {
			t.Errorf("syscall %d (%q): got %#x, want %#x", nr, name, got, want)
		}
		counts[got]++
	}
	t.Logf("%s: %d allowed, %d EPERM, %d ENOSYS", runtime.GOARCH, counts[wantAllow], counts[wantEPERM], counts[wantENOSYS])
}

// TestFilterArguments checks the argument-dependent rules and the
// architecture checks.
func TestFilterArguments(t *testing.T) {
	vm, info := filterVM(t)
	nr := func(name string) uint32 {
		n, ok := info.SyscallNames[name]
		if !ok {
			t.Fatalf("no %s on %s", name, info.Name)
		}
		return uint32(n)
	}
	const sigchld = 17
	tests := []struct {
		name string
		call string
		args []uint64
		want int
	}{
		{"fork-like clone", "clone", []uint64{0x01000000 | 0x00200000 | sigchld}, wantAllow},
		{"go exec clone", "clone", []uint64{0x00004000 | 0x00000100 | 0x00001000 | sigchld}, wantAllow}, // VFORK|VM|PIDFD
		{"thread clone", "clone", []uint64{0x003d0f00}, wantAllow},
		{"clone high bits ignored", "clone", []uint64{1<<32 | sigchld}, wantAllow},
		{"clone NEWNS", "clone", []uint64{0x00020000 | sigchld}, wantEPERM},
		{"clone NEWCGROUP", "clone", []uint64{0x02000000}, wantEPERM},
		{"clone NEWUTS", "clone", []uint64{0x04000000}, wantEPERM},
		{"clone NEWIPC", "clone", []uint64{0x08000000}, wantEPERM},
		{"clone NEWUSER", "clone", []uint64{0x10000000 | sigchld}, wantEPERM},
		{"clone NEWPID", "clone", []uint64{0x20000000}, wantEPERM},
		{"clone NEWNET", "clone", []uint64{0x40000000}, wantEPERM},
		{"clone3", "clone3", []uint64{0, 88}, wantENOSYS},
		{"unshare", "unshare", []uint64{0x10000000}, wantEPERM},
		{"AF_UNIX", "socket", []uint64{1, 1}, wantAllow},
		{"AF_INET", "socket", []uint64{2, 1}, wantAllow},
		{"AF_INET6", "socket", []uint64{10, 2}, wantAllow},
		{"AF_NETLINK", "socket", []uint64{16, 3}, wantAllow},
		{"AF_UNSPEC", "socket", []uint64{0}, wantEPERM},
		{"AF_PACKET", "socket", []uint64{17, 3}, wantEPERM},
		{"AF_ALG", "socket", []uint64{38, 5}, wantEPERM},
		{"AF_VSOCK", "socket", []uint64{40, 1}, wantEPERM},
		{"AF_UNIX with high bits", "socket", []uint64{1<<32 | 1}, wantEPERM},
		{"AF_VSOCK with high bits", "socket", []uint64{1<<32 | 40}, wantEPERM},
		{"PER_LINUX", "personality", []uint64{0}, wantAllow},
		{"PER_LINUX32", "personality", []uint64{8}, wantAllow},
		{"UNAME26", "personality", []uint64{0x20000}, wantAllow},
		{"UNAME26|PER_LINUX32", "personality", []uint64{0x20008}, wantAllow},
		{"query", "personality", []uint64{0xffffffff}, wantAllow},
		{"READ_IMPLIES_EXEC", "personality", []uint64{0x0400000}, wantEPERM},
		{"ADDR_NO_RANDOMIZE", "personality", []uint64{0x0040000}, wantEPERM},
		{"TIOCSTI", "ioctl", []uint64{0, 0x5412}, wantEPERM},
		{"TIOCSTI high bits", "ioctl", []uint64{0, 1<<32 | 0x5412}, wantEPERM},
		{"TIOCSTI sign-extended", "ioctl", []uint64{0, 0xffffffff_00005412}, wantEPERM},
		{"TIOCLINUX", "ioctl", []uint64{3, 0x541C}, wantEPERM},
		{"TIOCGWINSZ", "ioctl", []uint64{0, 0x5413}, wantAllow},
		{"TIOCSWINSZ", "ioctl", []uint64{0, 0x5414}, wantAllow},
		{"TIOCSPTLCK", "ioctl", []uint64{0, 0x40045431}, wantAllow},
		{"FIONREAD", "ioctl", []uint64{0, 0x541B}, wantAllow},
		{"fd equal to TIOCSTI", "ioctl", []uint64{0x5412, 0x5413}, wantAllow},
		{"read", "read", nil, wantAllow},

		// Signals whose si_code the sender chooses: refused for the fault
		// signals a runtime takes for its own faults, whatever the
		// target (the filter cannot tell the agent from anyone else).
		{"sigqueue SIGSEGV", "rt_sigqueueinfo", []uint64{1, 11, 0x1000}, wantEPERM},
		{"sigqueue SIGBUS", "rt_sigqueueinfo", []uint64{1, 7, 0x1000}, wantEPERM},
		{"sigqueue SIGFPE", "rt_sigqueueinfo", []uint64{1, 8, 0x1000}, wantEPERM},
		{"sigqueue SIGILL", "rt_sigqueueinfo", []uint64{1, 4, 0x1000}, wantEPERM},
		{"sigqueue SIGTRAP", "rt_sigqueueinfo", []uint64{1, 5, 0x1000}, wantEPERM},
		{"sigqueue SIGSTKFLT", "rt_sigqueueinfo", []uint64{1, 16, 0x1000}, wantEPERM},
		{"sigqueue SIGSYS", "rt_sigqueueinfo", []uint64{1, 31, 0x1000}, wantEPERM},
		{"sigqueue SIGSEGV high bits", "rt_sigqueueinfo", []uint64{1, 1<<32 | 11, 0x1000}, wantEPERM},
		{"sigqueue SIGSEGV to self", "rt_sigqueueinfo", []uint64{0, 11, 0x1000}, wantEPERM},
		{"sigqueue SIGTERM", "rt_sigqueueinfo", []uint64{1, 15, 0x1000}, wantAllow},
		{"sigqueue SIGUSR1", "rt_sigqueueinfo", []uint64{42, 10, 0x1000}, wantAllow},
		{"sigqueue SIGRTMIN+3", "rt_sigqueueinfo", []uint64{42, 37, 0x1000}, wantAllow},
		{"sigqueue pid equal to SIGSEGV", "rt_sigqueueinfo", []uint64{11, 10, 11}, wantAllow},
		{"tgsigqueue SIGSEGV", "rt_tgsigqueueinfo", []uint64{1, 7, 11, 0x1000}, wantEPERM},
		{"tgsigqueue SIGBUS high bits", "rt_tgsigqueueinfo", []uint64{1, 7, 0xffffffff_00000007, 0x1000}, wantEPERM},
		{"tgsigqueue SIGUSR2", "rt_tgsigqueueinfo", []uint64{1, 7, 12, 0x1000}, wantAllow},
		{"tgsigqueue tid equal to SIGSEGV", "rt_tgsigqueueinfo", []uint64{11, 11, 10, 0x1000}, wantAllow},
		{"pidfd SIGSEGV with info", "pidfd_send_signal", []uint64{3, 11, 0x1000, 0}, wantEPERM},
		{"pidfd SIGSEGV with info above 4 GiB", "pidfd_send_signal", []uint64{3, 11, 1 << 32, 0}, wantEPERM},
		{"pidfd SIGSEGV high bits with info", "pidfd_send_signal", []uint64{3, 1<<32 | 11, 0x1000, 0}, wantEPERM},
		{"pidfd SIGSEGV without info", "pidfd_send_signal", []uint64{3, 11, 0, 0}, wantAllow},
		{"pidfd SIGTERM with info", "pidfd_send_signal", []uint64{3, 15, 0x1000, 0}, wantAllow},
		{"pidfd SIGKILL", "pidfd_send_signal", []uint64{3, 9, 0, 0}, wantAllow},
		{"kill SIGSEGV (SI_USER)", "kill", []uint64{1, 11}, wantAllow},
		{"tgkill SIGSEGV (SI_TKILL)", "tgkill", []uint64{1, 1, 11}, wantAllow},
		{"F_SETSIG SIGSEGV", "fcntl", []uint64{3, fcntlSETSIG, 11}, wantEPERM},
		{"F_SETSIG SIGSYS high bits", "fcntl", []uint64{3, 1<<32 | fcntlSETSIG, 1<<32 | 31}, wantEPERM},
		{"F_SETSIG SIGIO", "fcntl", []uint64{3, fcntlSETSIG, 29}, wantAllow},
		{"F_SETSIG default", "fcntl", []uint64{3, fcntlSETSIG, 0}, wantAllow},
		{"F_SETOWN pid 11", "fcntl", []uint64{3, 8, 11}, wantAllow},
		{"F_GETFL", "fcntl", []uint64{3, 3, 0}, wantAllow},

		// Limits: only one's own may change.
		{"prlimit other process", "prlimit64", []uint64{1, 7, 0x1000, 0}, wantEPERM},
		{"prlimit other process new above 4 GiB", "prlimit64", []uint64{1, 7, 1 << 32, 0x2000}, wantEPERM},
		{"prlimit negative pid", "prlimit64", []uint64{0xffffffff_ffffffff, 7, 0x1000, 0}, wantEPERM},
		{"prlimit self", "prlimit64", []uint64{0, 7, 0x1000, 0x2000}, wantAllow},
		{"prlimit self high bits", "prlimit64", []uint64{1 << 32, 7, 0x1000, 0}, wantAllow},
		{"prlimit read other process", "prlimit64", []uint64{1, 7, 0, 0x2000}, wantAllow},
		{"setrlimit", "setrlimit", []uint64{7, 0x1000}, wantAllow},
		{"ioctl after the other denials", "ioctl", []uint64{0, 0x5412}, wantEPERM},
		{"ptrace", "ptrace", []uint64{0}, wantEPERM},
		{"io_uring_setup", "io_uring_setup", []uint64{1}, wantEPERM},
		{"mount", "mount", nil, wantEPERM},
	}
	for _, tt := range tests {
		got := run(t, vm, seccompData(uint32(info.ID), nr(tt.call), tt.args...))
		if got != tt.want {
			t.Errorf("%s: %s%#x = %#x, want %#x", tt.name, tt.call, tt.args, got, tt.want)
		}
	}

	// Foreign architectures are refused whatever the call; the x32 ABI on
	// amd64 gets ENOSYS.
	foreign := []struct {
		name string
		arch uint32
		nr   uint32
		want int
	}{
		{"i386 read", uint32(arch.I386.ID), 3, wantEPERM},
		{"i386 nr 0", uint32(arch.I386.ID), 0, wantEPERM},
		{"arm read", uint32(arch.ARM.ID), 3, wantEPERM},
		{"aarch64 read on amd64 or the reverse", otherArch(info), 0, wantEPERM},
	}
	if info == arch.X86_64 {
		foreign = append(foreign,
			struct {
				name string
				arch uint32
				nr   uint32
				want int
			}{"x32 read", uint32(arch.X86_64.ID), 0x40000000, wantENOSYS},
			struct {
				name string
				arch uint32
				nr   uint32
				want int
			}{"x32 ioctl", uint32(arch.X86_64.ID), 0x40000000 | 514, wantENOSYS})
	}
	for _, tt := range foreign {
		if got := run(t, vm, seccompData(tt.arch, tt.nr, 0, 0x5413)); got != tt.want {
			t.Errorf("%s: got %#x, want %#x", tt.name, got, tt.want)
		}
	}
}

func otherArch(info *arch.Info) uint32 {
	if info == arch.X86_64 {
		return uint32(arch.AARCH64.ID)
	}
	return uint32(arch.X86_64.ID)
}

// TestFilterClone3Allowed: with Policy.Clone3 the filter lets clone3
// through, whatever its arguments, and nothing else changes.
func TestFilterClone3Allowed(t *testing.T) {
	strict, info := filterVMWith(t, false)
	loose, _ := filterVMWith(t, true)
	for nr, name := range info.SyscallNumbers {
		for _, args := range [][]uint64{nil, {0, 88}, {0x10000000}} {
			data := seccompData(uint32(info.ID), uint32(nr), args...)
			want := run(t, strict, data)
			if name == "clone3" {
				want = wantAllow
			}
			if got := run(t, loose, data); got != want {
				t.Errorf("%s %v: got %#x, want %#x", name, args, got, want)
			}
		}
	}
}
