//go:build linux

package cgroups

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestDetect(t *testing.T) {
	v, err := Detect()
	if err != nil {
		t.Skipf("no usable cgroups here: %v", err)
	}
	if v != V1 && v != V2 {
		t.Fatalf("Detect = %v", v)
	}
	t.Logf("host cgroup version: %v", v)
}

func TestCreateLimits(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		l := Limits{MemoryBytes: 64 << 20, CPUs: 1.5, Pids: 100, AgentMemoryBytes: 256 << 20, AgentPids: 50}
		if m.l.v == V2 && !hasController(t, m, ctrlMemory) {
			// The unified mount of a v1 host: limits are not supported, and
			// saying so must leave nothing behind.
			id := newID()
			if _, err := m.Create(id, l, testOwner); !errors.Is(err, errdefs.ErrNotSupported) {
				t.Fatalf("Create with limits and no controllers = %v, want not supported", err)
			}
			assertGone(t, m, id)
			l = Limits{}
		}
		s := create(t, m, l)
		type want struct{ ctrl, rel, file, val string }
		var wants []want
		if m.l.v == V1 {
			wants = []want{
				{"pids", "", "pids.max", "150"},
				{"cpu", "", "cpu.cfs_period_us", "100000"},
				{"cpu", "", "cpu.cfs_quota_us", "150000"},
				{"memory", "work", "memory.limit_in_bytes", "67108864"},
				{"pids", "work", "pids.max", "100"},
				// The agent's allowances apply to the whole sandbox, not
				// to agent/ alone (where a cap would kill the agent).
				{"memory", "agent", "memory.limit_in_bytes", "9223372036854771712"},
				{"pids", "agent", "pids.max", "max"},
				{"memory", "", "memory.limit_in_bytes", "335544320"}, // work + agent
			}
			if !m.noSwap {
				wants = append(wants,
					want{"memory", "work", "memory.memsw.limit_in_bytes", "67108864"},
					want{"memory", "", "memory.memsw.limit_in_bytes", "335544320"})
			}
		}
		for _, w := range wants {
			for _, h := range m.l.hiers {
				if !h.has(w.ctrl) {
					continue
				}
				if got := readTrim(t, s.testPath(h, w.rel, w.file)); got != w.val {
					t.Errorf("%s/%s = %s, want %s", w.rel, w.file, got, w.val)
				}
			}
		}
		for _, h := range m.l.hiers {
			for _, sub := range []string{"", "agent", "work"} {
				if fi, err := os.Stat(s.testPath(h, sub)); err != nil || !fi.IsDir() {
					t.Errorf("%s: %v", s.testPath(h, sub), err)
				}
			}
		}

		ids, err := m.List()
		if err != nil || !slices.Contains(ids, s.ID()) {
			t.Errorf("List = %v, %v; want it to contain %s", ids, err, s.ID())
		}
		if _, err := m.Create(s.ID(), Limits{}, testOwner); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("Create again = %v, want already exists", err)
		}
		o, err := m.Open(s.ID())
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if _, err := o.Delegate(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Delegate of an opened sandbox = %v, want failed precondition", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := o.Remove(ctx); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		assertGone(t, m, s.ID())
		if err := o.Remove(ctx); err != nil {
			t.Errorf("second Remove = %v, want nil", err)
		}
		if _, err := m.Open(s.ID()); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Open after Remove = %v, want not found", err)
		}
	})
}

func TestCreateInvalid(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		for _, c := range []struct {
			id    string
			l     Limits
			owner Owner
		}{
			{"../x", Limits{}, testOwner},
			{"a.b", Limits{}, testOwner},
			{"", Limits{}, testOwner},
			{newID(), Limits{Pids: -1}, testOwner},
			{newID(), Limits{CPUs: 1e9}, testOwner},
			{newID(), Limits{}, Owner{UID: -1}},
		} {
			if _, err := m.Create(c.id, c.l, c.owner); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("Create(%q, %+v, %+v) = %v, want invalid argument", c.id, c.l, c.owner, err)
			}
			if validName(c.id) {
				assertGone(t, m, c.id)
			}
		}
		if _, err := newManager(m.l, "../etc", nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("newManager(../etc) = %v, want invalid argument", err)
		}
	})
}

// A conflict in one hierarchy must undo the others and keep what existed.
func TestCreateConflictCleansUp(t *testing.T) {
	ms := managers(t)
	m := ms[V1]
	if m == nil {
		t.Skip("needs several hierarchies (v1)")
	}
	id := newID()
	last := m.l.hiers[len(m.l.hiers)-1]
	pre := filepath.Join(last.mount, m.parent, id)
	if err := os.Mkdir(pre, 0o755); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(pre)
	if _, err := m.Create(id, Limits{}, testOwner); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("Create = %v, want already exists", err)
	}
	for _, h := range m.l.hiers[:len(m.l.hiers)-1] {
		if _, err := os.Lstat(filepath.Join(h.mount, m.parent, id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: left behind (%v)", h.name, err)
		}
	}
	if _, err := os.Lstat(pre); err != nil {
		t.Errorf("pre-existing cgroup removed: %v", err)
	}
}

func TestEnterMoveDelegate(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		cmd := startGated(t, s, "exec sleep 30")
		pid := cmd.Process.Pid
		proc := "/proc/" + strconv.Itoa(pid) + "/cgroup"
		assertIn(t, s, proc, "")
		if err := s.MoveToAgent(pid); err != nil {
			t.Fatalf("MoveToAgent: %v", err)
		}
		assertIn(t, s, proc, "agent")
		if err := s.Enter(0); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Enter(0) = %v, want invalid argument", err)
		}
		if err := s.Enter(1 << 30); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("Enter(no such pid) = %v, want not found", err)
		}
		procs, err := s.Procs()
		if err != nil || !slices.Contains(procs, pid) {
			t.Errorf("Procs = %v, %v; want %d in it", procs, err, pid)
		}

		d, err := s.Delegate()
		if err != nil {
			t.Fatalf("Delegate: %v", err)
		}
		defer d.Close()
		if d.Version != m.l.v || len(d.Work) != len(m.l.hiers) || len(d.Home) != len(m.l.hiers) {
			t.Errorf("Delegation = %+v", d)
		}
		tab := tables[m.l.v]
		owned := []string{"work", "work/" + tab.procs.name, "work/" + tab.tasks.name, "agent/" + tab.procs.name, "agent/" + tab.tasks.name}
		rootOwned := []string{"", "work/" + tab.subtree.name, "agent", tab.freeze.name}
		if m.l.v == V1 {
			rootOwned = append(rootOwned, tab.procs.name, tab.tasks.name)
			rootOwned = append(rootOwned, "work/memory.limit_in_bytes", "work/memory.memsw.limit_in_bytes", "work/pids.max",
				"agent/memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us")
		} else {
			owned = append(owned, tab.procs.name) // the common ancestor of agent/ and work/
			rootOwned = append(rootOwned, tab.subtree.name, tab.freeze.name, tab.kill.name)
		}
		for _, h := range m.l.hiers {
			check := func(rel string, uid int) {
				if rel == "" || strings.HasSuffix(rel, "/") {
					return
				}
				fi, err := os.Lstat(s.testPath(h, rel))
				if errors.Is(err, os.ErrNotExist) {
					return // file of another hierarchy
				}
				if err != nil {
					t.Fatal(err)
				}
				st := fi.Sys().(*syscall.Stat_t)
				if int(st.Uid) != uid || int(st.Gid) != uid {
					t.Errorf("%s:%s owned by %d:%d, want %d", h.name, rel, st.Uid, st.Gid, uid)
				}
			}
			for _, rel := range owned {
				check(rel, agentUID)
			}
			for _, rel := range rootOwned {
				check(rel, 0)
			}
		}
		files, spec := d.ExtraFiles(3)
		if len(files) != 2*len(m.l.hiers) {
			t.Errorf("ExtraFiles gave %d files", len(files))
		}
		if _, _, _, err := parseSpec(spec); err != nil {
			t.Errorf("ExtraFiles spec %q: %v", spec, err)
		}
		// In-process NewDelegated checks its input.
		dd, err := NewDelegated(d.Version, d.Work, d.Home)
		if err != nil {
			t.Fatalf("NewDelegated: %v", err)
		}
		dd.Close()
		other := V1
		if m.l.v == V1 {
			other = V2
		}
		if _, err := NewDelegated(other, d.Work, d.Home); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewDelegated with the wrong version = %v, want invalid argument", err)
		}
		tmp, err := os.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		defer tmp.Close()
		bad := map[string]*os.File{}
		for k := range d.Work {
			bad[k] = tmp
		}
		if _, err := NewDelegated(d.Version, bad, d.Home); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewDelegated with a non-cgroup directory = %v, want invalid argument", err)
		}
	})
}

// The agent, as an unprivileged owner, makes an exec cgroup, forks into it,
// returns its own thread, and cannot touch its limits.
func TestDelegatedExec(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		a := startAgent(t, s)
		assertIn(t, s, "/proc/"+strconv.Itoa(a.cmd.Process.Pid)+"/cgroup", "agent")

		a.ok("new", "x")
		if r := a.do("new", "x"); !strings.HasPrefix(r, "err already_exists") {
			t.Errorf("new x twice: %s", r)
		}
		if r := a.do("new", "../y"); !strings.HasPrefix(r, "err invalid_argument") {
			t.Errorf("new ../y: %s", r)
		}
		pid, err := strconv.Atoi(a.ok("start", "x", "/bin/sleep", "30"))
		if err != nil {
			t.Fatal(err)
		}
		assertIn(t, s, "/proc/"+strconv.Itoa(pid)+"/cgroup", "work/x")
		// Every thread of the agent is back home.
		tasks, err := filepath.Glob("/proc/" + strconv.Itoa(a.cmd.Process.Pid) + "/task/*/cgroup")
		if err != nil || len(tasks) == 0 {
			t.Fatalf("agent tasks: %v %v", tasks, err)
		}
		for _, task := range tasks {
			assertIn(t, s, task, "agent")
		}

		if m.l.v == V1 {
			if r := a.do("writelimit"); !strings.HasPrefix(r, "err permission_denied") {
				t.Errorf("agent raising its memory limit: %s", r)
			}
		}
		if r := a.do("mkdirhome"); !strings.HasPrefix(r, "err permission_denied") {
			t.Errorf("agent making a cgroup beside itself: %s", r)
		}

		a.ok("kill", "x")
		if r := a.ok("wait", "x"); r != "signal: killed" {
			t.Errorf("wait after kill: %q", r)
		}
		if u := a.ok("usage", "x"); len(strings.Fields(u)) != 3 {
			t.Errorf("usage: %q", u)
		}
		a.ok("close", "x")
		for _, h := range m.l.hiers {
			if _, err := os.Lstat(s.testPath(h, "work", "x")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: work/x left after close (%v)", h.name, err)
			}
		}
		if r := a.do("usage", "x"); !strings.HasPrefix(r, "err failed_precondition") {
			t.Errorf("usage after close: %s", r)
		}

		// A cgroup with a background process survives Close and Sweep,
		// and Sweep removes it once it is empty.
		a.ok("new", "y")
		pid, err = strconv.Atoi(a.ok("start", "y", "/bin/sleep", "30"))
		if err != nil {
			t.Fatal(err)
		}
		if r := a.do("close", "y"); !strings.HasPrefix(r, "err failed_precondition") {
			t.Errorf("close of a busy cgroup: %s", r)
		}
		a.ok("sweep")
		for _, h := range m.l.hiers {
			if _, err := os.Lstat(s.testPath(h, "work", "y")); err != nil {
				t.Errorf("%s: busy work/y swept: %v", h.name, err)
			}
		}
		syscall.Kill(pid, syscall.SIGKILL)
		a.ok("wait", "y")
		a.ok("sweep")
		for _, h := range m.l.hiers {
			if _, err := os.Lstat(s.testPath(h, "work", "y")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: work/y left after sweep (%v)", h.name, err)
			}
		}
	})
}

// The agent kills a fork loop held in check by the pids limit, and keeps
// working while the loop runs (its own pids are separate).
func TestExecKillForkLoop(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		l := Limits{Pids: 64, AgentPids: 64}
		limited := hasController(t, m, ctrlPids)
		if !limited {
			l = Limits{}
		}
		s := create(t, m, l)
		a := startAgent(t, s)
		a.ok("new", "bomb")
		// bash, unlike dash, retries a fork that fails at the pids limit
		// instead of exiting, so the loop is still running when killed.
		a.ok("start", "bomb", "/bin/bash", "-c", "while :; do sleep 10 & done")
		if limited {
			p := filepath.Join(m.l.hiers[0].mount, m.parent, s.ID(), "work", "pids.current")
			for _, h := range m.l.hiers {
				if h.has(ctrlPids) {
					p = s.testPath(h, "work", "pids.current")
				}
			}
			waitFor(t, "the fork loop to hit the pids limit", func() bool {
				n, _ := strconv.Atoi(readTrim(t, p))
				return n >= 60
			})
		} else {
			time.Sleep(200 * time.Millisecond)
		}
		a.ok("new", "still-alive") // the agent can still make threads and cgroups
		a.ok("kill", "bomb")
		if r := a.ok("wait", "bomb"); r != "signal: killed" {
			t.Errorf("wait after kill: %q", r)
		}
		for _, h := range m.l.hiers {
			if got := readTrim(t, s.testPath(h, "work", "bomb", "cgroup.procs")); got != "" {
				t.Errorf("%s: work/bomb still has %q", h.name, got)
			}
		}
		a.ok("close", "bomb")
	})
}

// A memory hog in an exec cgroup is OOM-killed at the work limit, the kill
// is counted, and the agent survives.
func TestExecOOM(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		if !hasController(t, m, ctrlMemory) {
			t.Skip("no memory controller in this hierarchy")
		}
		s := create(t, m, Limits{MemoryBytes: 64 << 20, AgentMemoryBytes: 256 << 20})
		a := startAgent(t, s)
		a.ok("new", "hog")
		// tail keeps the whole newline-free input in memory.
		a.ok("start", "hog", "/bin/sh", "-c", "head -c 200M /dev/zero | tail")
		if r := a.ok("wait", "hog"); r == "exit status 0" {
			t.Errorf("memory hog exited normally")
		}
		f := strings.Fields(a.ok("usage", "hog"))
		peak, _ := strconv.ParseUint(f[1], 10, 64)
		ooms, _ := strconv.ParseUint(f[2], 10, 64)
		if ooms < 1 {
			t.Errorf("OOMKills = %d, want >= 1", ooms)
		}
		if peak < 8<<20 || peak > 80<<20 {
			t.Errorf("PeakMemoryBytes = %d, want between 8 MiB and the 64 MiB limit", peak)
		}
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		// The kernel keeps watermarks loosely ("we can live with some
		// inaccuracy in the watermark", page_counter_try_charge): on v2 the
		// sandbox's peak came out up to 28 pages below its command's.
		const slack = 1 << 20
		if st.OOMKills < 1 || st.PeakMemoryBytes+slack < peak {
			t.Errorf("Stats = %+v, want OOMKills >= 1 and peak >= %d (less %d of slack)", st, peak, slack)
		}
		// The whole sandbox's cap, read back: work's limit plus the
		// agent's allowance; no pids limit was set.
		if st.MemoryLimitBytes != (64+256)<<20 || st.PidsLimit != 0 {
			t.Errorf("Stats limits = %d bytes, %d pids; want %d, 0", st.MemoryLimitBytes, st.PidsLimit, (64+256)<<20)
		}
		a.ok("new", "after") // the agent is alive
		// The shell was reaped; the pipeline's other killed process may
		// still be leaving the cgroup (v2 reports it populated until then).
		deadline := time.Now().Add(5 * time.Second)
		for r := a.do("close", "hog"); !strings.HasPrefix(r, "ok"); r = a.do("close", "hog") {
			if time.Now().After(deadline) || !strings.Contains(r, "still has processes") {
				t.Fatalf("close hog: %s", r)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// TestExecOOMKillsTree: on v2 an OOM kill in a command's cgroup ends the
// whole command (memory.oom.group), a background sleeper too; the agent
// lives on.
func TestExecOOMKillsTree(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		if m.Version() != V2 || !hasController(t, m, ctrlMemory) {
			t.Skip("memory.oom.group is v2's, with the memory controller")
		}
		s := create(t, m, Limits{MemoryBytes: 64 << 20, AgentMemoryBytes: 256 << 20})
		a := startAgent(t, s)
		a.ok("new", "hog")
		a.ok("start", "hog", "/bin/sh", "-c", "sleep 300 & head -c 200M /dev/zero | tail; wait")
		if r := a.ok("wait", "hog"); r == "exit status 0" {
			t.Errorf("memory hog exited normally")
		}
		// Without oom.group the sleeper would keep the cgroup busy for 300 s.
		deadline := time.Now().Add(5 * time.Second)
		for r := a.do("close", "hog"); !strings.HasPrefix(r, "ok"); r = a.do("close", "hog") {
			if time.Now().After(deadline) {
				t.Fatalf("close hog: %s (the OOM kill left part of the command alive)", r)
			}
			time.Sleep(50 * time.Millisecond)
		}
		a.ok("new", "after") // the agent is alive
	})
}

func TestFreezeThaw(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		startGated(t, s, "while :; do :; done")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cpu := func() time.Duration {
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			return st.CPUTime
		}
		waitFor(t, "CPU time", func() bool { return cpu() > 0 })
		if err := s.Freeze(ctx); err != nil {
			t.Fatalf("Freeze: %v", err)
		}
		// CPU time is accounted lazily (at a tick, or when a task stops
		// running): let the last slice before the freeze land first. A
		// loop that still ran would use the whole window.
		time.Sleep(50 * time.Millisecond)
		before := cpu()
		time.Sleep(250 * time.Millisecond)
		if after := cpu(); after-before > 10*time.Millisecond {
			t.Errorf("frozen sandbox used %v of CPU in 250ms", after-before)
		}
		if err := s.Thaw(ctx); err != nil {
			t.Fatalf("Thaw: %v", err)
		}
		before = cpu()
		waitFor(t, "CPU time after thaw", func() bool { return cpu()-before > 20*time.Millisecond })
	})
}

// Kill empties the whole sandbox: a fork loop in <id>, an agent and its
// exec cgroup.
func TestSandboxKill(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		l := Limits{Pids: 64, AgentPids: 64}
		if !hasController(t, m, ctrlPids) {
			l = Limits{}
		}
		s := create(t, m, l)
		a := startAgent(t, s)
		a.ok("new", "x")
		a.ok("start", "x", "/bin/sleep", "30")
		if m.l.v == V2 {
			// v2 allows no process in an armed <id>: the fork loop runs
			// in the exec cgroup, started before it is frozen (a vfork
			// into a frozen cgroup would never return).
			a.ok("new", "y")
			a.ok("start", "y", "/bin/bash", "-c", "while :; do sleep 10 & done")
		}
		// An exec cgroup frozen by its own state (an agent that died in the
		// middle of a kill) must not keep its processes from dying.
		if err := os.WriteFile(s.testPath(freezerHier(m), "work", "x", tables[m.l.v].freeze.name), []byte(tables[m.l.v].frozen), 0); err != nil {
			t.Fatal(err)
		}
		if m.l.v == V1 {
			startGated(t, s, "exec bash -c 'while :; do sleep 10 & done'")
		}
		time.Sleep(100 * time.Millisecond)
		procs, err := s.Procs()
		if err != nil || len(procs) < 3 {
			t.Fatalf("Procs = %v, %v; want the agent, sleep and the loop", procs, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		start := time.Now()
		if err := s.Kill(ctx); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		t.Logf("killed %d+ processes in %v", len(procs), time.Since(start))
		if procs, err := s.Procs(); err != nil || len(procs) != 0 {
			t.Errorf("Procs after Kill = %v, %v", procs, err)
		}
		if err := a.cmd.Wait(); err == nil {
			t.Errorf("agent exited normally after Kill")
		}
		if err := s.Remove(ctx); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		assertGone(t, m, s.ID())
	})
}

func TestStats(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		startGated(t, s, "i=0; while [ $i -lt 100000 ]; do i=$((i+1)); done; exec sleep 30")
		waitFor(t, "CPU time", func() bool {
			st, err := s.Stats()
			if err != nil {
				t.Fatal(err)
			}
			return st.CPUTime > 10*time.Millisecond
		})
		st, err := s.Stats()
		if err != nil {
			t.Fatal(err)
		}
		if hasController(t, m, ctrlMemory) && (st.MemoryBytes == 0 || st.PeakMemoryBytes < st.MemoryBytes) {
			t.Errorf("Stats memory = %+v", st)
		}
		if hasController(t, m, ctrlPids) && st.Pids != 1 {
			t.Errorf("Stats pids = %d, want 1", st.Pids)
		}
	})
}

func TestRemoveBusy(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		startGated(t, s, "exec sleep 30")
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		err := s.Remove(ctx)
		if !errors.Is(err, errdefs.ErrTimeout) || !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("Remove of a busy sandbox = %v, want timeout and failed precondition", err)
		}
	})
}

func freezerHier(m *Manager) mountedHier {
	for _, h := range m.l.hiers {
		if h.has(ctrlFreezer) {
			return h
		}
	}
	panic("no freezer hierarchy")
}

// TestStartInAgent checks that a process started with StartInAgent begins
// life in <id>/agent (v1) or <id> (v2, where the agent moves itself on:
// EnterHome) and that no thread of the caller stays in the sandbox's
// cgroups (a later Kill of the sandbox would kill it).
func TestStartInAgent(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		cmd := exec.Command("sleep", "30")
		cmd.SysProcAttr = &syscall.SysProcAttr{}
		pid, err := s.StartInAgent(cmd.SysProcAttr, func() (int, error) {
			if err := cmd.Start(); err != nil {
				return 0, err
			}
			return cmd.Process.Pid, nil
		})
		if err != nil {
			t.Fatalf("StartInAgent: %v", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		if pid != cmd.Process.Pid {
			t.Fatalf("pid = %d, want %d", pid, cmd.Process.Pid)
		}
		want := "agent"
		if m.l.v == V2 {
			want = ""
		}
		assertIn(t, s, "/proc/"+strconv.Itoa(pid)+"/cgroup", want)
		procs, err := s.Procs()
		if err != nil || !slices.Equal(procs, []int{pid}) {
			t.Errorf("sandbox procs = %v, %v; want only the child %d (no thread of the caller)", procs, err, pid)
		}

		failed := errors.New("no fork")
		if _, err := s.StartInAgent(&syscall.SysProcAttr{}, func() (int, error) { return 0, failed }); !errors.Is(err, failed) {
			t.Errorf("StartInAgent with a failing start = %v, want its error", err)
		}
		if procs, _ := s.Procs(); !slices.Equal(procs, []int{pid}) {
			t.Errorf("after a failed start, sandbox procs = %v", procs)
		}
	})
}

// BenchmarkMoveSelf compares moving the calling thread into a v1 cgroup
// and back, in every hierarchy, by its id (the kernel takes the global
// threadgroup lock, whose write side waits for an RCU grace period when no
// migration happened recently) and by "0" (it does not).
func BenchmarkMoveSelf(b *testing.B) {
	m := managers(b)[V1]
	if m == nil {
		b.Skip("needs cgroup v1")
	}
	s := create(b, m, Limits{})
	g, err := s.open()
	if err != nil {
		b.Fatal(err)
	}
	defer g.close()
	a, err := g.sub("agent")
	if err != nil {
		b.Fatal(err)
	}
	defer a.close()
	parent, err := m.group(m.parent)
	if err != nil {
		b.Fatal(err)
	}
	defer parent.close()
	for _, bc := range []struct {
		name string
		who  func() string
	}{
		{"tid", func() string { return strconv.Itoa(unix.Gettid()) }},
		{"zero", func() string { return "0" }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// Never unlocked: the thread has been in the sandbox's
			// cgroups and ends with this goroutine.
			runtime.LockOSThread()
			defer moveSelf(parent, len(parent.dirs))
			who := bc.who()
			for b.Loop() {
				// Commands come seconds apart, not back to back: let
				// the kernel's rcu_sync go idle, as it does between two
				// commands.
				b.StopTimer()
				time.Sleep(20 * time.Millisecond)
				b.StartTimer()
				for _, dst := range []*group{a, g} {
					for _, d := range dst.dirs {
						if err := writeAt(d.fd, dst.tab.tasks.name, who); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		})
	}
}

// TestEnterHome: an agent started in <id> moves itself into <id>/agent
// through its delegation (v2), after which <id> can be armed; on v1 it
// stays where the daemon put it.
func TestEnterHome(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		a := startAgentIn(t, s, false)
		a.ok("enterhome")
		want := "agent"
		if m.l.v == V1 {
			want = "" // EnterHome does nothing on v1
		}
		assertIn(t, s, "/proc/"+strconv.Itoa(a.cmd.Process.Pid)+"/cgroup", want)
		if err := s.Arm(); err != nil {
			t.Fatalf("Arm after EnterHome: %v", err)
		}
	})
}
