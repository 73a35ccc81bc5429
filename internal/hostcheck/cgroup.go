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

	// On v2: sandboxes go below the cgroup at the unified mount's root
	// (the hierarchy's root on a host, the namespace's root in a
	// container with its own cgroup namespace): top.
	top    cgroupNode
	topErr error // top could not be read
	// The daemon's own cgroup, as /proc/self/cgroup names it, and where
	// it is relative to top ("" for top itself).
	self, selfRel string
	selfErr       error // self could not be read
}

// cgroupNode is what the checks read of one v2 cgroup.
type cgroupNode struct {
	dir       string // its directory in the fs.FS
	isRoot    bool   // the hierarchy's root (no cgroup.type there)
	typ       string // cgroup.type: domain, threaded, ...
	available []string
	enabled   []string
	procs     []int
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
	v.topErr = v.top.read(e.fsys, fsPath(v.layout.Used[0].Point, ""))
	v.selfErr = v.readSelf(e)
	return v
}

// readSelf finds the daemon's own v2 cgroup relative to top.
func (v *cgroupView) readSelf(e *env) error {
	b, err := readSmall(e.fsys, "proc/self/cgroup", 64<<10)
	if err != nil {
		return err
	}
	v.self, err = parseSelfCgroup(b)
	if err != nil {
		return err
	}
	if v.self == "/.." || strings.HasPrefix(v.self, "/../") {
		return fmt.Errorf("the cgroup %s is outside this cgroup namespace: %w", v.self, errdefs.ErrFailedPrecondition)
	}
	root := strings.TrimSuffix(v.layout.Used[0].Root, "/")
	r, ok := strings.CutPrefix(v.self, root)
	if !ok || (r != "" && !strings.HasPrefix(r, "/")) {
		return fmt.Errorf("the cgroup %s is outside the mounted part %s of the hierarchy: %w", v.self, v.layout.Used[0].Root, errdefs.ErrFailedPrecondition)
	}
	v.selfRel = strings.Trim(r, "/")
	return nil
}

// read fills n from the cgroup directory dir.
func (n *cgroupNode) read(fsys fs.FS, dir string) error {
	if !fs.ValidPath(dir) {
		return fmt.Errorf("cgroup path %q: %w", dir, errdefs.ErrInvalidArgument)
	}
	n.dir = dir
	t, err := readSmall(fsys, path.Join(dir, "cgroup.type"), 256)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		n.isRoot = true
	case err != nil:
		return err
	default:
		n.typ = strings.TrimSpace(string(t))
	}
	ctl, err := readSmall(fsys, path.Join(dir, "cgroup.controllers"), 4096)
	if err != nil {
		return err
	}
	n.available = strings.Fields(string(ctl))
	sub, err := readSmall(fsys, path.Join(dir, "cgroup.subtree_control"), 4096)
	if err != nil {
		return err
	}
	n.enabled = strings.Fields(string(sub))
	procs, err := readSmall(fsys, path.Join(dir, "cgroup.procs"), 1<<22)
	if err != nil {
		return err
	}
	n.procs, err = parsePids(procs)
	return err
}

// where names top for a report.
func (v *cgroupView) where() string {
	m := v.layout.Used[0]
	switch {
	case v.top.isRoot:
		return "the root cgroup"
	case m.Root == "/":
		return "the root of this cgroup namespace (a container's cgroup)"
	}
	return "the cgroup " + m.Root + " mounted at " + m.Point
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
		if len(v2) > 0 {
			c.Fix = "in a container: have its runtime delegate memory, pids and cpu to its cgroup (enabled in the parent's cgroup.subtree_control; docker and podman do on a v2 host); on a host: " + c.Fix
		}
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
	if v.topErr != nil {
		c.Status, c.Found = Fail, "cannot read the mounted cgroup2's top cgroup: "+v.topErr.Error()
		c.Fix = "mount cgroup2 where the daemon can read it (/sys/fs/cgroup)"
		return c
	}
	where := v.where()
	var missing []string
	for _, ctl := range mandatoryControllers {
		if !slices.Contains(v.top.available, ctl) {
			missing = append(missing, ctl)
		}
	}
	c.Found = "available to " + where + ": " + strings.Join(present(mandatoryControllers, v.top.available), " ")
	if len(v.top.enabled) > 0 {
		c.Found += " (enabled for its children: " + strings.Join(v.top.enabled, " ") + ")"
	}
	c.Found += "; optional: " + optionalList(optional, v.top.available)
	if len(missing) > 0 {
		c.Status = Fail
		c.Found = "missing " + strings.Join(missing, ", ") + " in " + where + "; " + c.Found
		c.Fix = "in a container: have the runtime delegate the " + strings.Join(missing, ", ") + " controller(s) to its cgroup (enabled in the parent's cgroup.subtree_control); on a host: boot with systemd.unified_cgroup_hierarchy=1 so that they are on cgroup2"
		return c
	}
	c.Status = OK
	return c
}

func checkPlacement(e *env) Check {
	v := e.cgroups()
	c := Check{Meaning: "sandboxes' cgroups go in " + cgroups.DefaultParent + "/ at the top of the mounted cgroup2 (outside the daemon's own cgroup, so that they outlive it); the kernel lets a non-root cgroup enable controllers for its children only while it holds no process, so in a container the daemon first moves its cgroup's processes into its leaf " + cgroups.LeafName + "/"}
	switch {
	case v.err != nil || v.layout.Version == 0:
		c.Status, c.Found = Fail, "no usable cgroup hierarchy (see cgroups)"
		c.Fix = "see cgroups"
		return c
	case v.layout.Version == cgroups.V1:
		c.Status, c.Found = OK, "v1: sandboxes go under airlock/ in each hierarchy, wherever the daemon runs"
		c.Meaning = "on v1 a cgroup may hold processes and children with limits at once"
		return c
	case v.topErr != nil:
		c.Status, c.Found = Fail, "cannot read the mounted cgroup2's top cgroup: "+v.topErr.Error()
		c.Fix = "mount cgroup2 where the daemon can read it (/sys/fs/cgroup)"
		return c
	case v.selfErr != nil:
		c.Status, c.Found = Fail, "cannot read the daemon's cgroup: "+v.selfErr.Error()
		c.Fix = "run the daemon where /proc/self/cgroup names a cgroup of the mounted cgroup2 (on a host, or in a container with its own cgroup namespace and cgroup2 mounted in it)"
		return c
	case v.top.isRoot:
		c.Status, c.Found = OK, "the root cgroup (exempt from the no-internal-process rule); the daemon runs in "+v.self
		return c
	case v.top.typ != "domain":
		c.Status = Fail
		c.Found = fmt.Sprintf("%s is a %q cgroup", v.where(), v.top.typ)
		c.Fix = "run the daemon in a container whose cgroup is a domain cgroup"
		return c
	}
	self := e.probes.Pid()
	others := 0
	for _, p := range v.top.procs {
		if p != self {
			others++
		}
	}
	c.Found = fmt.Sprintf("%s holds %d process(es)", v.where(), len(v.top.procs))
	switch {
	case len(v.top.procs) == 0:
		c.Status = OK
	case v.selfRel == "":
		c.Status = OK
		c.Found += fmt.Sprintf(", this one and %d other(s): the daemon moves them into %s/ before enabling controllers", others, cgroups.LeafName)
	default:
		c.Status = Fail
		c.Found += ", none of them the daemon (in " + v.self + "): the kernel refuses controllers for sandboxes there"
		c.Fix = "start the daemon in that cgroup (the container's main process), or move those processes into a leaf cgroup below it"
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
			if v.topErr == nil {
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

// v2SwapFiles reports whether memory.swap.max exists where it can: in top,
// or, when that is the root (which has no memory files), in a child with
// memory files.
func v2SwapFiles(fsys fs.FS, v *cgroupView) (known, accounted bool) {
	dir := v.top.dir
	if !v.top.isRoot {
		if !exists(fsys, path.Join(dir, "memory.max")) {
			return false, false
		}
		return true, exists(fsys, path.Join(dir, "memory.swap.max"))
	}
	ents, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return false, false
	}
	for i, d := range ents {
		if i == 256 {
			break
		}
		if d.IsDir() && exists(fsys, path.Join(dir, d.Name(), "memory.max")) {
			return true, exists(fsys, path.Join(dir, d.Name(), "memory.swap.max"))
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
