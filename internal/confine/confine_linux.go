package confine

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// applyMu serialises Apply calls; enforcedABI remembers what the last
// successful one enforced, for Status.
var (
	applyMu     sync.Mutex
	enforcedABI atomic.Int32
)

// Apply confines the calling process, all its threads and everything it
// starts from now on, irreversibly, in this order: clear the inheritable
// and ambient capabilities and empty the bounding set (but for
// p.KeepBounding), set no_new_privs,
// enforce the Landlock ruleset built from p, install the seccomp filter
// (see SeccompRules). Effective and permitted capabilities are kept.
//
// Errors from checking p, the kernel and the process wrap
// ErrInvalidArgument, ErrNotSupported or ErrPermissionDenied and leave the
// process unchanged. An error while changing the process wraps ErrInternal;
// the process is then partly confined and must exit.
func Apply(p Policy) (Result, error) {
	applyMu.Lock()
	defer applyMu.Unlock()
	start := time.Now()

	p, err := p.validate()
	if err != nil {
		return Result{}, err
	}
	// Every step below must reach every thread; that needs a binary
	// without cgo.
	if err := AllThreads(); err != nil {
		return Result{}, err
	}
	caps, err := prepareCaps(p.KeepBounding)
	if err != nil {
		return Result{}, err
	}
	rs := &landlockRuleset{fd: -1, abi: int(enforcedABI.Load())}
	if !p.FilesRestricted {
		if rs, err = prepareLandlock(p); err != nil {
			return Result{}, err
		}
	}
	defer rs.close()
	if p.Clone3 {
		if err := requireNoUserNamespaces(); err != nil {
			return Result{}, err
		}
	}
	insts, err := seccompProgram(p.Clone3)
	if err != nil {
		return Result{}, err
	}
	raw, err := bpf.Assemble(insts)
	if err != nil {
		return Result{}, fmt.Errorf("confine: assemble seccomp filter: %v: %w", err, errdefs.ErrInternal)
	}

	// From here on the process changes; any failure leaves it partly
	// confined.
	if err := caps.drop(); err != nil {
		return Result{}, err
	}
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return Result{}, fmt.Errorf("confine: set no_new_privs: %v: %w", e, errdefs.ErrInternal)
	}
	if err := rs.enforce(); err != nil {
		return Result{}, err
	}
	if err := loadSeccomp(raw); err != nil {
		return Result{}, err
	}
	enforcedABI.Store(int32(rs.abi))
	return Result{
		LandlockABI:         rs.abi,
		Missing:             rs.missing,
		SeccompInstructions: len(raw),
		Duration:            time.Since(start),
	}, nil
}

// AllThreads reports whether this binary can apply a system call to all of
// its threads, as Apply and RestrictFiles must: Go cannot in a binary built
// with cgo, whose C threads it does not control. The error wraps
// errdefs.ErrNotSupported.
func AllThreads() error {
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0); e != 0 {
		return fmt.Errorf("confine: this binary was built with cgo, so it cannot confine all of its threads (%v): %w", e, errdefs.ErrNotSupported)
	}
	return nil
}

// RestrictFiles enforces only the Landlock part of p, on every thread of
// the calling process, after setting no_new_privs; see the package
// documentation for why a process re-executes itself after it. Errors are
// classed as for Apply.
func RestrictFiles(p Policy) (Result, error) {
	applyMu.Lock()
	defer applyMu.Unlock()
	start := time.Now()

	p, err := p.validate()
	if err != nil {
		return Result{}, err
	}
	if err := AllThreads(); err != nil {
		return Result{}, err
	}
	rs, err := prepareLandlock(p)
	if err != nil {
		return Result{}, err
	}
	defer rs.close()
	if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); e != 0 {
		return Result{}, fmt.Errorf("confine: set no_new_privs: %v: %w", e, errdefs.ErrInternal)
	}
	if err := rs.enforce(); err != nil {
		return Result{}, err
	}
	enforcedABI.Store(int32(rs.abi))
	return Result{LandlockABI: rs.abi, Missing: rs.missing, Duration: time.Since(start)}, nil
}

// NarrowBoundingForExec empties the bounding set of the calling thread
// only, but for keep (see Policy.KeepBounding), after copying its
// permitted capabilities into its inheritable set, so that an execve by
// this thread as uid 0 keeps the capabilities (they come back from the
// inheritable set) while nothing the new image execs can gain more than
// keep. The caller must have locked the goroutine to its thread and exec
// from it; the new image's Apply, given the same keep, clears the
// inheritable set and finds the bounding set already narrowed, which saves
// narrowing it on every thread (one stop-the-world round per capability).
func NarrowBoundingForExec(keep uint64) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("confine: capget: %v: %w", err, errdefs.ErrInternal)
	}
	data[0].Inheritable, data[1].Inheritable = data[0].Permitted, data[1].Permitted
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("confine: capset: %v: %w", err, errdefs.ErrInternal)
	}
	last, err := lastCap()
	if err != nil {
		return err
	}
	for c := 0; c <= last; c++ {
		if keep&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("confine: drop capability %d from the bounding set: %v: %w", c, err, errdefs.ErrInternal)
		}
	}
	return nil
}

// capPlan is what prepareCaps found and drop will change.
type capPlan struct {
	bounding []uintptr           // capabilities still in the bounding set
	hdr      unix.CapUserHeader  // for capset, when inheritable must be cleared
	data     [2]unix.CapUserData // current sets with inheritable cleared
	clearInh bool
}

// prepareCaps reads the calling thread's capability sets and checks that
// drop will be allowed. Capabilities in keep stay in the bounding set.
func prepareCaps(keep uint64) (*capPlan, error) {
	plan := &capPlan{hdr: unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}}
	if err := unix.Capget(&plan.hdr, &plan.data[0]); err != nil {
		return nil, fmt.Errorf("confine: capget: %v: %w", err, errdefs.ErrInternal)
	}
	last, err := lastCap()
	if err != nil {
		return nil, err
	}
	for c := 0; c <= last; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if err != nil {
			return nil, fmt.Errorf("confine: read bounding set: %v: %w", err, errdefs.ErrInternal)
		}
		if in == 1 && keep&(1<<c) == 0 {
			plan.bounding = append(plan.bounding, uintptr(c))
		}
	}
	if len(plan.bounding) > 0 && plan.data[0].Effective&(1<<unix.CAP_SETPCAP) == 0 {
		return nil, fmt.Errorf("confine: emptying the capability bounding set needs CAP_SETPCAP: %w", errdefs.ErrPermissionDenied)
	}
	if plan.data[0].Inheritable != 0 || plan.data[1].Inheritable != 0 {
		plan.clearInh = true
		plan.data[0].Inheritable, plan.data[1].Inheritable = 0, 0
	}
	return plan, nil
}

// drop clears the inheritable and ambient sets and empties the bounding set
// (but for the kept capabilities) on every thread. Without inheritable
// capabilities and with an empty bounding set, execve grants nothing, even
// to uid 0; with kept ones, uid 0 gets exactly those.
func (c *capPlan) drop() error {
	if c.clearInh {
		_, _, e := syscall.AllThreadsSyscall(syscall.SYS_CAPSET,
			uintptr(unsafe.Pointer(&c.hdr)), uintptr(unsafe.Pointer(&c.data[0])), 0)
		runtime.KeepAlive(c)
		if e != 0 {
			return fmt.Errorf("confine: clear inheritable capabilities: %v: %w", e, errdefs.ErrInternal)
		}
	}
	_, _, e := syscall.AllThreadsSyscall6(syscall.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0)
	if e != 0 && e != syscall.EINVAL { // EINVAL: kernel without ambient capabilities
		return fmt.Errorf("confine: clear ambient capabilities: %v: %w", e, errdefs.ErrInternal)
	}
	for _, capability := range c.bounding {
		if _, _, e := syscall.AllThreadsSyscall(syscall.SYS_PRCTL, unix.PR_CAPBSET_DROP, capability, 0); e != 0 {
			return fmt.Errorf("confine: drop capability %d from the bounding set: %v: %w", capability, e, errdefs.ErrInternal)
		}
	}
	return nil
}

// lastCap returns the highest capability number the kernel knows, from
// /proc/sys/kernel/cap_last_cap or, without /proc, by probing the bounding
// set.
func lastCap() (int, error) {
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			return n, nil
		}
	}
	for c := 0; c < 64; c++ {
		if _, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0); err != nil {
			if c == 0 {
				return 0, fmt.Errorf("confine: read bounding set: %v: %w", err, errdefs.ErrInternal)
			}
			return c - 1, nil
		}
	}
	return 63, nil
}

// loadSeccomp installs the filter on every thread (SECCOMP_FILTER_FLAG_TSYNC,
// which also propagates no_new_privs).
func loadSeccomp(raw []bpf.RawInstruction) error {
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	r, _, e := syscall.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(filter)
	if e != 0 {
		return fmt.Errorf("confine: install seccomp filter: %v: %w", e, errdefs.ErrInternal)
	}
	if r != 0 { // TSYNC: the id of a thread that could not be synchronised
		return fmt.Errorf("confine: install seccomp filter: thread %d cannot be synchronised: %w", r, errdefs.ErrInternal)
	}
	return nil
}

// Status reports the confinement of the calling thread.
func Status() (State, error) {
	f, err := os.Open("/proc/thread-self/status")
	if err != nil {
		return State{}, fmt.Errorf("confine: status: %v: %w", err, errdefs.ErrUnavailable)
	}
	defer f.Close()
	st, err := parseStatus(f)
	if err != nil {
		return State{}, err
	}
	st.LandlockABI = int(enforcedABI.Load())
	return st, nil
}

// maxStatusSize caps how much of a status file parseStatus reads.
const maxStatusSize = 64 << 10

// parseStatus extracts the confinement fields from a /proc/<pid>/status
// file. Every field must be present.
func parseStatus(r io.Reader) (State, error) {
	var st State
	hex := map[string]*uint64{
		"CapInh": &st.CapInh, "CapPrm": &st.CapPrm, "CapEff": &st.CapEff,
		"CapBnd": &st.CapBnd, "CapAmb": &st.CapAmb,
	}
	seen := map[string]bool{}
	sc := bufio.NewScanner(io.LimitReader(r, maxStatusSize))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch {
		case hex[key] != nil:
			n, err := strconv.ParseUint(val, 16, 64)
			if err != nil {
				return State{}, fmt.Errorf("confine: status field %s: %w", key, errdefs.ErrInternal)
			}
			*hex[key] = n
		case key == "NoNewPrivs" || key == "Seccomp":
			n, err := strconv.Atoi(val)
			if err != nil || n < 0 || n > 2 {
				return State{}, fmt.Errorf("confine: status field %s: %w", key, errdefs.ErrInternal)
			}
			if key == "Seccomp" {
				st.SeccompMode = n
			} else {
				st.NoNewPrivs = n == 1
			}
		default:
			continue
		}
		if seen[key] {
			return State{}, fmt.Errorf("confine: status field %s repeated: %w", key, errdefs.ErrInternal)
		}
		seen[key] = true
	}
	if err := sc.Err(); err != nil {
		return State{}, fmt.Errorf("confine: read status: %v: %w", err, errdefs.ErrInternal)
	}
	if len(seen) != len(hex)+2 {
		return State{}, fmt.Errorf("confine: status lacks confinement fields: %w", errdefs.ErrInternal)
	}
	return st, nil
}

// maxUserNamespaces is the limit on user namespaces created in the calling
// process's user namespace (and below it).
const maxUserNamespaces = "/proc/sys/user/max_user_namespaces"

// requireNoUserNamespaces checks Policy.Clone3's precondition: no user
// namespace can be created in the caller's user namespace.
func requireNoUserNamespaces() error {
	b, err := os.ReadFile(maxUserNamespaces)
	if err != nil {
		return fmt.Errorf("confine: clone3 needs user namespaces closed: %v: %w", err, errdefs.ErrFailedPrecondition)
	}
	if strings.TrimSpace(string(b)) != "0" {
		return fmt.Errorf("confine: clone3 needs user namespaces closed, but %s is %s: %w",
			maxUserNamespaces, strings.TrimSpace(string(b)), errdefs.ErrFailedPrecondition)
	}
	return nil
}
