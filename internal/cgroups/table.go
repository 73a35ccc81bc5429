package cgroups

import (
	"slices"
	"strings"
)

// The controllers this package uses.
const (
	ctrlMemory  = "memory"
	ctrlPids    = "pids"
	ctrlCPU     = "cpu"
	ctrlCPUAcct = "cpuacct"
	ctrlFreezer = "freezer"
)

// v1Controllers must all be mounted for a host to count as v1. cpuacct is
// needed for CPU time; it is often co-mounted with cpu as "cpu,cpuacct".
var v1Controllers = []string{ctrlMemory, ctrlPids, ctrlCPU, ctrlCPUAcct, ctrlFreezer}

// v2Controllers must be available in the unified hierarchy's root for a host
// to count as v2. CPU time, freezing and killing are core v2 features.
var v2Controllers = []string{ctrlMemory, ctrlPids, ctrlCPU}

// v2Name names the one hierarchy of cgroup v2.
const v2Name = "cgroup2"

// hier is one cgroup hierarchy: on v1 the managed controllers mounted
// together ("memory", "cpu,cpuacct"), on v2 the unified hierarchy.
type hier struct {
	name  string   // controllers joined by ',' (v1) or v2Name
	ctrls []string // v1: sorted managed controllers; v2: nil (has everything)
}

func newHier(v Version, name string) hier {
	if v == V2 {
		return hier{name: v2Name}
	}
	return hier{name: name, ctrls: strings.Split(name, ",")}
}

// has reports whether h provides ctrl. On v2 the single hierarchy provides
// every controller and every core file ("" is a core file on both).
func (h hier) has(ctrl string) bool {
	return h.ctrls == nil || ctrl == "" || slices.Contains(h.ctrls, ctrl)
}

// ifile is a cgroup interface file and the controller that provides it
// ("" for core files).
type ifile struct {
	ctrl string
	name string
}

// table names the interface files of one cgroup version. Code paths are
// shared between versions; only names and value formats differ.
type table struct {
	procs, tasks ifile
	memLimit     ifile // memory limit, in bytes
	swapLimit    ifile // v1: memory+swap limit (set = memLimit); v2: swap alone (set to 0)
	memCurrent   ifile
	memPeak      ifile
	oomEvents    ifile  // flat keyed file with an "oom_kill N" line
	cpuUsage     ifile  // v1: single value in ns; v2: keyed, cpuUsageKey in µs
	cpuUsageKey  string // "" for a single value
	pidsMax      ifile
	pidsCurrent  ifile
	freeze       ifile
	frozen       string // value written to freeze (and read back on v1)
	thawed       string
	events       ifile // v2 cgroup.events (populated, frozen); empty on v1
	kill         ifile // v2 cgroup.kill; empty on v1
	subtree      ifile // v2 cgroup.subtree_control; empty on v1
	controllers  ifile // v2 cgroup.controllers; empty on v1
}

var tables = map[Version]*table{
	V1: {
		procs:       ifile{"", "cgroup.procs"},
		tasks:       ifile{"", "tasks"},
		memLimit:    ifile{ctrlMemory, "memory.limit_in_bytes"},
		swapLimit:   ifile{ctrlMemory, "memory.memsw.limit_in_bytes"},
		memCurrent:  ifile{ctrlMemory, "memory.usage_in_bytes"},
		memPeak:     ifile{ctrlMemory, "memory.max_usage_in_bytes"},
		oomEvents:   ifile{ctrlMemory, "memory.oom_control"},
		cpuUsage:    ifile{ctrlCPUAcct, "cpuacct.usage"},
		pidsMax:     ifile{ctrlPids, "pids.max"},
		pidsCurrent: ifile{ctrlPids, "pids.current"},
		freeze:      ifile{ctrlFreezer, "freezer.state"},
		frozen:      "FROZEN",
		thawed:      "THAWED",
	},
	V2: {
		procs:       ifile{"", "cgroup.procs"},
		tasks:       ifile{"", "cgroup.threads"},
		memLimit:    ifile{ctrlMemory, "memory.max"},
		swapLimit:   ifile{ctrlMemory, "memory.swap.max"},
		memCurrent:  ifile{ctrlMemory, "memory.current"},
		memPeak:     ifile{ctrlMemory, "memory.peak"},
		oomEvents:   ifile{ctrlMemory, "memory.events"},
		cpuUsage:    ifile{"", "cpu.stat"},
		cpuUsageKey: "usage_usec",
		pidsMax:     ifile{ctrlPids, "pids.max"},
		pidsCurrent: ifile{ctrlPids, "pids.current"},
		freeze:      ifile{"", "cgroup.freeze"},
		frozen:      "1",
		thawed:      "0",
		events:      ifile{"", "cgroup.events"},
		kill:        ifile{"", "cgroup.kill"},
		subtree:     ifile{"", "cgroup.subtree_control"},
		controllers: ifile{"", "cgroup.controllers"},
	},
}
