package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// maxNetDev caps what Stats reads of a sandbox's /proc/<pid>/net/dev:
// two header lines and about 150 bytes per interface.
const maxNetDev = 256 << 10

// Stats implements runtime.Instance: CPU, memory and pids from the
// sandbox's cgroups (see cgroups.Sandbox.Stats), the writable layer's use
// from a statfs of the agent's root (overlayfs answers with its upper
// layer's filesystem, the sandbox's tmpfs), and network counters from the
// agent's /proc/<pid>/net/dev, which shows the interfaces of its network
// namespace. Both are read through /proc/<agent pid> and checked against
// the agent's pidfd afterwards, as OpenNetNS does, so that a pid reused
// after the agent exited cannot report another process's.
func (i *Instance) Stats(ctx context.Context) (runtime.Stats, error) {
	cg, err := i.cg.Stats()
	if err != nil {
		return runtime.Stats{}, fmt.Errorf("sandbox %s: stats: %w", i.id, err)
	}
	st := runtime.Stats{
		CPUTime:          cg.CPUTime,
		MemoryBytes:      cg.MemoryBytes,
		PeakMemoryBytes:  max(cg.PeakMemoryBytes, cg.MemoryBytes),
		MemoryLimitBytes: cg.MemoryLimitBytes,
		Pids:             cg.Pids,
		PidsLimit:        cg.PidsLimit,
		OOMKills:         cg.OOMKills,
	}
	if err := i.readAgentProc(&st); err != nil {
		return runtime.Stats{}, err
	}
	return st, nil
}

// readAgentProc fills the disk and network fields of st from the agent's
// /proc directory.
func (i *Instance) readAgentProc(st *runtime.Stats) error {
	// Held throughout: Destroy closes the pidfd under it.
	i.destroyMu.Lock()
	defer i.destroyMu.Unlock()
	agent := i.agent
	gone := fmt.Errorf("sandbox %s has ended: %w", i.id, errdefs.ErrFailedPrecondition)
	if agent == nil || agent.hasExited() || i.state.Pid <= 0 {
		return gone
	}
	dir := "/proc/" + strconv.Itoa(i.state.Pid)
	var fs unix.Statfs_t
	if err := unix.Statfs(dir+"/root", &fs); err != nil {
		return fmt.Errorf("sandbox %s: stats: writable layer: %w", i.id, err)
	}
	f, err := os.Open(dir + "/net/dev")
	if err != nil {
		return fmt.Errorf("sandbox %s: stats: network: %w", i.id, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxNetDev))
	f.Close()
	if err != nil {
		return fmt.Errorf("sandbox %s: stats: network: %w", i.id, err)
	}
	exited := true
	_ = agent.rc.Control(func(fd uintptr) { exited = pidfdExited(int(fd)) })
	if exited {
		return gone
	}
	bsize := uint64(fs.Bsize)
	st.DiskLimitBytes = fs.Blocks * bsize
	st.DiskUsedBytes = (fs.Blocks - min(fs.Bfree, fs.Blocks)) * bsize
	net, err := parseNetDev(b)
	if err != nil {
		return fmt.Errorf("sandbox %s: stats: network: %w", i.id, err)
	}
	st.Net = net
	return nil
}

// parseNetDev sums the counters of /proc/net/dev's interfaces but
// loopback; nil when there is none. The file has two header lines, then
// one "name: 16 numbers" line per interface: received bytes and packets
// are the first two numbers, transmitted ones the ninth and tenth.
func parseNetDev(b []byte) (*runtime.NetStats, error) {
	var sum *runtime.NetStats
	for n := 0; len(b) > 0; n++ {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte("\n"))
		if n < 2 || len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			return nil, errors.New("malformed /proc/net/dev line")
		}
		f := strings.Fields(string(rest))
		if len(f) < 16 {
			return nil, errors.New("malformed /proc/net/dev line")
		}
		if string(bytes.TrimSpace(name)) == "lo" {
			continue
		}
		var v [4]uint64
		for j, k := range []int{0, 1, 8, 9} {
			x, err := strconv.ParseUint(f[k], 10, 64)
			if err != nil {
				return nil, errors.New("malformed /proc/net/dev counter")
			}
			v[j] = x
		}
		if sum == nil {
			sum = &runtime.NetStats{}
		}
		sum.RxBytes += v[0]
		sum.RxPackets += v[1]
		sum.TxBytes += v[2]
		sum.TxPackets += v[3]
	}
	return sum, nil
}
