// Package runtime defines what a sandbox backend provides: an isolated
// environment whose PID 1 is the Airlock agent, reachable from the daemon
// over a connection that sandboxed code cannot reach.
//
// A backend implements Runtime. Commands and files are not part of this
// interface: every backend runs the same in-sandbox agent (internal/agent)
// and the layers above talk to it through internal/agentclient over the
// connection that Instance.Dial returns. Optional abilities (pause/resume,
// checkpoint) are small separate interfaces that callers detect with a type
// assertion. Every backend must pass the conformance suite in
// runtime/runtimetest.
package runtime

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Runtime creates sandboxes and finds the ones a previous daemon left
// running.
type Runtime interface {
	// Name identifies the backend ("linux", "fake", ...).
	Name() string

	// Create builds the sandbox described by spec, starts its agent and
	// returns once the agent answers on its control connection. On error
	// nothing of the sandbox is left on the host.
	Create(ctx context.Context, spec Spec) (Instance, error)

	// Recover finds sandboxes created by earlier runs of the daemon. Those
	// whose agent is alive are returned, adopted, whether or not it
	// answers yet (a backend may return a frozen or starved one: the
	// caller thaws it with Pauser.Resume and waits for it); every other
	// trace of a sandbox (processes, mounts, cgroups, files) is removed.
	Recover(ctx context.Context) ([]Instance, error)
}

// Instance is one running sandbox.
//
// The lifecycle is: Create returns a running instance; Destroy kills every
// process in it and removes everything it held on the host. Destroy is
// idempotent and safe to call concurrently with any other method. An
// instance outlives the daemon process that created it.
type Instance interface {
	ID() string
	// Spec returns the spec the sandbox was created from (recovered from
	// disk for adopted sandboxes).
	Spec() Spec
	// CreatedAt is when the sandbox was created.
	CreatedAt() time.Time
	// Dial opens a new connection to the agent's control socket.
	Dial(ctx context.Context) (net.Conn, error)
	// Stats reports current resource usage of the whole sandbox.
	Stats(ctx context.Context) (Stats, error)
	// Exited is closed once the sandbox's agent, its PID 1, has exited,
	// whatever ended it (Destroy included): every process of the
	// sandbox ended with it and the sandbox can serve nothing more. It
	// is closed within moments of the exit, for created and adopted
	// instances alike, so that a sandbox that dies on its own is noticed
	// at once rather than by the next failed health check. Waiting on it
	// must not cost the daemon an OS thread per sandbox.
	Exited() <-chan struct{}
	// Destroy kills everything in the sandbox and frees its host resources.
	Destroy(ctx context.Context) error
}

// Pauser is implemented by instances that can be frozen in place (memory
// stays resident) and thawed.
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Checkpointer is implemented by instances whose full memory state can be
// written to disk. No backend in this tree implements it yet; it is
// reserved for the gVisor backend.
type Checkpointer interface {
	Checkpoint(ctx context.Context, dir string) error
}

// Spec describes a sandbox to create. The zero values of the optional
// fields mean "backend default".
type Spec struct {
	// ID names the sandbox; it must match IDPattern.
	ID string `json:"id"`
	// Rootfs is the resolved root filesystem (see internal/template).
	Rootfs Rootfs `json:"rootfs"`
	// Limits caps the resources of the whole sandbox.
	Limits Limits `json:"limits"`
	// Env is the base environment of every process started in the
	// sandbox; per-process environment is layered on top.
	Env map[string]string `json:"env,omitempty"`
	// Hostname inside the sandbox; defaults to the ID.
	Hostname string `json:"hostname,omitempty"`
	// Labels are opaque key/values kept with the sandbox and returned for
	// adopted sandboxes; the lifecycle manager stores its bookkeeping here.
	Labels map[string]string `json:"labels,omitempty"`
	// Build makes a build sandbox, for a template's RUN steps: root inside
	// keeps the file-administration capabilities a Dockerfile RUN expects
	// (chown, setuid, ...; see BuildCapabilities in the backend), scoped
	// to the sandbox's own user namespace, and may write anywhere in the
	// root filesystem rather than only under its top-level directories.
	Build bool `json:"build,omitempty"`
	// Deadline, if set, is when the sandbox's agent ends the sandbox by
	// itself (kills every process, then exits) should nothing have
	// destroyed it before: host wall-clock time, which the agent turns
	// into a time left when it starts and counts on a clock the sandbox
	// cannot set. The lifecycle manager gives its expiry plus a grace, so
	// that its own reaper normally ends the sandbox first, and moves it
	// later through the agent (agentclient.SetDeadline). A backend must
	// pass it to the agent.
	Deadline time.Time `json:"deadline,omitzero"`
}

// IDPattern is the syntax of sandbox IDs: it keeps IDs safe to use in host
// paths and cgroup names.
var IDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// Rootfs is a root filesystem ready to mount: read-only layers stacked under
// a per-sandbox writable layer, plus read-only bind mounts of host paths.
type Rootfs struct {
	// Layers are host directories, lowest first. They are never written.
	Layers []string `json:"layers"`
	// Binds are mounted on top of the layers, in order.
	Binds []Bind `json:"binds,omitempty"`
	// Workdir is the working directory of processes that name none (an
	// image's WORKDIR). It is made, owned by root, when the sandbox starts
	// if the layers lack it. Empty means the default user's home.
	Workdir string `json:"workdir,omitempty"`
	// User is the account processes run as when a request names none (an
	// image's USER): "name", "uid", "name:group" or "uid:gid", looked up
	// in the root filesystem's /etc/passwd and /etc/group when the sandbox
	// starts. Empty means the sandbox user ("user", uid 1000).
	User string `json:"user,omitempty"`
	// Env is the environment the template sets (an image's ENV). Every
	// process starts with it, under Spec.Env.
	Env map[string]string `json:"env,omitempty"`
}

// Limits on the defaults a Rootfs carries.
const (
	maxWorkdirLen = 4096
	maxUserLen    = 256
)

// Validate checks the fields of r that are not host paths: the working
// directory is absolute and clean and the user a short printable word.
func (r *Rootfs) Validate() error {
	if w := r.Workdir; w != "" && (!path.IsAbs(w) || path.Clean(w) != w || len(w) > maxWorkdirLen || strings.IndexByte(w, 0) >= 0) {
		return fmt.Errorf("rootfs: working directory %.100q must be an absolute clean path of at most %d bytes: %w", w, maxWorkdirLen, errdefs.ErrInvalidArgument)
	}
	if u := r.User; len(u) > maxUserLen || strings.ContainsFunc(u, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return fmt.Errorf("rootfs: user %.100q must be at most %d printable bytes without spaces: %w", u, maxUserLen, errdefs.ErrInvalidArgument)
	}
	return nil
}

// MaxLayers is the most read-only layers a Rootfs may stack. Overlayfs
// takes up to 500, but each layer's id-mapped mount travels to the agent in
// one SCM_RIGHTS message and each adds a path to the mount options, which
// must fit in a page; Docker's own limit is 127.
const MaxLayers = 128

// BaseEnv returns the environment every process of a sandbox made from
// spec starts with: the template's, then the spec's on top.
func (spec *Spec) BaseEnv() map[string]string {
	if len(spec.Rootfs.Env) == 0 {
		return spec.Env
	}
	env := make(map[string]string, len(spec.Rootfs.Env)+len(spec.Env))
	maps.Copy(env, spec.Rootfs.Env)
	maps.Copy(env, spec.Env)
	return env
}

// Bind mounts a host path into the sandbox read-only.
type Bind struct {
	Source string `json:"source"` // absolute host path
	Target string `json:"target"` // absolute path inside the sandbox
}

// Limits are resource caps for a whole sandbox. Zero means the backend's
// default, not unlimited.
type Limits struct {
	CPUs        float64 `json:"cpus,omitempty"`         // CPU quota in cores
	MemoryBytes int64   `json:"memory_bytes,omitempty"` // RAM for sandboxed processes; no swap
	Pids        int64   `json:"pids,omitempty"`         // processes and threads
	DiskBytes   int64   `json:"disk_bytes,omitempty"`   // writable layer size
	NoFile      uint64  `json:"nofile,omitempty"`       // RLIMIT_NOFILE per process
}

// Over returns base with every field that l sets (non-zero) replaced by
// l's: a request's limits over a template's over the daemon's defaults.
func (l Limits) Over(base Limits) Limits {
	if l.CPUs != 0 {
		base.CPUs = l.CPUs
	}
	if l.MemoryBytes != 0 {
		base.MemoryBytes = l.MemoryBytes
	}
	if l.Pids != 0 {
		base.Pids = l.Pids
	}
	if l.DiskBytes != 0 {
		base.DiskBytes = l.DiskBytes
	}
	if l.NoFile != 0 {
		base.NoFile = l.NoFile
	}
	return base
}

// Stats is a point-in-time view of a sandbox's resource use. A counter a
// backend cannot read is zero.
type Stats struct {
	// CPUTime is the CPU time every process of the sandbox (its agent
	// included) has used since it started.
	CPUTime time.Duration `json:"cpu_time"`
	// MemoryBytes and PeakMemoryBytes are the current and highest memory
	// use of the whole sandbox: its processes, its agent and the pages of
	// the files they wrote to memory-backed filesystems (the writable
	// layer of the native backend is one). MemoryLimitBytes is the cap on
	// that same sum (Limits.MemoryBytes plus what the backend allows the
	// agent), 0 for none.
	MemoryBytes      uint64 `json:"memory_bytes"`
	PeakMemoryBytes  uint64 `json:"peak_memory_bytes"`
	MemoryLimitBytes uint64 `json:"memory_limit_bytes"`
	// Pids is the number of tasks (processes and threads) in the sandbox
	// now, its agent's included; PidsLimit their cap, 0 for none.
	Pids      uint64 `json:"pids"`
	PidsLimit uint64 `json:"pids_limit"`
	// OOMKills counts the processes the kernel's OOM killer ended.
	OOMKills uint64 `json:"oom_kills"`
	// DiskUsedBytes is what the sandbox's writable layer holds (the
	// files it wrote and their metadata), DiskLimitBytes its size.
	DiskUsedBytes  uint64 `json:"disk_used_bytes"`
	DiskLimitBytes uint64 `json:"disk_limit_bytes"`
	// Net counts the traffic of the sandbox's own network interfaces,
	// loopback aside; nil when it has none (its network, if any, goes
	// through a proxy outside: see the egress package).
	Net *NetStats `json:"net,omitempty"`
}

// NetStats are the counters of a sandbox's network interfaces, loopback
// aside, summed, as the kernel counts them inside the sandbox: received
// is what came into the sandbox.
type NetStats struct {
	RxBytes   uint64 `json:"rx_bytes"`
	TxBytes   uint64 `json:"tx_bytes"`
	RxPackets uint64 `json:"rx_packets"`
	TxPackets uint64 `json:"tx_packets"`
}
