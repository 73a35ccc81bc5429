package linux

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Helpers that inspect the host, for leak checks and memory figures.

func heapInuse() int64 {
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return int64(ms.HeapInuse)
}

// processPSS is the proportional set size of a process in bytes.
func processPSS(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 2 && f[0] == "Pss:" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no Pss in smaps_rollup of %d", pid)
}

// hostSnapshot is what a sandbox could leave behind on the host.
type hostSnapshot struct {
	processes  map[int]string // pid → comm, processes with a sandbox uid
	mounts     int            // lines of the host mount table
	cgroups    []string       // cgroup directories under the test parent
	userNS     map[string]bool
	stateFiles []string
	fds        int
	unixSocks  int
}

func takeSnapshot(rt *Runtime) (hostSnapshot, error) {
	s := hostSnapshot{processes: map[int]string{}, userNS: map[string]bool{}}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return s, err
	}
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/user", pid)); err == nil {
			s.userNS[ns] = true
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(st), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				uid, _ := strconv.ParseUint(f[1], 10, 32)
				// Sandboxes of other runtimes on this host (other test
				// packages' daemons) share the uid base; ours are in our
				// cgroup parent.
				cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
				if uint32(uid) >= rt.cfg.UIDBase && strings.Contains(string(cg), "/"+rt.cfg.CgroupParent+"/") {
					comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
					s.processes[pid] = strings.TrimSpace(string(comm))
				}
			}
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return s, err
	}
	s.mounts = bytes.Count(mi, []byte("\n"))
	for _, ctrl := range []string{"memory", "pids", "cpu", "freezer", "unified"} {
		root := filepath.Join("/sys/fs/cgroup", ctrl, rt.cfg.CgroupParent)
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != root {
				s.cgroups = append(s.cgroups, p)
			}
			return nil
		})
	}
	_ = filepath.WalkDir(rt.cfg.StateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() && d.Name() == agentBinDir {
			return filepath.SkipDir // shared by all sandboxes, kept
		}
		if err == nil && p != rt.cfg.StateDir {
			s.stateFiles = append(s.stateFiles, p)
		}
		return nil
	})
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return s, err
	}
	s.fds = len(fds)
	unix, err := os.ReadFile("/proc/net/unix")
	if err != nil {
		return s, err
	}
	s.unixSocks = bytes.Count(unix, []byte(rt.cfg.StateDir))
	return s, nil
}

// requireNoLeaks waits for the kernel to free what the destroyed sandboxes
// held and requires the host to be as in before: no process, mount,
// cgroup, user namespace, state file or uid slot of a sandbox left. It
// returns the last snapshot.
func requireNoLeaks(t *testing.T, rt *Runtime, before hostSnapshot) hostSnapshot {
	t.Helper()
	var after hostSnapshot
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for {
		if after, err = takeSnapshot(rt); err != nil {
			t.Fatal(err)
		}
		if len(after.processes) == 0 && len(after.userNS) <= len(before.userNS) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(after.processes) != 0 {
		t.Errorf("sandbox processes left: %v", after.processes)
	}
	if after.mounts != before.mounts {
		t.Errorf("host mount table: %d lines before, %d after", before.mounts, after.mounts)
	}
	if len(after.cgroups) != 0 {
		t.Errorf("cgroups left: %v", after.cgroups)
	}
	if len(after.userNS) > len(before.userNS) {
		t.Errorf("user namespaces: %d before, %d after", len(before.userNS), len(after.userNS))
	}
	if len(after.stateFiles) != 0 {
		t.Errorf("state files left: %v", after.stateFiles)
	}
	rt.mu.Lock()
	slots := len(rt.slots)
	rt.mu.Unlock()
	if slots != 0 {
		t.Errorf("%d uid slots still reserved", slots)
	}
	return after
}
