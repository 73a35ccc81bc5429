//go:build linux

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sort"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Delegated is the agent's view of its sandbox's cgroups: the directories of
// <id>/work and <id>/agent that the daemon delegated, used only through
// *at system calls. If the agent restricts itself with landlock, it must add
// path-beneath rules for these directories first (landlock checks accesses
// made through descriptors too). A Delegated is safe for concurrent use.
type Delegated struct {
	v    Version
	tab  *table
	work *group // <id>/work
	home *group // <id>/agent: where the forking thread returns to (v1)
	// budget is the memory cap of the whole sandbox (<id>), 0 when
	// unknown (see MemoryRoom).
	budget int64

	// mu guards live and closed, and keeps work and home open: Start holds
	// it shared while it uses home, Close exclusively.
	mu     sync.RWMutex
	live   map[string]bool // exec cgroups between New and Close; Sweep leaves them alone
	closed bool
}

// NewDelegated makes a Delegated from directories of <id>/work and
// <id>/agent, keyed by hierarchy name as in Delegation. It duplicates the
// descriptors: the caller keeps and closes its files.
func NewDelegated(v Version, work, home map[string]*os.File) (*Delegated, error) {
	names := make([]string, 0, len(work))
	for n := range work {
		names = append(names, n)
	}
	sort.Strings(names)
	var es []specEntry
	var fds []int
	fail := func(err error) (*Delegated, error) {
		for _, fd := range fds {
			unix.Close(fd)
		}
		return nil, err
	}
	if len(home) != len(work) {
		return fail(fmt.Errorf("cgroups: work and agent directories differ: %w", errdefs.ErrInvalidArgument))
	}
	for _, n := range names {
		w, h := work[n], home[n]
		if w == nil || h == nil {
			return fail(fmt.Errorf("cgroups: missing directory for hierarchy %s: %w", clip(n), errdefs.ErrInvalidArgument))
		}
		e := specEntry{hier: n}
		for _, p := range []struct {
			f  *os.File
			fd *int
		}{{w, &e.work}, {h, &e.home}} {
			fd, err := unix.FcntlInt(p.f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return fail(sysErr("dup", n, err))
			}
			fds = append(fds, fd)
			*p.fd = fd
		}
		es = append(es, e)
	}
	if err := checkHierNames(v, names); err != nil {
		return fail(err)
	}
	d, err := newDelegated(v, es)
	if err != nil {
		return fail(err)
	}
	return d, nil
}

// OpenSpec makes a Delegated from descriptors inherited from the daemon as
// described by spec (see Delegation.ExtraFiles). It takes ownership of the
// descriptors and marks them close-on-exec so that they never leak into
// sandboxed processes; on error it closes them.
func OpenSpec(spec string) (*Delegated, error) {
	v, es, budget, err := parseSpec(spec)
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		unix.CloseOnExec(e.work)
		unix.CloseOnExec(e.home)
	}
	d, err := newDelegated(v, es)
	if err == nil {
		d.budget = budget
	}
	if err != nil {
		for _, e := range es {
			unix.Close(e.work)
			unix.Close(e.home)
		}
		return nil, err
	}
	return d, nil
}

// newDelegated checks that every descriptor is a directory of the right
// cgroup filesystem and takes ownership of them.
func newDelegated(v Version, es []specEntry) (*Delegated, error) {
	var magic int64 = unix.CGROUP_SUPER_MAGIC
	if v == V2 {
		magic = unix.CGROUP2_SUPER_MAGIC
	}
	d := &Delegated{
		v:    v,
		tab:  tables[v],
		work: &group{v: v, tab: tables[v], rel: "work"},
		home: &group{v: v, tab: tables[v], rel: "agent"},
		live: map[string]bool{},
	}
	for _, e := range es {
		for _, fd := range []int{e.work, e.home} {
			var st unix.Statfs_t
			if err := unix.Fstatfs(fd, &st); err != nil {
				return nil, sysErr("statfs", e.hier, err)
			}
			if st.Type != magic {
				return nil, fmt.Errorf("cgroups: descriptor %d is not a cgroup %s directory: %w", fd, v, errdefs.ErrInvalidArgument)
			}
		}
		h := newHier(v, e.hier)
		d.work.dirs = append(d.work.dirs, dirFD{h: h, fd: e.work})
		d.home.dirs = append(d.home.dirs, dirFD{h: h, fd: e.home})
	}
	return d, nil
}

// Version reports the cgroup version of d.
func (d *Delegated) Version() Version { return d.v }

// Close closes d's descriptors. Exec cgroups made by d keep working until
// their own Close.
func (d *Delegated) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		d.work.close()
		d.home.close()
	}
	return nil
}

// MemoryRoom reports how many more bytes the whole sandbox may be charged
// before it reaches its memory cap: the cap of <id> less what <id>/agent
// and <id>/work use now. known is false when the cap is unknown (the spec
// carried none) or there is no memory controller. The agent checks it
// before each chunk of a file write, whose pages the kernel charges to the
// agent, so that an upload stops with a clear error before the cap, where
// the kernel would OOM-kill a process of the sandbox (maybe the agent).
func (d *Delegated) MemoryRoom() (room int64, known bool, err error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return 0, false, fmt.Errorf("cgroups: delegation closed: %w", errdefs.ErrFailedPrecondition)
	}
	if d.budget <= 0 {
		return 0, false, nil
	}
	if _, ok := d.work.dir(ctrlMemory); !ok {
		return 0, false, nil
	}
	used := int64(0)
	for _, g := range []*group{d.home, d.work} {
		n, err := g.readUint(d.tab.memCurrent, "")
		if err != nil {
			return 0, false, err
		}
		used += int64(min(n, 1<<62))
	}
	return d.budget - used, true, nil
}

// New creates the exec cgroup work/<name> in every hierarchy. name must be
// unique among d's open exec cgroups and must not exist.
func (d *Delegated) New(name string) (*Exec, error) {
	if err := checkName("exec cgroup", name); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, fmt.Errorf("cgroups: delegation closed: %w", errdefs.ErrFailedPrecondition)
	}
	if d.live[name] {
		d.mu.Unlock()
		return nil, fmt.Errorf("cgroups: exec cgroup %s: %w", name, errdefs.ErrAlreadyExists)
	}
	d.live[name] = true
	// The lock stays held while the directories are made so that Close
	// cannot close them underneath; mkdir is quick.
	defer d.mu.Unlock()
	if err := d.work.mkdir(name); err != nil {
		delete(d.live, name)
		return nil, err
	}
	g, err := d.work.sub(name)
	if err != nil {
		for _, w := range d.work.dirs {
			_ = unix.Unlinkat(w.fd, name, unix.AT_REMOVEDIR)
		}
		delete(d.live, name)
		return nil, err
	}
	if err := groupOOM(g); err != nil {
		g.close()
		for _, w := range d.work.dirs {
			_ = unix.Unlinkat(w.fd, name, unix.AT_REMOVEDIR)
		}
		delete(d.live, name)
		return nil, err
	}
	return &Exec{d: d, name: name, g: g}, nil
}

// groupOOM makes, on v2, an OOM kill of any process of the exec cgroup g
// kill its whole tree (memory.oom.group, as Kubernetes does for a
// container): a command is not left half-killed, and never takes the
// agent or another command with it. Without the memory controller there
// (no memory limit), there is nothing to do.
func groupOOM(g *group) error {
	if g.v != V2 {
		return nil
	}
	err := g.write(ifile{ctrlMemory, "memory.oom.group"}, "1")
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// Sweep removes exec cgroups under work/ that no Exec holds open and that
// have no processes left: those whose Close found them busy, or that a
// previous agent left behind. Busy ones are left for a later Sweep.
func (d *Delegated) Sweep() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return fmt.Errorf("cgroups: delegation closed: %w", errdefs.ErrFailedPrecondition)
	}
	var errs []error
	for _, w := range d.work.dirs {
		names, err := subdirs(w.fd)
		if err != nil {
			errs = append(errs, sysErr("list", w.h.name+":work", err))
			continue
		}
		for _, n := range names {
			if d.live[n] {
				continue
			}
			err := removeTree(w.fd, n, w.h.name+":work/"+n)
			if err != nil && !errors.Is(err, unix.EBUSY) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// Exec is the cgroup of one process tree, work/<name>. Its methods are safe
// for concurrent use.
type Exec struct {
	d    *Delegated
	name string

	mu sync.RWMutex // guards g against Close
	g  *group       // nil once closed
}

// Name returns the exec cgroup's name.
func (e *Exec) Name() string { return e.name }

func (e *Exec) errClosed() error {
	return fmt.Errorf("cgroups: exec cgroup %s closed: %w", e.name, errdefs.ErrFailedPrecondition)
}

// Start calls start, which must fork exactly one process and return its pid,
// so that the process begins life inside the exec cgroup:
//
//   - v2: Start sets attr's UseCgroupFD and CgroupFD, so that start's
//     fork is a clone3 with CLONE_INTO_CGROUP: the process is born in the
//     exec cgroup, or the fork fails. The kernel allows that only while the
//     caller's cgroup namespace is rooted at <id> or above (see
//     Sandbox.StartInAgent and EnterHome). attr must be the attributes
//     start forks with.
//   - v1: Start runs start on a new goroutine locked to its OS thread,
//     which it moves into the exec cgroup in every hierarchy (writing the
//     "0", the calling thread, to "tasks") before start forks on it, and back to <id>/agent
//     after. If moving back fails the goroutine exits still locked, so Go
//     terminates the thread; the process has started and its pid is
//     returned with the error. start must therefore not rely on the
//     caller's thread. attr is not used.
func (e *Exec) Start(attr *syscall.SysProcAttr, start func() (int, error)) (int, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.g == nil {
		return 0, e.errClosed()
	}
	if e.d.v == V2 {
		if attr == nil {
			return 0, fmt.Errorf("cgroups: exec cgroup %s: Start on v2 needs SysProcAttr: %w", e.name, errdefs.ErrInvalidArgument)
		}
		attr.UseCgroupFD, attr.CgroupFD = true, e.g.dirs[0].fd
		return start()
	}

	e.d.mu.RLock()
	defer e.d.mu.RUnlock()
	if e.d.closed {
		return 0, fmt.Errorf("cgroups: delegation closed: %w", errdefs.ErrFailedPrecondition)
	}
	// If the thread cannot be moved back, it ends: a thread of the agent
	// left inside an exec cgroup would be frozen and signalled with it by
	// Kill.
	return forkIn(e.g, e.d.home, true, start)
}

// forkIn calls start on a fresh OS thread that has moved itself into g in
// every hierarchy, then moves the thread on to back (in the hierarchies it
// entered). With keep, the thread returns to Go's pool when both moves
// succeeded, and a failure to move back is reported; otherwise the thread
// ends with its goroutine (Go terminates a thread whose goroutine exits
// locked), so that no thread of the caller stays in a cgroup that may be
// frozen or killed.
func forkIn(g, back *group, keep bool, start func() (int, error)) (int, error) {
	type result struct {
		pid int
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		var r result
		n, err := moveSelf(g, len(g.dirs))
		if err != nil {
			r.err = err
		} else {
			r.pid, r.err = start()
		}
		if _, berr := moveSelf(back, n); berr != nil {
			if keep {
				r.err = errors.Join(r.err, berr)
			}
			ch <- r
			return // still locked: the thread ends with the goroutine
		}
		if keep {
			runtime.UnlockOSThread()
		}
		ch <- r
	}()
	r := <-ch
	return r.pid, r.err
}

// moveSelf moves the calling thread into g in its first n hierarchies and
// reports how many succeeded. It writes "0" (the calling thread) rather
// than the thread's id: the kernel then skips the global
// cgroup_threadgroup_rwsem, whose write side waits for an RCU grace period
// (0.4 ms idle, several ms under load, per hierarchy; see
// BenchmarkMoveSelf).
func moveSelf(g *group, n int) (int, error) {
	for i, d := range g.dirs[:n] {
		if err := writeAt(d.fd, g.tab.tasks.name, "0"); err != nil {
			return i, sysErr("move thread to", g.where(d, g.tab.tasks.name), err)
		}
	}
	return n, nil
}

// Kill kills every process in the exec cgroup and below and returns once it
// is empty and, with a pids controller, every killed task has been reaped
// (the agent, PID 1, reaps them concurrently), or ctx is done (30 s
// without a deadline).
func (e *Exec) Kill(ctx context.Context) error {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.g == nil {
		return e.errClosed()
	}
	ctx, cancel := withDefaultWait(ctx)
	defer cancel()
	if err := e.g.kill(ctx); err != nil {
		return err
	}
	// A killed task leaves the process lists at once but holds its slot in
	// pids.current until it is reaped; wait for the caller's reaper, so
	// that the next command in the sandbox finds its slots free.
	if _, ok := e.g.dir(ctrlPids); !ok {
		return nil
	}
	return poll(ctx, "reap "+e.g.rel, func() (bool, error) {
		n, err := e.g.readUint(e.g.tab.pidsCurrent, "")
		return n == 0, err
	})
}

// Usage reports what the process tree has used so far: v1 cpuacct.usage,
// memory.max_usage_in_bytes and the oom_kill count of memory.oom_control;
// v2 usage_usec of cpu.stat, memory.peak (Linux 5.19+) and oom_kill of
// memory.events.
func (e *Exec) Usage() (Usage, error) {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if e.g == nil {
		return Usage{}, e.errClosed()
	}
	var u Usage
	var err error
	if u.CPUTime, err = e.g.cpuTime(); err != nil {
		return Usage{}, err
	}
	if u.PeakMemoryBytes, err = e.g.readUint(e.g.tab.memPeak, ""); err != nil {
		return Usage{}, err
	}
	if u.OOMKills, err = e.g.oomKills(); err != nil {
		return Usage{}, err
	}
	return u, nil
}

// Close removes the exec cgroup. If processes are still in it (background
// children) it fails with an error wrapping errdefs.ErrFailedPrecondition
// and leaves the cgroup to Sweep. Calling Close again retries the removal.
func (e *Exec) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.g != nil {
		e.g.close()
		e.g = nil
	}
	d := e.d
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.live, e.name)
	if d.closed {
		return fmt.Errorf("cgroups: delegation closed: %w", errdefs.ErrFailedPrecondition)
	}
	var errs []error
	for _, w := range d.work.dirs {
		errs = append(errs, removeTree(w.fd, e.name, w.h.name+":work/"+e.name))
	}
	err := errors.Join(errs...)
	if errors.Is(err, unix.EBUSY) {
		return fmt.Errorf("cgroups: exec cgroup %s still has processes: %w", e.name, errdefs.ErrFailedPrecondition)
	}
	return err
}

// EnterHome moves the calling process into <id>/agent, on v2, through the
// delegated descriptors that spec describes (they stay open and the
// caller's); on v1 it does nothing (the daemon started the agent there).
// The agent's setup stage calls it right after rooting its cgroup
// namespace at <id>, where the daemon started it (Sandbox.StartInAgent):
// the kernel checks a move against the namespace of whoever opened
// cgroup.procs, here one rooted at <id>, which holds both ends.
func EnterHome(spec string) error {
	v, es, _, err := parseSpec(spec)
	if err != nil {
		return err
	}
	if v != V2 {
		return nil
	}
	if len(es) != 1 {
		return malformed("cgroup spec", "v2 needs exactly one hierarchy")
	}
	if err := writeAt(es[0].home, tables[V2].procs.name, "0"); err != nil {
		return sysErr("move the agent to", "agent/"+tables[V2].procs.name, err)
	}
	return nil
}
