package linux

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroups"
	"github.com/airlock-sandbox/airlock/internal/confine"
)

// buildCapabilities are the capabilities root keeps in a build sandbox:
// Docker's default set without those the sandbox has no use for or
// refuses anyway (mknod, raw sockets, chroot, file capabilities, audit).
// They act only on what the sandbox's user namespace owns: its own files
// (ids 0-65535 of its range) and processes, never a host file.
const buildCapabilities = 1<<unix.CAP_CHOWN | 1<<unix.CAP_DAC_OVERRIDE | 1<<unix.CAP_FOWNER |
	1<<unix.CAP_FSETID | 1<<unix.CAP_KILL | 1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID |
	1<<unix.CAP_NET_BIND_SERVICE

// keptCapabilities returns the capabilities left in the bounding set,
// which every process run as root inside the sandbox gets: none, or
// buildCapabilities in a build sandbox.
func keptCapabilities(build bool) uint64 {
	if build {
		return buildCapabilities
	}
	return 0
}

// agentPolicy is the sandbox's filesystem policy, which the agent enforces
// on itself and every process it starts inherits. Writes are limited to the
// top-level directories of the root filesystem (and /dev/shm, /dev/pts and
// a few device files), never /proc, /dev or /sys; the delegated cgroup
// directories stay writable through their fds. A build sandbox may write
// anywhere (a RUN step makes /app or /opt/x), which leaves /proc, /dev and
// /sys to their own permissions.
func agentPolicy(cgroupFDs []int, build bool) (confine.Policy, error) {
	writable := []string{"/"}
	if !build {
		var err error
		if writable, err = topLevelDirs(); err != nil {
			return confine.Policy{}, err
		}
	}
	writable = append(writable, "/dev/shm", "/dev/pts")
	devices := []string{"/dev/pts", "/dev/ptmx"}
	for _, n := range devNodes {
		devices = append(devices, "/dev/"+n)
	}
	return confine.Policy{
		ReadOnly:    []string{"/"},
		Writable:    writable,
		WritableFDs: cgroupFDs,
		DevicePaths: devices,
	}, nil
}

// topLevelDirs lists the root filesystem's top-level directories but
// /proc, /dev, /sys and the runtime's /.airlock.
func topLevelDirs() ([]string, error) {
	entries, err := os.ReadDir("/")
	if err != nil {
		return nil, err
	}
	var dirs []string
	for _, e := range entries {
		switch e.Name() {
		case "proc", "dev", "sys", ".airlock":
			continue
		}
		if e.IsDir() {
			dirs = append(dirs, "/"+e.Name())
		}
	}
	return dirs, nil
}

// delegatedCgroups opens the agent's view of the sandbox's cgroups: the
// work directory under which every process tree gets its own cgroup. It
// returns nil (and the agent falls back to process groups) when the
// daemon delegated nothing.
func delegatedCgroups(cfg *initConfig) (agent.ExecCgroups, error) {
	if cfg.CgroupSpec == "" {
		return nil, nil
	}
	d, err := cgroups.OpenSpec(cfg.CgroupSpec)
	if err != nil {
		return nil, err
	}
	e := &execCgroups{d: d, ready: make(chan *cgroups.Exec, 1)}
	go e.refill()
	return e, nil
}

// execCgroups adapts cgroups.Delegated to the agent's interface. It keeps
// one exec cgroup made ahead of time, so that making the directories in
// every hierarchy is not on a command's path.
type execCgroups struct {
	d     *cgroups.Delegated
	ready chan *cgroups.Exec // at most one cgroup made ahead
	seq   atomic.Uint64
}

// New returns a fresh exec cgroup. The agent's name only needs to be
// unique; the cgroups' own names ("c1", "c2", ...) are.
func (e *execCgroups) New(string) (agent.ExecCgroup, error) {
	select {
	case x := <-e.ready:
		go e.refill()
		return execCgroup{x}, nil
	default:
	}
	x, err := e.make()
	if err != nil {
		return nil, err
	}
	return execCgroup{x}, nil
}

func (e *execCgroups) make() (*cgroups.Exec, error) {
	return e.d.New("c" + strconv.FormatUint(e.seq.Add(1), 10))
}

// refill makes the next cgroup ahead of time. A failure is left for the
// next New to meet (and report) on its own path.
func (e *execCgroups) refill() {
	x, err := e.make()
	if err != nil {
		return
	}
	select {
	case e.ready <- x:
	default:
		_ = x.Close() // someone refilled first
	}
}

// MemoryRoom implements agent.MemoryRoomer.
func (e *execCgroups) MemoryRoom() (int64, bool, error) { return e.d.MemoryRoom() }

type execCgroup struct{ x *cgroups.Exec }

func (e execCgroup) Start(attr *syscall.SysProcAttr, start func() (int, error)) (int, error) {
	return e.x.Start(attr, start)
}

func (e execCgroup) Kill(ctx context.Context) error { return e.x.Kill(ctx) }

func (e execCgroup) Usage() (agent.ExecUsage, error) {
	u, err := e.x.Usage()
	if err != nil {
		return agent.ExecUsage{}, fmt.Errorf("cgroup usage: %w", err)
	}
	return agent.ExecUsage{CPUTime: u.CPUTime, PeakMemoryBytes: u.PeakMemoryBytes, OOMKills: u.OOMKills}, nil
}

func (e execCgroup) Close() error { return e.x.Close() }
