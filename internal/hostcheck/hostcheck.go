// Package hostcheck inspects the host the daemon runs on and reports, for
// each guarantee Airlock's isolation relies on, what the host gives and
// whether it is mandatory: the kernel, the cgroup version and the
// controllers the sandboxes' limits need, user namespaces and their
// sysctls, seccomp, overlayfs inside a user namespace, id-mapped mounts,
// Landlock, swap accounting, KVM, the data dir's free space and inodes and
// the open-file limit.
//
// `airlock serve` runs the checks before it touches anything and refuses to
// start when a mandatory one fails (Report.Err names each and the host
// setting to change); optional ones that fail start it degraded, with a
// warning in its log. `airlock doctor` prints the same report, and
// GET /v1/info serves the one taken at start.
//
// Most checks read files under /proc and /sys, through an fs.FS so that
// tests feed them fake content. Three things are tried instead, because
// only trying tells: a child process is started in a new user and mount
// namespace, as a sandbox's agent is, and there mounts overlayfs over a
// directory of the data dir's filesystem and installs a seccomp filter;
// while it lives, the daemon side id-maps that directory through the
// child's user namespace. The child's mounts die with it, the id-mapped
// mount is never attached, and the scratch directory is removed: nothing
// is left.
//
// On cgroup v2 the checks look at the top of the mounted hierarchy, where
// the sandboxes' cgroups go: the root cgroup on a host, the container's
// cgroup in a container with its own cgroup namespace. When that top is not
// the root and holds processes, controllers can be enabled for its children
// only once those processes are in a leaf cgroup (the kernel's "no internal
// processes" rule): the daemon moves them when it is one of them, and the
// report says so.
package hostcheck

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Status is the outcome of one check.
type Status string

// The statuses. A failed check is always a mandatory one: an optional
// guarantee the host lacks is a warning (the daemon starts degraded).
const (
	OK   Status = "ok"
	Warn Status = "warn"
	Fail Status = "fail"
)

// Check is what one check found.
type Check struct {
	// Name identifies the check ("kernel", "cgroup_controllers", ...).
	Name string `json:"name"`
	// Status is ok, warn or fail.
	Status Status `json:"status"`
	// Mandatory says whether the daemon refuses to start when it fails.
	Mandatory bool `json:"mandatory"`
	// Found is what the host gives, in a line.
	Found string `json:"found"`
	// Meaning says what this means for the sandboxes' isolation.
	Meaning string `json:"meaning"`
	// Fix, for a warning or failure, is the host setting to change.
	Fix string `json:"fix,omitempty"`
}

// Report is the outcome of every check.
type Report struct {
	// Checks are in a fixed order (see Names).
	Checks []Check `json:"checks"`
	// OK is false when a mandatory check failed: the host cannot run
	// Airlock safely.
	OK bool `json:"ok"`
	// ProbedAt is when the whole report was taken, probes included;
	// CheckedAt is when its quick checks (disk space, open files) were
	// last taken again (see Refresh).
	ProbedAt  time.Time `json:"probed_at"`
	CheckedAt time.Time `json:"checked_at"`
}

// Failed returns the checks that failed.
func (r Report) Failed() []Check { return r.with(Fail) }

// Warnings returns the checks that warn: what the daemon runs without.
func (r Report) Warnings() []Check { return r.with(Warn) }

func (r Report) with(s Status) []Check {
	var out []Check
	for _, c := range r.Checks {
		if c.Status == s {
			out = append(out, c)
		}
	}
	return out
}

// Err returns nil when no mandatory check failed, else one error, wrapping
// errdefs.ErrFailedPrecondition, that names each failed check, what was
// found and the host setting to change, one per line.
func (r Report) Err() error {
	failed := r.Failed()
	if len(failed) == 0 {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "this host cannot run Airlock safely (airlock doctor shows the full report): %d mandatory check(s) failed", len(failed))
	for _, c := range failed {
		fmt.Fprintf(&b, "\n  - %s: %s", c.Name, c.Found)
		if c.Fix != "" {
			fmt.Fprintf(&b, "; fix: %s", c.Fix)
		}
	}
	return fmt.Errorf("%s: %w", b.String(), errdefs.ErrFailedPrecondition)
}

// Options say what to check and how.
type Options struct {
	// DataDir is the daemon's data directory: its filesystem's space is
	// checked and the probes' scratch directory is made in it (or, when
	// it does not exist yet, in its nearest existing parent). Required.
	DataDir string
	// MaxSandboxes, when set, is the daemon's sandbox cap: a namespace
	// limit below it is a warning.
	MaxSandboxes int
	// Root is the host's root directory, through which /proc and /sys are
	// read (paths such as "proc/self/mountinfo"); nil means the real one.
	Root fs.FS
	// Probes replace the checks that act rather than read; nil fields
	// take the real ones.
	Probes Probes
}

// Probes are the checks that act on the host rather than read a file.
// Tests replace them.
type Probes struct {
	// Euid and Pid are the effective uid and the pid of this process.
	Euid func() int
	Pid  func() int
	// LandlockABI is the kernel's Landlock ABI version, 0 for none.
	LandlockABI func() (int, error)
	// Sandbox starts a process in new user and mount namespaces and tries
	// there what a sandbox's agent does (see SandboxResult), with a
	// scratch directory made under dir.
	Sandbox func(ctx context.Context, dir string) SandboxResult
	// Disk reports the filesystem that holds path.
	Disk func(path string) (Disk, error)
	// OpenFiles is this process's RLIMIT_NOFILE.
	OpenFiles func() (soft, hard uint64, err error)
}

// SandboxResult is what the namespace probe found. A nil error means the
// step worked; a step after one that failed is not tried (ErrNotProbed).
type SandboxResult struct {
	// UserNS: a child in new user and mount namespaces started.
	UserNS error
	// Overlay: the child mounted overlayfs (userxattr, upper layer on a
	// tmpfs, lower layer on the data dir's filesystem), wrote through it
	// and read back.
	Overlay error
	// Seccomp: the child installed a seccomp filter.
	Seccomp error
	// IDMap: the data dir's filesystem was id-mapped through the child's
	// user namespace. An error wrapping errdefs.ErrNotSupported means the
	// kernel or the filesystem cannot.
	IDMap error
}

// ErrNotProbed marks a probe step that was not tried because an earlier
// one failed.
var ErrNotProbed = fmt.Errorf("not tried: an earlier step failed: %w", errdefs.ErrFailedPrecondition)

// errNeedsRoot marks the probes not tried because only root can (the root
// check fails then).
var errNeedsRoot = fmt.Errorf("not tried: needs root: %w", errdefs.ErrPermissionDenied)

// Disk is a filesystem's size and what is free on it.
type Disk struct {
	// Path is the directory measured (the data dir or, when it does not
	// exist yet, its nearest existing parent).
	Path string
	// Type names the filesystem ("ext4", "xfs", ...; "0x..." when
	// unknown).
	Type string
	// Bytes and inodes: total and free (for root). Inodes are 0 on
	// filesystems without a fixed count (btrfs).
	TotalBytes, FreeBytes   uint64
	TotalInodes, FreeInodes uint64
}

// Run runs every check and returns the report. It takes a few
// milliseconds: one short-lived child process and a few file reads.
func Run(ctx context.Context, opts Options) Report {
	e := newEnv(opts)
	now := time.Now().UTC()
	r := Report{ProbedAt: now, CheckedAt: now}
	for _, c := range checks {
		r.Checks = append(r.Checks, c.run(ctx, e))
	}
	r.OK = len(r.Failed()) == 0
	return r
}

// Refresh returns prev with its quick, changing checks (the data dir's
// space, the open-file limit) taken again and CheckedAt set; the other
// results stay those of ProbedAt. It starts no process: the daemon calls
// it for GET /v1/info.
func Refresh(ctx context.Context, prev Report, opts Options) Report {
	e := newEnv(opts)
	r := Report{ProbedAt: prev.ProbedAt, CheckedAt: time.Now().UTC()}
	for _, c := range prev.Checks {
		for _, def := range checks {
			if def.name == c.Name && def.volatile {
				c = def.run(ctx, e)
				break
			}
		}
		r.Checks = append(r.Checks, c)
	}
	r.OK = len(r.Failed()) == 0
	return r
}

// Names lists the checks in the order a report holds them.
func Names() []string {
	out := make([]string, len(checks))
	for i, c := range checks {
		out[i] = c.name
	}
	return out
}

// env is what the checks of one run share: the options with defaults and
// what more than one check needs, computed once.
type env struct {
	opts   Options
	fsys   fs.FS
	probes Probes

	cg      *cgroupView
	sandbox *SandboxResult
}

func newEnv(opts Options) *env {
	e := &env{opts: opts, fsys: opts.Root, probes: opts.Probes}
	if e.fsys == nil {
		e.fsys = os.DirFS("/")
	}
	real := realProbes()
	p := &e.probes
	if p.Euid == nil {
		p.Euid = real.Euid
	}
	if p.Pid == nil {
		p.Pid = real.Pid
	}
	if p.LandlockABI == nil {
		p.LandlockABI = real.LandlockABI
	}
	if p.Sandbox == nil {
		p.Sandbox = real.Sandbox
	}
	if p.Disk == nil {
		p.Disk = real.Disk
	}
	if p.OpenFiles == nil {
		p.OpenFiles = real.OpenFiles
	}
	return e
}

// sandboxResult runs the namespace probe once per env, as root only.
func (e *env) sandboxResult(ctx context.Context) SandboxResult {
	if e.sandbox == nil {
		var r SandboxResult
		if e.probes.Euid() != 0 {
			r = SandboxResult{UserNS: errNeedsRoot, Overlay: errNeedsRoot, Seccomp: errNeedsRoot, IDMap: errNeedsRoot}
		} else {
			r = e.probes.Sandbox(ctx, e.opts.DataDir)
		}
		e.sandbox = &r
	}
	return *e.sandbox
}
