package cgroups

import (
	"io"
	"slices"
)

// Mount is a mounted cgroup hierarchy, as /proc/self/mountinfo lists it.
type Mount struct {
	// Version is V1 for a "cgroup" mount, V2 for "cgroup2".
	Version Version
	// Point is where it is mounted; Root is the cgroup at the mount's
	// root, relative to the hierarchy's root ("/" for all of it).
	Point, Root string
	// ReadOnly is set for a mount made read-only (a container's default).
	ReadOnly bool
	// Controllers are, on v1, the controllers bound to the hierarchy
	// ("cpu", "cpuacct", ...); nil on v2, whose controllers a cgroup
	// lists in its cgroup.controllers.
	Controllers []string
}

// Layout is what a host's mounts offer Airlock: every cgroup mount and the
// version that Detect and NewManager pick from them.
type Layout struct {
	// Mounts lists every cgroup and cgroup2 mount, in mountinfo order.
	Mounts []Mount
	// Version is the version Detect reports, 0 when none is usable;
	// Unusable (wrapping errdefs.ErrNotSupported) then says what each
	// version lacks.
	Version  Version
	Unusable error
	// Used are the mounts a Manager would create sandboxes in: one per v1
	// hierarchy holding the controllers it uses, or the unified one.
	Used []Mount
}

// knownControllers are the kernel's cgroup controller names; on v1 they
// appear among a hierarchy's super block options.
var knownControllers = []string{"blkio", "cpu", "cpuacct", "cpuset", "debug", "devices", "freezer",
	"hugetlb", "io", "memory", "misc", "net_cls", "net_prio", "perf_event", "pids", "rdma"}

// Inspect reads mountinfo (proc(5) format) and decides, by Detect's rules,
// which version a Manager would use. controllersOf returns what a cgroup2
// mount point's cgroup.controllers lists; it is called only when v1 is not
// usable. Malformed input is an error wrapping errdefs.ErrInvalidArgument;
// a host without a usable hierarchy is not an error (see Layout.Unusable).
func Inspect(mountinfo io.Reader, controllersOf func(point string) ([]string, error)) (Layout, error) {
	mounts, err := parseMountinfo(mountinfo)
	if err != nil {
		return Layout{}, err
	}
	var out Layout
	for _, m := range mounts {
		var v Version
		switch m.fstype {
		case "cgroup":
			v = V1
		case "cgroup2":
			v = V2
		default:
			continue
		}
		cm := Mount{Version: v, Point: m.point, Root: m.root, ReadOnly: slices.Contains(m.opts, "ro")}
		if v == V1 {
			for _, o := range m.super {
				if slices.Contains(knownControllers, o) {
					cm.Controllers = append(cm.Controllers, o)
				}
			}
		}
		out.Mounts = append(out.Mounts, cm)
	}
	l, err := detectLayout(mounts, controllersOf)
	if err != nil {
		out.Unusable = err
		return out, nil
	}
	out.Version = l.v
	for _, h := range l.hiers {
		for _, m := range out.Mounts {
			if m.Point == h.mount && (m.Version == V2) == (l.v == V2) {
				out.Used = append(out.Used, m)
				break
			}
		}
	}
	return out, nil
}
