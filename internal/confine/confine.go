// Package confine locks the calling process into the sandbox's final,
// irreversible security policy: an empty capability bounding set, no ambient
// or inheritable capabilities, no_new_privs, a Landlock filesystem ruleset and
// a seccomp-bpf system call filter.
//
// The sandbox's agent (PID 1 inside the sandbox's user namespace) calls Apply
// on itself as its last setup step. Everything Apply installs applies to every
// thread of the process and is inherited by every process it starts, so the
// agent keeps working (it may still fork, exec, switch uid with
// syscall.Credential, open ptys, create AF_UNIX/INET/INET6/NETLINK sockets)
// while nothing it starts can gain a capability, create namespaces, mount,
// ptrace, load kernel code or reach io_uring, bpf, perf or keyrings.
//
// The process keeps its own effective and permitted capabilities; only the
// bounding set is emptied, so a program the agent execs, even as uid 0, starts
// with none.
//
// Apply works in two phases. The first validates the policy, opens every path
// and assembles the filter; an error there leaves the process unchanged. The
// second changes the process; an error there (wrapping errdefs.ErrInternal)
// leaves it partly confined, and the caller must exit rather than run
// sandboxed code.
//
// Apply needs syscall.AllThreadsSyscall, so it works only in binaries built
// with CGO_ENABLED=0; with cgo it returns an error wrapping
// errdefs.ErrNotSupported before changing anything.
//
// Landlock gives every thread that calls landlock_restrict_self a domain of
// its own, and Apply must restrict every thread of a Go process; processes
// later forked from different threads then sit in sibling domains, and
// Landlock keeps them from signalling each other (signal scoping) and from
// inspecting each other through ptrace checks (/proc/<pid>/environ, fd,
// hidepid). A process whose children must share one domain calls
// RestrictFiles, re-executes itself (execve keeps only the calling thread,
// and its domain; the new image's threads all descend from it) and then
// calls Apply with Policy.FilesRestricted set.
//
// clone3 fails with ENOSYS after Apply (its flags live in memory the filter
// cannot read, so the filter could not refuse CLONE_NEWUSER in them) unless
// Policy.Clone3 says that user namespaces cannot be created anyway; only
// then can a confined process use syscall.SysProcAttr.UseCgroupFD
// (CLONE_INTO_CGROUP), which needs clone3.
package confine

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Limits on a Policy, so that a bad policy fails fast instead of building a
// huge ruleset.
const (
	// MaxRules caps the number of entries in each list of a Policy.
	MaxRules = 256
	// MaxPathLen caps the length of each path in a Policy.
	MaxPathLen = 4096
)

// maxLandlockABI is the newest Landlock ABI whose rights Apply knows how to
// use (7: filesystem rights up to IOCTL_DEV, signal and abstract unix socket
// scoping). Newer kernels are used at this level.
const maxLandlockABI = 7

// Policy says which parts of the filesystem stay reachable once the process
// is confined. Paths are absolute and clean; symlinks in them are followed
// when Apply runs; a path that does not exist is skipped (and reported in
// Result.Missing). Everything not listed is neither readable nor writable by
// the confined process and its descendants. Descriptors opened before Apply
// keep the access they were opened with.
type Policy struct {
	// ReadOnly lists files and directory trees that may be read and executed.
	ReadOnly []string
	// Writable lists files and directory trees that may be read, executed,
	// written, truncated, created in (files, directories, fifos, sockets,
	// symlinks), removed from and renamed within.
	Writable []string
	// WritableFDs are already-open directory descriptors (for example the
	// delegated cgroup directories) whose trees get the same rights as
	// Writable. The descriptors stay open and owned by the caller.
	WritableFDs []int
	// DevicePaths lists device files and directories of device files
	// (/dev/null, /dev/ptmx, /dev/pts, ...) that may be opened for reading,
	// writing and truncation and on which device ioctls (terminal size,
	// pty unlock, ...) are allowed.
	DevicePaths []string
	// FilesRestricted says that RestrictFiles already enforced the Landlock
	// part of the policy in an earlier image of this process (see
	// RestrictFiles); Apply then skips Landlock and ignores the path lists.
	FilesRestricted bool
	// KeepBounding is a set of capabilities (bit n is capability n) that
	// stay in the bounding set, so that a child executed as uid 0 starts
	// with them and nothing else; children of other uids get none. Zero
	// empties the bounding set. Capabilities held by a process in a user
	// namespace act only on what that namespace owns.
	KeepBounding uint64
	// MinLandlockABI makes Apply fail, before it changes anything, when the
	// kernel's Landlock ABI is older. Zero means best effort: Landlock is
	// applied down to whatever the kernel supports, or skipped when the
	// kernel has none, and Result.LandlockABI says which.
	MinLandlockABI int
	// Clone3 allows clone3, whose flags the filter cannot read. Only a
	// caller that closed namespace creation by other means may set it:
	// every namespace but a user namespace needs CAP_SYS_ADMIN, so that
	// means user.max_user_namespaces is 0 in the caller's user namespace
	// (a limit the kernel enforces for it and everything it starts; only
	// CAP_SYS_RESOURCE there can raise it). Apply checks it and refuses
	// otherwise.
	Clone3 bool
}

// Result reports what Apply enforced.
type Result struct {
	// LandlockABI is the Landlock ABI version the ruleset was built for, or
	// 0 when the kernel has no Landlock and no filesystem rules apply.
	LandlockABI int
	// Missing lists policy paths that did not exist and were skipped.
	Missing []string
	// SeccompInstructions is the length of the installed BPF program.
	SeccompInstructions int
	// Duration is how long Apply took, both phases included.
	Duration time.Duration
}

// LogValue implements slog.LogValuer.
func (r Result) LogValue() slog.Value {
	return slog.GroupValue(
		slog.Int("landlock_abi", r.LandlockABI),
		slog.Any("missing", r.Missing),
		slog.Int("seccomp_instructions", r.SeccompInstructions),
		slog.Duration("duration", r.Duration),
	)
}

// State is the confinement of the calling process as the kernel reports it.
type State struct {
	// LandlockABI is the ABI version Apply enforced in this process, or 0
	// if Apply has not run in it (the kernel does not expose whether a
	// process is in a Landlock domain).
	LandlockABI int
	// SeccompMode is 0 (none), 1 (strict) or 2 (filter).
	SeccompMode int
	// NoNewPrivs reports the no_new_privs bit.
	NoNewPrivs bool
	// CapBnd, CapEff, CapPrm, CapInh and CapAmb are the capability sets of
	// the calling thread, as bit masks.
	CapBnd, CapEff, CapPrm, CapInh, CapAmb uint64
}

// validate checks every field of p and returns a clean copy.
func (p Policy) validate() (Policy, error) {
	lists := []struct {
		name  string
		paths []string
	}{{"read-only", p.ReadOnly}, {"writable", p.Writable}, {"device", p.DevicePaths}}
	for _, l := range lists {
		if len(l.paths) > MaxRules {
			return p, fmt.Errorf("confine: %d %s paths, at most %d: %w", len(l.paths), l.name, MaxRules, errdefs.ErrInvalidArgument)
		}
		for _, path := range l.paths {
			if err := validatePath(path); err != nil {
				return p, fmt.Errorf("confine: %s path: %w", l.name, err)
			}
		}
	}
	if len(p.WritableFDs) > MaxRules {
		return p, fmt.Errorf("confine: %d writable fds, at most %d: %w", len(p.WritableFDs), MaxRules, errdefs.ErrInvalidArgument)
	}
	for _, fd := range p.WritableFDs {
		if fd < 0 {
			return p, fmt.Errorf("confine: writable fd %d: %w", fd, errdefs.ErrInvalidArgument)
		}
	}
	if p.MinLandlockABI < 0 || p.MinLandlockABI > maxLandlockABI {
		return p, fmt.Errorf("confine: minimum Landlock ABI %d outside 0..%d: %w", p.MinLandlockABI, maxLandlockABI, errdefs.ErrInvalidArgument)
	}
	return p, nil
}

// validatePath accepts absolute, clean paths of bounded length.
func validatePath(path string) error {
	switch {
	case path == "":
		return fmt.Errorf("empty path: %w", errdefs.ErrInvalidArgument)
	case len(path) > MaxPathLen:
		return fmt.Errorf("path longer than %d bytes: %w", MaxPathLen, errdefs.ErrInvalidArgument)
	case strings.IndexByte(path, 0) >= 0:
		return fmt.Errorf("path contains a NUL byte: %w", errdefs.ErrInvalidArgument)
	case !filepath.IsAbs(path):
		return fmt.Errorf("path %q is not absolute: %w", path, errdefs.ErrInvalidArgument)
	case filepath.Clean(path) != path:
		return fmt.Errorf("path %q is not clean: %w", path, errdefs.ErrInvalidArgument)
	}
	return nil
}
