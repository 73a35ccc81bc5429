//go:build linux

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Detect reports the cgroup version of this host: V1 when the v1 controllers
// memory, pids, cpu, cpuacct and freezer are all mounted, else V2 when the
// unified hierarchy offers memory, pids and cpu. Anything else is an error
// wrapping errdefs.ErrNotSupported.
func Detect() (Version, error) {
	l, err := hostLayout()
	return l.v, err
}

func hostLayout() (layout, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return layout{}, fmt.Errorf("cgroups: read mountinfo: %w: %w", err, errdefs.ErrUnavailable)
	}
	defer f.Close()
	mounts, err := parseMountinfo(f)
	if err != nil {
		return layout{}, err
	}
	return detectLayout(mounts, func(point string) ([]string, error) {
		b, err := os.ReadFile(filepath.Join(point, "cgroup.controllers"))
		if err != nil {
			return nil, fmt.Errorf("cgroups: read cgroup2 controllers: %w: %w", err, errdefs.ErrUnavailable)
		}
		return strings.Fields(string(b)), nil
	})
}

// Manager creates and manages sandbox cgroups under one parent cgroup. It is
// used by the daemon, which must be global root with cgroupfs mounted. A
// Manager holds no open resources; it is safe for concurrent use as long as
// each sandbox id is used by one caller at a time.
type Manager struct {
	l      layout
	tab    *table
	parent string
	log    *slog.Logger
	noSwap bool // v1 without swap accounting: memory.memsw.* missing
}

// NewManager detects the host's cgroup version and prepares parent (a
// relative cgroup path such as DefaultParent) in every hierarchy. On v2 it
// enables the memory, pids and cpu controllers from the root down to parent.
// log may be nil.
func NewManager(parent string, log *slog.Logger) (*Manager, error) {
	l, err := hostLayout()
	if err != nil {
		return nil, err
	}
	return newManager(l, parent, log)
}

func newManager(l layout, parent string, log *slog.Logger) (*Manager, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	comps := strings.Split(parent, "/")
	for _, c := range comps {
		if err := checkName("parent cgroup", c); err != nil {
			return nil, err
		}
	}
	m := &Manager{l: l, tab: tables[l.v], parent: parent, log: log}
	for _, h := range l.hiers {
		if err := os.MkdirAll(filepath.Join(h.mount, parent), 0o755); err != nil {
			return nil, fmt.Errorf("cgroups: create parent %s:%s: %w: %w", h.name, parent, err, errdefs.ErrUnavailable)
		}
	}
	if l.v == V2 {
		for i := 0; i <= len(comps); i++ {
			if err := m.enableAt(strings.Join(comps[:i], "/")); err != nil {
				return nil, err
			}
		}
	}
	if l.v == V1 {
		g, err := m.group(parent)
		if err != nil {
			return nil, err
		}
		_, err = g.read(m.tab.swapLimit)
		g.close()
		if errors.Is(err, unix.ENOENT) {
			m.noSwap = true
			log.Warn("cgroups: no swap accounting (boot with swapaccount=1): memory limits do not cover swap")
		}
	}
	log.Debug("cgroups: manager ready", "version", l.v.String(), "parent", parent, "hierarchies", len(l.hiers))
	return m, nil
}

// Version reports the cgroup version m manages.
func (m *Manager) Version() Version { return m.l.v }

// group opens the cgroup rel (relative to every hierarchy's mount).
func (m *Manager) group(rel string) (*group, error) {
	g := &group{v: m.l.v, tab: m.tab, rel: rel}
	for _, h := range m.l.hiers {
		fd, err := openDirAt(unix.AT_FDCWD, filepath.Join(h.mount, rel))
		if err != nil {
			g.close()
			return nil, sysErr("open", h.name+":"+rel, err)
		}
		g.dirs = append(g.dirs, dirFD{h: h.hier, fd: fd})
	}
	return g, nil
}

// enable turns on the controllers in want that the cgroup g (v2) offers, for
// its children. It reports whether it changed anything.
func (g *group) enable(want []string) (changed bool, err error) {
	b, err := g.read(g.tab.controllers)
	if err != nil {
		return false, err
	}
	avail := strings.Fields(string(b))
	if b, err = g.read(g.tab.subtree); err != nil {
		return false, err
	}
	on := strings.Fields(string(b))
	for _, c := range want {
		if slices.Contains(avail, c) && !slices.Contains(on, c) {
			if err := g.write(g.tab.subtree, "+"+c); err != nil {
				return changed, err
			}
			changed = true
		}
	}
	return changed, nil
}

// Sandbox is the cgroups of one sandbox. Its methods open what they need and
// close it before returning.
type Sandbox struct {
	m      *Manager
	id     string
	limits *Limits // nil when opened rather than created
	owner  *Owner  // nil when opened rather than created
}

// ID returns the sandbox id.
func (s *Sandbox) ID() string { return s.id }

func (s *Sandbox) rel(sub ...string) string {
	return strings.Join(append([]string{s.m.parent, s.id}, sub...), "/")
}

// Create creates <id>, <id>/agent and <id>/work in every hierarchy and sets
// l. owner will own the delegated files (see Delegate). If anything fails it
// removes what it made. An existing id is an error wrapping
// errdefs.ErrAlreadyExists.
//
// On v2, the memory and pids limits of agent/ and work/ are applied by
// MoveToAgent or Delegate, whichever comes first: they need controllers
// enabled in <id>'s cgroup.subtree_control, which the kernel refuses while
// <id> holds a process (the one Enter puts there).
func (m *Manager) Create(id string, l Limits, owner Owner) (*Sandbox, error) {
	if err := checkName("sandbox", id); err != nil {
		return nil, err
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	if err := owner.validate(); err != nil {
		return nil, err
	}
	p, err := m.group(m.parent)
	if err != nil {
		return nil, err
	}
	defer p.close()
	if err := p.mkdir(id); err != nil {
		return nil, err
	}
	s := &Sandbox{m: m, id: id, limits: &l, owner: &owner}
	if err := s.setup(p, l); err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return nil, errors.Join(err, s.Remove(ctx))
	}
	m.log.Debug("cgroups: created sandbox", "id", id, "memory", l.MemoryBytes, "cpus", l.CPUs, "pids", l.Pids)
	return s, nil
}

func (s *Sandbox) setup(p *group, l Limits) error {
	g, err := p.sub(s.id)
	if err != nil {
		return err
	}
	defer g.close()
	for _, n := range []string{"agent", "work"} {
		if err := g.mkdir(n); err != nil {
			return err
		}
	}
	if s.m.l.v == V2 {
		if err := checkV2Controllers(g, l); err != nil {
			return err
		}
	}
	if err := s.limitOne(g, l.totalMemory(), l.totalPids()); err != nil {
		return err
	}
	if l.CPUs > 0 {
		quota := strconv.FormatInt(int64(l.CPUs*cpuPeriodUsec+0.5), 10)
		if s.m.l.v == V1 {
			if err := g.write(ifile{ctrlCPU, "cpu.cfs_period_us"}, strconv.Itoa(cpuPeriodUsec)); err != nil {
				return err
			}
			if err := g.write(ifile{ctrlCPU, "cpu.cfs_quota_us"}, quota); err != nil {
				return err
			}
		} else if err := g.write(ifile{ctrlCPU, "cpu.max"}, quota+" "+strconv.Itoa(cpuPeriodUsec)); err != nil {
			return err
		}
	}
	if s.m.l.v == V1 {
		return s.childLimits(g, l)
	}
	return nil
}

// checkV2Controllers fails with errdefs.ErrNotSupported when l needs a
// controller that <id> does not offer.
func checkV2Controllers(g *group, l Limits) error {
	b, err := g.read(g.tab.controllers)
	if err != nil {
		return err
	}
	avail := strings.Fields(string(b))
	for _, need := range []struct {
		ctrl string
		used bool
	}{
		{ctrlMemory, l.MemoryBytes > 0 || l.AgentMemoryBytes > 0},
		{ctrlPids, l.Pids > 0 || l.AgentPids > 0},
		{ctrlCPU, l.CPUs > 0},
	} {
		if need.used && !slices.Contains(avail, need.ctrl) {
			return fmt.Errorf("cgroups: controller %s not available: %w", need.ctrl, errdefs.ErrNotSupported)
		}
	}
	return nil
}

// childLimits writes the memory and pids limits of work/. agent/ has none
// of its own: see Limits.AgentMemoryBytes.
func (s *Sandbox) childLimits(g *group, l Limits) error {
	if l.MemoryBytes == 0 && l.Pids == 0 {
		return nil
	}
	cg, err := g.sub("work")
	if err != nil {
		return err
	}
	defer cg.close()
	return s.limitOne(cg, l.MemoryBytes, l.Pids)
}

func (s *Sandbox) limitOne(g *group, mem, pids int64) error {
	if mem > 0 {
		v := strconv.FormatInt(mem, 10)
		if err := g.write(g.tab.memLimit, v); err != nil {
			return err
		}
		switch {
		case s.m.l.v == V1 && !s.m.noSwap:
			if err := g.write(g.tab.swapLimit, v); err != nil { // memory+swap = memory: no swap
				return err
			}
		case s.m.l.v == V2:
			// memory.swap.max is missing only without swap support.
			if err := g.write(g.tab.swapLimit, "0"); err != nil && !errors.Is(err, unix.ENOENT) {
				return err
			}
		}
	}
	if pids > 0 {
		return g.write(g.tab.pidsMax, strconv.FormatInt(pids, 10))
	}
	return nil
}

// arm, on v2, enables memory and pids for <id>'s children (and memory for
// exec cgroups below work/) and applies the limits of agent/ and work/. It is
// idempotent and a no-op on v1.
// Arm enables, on v2, the memory and pids controllers for <id>'s children
// and writes the limits of work/; the kernel refuses that while <id> holds
// a process, so the daemon calls it once the agent has moved itself into
// <id>/agent (see StartInAgent). It does nothing on v1, where Create
// wrote every limit.
func (s *Sandbox) Arm() error {
	if s.m.l.v != V2 {
		return nil
	}
	g, err := s.open()
	if err != nil {
		return err
	}
	defer g.close()
	return s.arm(g)
}

func (s *Sandbox) arm(g *group) error {
	if s.m.l.v != V2 {
		return nil
	}
	changed, err := g.enable([]string{ctrlMemory, ctrlPids})
	if err != nil {
		return err
	}
	work, err := g.sub("work")
	if err != nil {
		return err
	}
	_, err = work.enable([]string{ctrlMemory})
	work.close()
	if err != nil {
		return err
	}
	if s.limits == nil {
		if changed {
			return fmt.Errorf("cgroups: sandbox %s: limits of an opened sandbox are unknown: %w", s.id, errdefs.ErrFailedPrecondition)
		}
		return nil
	}
	return s.childLimits(g, *s.limits)
}

// Open returns the sandbox id created earlier, for example by a previous
// daemon, for inspection, killing and removal. It fails with an error
// wrapping errdefs.ErrNotFound when no hierarchy has it.
func (m *Manager) Open(id string) (*Sandbox, error) {
	if err := checkName("sandbox", id); err != nil {
		return nil, err
	}
	for _, h := range m.l.hiers {
		if _, err := os.Lstat(filepath.Join(h.mount, m.parent, id)); err == nil {
			return &Sandbox{m: m, id: id}, nil
		}
	}
	return nil, fmt.Errorf("cgroups: sandbox %s: %w", id, errdefs.ErrNotFound)
}

// List returns the ids of the sandboxes under the parent in any hierarchy,
// sorted, for recovery after a daemon restart.
func (m *Manager) List() ([]string, error) {
	seen := map[string]bool{}
	for _, h := range m.l.hiers {
		ents, err := os.ReadDir(filepath.Join(h.mount, m.parent))
		if err != nil {
			return nil, fmt.Errorf("cgroups: list %s:%s: %w: %w", h.name, m.parent, err, errdefs.ErrUnavailable)
		}
		for _, e := range ents {
			if e.IsDir() && validName(e.Name()) {
				seen[e.Name()] = true
			}
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids, nil
}

func checkPid(pid int) error {
	if pid <= 0 {
		return fmt.Errorf("cgroups: invalid pid %d: %w", pid, errdefs.ErrInvalidArgument)
	}
	return nil
}

func (s *Sandbox) open(sub ...string) (*group, error) {
	return s.m.group(s.rel(sub...))
}

// Enter moves the process pid (all its threads) into <id> in every
// hierarchy. The daemon does this before it lets the agent run, so that the
// agent's cgroup namespace is rooted at <id>.
func (s *Sandbox) Enter(pid int) error {
	if err := checkPid(pid); err != nil {
		return err
	}
	g, err := s.open()
	if err != nil {
		return err
	}
	defer g.close()
	return g.writeAll(g.tab.procs.name, strconv.Itoa(pid))
}

// StartInAgent calls start, which must fork exactly one process and return
// its pid, so that the process begins life in <id>/agent in every hierarchy
// on v1, in <id> on v2 (see below). It is MoveToAgent without the
// migration, which on v1 costs a wait for an RCU grace period per
// hierarchy (milliseconds under load):
//
//   - v1: start runs on a new goroutine locked to its OS thread; the thread
//     moves itself into <id>/agent (writing "0" to "tasks", which skips the
//     global lock) and forks there. The goroutine then exits still locked,
//     so Go ends the thread instead of returning it to the daemon's pool.
//   - v2: start forks straight into <id> itself with clone3
//     (CLONE_INTO_CGROUP): attr gets UseCgroupFD and CgroupFD, which stay
//     valid until StartInAgent returns. The agent roots its cgroup
//     namespace there and moves itself into <id>/agent (EnterHome); only
//     then can <id> enable controllers for its children, which the caller
//     does with Arm. The kernel lets a process place another (a move, or
//     CLONE_INTO_CGROUP) only between cgroups below its cgroup namespace's
//     root: rooted at <id>/agent, the agent could not place its commands
//     in <id>/work.
func (s *Sandbox) StartInAgent(attr *syscall.SysProcAttr, start func() (int, error)) (int, error) {
	g, err := s.open()
	if err != nil {
		return 0, err
	}
	defer g.close()
	a, err := g.sub("agent")
	if err != nil {
		return 0, err
	}
	defer a.close()
	if s.m.l.v == V2 {
		if attr == nil {
			return 0, fmt.Errorf("cgroups: StartInAgent on v2 needs SysProcAttr: %w", errdefs.ErrInvalidArgument)
		}
		attr.UseCgroupFD, attr.CgroupFD = true, g.dirs[0].fd
		return start()
	}
	// The thread leaves for the parent, which nothing kills or freezes,
	// and ends: a Kill of the sandbox can never catch a thread of the
	// daemon.
	parent, err := s.m.group(s.m.parent)
	if err != nil {
		return 0, err
	}
	defer parent.close()
	return forkIn(a, parent, false, start)
}

// MoveToAgent moves the process pid into <id>/agent in every hierarchy (and,
// on v2, applies the deferred limits; see Create).
func (s *Sandbox) MoveToAgent(pid int) error {
	if err := checkPid(pid); err != nil {
		return err
	}
	g, err := s.open()
	if err != nil {
		return err
	}
	defer g.close()
	a, err := g.sub("agent")
	if err != nil {
		return err
	}
	err = a.writeAll(g.tab.procs.name, strconv.Itoa(pid))
	a.close()
	if err != nil {
		return err
	}
	return s.arm(g)
}

// Delegation is what the daemon hands the agent: open directories of
// <id>/work (where the agent makes exec cgroups) and <id>/agent (where the
// agent returns its forking thread on v1), keyed by hierarchy name. Pass
// them to the agent with ExtraFiles and open them there with OpenSpec. The
// caller owns the files and closes them with Close once they are passed.
type Delegation struct {
	Version    Version
	Work, Home map[string]*os.File
	// MemoryBudget is the memory cap of the whole sandbox (<id>), 0 when
	// it has none; the agent reads it with Delegated.MemoryRoom.
	MemoryBudget int64
}

// Close closes every file of d.
func (d *Delegation) Close() error {
	var errs []error
	for _, m := range []map[string]*os.File{d.Work, d.Home} {
		for _, f := range m {
			errs = append(errs, f.Close())
		}
	}
	return errors.Join(errs...)
}

// ExtraFiles returns d's files in a fixed order for exec.Cmd.ExtraFiles,
// where files[0] becomes descriptor first in the child (3 when files are
// the whole of ExtraFiles), and the spec with which the child opens them
// (OpenSpec).
func (d *Delegation) ExtraFiles(first int) (files []*os.File, spec string) {
	names := make([]string, 0, len(d.Work))
	for n := range d.Work {
		names = append(names, n)
	}
	sort.Strings(names)
	var es []specEntry
	for _, n := range names {
		es = append(es, specEntry{hier: n, work: first + len(files), home: first + len(files) + 1})
		files = append(files, d.Work[n], d.Home[n])
	}
	return files, formatSpec(d.Version, es, d.MemoryBudget)
}

// Delegate opens <id>/work and <id>/agent in every hierarchy and gives the
// sandbox's owner what the agent needs: <id>/work itself with its
// cgroup.procs and tasks (v2: cgroup.threads) files, and the cgroup.procs
// and tasks files of <id>/agent; on v2 also <id>/cgroup.procs, which the
// kernel requires for moves between agent/ and work/ (their common
// ancestor), and which it refuses to use for placing processes in <id> once
// <id> has controllers enabled. Every limit file stays root-owned.
func (s *Sandbox) Delegate() (*Delegation, error) {
	if s.owner == nil {
		return nil, fmt.Errorf("cgroups: sandbox %s: delegate needs the sandbox's owner, known only to Create: %w", s.id, errdefs.ErrFailedPrecondition)
	}
	uid, gid := s.owner.UID, s.owner.GID
	g, err := s.open()
	if err != nil {
		return nil, err
	}
	defer g.close()
	work, err := g.sub("work")
	if err != nil {
		return nil, err
	}
	defer work.close()
	home, err := g.sub("agent")
	if err != nil {
		return nil, err
	}
	defer home.close()
	chown := func(c *group, d dirFD, name string) error {
		var err error
		if name == "." {
			err = unix.Fchown(d.fd, uid, gid)
		} else {
			err = unix.Fchownat(d.fd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err != nil {
			return sysErr("chown", c.where(d, name), err)
		}
		return nil
	}
	procs, tasks := g.tab.procs.name, g.tab.tasks.name
	for i := range work.dirs {
		for _, n := range []string{".", procs, tasks} {
			if err := chown(work, work.dirs[i], n); err != nil {
				return nil, err
			}
		}
		for _, n := range []string{procs, tasks} {
			if err := chown(home, home.dirs[i], n); err != nil {
				return nil, err
			}
		}
	}
	if s.m.l.v == V2 {
		if err := chown(g, g.dirs[0], procs); err != nil {
			return nil, err
		}
	}
	d := &Delegation{Version: s.m.l.v, Work: map[string]*os.File{}, Home: map[string]*os.File{}, MemoryBudget: s.limits.totalMemory()}
	for i := range work.dirs {
		name := work.dirs[i].h.name
		for _, x := range []struct {
			c    *group
			m    map[string]*os.File
			what string
		}{{work, d.Work, "work"}, {home, d.Home, "agent"}} {
			fd, err := detachedDir(x.c.dirs[i].fd)
			if err != nil {
				d.Close()
				return nil, sysErr("clone mount of", x.c.where(x.c.dirs[i], "."), err)
			}
			x.m[name] = os.NewFile(uintptr(fd), "cgroup:"+name+":"+x.what)
		}
	}
	return d, nil
}

// detachedDir returns a directory fd of dirfd's directory on a detached
// bind mount of it (open_tree OPEN_TREE_CLONE): ".." from there stays at
// the directory, and its /proc fd link names no host path. The agent holds
// these for the life of the sandbox; a descriptor of the host's cgroup
// mount would lead anyone who borrows it, through "..", into every cgroup
// and up the host's mount tree.
func detachedDir(dirfd int) (int, error) {
	tree, err := ignoringEINTR(func() (int, error) {
		return unix.OpenTree(dirfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	})
	if err != nil {
		return -1, err
	}
	defer unix.Close(tree)
	return openDirAt(tree, ".")
}

// Stats reports what the whole sandbox has used so far.
func (s *Sandbox) Stats() (Stats, error) {
	g, err := s.open()
	if err != nil {
		return Stats{}, err
	}
	defer g.close()
	var st Stats
	if st.CPUTime, err = g.cpuTime(); err != nil {
		return Stats{}, err
	}
	if st.MemoryBytes, err = g.readUint(g.tab.memCurrent, ""); err != nil {
		return Stats{}, err
	}
	if st.PeakMemoryBytes, err = g.readUint(g.tab.memPeak, ""); err != nil {
		return Stats{}, err
	}
	if st.Pids, err = g.readUint(g.tab.pidsCurrent, ""); err != nil {
		return Stats{}, err
	}
	if st.OOMKills, err = g.oomKills(); err != nil {
		return Stats{}, err
	}
	if st.MemoryLimitBytes, err = g.readLimit(g.tab.memLimit); err != nil {
		return Stats{}, err
	}
	if st.PidsLimit, err = g.readLimit(g.tab.pidsMax); err != nil {
		return Stats{}, err
	}
	return st, nil
}

// readLimit reads the limit file f of g (see parseLimit); a file the
// kernel does not provide reads as 0, no limit.
func (g *group) readLimit(f ifile) (uint64, error) {
	b, err := g.read(f)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return parseLimit(b)
}

// cpuTime reads the CPU time of g's subtree.
func (g *group) cpuTime() (time.Duration, error) {
	n, err := g.readUint(g.tab.cpuUsage, g.tab.cpuUsageKey)
	if err != nil {
		return 0, err
	}
	if g.v == V2 {
		n *= 1000 // µs
	}
	return time.Duration(n), nil
}

// oomKills counts OOM kills in g's subtree. v2 counts hierarchically; v1
// counts per cgroup, so it sums over the live subtree.
func (g *group) oomKills() (uint64, error) {
	if g.v == V2 {
		return g.readUint(g.tab.oomEvents, "oom_kill")
	}
	d, ok := g.dir(ctrlMemory)
	if !ok {
		return 0, nil
	}
	var sum uint64
	err := g.walkTree(d, func(fd int) error {
		b, err := readAt(fd, g.tab.oomEvents.name)
		if err == unix.ENOENT || err == unix.ENODEV {
			return nil
		}
		if err != nil {
			return err
		}
		n, _, err := parseKeyed(b, "oom_kill")
		sum += n
		return err
	})
	return sum, err
}

// Procs returns the processes of the sandbox (agent included), as seen from
// the daemon's pid namespace, sorted.
func (s *Sandbox) Procs() ([]int, error) {
	g, err := s.open()
	if err != nil {
		return nil, err
	}
	defer g.close()
	return g.treeProcs()
}

// Freeze stops every task of the sandbox and waits until all are frozen. If
// that takes until ctx is done (30 s without a deadline) it thaws the
// sandbox again and fails with a timeout.
func (s *Sandbox) Freeze(ctx context.Context) error {
	g, err := s.open()
	if err != nil {
		return err
	}
	defer g.close()
	return g.freeze(ctx)
}

// Thaw lets a frozen sandbox run again.
func (s *Sandbox) Thaw(ctx context.Context) error {
	g, err := s.open()
	if err != nil {
		return err
	}
	defer g.close()
	return g.thaw(ctx)
}

// Kill kills every process of the sandbox, agent included, and waits until
// none is left or ctx is done (30 s without a deadline). The sandbox ends
// thawed.
func (s *Sandbox) Kill(ctx context.Context) error {
	g, err := s.open()
	if err != nil {
		return err
	}
	defer g.close()
	return g.kill(ctx)
}

// Remove removes the sandbox's cgroups, deepest first, in every hierarchy.
// It retries cgroups still busy with exiting tasks until ctx is done (30 s
// without a deadline); kill first. Missing cgroups count as removed, so
// Remove is idempotent.
func (s *Sandbox) Remove(ctx context.Context) error {
	ctx, cancel := withDefaultWait(ctx)
	defer cancel()
	var errs []error
	for _, h := range s.m.l.hiers {
		fd, err := openDirAt(unix.AT_FDCWD, filepath.Join(h.mount, s.m.parent))
		if err == unix.ENOENT {
			continue
		}
		if err != nil {
			errs = append(errs, sysErr("open", h.name+":"+s.m.parent, err))
			continue
		}
		errs = append(errs, removeTreeWait(ctx, fd, s.id, h.name+":"+s.rel()))
		unix.Close(fd)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	s.m.log.Debug("cgroups: removed sandbox", "id", s.id)
	return nil
}
