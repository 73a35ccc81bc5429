package api

import "time"

// Bounds of the interval_ms query parameter of GET
// /v1/sandboxes/{id}/stats: the window the CPU rate is measured over, and
// a stream's period.
const (
	StatsIntervalMinMS     = 100
	StatsIntervalMaxMS     = 60000
	StatsIntervalDefaultMS = 1000
)

// The sources of a sample's network counters (StatsNetwork.Source).
const (
	// NetSourceInterface: the kernel's counters of the sandbox's own
	// network interface (mode open), loopback aside.
	NetSourceInterface = "interface"
	// NetSourceProxy: the bytes through the sandbox's egress proxy (mode
	// allowlist), the only way out it has.
	NetSourceProxy = "proxy"
)

// SandboxStats is one sample of a sandbox's resource use: the body of GET
// /v1/sandboxes/{id}/stats, and each line of its stream (stream=1).
type SandboxStats struct {
	// SandboxID names the sandbox.
	SandboxID string `json:"sandbox_id"`
	// Time is when the sample was read.
	Time time.Time `json:"time"`
	// IntervalMS is the window CPU.Rate was measured over, in
	// milliseconds.
	IntervalMS int64 `json:"interval_ms"`
	// CPU, Memory, Pids and Disk are the sandbox's use and its caps.
	CPU    StatsCPU    `json:"cpu"`
	Memory StatsMemory `json:"memory"`
	Pids   StatsPids   `json:"pids"`
	Disk   StatsDisk   `json:"disk"`
	// Network counts the sandbox's traffic; absent when it has no way
	// out (NetworkAbsent says why).
	Network *StatsNetwork `json:"network,omitempty"`
	// NetworkAbsent says why Network is absent.
	NetworkAbsent string `json:"network_absent,omitempty"`
}

// StatsCPU is a sandbox's CPU use: every process's, its agent's included.
type StatsCPU struct {
	// UsageS is the CPU time used since the sandbox started, in seconds.
	UsageS float64 `json:"usage_s"`
	// Rate is the CPUs used over the sample's interval (0.5: half of
	// one CPU's time).
	Rate float64 `json:"rate"`
	// Limit is its CPU cap, in CPUs.
	Limit float64 `json:"limit"`
}

// StatsMemory is a sandbox's memory: its processes', its agent's and the
// pages of the files written to its writable layer, which lives in
// memory.
type StatsMemory struct {
	// CurrentBytes is in use now; PeakBytes the most used so far.
	CurrentBytes uint64 `json:"current_bytes"`
	PeakBytes    uint64 `json:"peak_bytes"`
	// LimitBytes caps that whole: the sandbox's memory limit plus the
	// server's allowance for its agent (0: none).
	LimitBytes uint64 `json:"limit_bytes"`
	// OOMKills counts the processes the kernel's OOM killer ended.
	OOMKills uint64 `json:"oom_kills"`
}

// StatsPids counts a sandbox's tasks (processes and threads), its
// agent's included.
type StatsPids struct {
	Current uint64 `json:"current"`
	// Limit caps them: the sandbox's pids limit plus the agent's
	// allowance (0: none).
	Limit uint64 `json:"limit"`
}

// StatsDisk is a sandbox's writable layer.
type StatsDisk struct {
	// UsedBytes is what its files and their metadata take; LimitBytes
	// its size (the sandbox's disk limit).
	UsedBytes  uint64 `json:"used_bytes"`
	LimitBytes uint64 `json:"limit_bytes"`
}

// StatsNetwork counts a sandbox's traffic since its network started.
type StatsNetwork struct {
	// Source is NetSourceInterface or NetSourceProxy.
	Source string `json:"source"`
	// RxBytes came into the sandbox, TxBytes went out.
	RxBytes uint64 `json:"rx_bytes"`
	TxBytes uint64 `json:"tx_bytes"`
}
