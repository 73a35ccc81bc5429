package cgroups

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Parsers for what the kernel (or, for specs, a parent process) hands us.
// They never trust their input: sizes are capped and malformed input is an
// error wrapping errdefs.ErrInvalidArgument, never a panic.

const (
	maxMountinfoLine = 1 << 20
	maxMounts        = 1 << 16
	maxProcs         = 1 << 22
	maxSpecLen       = 1024
	maxSpecEntries   = 8
	maxSpecFD        = 1 << 16
)

func malformed(what string, detail any) error {
	return fmt.Errorf("cgroups: malformed %s: %v: %w", what, detail, errdefs.ErrInvalidArgument)
}

// parseUint parses an interface file that holds one unsigned decimal number
// ("123\n").
func parseUint(b []byte) (uint64, error) {
	s := strings.TrimSpace(string(b))
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, malformed("counter", strconv.Quote(clip(s)))
	}
	return n, nil
}

// unlimitedV1 is where cgroup v1 memory limits start to mean "none": the
// kernel reports no limit as PAGE_COUNTER_MAX pages, rounded to a page
// (9223372036854771712 on 4 KiB pages).
const unlimitedV1 = 1 << 62

// parseLimit parses a limit file (memory.max, memory.limit_in_bytes,
// pids.max): a number, or "max" for none, which reads as 0, as does a v1
// memory limit at or above unlimitedV1.
func parseLimit(b []byte) (uint64, error) {
	if strings.TrimSpace(string(b)) == "max" {
		return 0, nil
	}
	n, err := parseUint(b)
	if err != nil || n >= unlimitedV1 {
		return 0, err
	}
	return n, nil
}

// parseKeyed returns the value of key in a flat keyed file of "key value"
// lines (memory.oom_control, memory.events, cpu.stat, cgroup.events).
// found is false when the key is absent; a key present twice or with a value
// that is not an unsigned number is an error. Other lines are not checked, so
// that new kernel keys do not break old code.
func parseKeyed(b []byte, key string) (v uint64, found bool, err error) {
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		k, val, ok := bytes.Cut(line, []byte(" "))
		if !ok || string(k) != key {
			continue
		}
		if found {
			return 0, false, malformed("keyed file", "duplicate key "+key)
		}
		v, err = strconv.ParseUint(string(bytes.TrimSpace(val)), 10, 64)
		if err != nil {
			return 0, false, malformed("keyed file", strconv.Quote(clip(string(line))))
		}
		found = true
	}
	return v, found, nil
}

// parseProcs parses cgroup.procs or tasks: one id per line. Ids of tasks
// outside the reader's pid namespace read as 0 and are skipped.
func parseProcs(b []byte) ([]int, error) {
	var pids []int
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if len(line) == 0 {
			continue
		}
		n, err := strconv.ParseUint(string(line), 10, 31)
		if err != nil {
			return nil, malformed("process list", strconv.Quote(clip(string(line))))
		}
		if n == 0 {
			continue
		}
		if len(pids) == maxProcs {
			return nil, fmt.Errorf("cgroups: more than %d processes: %w", maxProcs, errdefs.ErrResourceExhausted)
		}
		pids = append(pids, int(n))
	}
	return pids, nil
}

// mountInfo is one line of /proc/self/mountinfo, the fields we use.
type mountInfo struct {
	root   string   // root of the mount within its filesystem
	point  string   // mount point
	fstype string   // "cgroup", "cgroup2", ...
	opts   []string // per-mount options ("rw" or "ro", ...)
	super  []string // super block options; on cgroup v1 they name the controllers
}

// parseMountinfo parses proc(5) mountinfo.
func parseMountinfo(r io.Reader) ([]mountInfo, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), maxMountinfoLine)
	var out []mountInfo
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		// id parent major:minor root point options [optional...] - fstype source super
		sep := slices.Index(f, "-")
		if sep < 6 || len(f) < sep+4 {
			return nil, malformed("mountinfo line", strconv.Quote(clip(line)))
		}
		root, err1 := unescapeMount(f[3])
		point, err2 := unescapeMount(f[4])
		if err1 != nil || err2 != nil {
			return nil, malformed("mountinfo line", strconv.Quote(clip(line)))
		}
		if len(out) == maxMounts {
			return nil, fmt.Errorf("cgroups: more than %d mounts: %w", maxMounts, errdefs.ErrResourceExhausted)
		}
		out = append(out, mountInfo{
			root:   root,
			point:  point,
			fstype: f[sep+1],
			opts:   strings.Split(f[5], ","),
			super:  strings.Split(f[sep+3], ","),
		})
	}
	if err := sc.Err(); err != nil {
		return nil, malformed("mountinfo", err)
	}
	return out, nil
}

// unescapeMount undoes the octal escapes (\040 for space and so on) that the
// kernel applies to paths in mountinfo.
func unescapeMount(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", malformed("mount path escape", strconv.Quote(clip(s)))
		}
		n, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", malformed("mount path escape", strconv.Quote(clip(s)))
		}
		b.WriteByte(byte(n))
		i += 3
	}
	return b.String(), nil
}

// mountedHier is a hierarchy and the mount point we reach it through.
type mountedHier struct {
	hier
	mount string
}

// layout is what Detect finds: the version and its hierarchies.
type layout struct {
	v     Version
	hiers []mountedHier
	// root is, on v2, the cgroup at the unified mount's root as
	// /proc/self/cgroup names cgroups ("/" for a whole hierarchy or a
	// cgroup namespace's own mount).
	root string
}

// detectLayout picks the cgroup version and hierarchies from mounts.
// controllersOf returns the controllers listed in a cgroup2 mount's
// cgroup.controllers. v1 wins when all of v1Controllers are mounted as v1.
// Of several mounts of one hierarchy, one of the whole hierarchy (root "/")
// is preferred.
func detectLayout(mounts []mountInfo, controllersOf func(point string) ([]string, error)) (layout, error) {
	chosen := map[string]int{} // controller → index into mounts
	for i, m := range mounts {
		if m.fstype != "cgroup" {
			continue
		}
		for _, c := range m.super {
			if !slices.Contains(v1Controllers, c) {
				continue
			}
			if j, ok := chosen[c]; !ok || (mounts[j].root != "/" && m.root == "/") {
				chosen[c] = i
			}
		}
	}
	var missing1 []string
	for _, c := range v1Controllers {
		if _, ok := chosen[c]; !ok {
			missing1 = append(missing1, c)
		}
	}
	if len(missing1) == 0 {
		byMount := map[int][]string{}
		for _, c := range v1Controllers {
			byMount[chosen[c]] = append(byMount[chosen[c]], c)
		}
		var l layout
		l.v = V1
		for _, c := range v1Controllers {
			i := chosen[c]
			ctrls, ok := byMount[i]
			if !ok {
				continue // hierarchy already added
			}
			delete(byMount, i)
			slices.Sort(ctrls)
			l.hiers = append(l.hiers, mountedHier{hier{name: strings.Join(ctrls, ","), ctrls: ctrls}, mounts[i].point})
		}
		return l, nil
	}

	best := -1
	for i, m := range mounts {
		if m.fstype == "cgroup2" && (best < 0 || (mounts[best].root != "/" && m.root == "/")) {
			best = i
		}
	}
	missing2 := v2Controllers
	if best >= 0 {
		have, err := controllersOf(mounts[best].point)
		if err != nil {
			return layout{}, err
		}
		missing2 = nil
		for _, c := range v2Controllers {
			if !slices.Contains(have, c) {
				missing2 = append(missing2, c)
			}
		}
		if len(missing2) == 0 {
			return layout{v: V2, hiers: []mountedHier{{hier{name: v2Name}, mounts[best].point}}, root: mounts[best].root}, nil
		}
	}
	return layout{}, fmt.Errorf("cgroups: no usable hierarchy (v1 lacks %s; v2 lacks %s): %w",
		strings.Join(missing1, ","), strings.Join(missing2, ","), errdefs.ErrNotSupported)
}

// checkHierNames reports whether names (one per delegated directory) are a
// valid set of hierarchies for v: on v2 exactly v2Name, on v1 hierarchies
// that together hold each of v1Controllers exactly once, each name listing
// its controllers sorted.
func checkHierNames(v Version, names []string) error {
	bad := func(detail string) error {
		return fmt.Errorf("cgroups: %s hierarchies %s: %s: %w", v, strconv.Quote(clip(strings.Join(names, " "))), detail, errdefs.ErrInvalidArgument)
	}
	switch v {
	case V2:
		if len(names) != 1 || names[0] != v2Name {
			return bad("want exactly " + v2Name)
		}
		return nil
	case V1:
		seen := map[string]bool{}
		for _, n := range names {
			ctrls := strings.Split(n, ",")
			if !slices.IsSorted(ctrls) {
				return bad("controllers of " + strconv.Quote(clip(n)) + " not sorted")
			}
			for _, c := range ctrls {
				if !slices.Contains(v1Controllers, c) || seen[c] {
					return bad("unexpected or repeated controller " + strconv.Quote(clip(c)))
				}
				seen[c] = true
			}
		}
		if len(seen) != len(v1Controllers) {
			return bad("want all of " + strings.Join(v1Controllers, ","))
		}
		return nil
	}
	return fmt.Errorf("cgroups: unknown version %d: %w", int(v), errdefs.ErrInvalidArgument)
}

// specEntry is one delegated hierarchy in a spec: its name and the
// descriptor numbers of <id>/work and <id>/agent in the receiving process.
type specEntry struct {
	hier       string
	work, home int
}

// formatSpec renders a spec: "v1 memory:3:4 cpu,cpuacct:5:6 ...", with a
// final "mem=N" when budget (the whole sandbox's memory cap) is known.
func formatSpec(v Version, es []specEntry, budget int64) string {
	var b strings.Builder
	b.WriteString(v.String())
	for _, e := range es {
		fmt.Fprintf(&b, " %s:%d:%d", e.hier, e.work, e.home)
	}
	if budget > 0 {
		fmt.Fprintf(&b, " mem=%d", budget)
	}
	return b.String()
}

// parseSpec parses what formatSpec renders and checks it completely. The
// budget is 0 when the spec has none.
func parseSpec(s string) (Version, []specEntry, int64, error) {
	bad := func(detail string) (Version, []specEntry, int64, error) {
		return 0, nil, 0, malformed("cgroup spec", detail)
	}
	if len(s) > maxSpecLen {
		return bad("too long")
	}
	f := strings.Fields(s)
	var budget int64
	if n := len(f); n > 0 {
		if m, ok := strings.CutPrefix(f[n-1], "mem="); ok {
			v, err := strconv.ParseInt(m, 10, 64)
			if err != nil || v < minMemoryBytes || v > 2*maxMemoryBytes {
				return bad("memory budget " + strconv.Quote(clip(m)))
			}
			budget, f = v, f[:n-1]
		}
	}
	if len(f) < 2 || len(f) > maxSpecEntries+1 {
		return bad("want a version and 1 to 8 entries")
	}
	var v Version
	switch f[0] {
	case "v1":
		v = V1
	case "v2":
		v = V2
	default:
		return bad("unknown version " + strconv.Quote(clip(f[0])))
	}
	var es []specEntry
	fds := map[int]bool{}
	var names []string
	for _, field := range f[1:] {
		parts := strings.Split(field, ":")
		if len(parts) != 3 {
			return bad("entry " + strconv.Quote(clip(field)))
		}
		e := specEntry{hier: parts[0]}
		var err1, err2 error
		e.work, err1 = strconv.Atoi(parts[1])
		e.home, err2 = strconv.Atoi(parts[2])
		if err1 != nil || err2 != nil {
			return bad("entry " + strconv.Quote(clip(field)))
		}
		for _, fd := range []int{e.work, e.home} {
			if fd < 0 || fd >= maxSpecFD || fds[fd] {
				return bad("descriptor " + strconv.Itoa(fd) + " out of range or repeated")
			}
			fds[fd] = true
		}
		names = append(names, e.hier)
		es = append(es, e)
	}
	if err := checkHierNames(v, names); err != nil {
		return 0, nil, 0, err
	}
	return v, es, budget, nil
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
