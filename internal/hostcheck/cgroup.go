package hostcheck

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/cgroups"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// What the cgroup checks look at.
var (
	// mandatoryControllers are what every sandbox's limits need.
	mandatoryControllers = []string{"memory", "pids", "cpu"}
	// v1Extra are the v1 controllers the cgroups package needs besides
	// (CPU time and freezing are core features on v2).
	v1Extra = []string{"cpuacct", "freezer"}
	// optionalControllers are reported, not required: this version sets
	// no io or cpuset limits.
	optionalControllers = map[cgroups.Version][]string{cgroups.V1: {"blkio", "cpuset"}, cgroups.V2: {"io", "cpuset"}}
)

// cgroupView is what the cgroup checks share.
type cgroupView struct {
	layout cgroups.Layout
	err    error // mountinfo could not be read or parsed

	// On v2: the daemon's own cgroup, below which sandboxes belong.
	self      string // its path in the hierarchy, as /proc/self/cgroup names it
	dir       string // its directory in the fs.FS
	isRoot    bool   // the hierarchy's root (no cgroup.type there)
	typ       string // cgroup.type: domain, threaded, ...
	available []string
	enabled   []string
	procs     []int
	selfErr   error // the above could not be read
}

// cgroups computes the view once.
func (e *env) cgroups() *cgroupView {
	if e.cg != nil {
		return e.cg
	}
	v := &cgroupView{}
	e.cg = v
	mi, err := readSmall(e.fsys, "proc/self/mountinfo", 1<<22)
	if err != nil {
		v.err = err
		return v
	}
	v.layout, v.err = cgroups.Inspect(bytes.NewReader(mi), func(point string) ([]string, error) {
		b, err := readSmall(e.fsys, fsPath(point, "cgroup.controllers"), 4096)
		return strings.Fields(string(b)), err
	})
	if v.err != nil || v.layout.Version != cgroups.V2 {
		return v
	}
	v.selfErr = v.readSelf(e)
	return v
}

// readSelf fills in the daemon's own v2 cgroup.
func (v *cgroupView) readSelf(e *env) error {
	b, err := readSmall(e.fsys, "proc/self/cgroup", 64<<10)
	if err != nil {
		return err
	}
	v.self, err = parseSelfCgroup(b)
	if err != nil {
		return err
	}
	m := v.layout.Used[0]
	rel := v.self
	if m.Root != "/" {
		r, ok := strings.CutPrefix(v.self, m.Root)
		if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
			return fmt.Errorf("the cgroup %s is outside the mounted part %s of the hierarchy: %w", v.self, m.Root, errdefs.ErrFailedPrecondition)
		}
		rel = r
	}
	if strings.Contains(rel, "/..") {
		return fmt.Errorf("the cgroup %s is outside this cgroup namespace: %w", v.self, errdefs.ErrFailedPrecondition)
	}
	v.dir = fsPath(m.Point, rel)
	if !fs.ValidPath(v.dir) {
		return fmt.Errorf("cgroup path %q: %w", v.self, errdefs.ErrInvalidArgument)
	}
	t, err := readSmall(e.fsys, path.Join(v.dir, "cgroup.type"), 256)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		v.isRoot = true
	case err != nil:
		return err
	default:
		v.typ = strings.TrimSpace(string(t))
	}
	ctl, err := readSmall(e.fsys, path.Join(v.dir, "cgroup.controllers"), 4096)
	if err != nil {
		return err
	}
	v.available = strings.Fields(string(ctl))
	sub, err := readSmall(e.fsys, path.Join(v.dir, "cgroup.subtree_control"), 4096)
	if err != nil {
		return err
	}
	v.enabled = strings.Fields(string(sub))
	procs, err := readSmall(e.fsys, path.Join(v.dir, "cgroup.procs"), 1<<22)
	if err != nil {
		return err
	}
	v.procs, err = parsePids(procs)
	return err
}

// parseSelfCgroup returns the v2 path ("0::/path") of a /proc/<pid>/cgroup.
func parseSelfCgroup(b []byte) (string, error) {
	found := ""
	for _, line := range strings.Split(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "0::")
		if !ok {
			continue
		}
		if found != "" {
			return "", fmt.Errorf("/proc/self/cgroup lists two unified hierarchies: %w", errdefs.ErrInvalidArgument)
		}
		if !strings.HasPrefix(rest, "/") {
			return "", fmt.Errorf("/proc/self/cgroup: malformed line %q: %w", clip(line), errdefs.ErrInvalidArgument)
		}
		found = path.Clean(rest)
		if rest == "/.." || strings.HasPrefix(rest, "/../") {
			found = rest // outside the cgroup namespace: as the kernel wrote it
		}
	}
	if found == "" {
		return "", fmt.Errorf("/proc/self/cgroup has no unified hierarchy line: %w", errdefs.ErrInvalidArgument)
	}
	return found, nil
}

// parsePids parses cgroup.procs: one pid per line.
func parsePids(b []byte) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("cgroup.procs: malformed pid %q: %w", clip(f), errdefs.ErrInvalidArgument)
		}
		out = append(out, n)
	}
	return out, nil
}

func checkCgroups(e *env) Check {
	v := e.cgroups()
	c := Check{Meaning: "memory, pids and CPU limits of sandboxes and of each command are cgroups; so are the freezing and killing of a sandbox's whole process tree"}
	if v.err != nil {
		c.Status, c.Found = Fail, "cannot read the mounts: "+v.err.Error()
		return c
	}
	var v1, v2 []cgroups.Mount
	for _, m := range v.layout.Mounts {
		if m.Version == cgroups.V1 {
			v1 = append(v1, m)
		} else {
			v2 = append(v2, m)
		}
	}
	mode := "none"
	switch {
	case len(v1) > 0 && len(v2) > 0:
		mode = "hybrid"
	case len(v1) > 0:
		mode = "v1"
	case len(v2) > 0:
		mode = "v2"
	}
	if v.layout.Version == 0 {
		c.Status = Fail
		c.Found = fmt.Sprintf("mounts: %s; no usable hierarchy (%s)", mode, v.layout.Unusable)
		c.Fix = "boot with systemd.unified_cgroup_hierarchy=1 (cgroup v2, with the memory, pids and cpu controllers), or mount the v1 memory, pids, cpu, cpuacct and freezer hierarchies"
		return c
	}
	c.Status = OK
	switch v.layout.Version {
	case cgroups.V1:
		c.Found = "v1"
		if mode == "hybrid" {
			c.Found = "v1 (hybrid: the controllers on v1 hierarchies"
			for _, m := range v2 {
				c.Found += ", cgroup2 at " + m.Point
			}
			c.Found += " unused)"
		}
		c.Meaning += ". On v1: memory (memory+swap capped at the memory limit where swap is accounted), pids, CPU quota and freezer per sandbox and per command"
	case cgroups.V2:
		c.Found = "v2 (unified, at " + v.layout.Used[0].Point + ")"
		if mode == "hybrid" {
			c.Found = "v2 (hybrid: the controllers on the unified hierarchy at " + v.layout.Used[0].Point + ")"
		}
		c.Meaning += ". On v2: memory.max with swap off, pids.max, cpu.max per sandbox and per command, cgroup.kill and cgroup.freeze for the tree, memory.peak and cpu.stat for usage"
	}
	for _, m := range v.layout.Used {
		if m.ReadOnly {
			c.Status = Fail
			c.Found += "; mounted read-only at " + m.Point
			c.Fix = "mount the cgroup filesystem read-write (in a container: run it privileged or with a writable, delegated cgroup namespace)"
			break
		}
	}
	return c
}

func checkControllers(e *env) Check {
	v := e.cgroups()
	c := Check{Meaning: "without memory, pids or cpu, a sandbox's memory, task or CPU limit would not hold: the daemon refuses to run sandboxes whose limits it cannot enforce"}
	if v.err != nil || v.layout.Version == 0 {
		c.Status, c.Found = Fail, "no usable cgroup hierarchy (see cgroups)"
		c.Fix = "see cgroups"
		return c
	}
	optional := optionalControllers[v.layout.Version]
	if v.layout.Version == cgroups.V1 {
		var have []string
		for _, m := range v.layout.Mounts {
			if m.Version == cgroups.V1 {
				have = append(have, m.Controllers...)
			}
		}
		c.Status = OK
		c.Found = "v1 hierarchies: " + strings.Join(present(append(slices.Clone(mandatoryControllers), v1Extra...), have), " ") +
			"; optional: " + optionalList(optional, have)
		return c
	}
	if v.selfErr != nil {
		c.Status, c.Found = Fail, "cannot read the daemon's cgroup: "+v.selfErr.Error()
		c.Fix = "run the daemon where /proc/self/cgroup names a cgroup of the mounted cgroup2 hierarchy (a systemd service with Delegate=yes, or a container with its own cgroup namespace)"
		return c
	}
	where := "the daemon's cgroup " + v.self
	if v.isRoot {
		where = "the root cgroup"
	}
	var missing []string
	for _, ctl := range mandatoryControllers {
		if !slices.Contains(v.available, ctl) {
			missing = append(missing, ctl)
		}
	}
	c.Found = "available to " + where + ": " + strings.Join(present(mandatoryControllers, v.available), " ")
	if len(v.enabled) > 0 {
		c.Found += " (enabled for its children: " + strings.Join(v.enabled, " ") + ")"
	}
	c.Found += "; optional: " + optionalList(optional, v.available)
	if len(missing) > 0 {
		c.Status = Fail
		c.Found = "missing " + strings.Join(missing, ", ") + " in " + where + "; " + c.Found
		c.Fix = "delegate the " + strings.Join(missing, ", ") + " controller(s) to the daemon's cgroup: run it as a systemd service with Delegate=yes (deploy/airlock.service), or enable them in the parent cgroup's cgroup.subtree_control"
		return c
	}
	c.Status = OK
	return c
}

func checkPlacement(e *env) Check {
	v := e.cgroups()
	c := Check{Meaning: "sandboxes' cgroups go below the daemon's own cgroup; the kernel lets a non-root cgroup enable controllers for its children only while it holds no process, so the daemon must first move itself (and whatever shares its cgroup) into a leaf"}
	switch {
	case v.err != nil || v.layout.Version == 0:
		c.Status, c.Found = Fail, "no usable cgroup hierarchy (see cgroups)"
		c.Fix = "see cgroups"
		return c
	case v.layout.Version == cgroups.V1:
		c.Status, c.Found = OK, "v1: sandboxes go under airlock/ in each hierarchy, wherever the daemon runs"
		c.Meaning = "on v1 a cgroup may hold processes and children with limits at once"
		return c
	case v.selfErr != nil:
		c.Status, c.Found = Fail, "cannot read the daemon's cgroup: "+v.selfErr.Error()
		c.Fix = "run the daemon where /proc/self/cgroup names a cgroup of the mounted cgroup2 hierarchy (a systemd service with Delegate=yes, or a container with its own cgroup namespace)"
		return c
	case v.isRoot:
		c.Status, c.Found = OK, "the root cgroup (no process rule there)"
		return c
	}
	if v.typ != "domain" {
		c.Status = Fail
		c.Found = fmt.Sprintf("%s is a %q cgroup", v.self, v.typ)
		c.Fix = "start the daemon in a domain cgroup: a systemd service with Delegate=yes (deploy/airlock.service), or a container's own cgroup"
		return c
	}
	self := e.probes.Pid()
	others := 0
	for _, p := range v.procs {
		if p != self {
			others++
		}
	}
	c.Found = fmt.Sprintf("%s, not the root, holds %d process(es)", v.self, len(v.procs))
	switch {
	case others == 0:
		c.Status = OK
		c.Found += ": only this one, which moves itself into a leaf before enabling controllers"
	default:
		c.Status = Warn
		c.Found += fmt.Sprintf(": %d besides this one, which must move into a leaf too before controllers can be enabled there", others)
		c.Fix = "start the daemon in a cgroup of its own: a systemd service with Delegate=yes (deploy/airlock.service), or a container whose cgroup holds only the daemon"
	}
	return c
}

func checkSwap(e *env) Check {
	v := e.cgroups()
	c := Check{Meaning: "with swap accounting, a sandbox's memory limit covers swap too (Airlock allows it none); without it, a sandbox can push memory to swap beyond its limit"}
	swap, err := swapInUse(e.fsys)
	if err != nil {
		swap = true // unknown: assume the worst
	}
	accounted, known := false, false
	if v.err == nil {
		switch v.layout.Version {
		case cgroups.V1:
			for _, m := range v.layout.Used {
				if slices.Contains(m.Controllers, "memory") {
					known = true
					accounted = exists(e.fsys, fsPath(m.Point, "memory.memsw.limit_in_bytes"))
				}
			}
		case cgroups.V2:
			if v.selfErr == nil {
				known, accounted = v2SwapFiles(e.fsys, v)
			}
		}
	}
	switch {
	case known && accounted:
		c.Status, c.Found = OK, "accounted"
	case !swap:
		c.Status, c.Found = OK, "no swap in use"
		if known {
			c.Found += " (not accounted: enable accounting before adding swap)"
		}
	case !known:
		c.Status, c.Found = Warn, "swap in use; accounting unknown"
		c.Fix = "boot with swapaccount=1, or turn swap off"
	default:
		c.Status, c.Found = Warn, "swap in use and not accounted"
		c.Fix = "boot with swapaccount=1 (a kernel with CONFIG_MEMCG_SWAP), or turn swap off"
	}
	return c
}

// v2SwapFiles reports whether memory.swap.max exists where it can: in the
// daemon's cgroup, or, when that is the root (which has no memory files),
// in a child with memory files.
func v2SwapFiles(fsys fs.FS, v *cgroupView) (known, accounted bool) {
	if !v.isRoot {
		if !exists(fsys, path.Join(v.dir, "memory.max")) {
			return false, false
		}
		return true, exists(fsys, path.Join(v.dir, "memory.swap.max"))
	}
	ents, err := fs.ReadDir(fsys, v.dir)
	if err != nil {
		return false, false
	}
	for i, d := range ents {
		if i == 256 {
			break
		}
		if d.IsDir() && exists(fsys, path.Join(v.dir, d.Name(), "memory.max")) {
			return true, exists(fsys, path.Join(v.dir, d.Name(), "memory.swap.max"))
		}
	}
	return false, false
}

// swapInUse reports whether /proc/swaps lists a swap area.
func swapInUse(fsys fs.FS) (bool, error) {
	b, err := readSmall(fsys, "proc/swaps", 1<<20)
	if err != nil {
		return false, err
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return len(lines) > 1, nil
}

// present returns want, each marked "-x" when not in have.
func present(want, have []string) []string {
	out := make([]string, len(want))
	for i, w := range want {
		out[i] = w
		if !slices.Contains(have, w) {
			out[i] = "-" + w
		}
	}
	return out
}

// optionalList renders optional controllers as "io yes, cpuset no".
func optionalList(opt, have []string) string {
	var parts []string
	for _, o := range opt {
		s := o + " no"
		if slices.Contains(have, o) {
			s = o + " yes"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ", ") + " (not used by this version)"
}
