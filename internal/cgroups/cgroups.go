// Package cgroups puts Airlock sandboxes, and the process trees inside them,
// into Linux control groups on cgroup v1 and cgroup v2 hosts.
//
// # Layout
//
// Every sandbox gets the same three cgroups in every hierarchy the package
// manages (v1: one hierarchy per mounted controller, "cpu,cpuacct" counting
// once when co-mounted; v2: the unified hierarchy):
//
//	<parent>/<id>/              whole-sandbox caps: memory (work's + the agent's
//	                            allowance, no swap), pids (likewise), CPU quota, freezer
//	<parent>/<id>/agent/        the agent, PID 1 of the sandbox; no caps of its own
//	<parent>/<id>/work/         memory (and swap = none) and pids limits of sandboxed code
//	<parent>/<id>/work/<name>/  one per process tree, made by the agent itself
//
// The kernel OOM killer stays on: when sandboxed code exceeds the work limit
// it kills inside work/, never the agent, which is a sibling. Whatever a
// sandbox's memory is charged to (on v1 and v2 the kernel charges the pages
// a process writes into a tmpfs to that process's memory cgroup, so the
// files the agent writes for the file API are charged to agent/), <id>
// caps the sum; the agent checks Delegated.MemoryRoom before writing, so
// that an upload fails cleanly before the kernel would have to OOM-kill.
//
// Killing and removing a sandbox never gives up on a deep or wide tree: the
// agent owns work/ and may nest cgroups below it without limit on v1, so
// walks hold a bounded number of descriptors whatever the depth and go on
// past errors, killing what they found.
//
// # Two sides
//
// The daemon (global root, cgroupfs mounted) uses [Manager] and [Sandbox] to
// create, limit, freeze, kill and remove sandboxes and to hand the agent a
// [Delegation]: open directory descriptors of <id>/work and <id>/agent, with
// just enough files chowned to the sandbox's owner that the agent can make
// exec cgroups and move itself. Limit files stay root-owned, so the agent
// cannot raise its own limits.
//
// The agent (the sandbox's root, inside its user namespace, no cgroupfs
// mounted, maybe under landlock) uses [Delegated] and [Exec], which only ever
// use *at system calls relative to those descriptors. On v1 the agent moves
// the one OS thread that forks into the exec cgroup and back, so the child is
// born inside it; on v2 it forks with clone3's CLONE_INTO_CGROUP (allowed
// because the sandbox can make no namespace), which the kernel permits only
// below the caller's cgroup-namespace root: so on v2 the daemon starts the
// agent in <id>, the agent roots its namespace there and moves itself into
// <id>/agent (EnterHome), and the daemon then arms <id> (Sandbox.Arm).
//
// # Order of operations
//
// Create; StartInAgent, so that the agent begins life in <id>/agent (no
// migration); Delegate and pass the directories (Delegation.ExtraFiles,
// OpenSpec); the agent then unshares its cgroup namespace, rooted at its own
// cgroup. Enter and MoveToAgent move an already running process instead,
// at the cost of a migration. On v2 hosts mounted with nsdelegate
// (systemd's default) a process may only move tasks between cgroups inside
// its namespace; that case is not exercised on the v1 host this is
// developed on.
//
// # Why hand-written
//
// The agent needs descriptor-based operations on delegated directories, the
// v1 per-thread move and chown-based delegation; containerd/cgroups is
// path-based and pulls in cilium/ebpf and dbus. This package is small and
// does exactly what Airlock needs: both versions share one code path and
// differ only by a table of interface-file names.
package cgroups

import (
	"fmt"
	"math"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Version is a cgroup version.
type Version int

// The cgroup versions.
const (
	V1 Version = 1
	V2 Version = 2
)

// String returns "v1" or "v2".
func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	}
	return fmt.Sprintf("Version(%d)", int(v))
}

// DefaultParent is the cgroup, relative to each hierarchy's mount, under
// which sandboxes are created unless NewManager is told otherwise.
const DefaultParent = "airlock"

// Limits are the resource limits of one sandbox. Zero means unlimited.
type Limits struct {
	// MemoryBytes caps the memory of sandboxed code (<id>/work), with no
	// swap on top.
	MemoryBytes int64
	// CPUs caps the CPU time of the whole sandbox, in CPUs (1.5 = one and a
	// half CPUs' worth of time per period).
	CPUs float64
	// Pids caps the tasks (processes and threads) of sandboxed code.
	Pids int64
	// AgentMemoryBytes is the agent's allowance: with MemoryBytes set, the
	// whole sandbox (<id>) is capped at MemoryBytes+AgentMemoryBytes, no
	// swap, so that nothing of the sandbox exceeds that sum whatever
	// cgroup it is charged to (the files the agent writes for the file
	// API are charged to agent/). agent/ gets no cap of its own: at such
	// a cap the kernel would OOM-kill the agent, the only process there.
	AgentMemoryBytes int64
	// AgentPids is the agent's allowance of tasks: with Pids set, the whole
	// sandbox is capped at Pids+AgentPids, so a fork bomb in work/ never
	// takes the agent's threads. agent/ gets no cap of its own: the Go
	// runtime dies when it cannot make a thread.
	AgentPids int64
}

// totalMemory is the memory cap of the whole sandbox, 0 for none.
func (l Limits) totalMemory() int64 {
	if l.MemoryBytes > 0 && l.AgentMemoryBytes > 0 {
		return l.MemoryBytes + l.AgentMemoryBytes
	}
	return 0
}

// totalPids is the pids cap of the whole sandbox, 0 for none.
func (l Limits) totalPids() int64 {
	if l.Pids > 0 && l.AgentPids > 0 {
		return l.Pids + l.AgentPids
	}
	return 0
}

// Bounds on limits: below the minimums the kernel misbehaves or nothing
// useful can run; above the maximums a value is a mistake.
const (
	minMemoryBytes = 1 << 20
	maxMemoryBytes = 1 << 50
	minCPUs        = 0.01
	maxCPUs        = 4096
	maxPids        = 1 << 22 // PID_MAX_LIMIT
	cpuPeriodUsec  = 100000
)

// Validate reports whether l is usable, with an error wrapping
// errdefs.ErrInvalidArgument when not.
func (l Limits) Validate() error {
	check := func(name string, v, lo, hi int64) error {
		if v != 0 && (v < lo || v > hi) {
			return fmt.Errorf("cgroups: %s %d out of range [%d, %d] (0 = unlimited): %w", name, v, lo, hi, errdefs.ErrInvalidArgument)
		}
		return nil
	}
	for _, c := range []struct {
		name      string
		v, lo, hi int64
	}{
		{"memory limit", l.MemoryBytes, minMemoryBytes, maxMemoryBytes},
		{"agent memory limit", l.AgentMemoryBytes, minMemoryBytes, maxMemoryBytes},
		{"pids limit", l.Pids, 1, maxPids},
		{"agent pids limit", l.AgentPids, 1, maxPids},
	} {
		if err := check(c.name, c.v, c.lo, c.hi); err != nil {
			return err
		}
	}
	if math.IsNaN(l.CPUs) || (l.CPUs != 0 && (l.CPUs < minCPUs || l.CPUs > maxCPUs)) {
		return fmt.Errorf("cgroups: cpus %v out of range [%v, %v] (0 = unlimited): %w", l.CPUs, minCPUs, maxCPUs, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Owner is the host user and group that own the delegated part of a sandbox's
// cgroups: the host uid and gid that root inside the sandbox maps to.
type Owner struct {
	UID, GID int
}

func (o Owner) validate() error {
	const maxID = 1<<32 - 2 // (uid_t)-1 means "unchanged" to chown
	if o.UID < 0 || o.UID > maxID || o.GID < 0 || o.GID > maxID {
		return fmt.Errorf("cgroups: owner %d:%d out of range: %w", o.UID, o.GID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// Stats is what a whole sandbox has used. A counter the kernel does not
// provide reads as zero.
type Stats struct {
	// CPUTime is the CPU time of every task of the sandbox, agent included.
	CPUTime time.Duration
	// MemoryBytes and PeakMemoryBytes are the current and highest memory
	// use of the whole sandbox.
	MemoryBytes, PeakMemoryBytes uint64
	// Pids is the number of tasks in the sandbox now.
	Pids uint64
	// OOMKills counts processes the OOM killer killed in the sandbox. On v1
	// the kernel counts them per cgroup, not per subtree, so kills in exec
	// cgroups the agent has already removed are no longer counted.
	OOMKills uint64
	// MemoryLimitBytes and PidsLimit are the caps of the whole sandbox
	// (work's limit plus the agent's allowance, see Limits), read back
	// from the kernel; 0 when it has none.
	MemoryLimitBytes, PidsLimit uint64
}

// Usage is what one process tree (an exec cgroup) has used. A counter the
// kernel does not provide reads as zero.
type Usage struct {
	CPUTime         time.Duration
	PeakMemoryBytes uint64
	OOMKills        uint64
}

// validName reports whether s can name a sandbox or an exec cgroup: 1 to 128
// letters, digits, '_' and '-', starting with a letter or digit. Without dots
// a name can never collide with an interface file ("memory.max") or be "." or
// "..".
func validName(s string) bool {
	if len(s) == 0 || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func checkName(kind, s string) error {
	if !validName(s) {
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return fmt.Errorf("cgroups: invalid %s name %q (1-128 of [A-Za-z0-9_-], starting with a letter or digit): %w", kind, s, errdefs.ErrInvalidArgument)
	}
	return nil
}
