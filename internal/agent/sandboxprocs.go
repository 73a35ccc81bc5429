package agent

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The sandbox-wide process view (ListAll, SignalAny, KillAll) covers every
// process of the sandbox, not only those the agent started: a command's
// children, daemons it started, orphans. Which processes belong to the
// sandbox depends on where the agent runs:
//
//   - as PID 1 of its own PID namespace (a real sandbox): every process in
//     /proc but the agent itself. KillAll then uses kill(-1, SIGKILL),
//     which the kernel applies to every process of the namespace but the
//     caller under the task list lock, so that a fork bomb cannot fork
//     past it.
//   - otherwise (the fake runtime, tests): the processes in the sessions of
//     the processes the agent tracks (every process it starts leads a
//     session). Orphans of a process that was forgotten after
//     exitRetention are then out of sight.

// Caps on ListAll's answer.
const (
	maxListed       = 4096    // processes
	maxArgvListed   = 64      // arguments per process
	maxArgvBytes    = 4 << 10 // command line bytes per process
	maxListArgvSize = 1 << 20 // command line bytes in all
)

// KillAll's wait for the last process to be reaped.
const (
	defaultKillAllWait = 10 * time.Second
	maxKillAllWait     = 60 * time.Second
	killAllPoll        = 10 * time.Millisecond
)

// procDir is where the kernel shows processes.
const procDir = "/proc"

// userHz is the unit of the start times in /proc/PID/stat (USER_HZ, 100
// on every architecture Go supports).
const userHz = 100

// procStat is what the agent reads from /proc/PID/stat.
type procStat struct {
	pid, ppid, session int
	state              byte
	comm               string
	startTicks         uint64 // since boot, in 1/userHz s
}

// parseStat parses the content of /proc/PID/stat. The command name comes
// in parentheses and may itself hold spaces and parentheses (a process
// chooses it), so the fields are read after its last ')'.
func parseStat(b []byte) (procStat, error) {
	var st procStat
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 1 || end < open {
		return st, fmt.Errorf("malformed stat: %w", errdefs.ErrInternal)
	}
	pid, err := strconv.Atoi(string(bytes.TrimSpace(b[:open])))
	if err != nil || pid <= 0 {
		return st, fmt.Errorf("malformed stat pid: %w", errdefs.ErrInternal)
	}
	f := strings.Fields(string(b[end+1:]))
	// state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	// cmajflt utime stime cutime cstime priority nice num_threads
	// itrealvalue starttime ...
	if len(f) < 20 || len(f[0]) != 1 {
		return st, fmt.Errorf("malformed stat fields: %w", errdefs.ErrInternal)
	}
	st.pid, st.state, st.comm = pid, f[0][0], string(b[open+1:end])
	if st.ppid, err = strconv.Atoi(f[1]); err != nil {
		return st, fmt.Errorf("malformed stat ppid: %w", errdefs.ErrInternal)
	}
	if st.session, err = strconv.Atoi(f[3]); err != nil {
		return st, fmt.Errorf("malformed stat session: %w", errdefs.ErrInternal)
	}
	if st.startTicks, err = strconv.ParseUint(f[19], 10, 64); err != nil {
		return st, fmt.Errorf("malformed stat start time: %w", errdefs.ErrInternal)
	}
	return st, nil
}

// parseStatusUID returns the real uid of a /proc/PID/status.
func parseStatusUID(b []byte) (uint32, bool) {
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, "Uid:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		uid, err := strconv.ParseUint(f[0], 10, 32)
		return uint32(uid), err == nil
	}
	return 0, false
}

// parseCgroup picks a process's cgroup from /proc/PID/cgroup: the pids
// hierarchy's on cgroup v1 (the one that caps the sandbox's tasks), else
// the unified one. The path is cleaned: inside a sandbox the agent's
// cgroup namespace is rooted at the agent's own cgroup, so the kernel
// shows a command's as /../work/c3, which reads /work/c3.
func parseCgroup(b []byte) string {
	var unified, first string
	for line := range strings.SplitSeq(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "" {
			continue
		}
		p := path.Clean(parts[2])
		if first == "" {
			first = p
		}
		if parts[1] == "" && parts[0] == "0" {
			unified = p
		}
		if slices.Contains(strings.Split(parts[1], ","), "pids") {
			return p
		}
	}
	return cmp.Or(unified, first)
}

// parseCmdline splits /proc/PID/cmdline (NUL-terminated arguments) into at
// most max arguments, reporting whether some were left out. b is already
// cut to the byte cap (cut tells): its last argument is then incomplete.
func parseCmdline(b []byte, max int, cut bool) (argv []string, truncated bool) {
	b = bytes.TrimSuffix(b, []byte{0})
	if len(b) == 0 {
		return nil, cut
	}
	for a := range bytes.SplitSeq(b, []byte{0}) {
		if len(argv) == max {
			return argv, true
		}
		argv = append(argv, strings.ToValidUTF8(string(a), "\uFFFD"))
	}
	return argv, cut
}

// readCapped reads at most max bytes of the file at name and reports
// whether there was more.
func readCapped(name string, max int) ([]byte, bool, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(max)+1))
	if err != nil {
		return nil, false, err
	}
	if len(b) > max {
		return b[:max], true, nil
	}
	return b, false, nil
}

// readStat reads and parses /proc/PID/stat.
func readStat(pid int) (procStat, error) {
	b, _, err := readCapped(procDir+"/"+strconv.Itoa(pid)+"/stat", 4096)
	if err != nil {
		return procStat{}, err
	}
	return parseStat(b)
}

// procPids lists the pids in /proc, ascending.
func procPids() ([]int, error) {
	d, err := os.Open(procDir)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procDir, errdefs.ErrUnavailable)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", procDir, errdefs.ErrUnavailable)
	}
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids, nil
}

// scope says which processes of /proc belong to the sandbox (see the top
// of this file).
type scope struct {
	self     int
	wholeNS  bool         // the agent is PID 1: everything but itself
	sessions map[int]bool // otherwise: these sessions
}

// scope returns the sandbox's process scope now.
func (t *processTable) scope() scope {
	s := scope{self: os.Getpid()}
	if s.self == 1 {
		s.wholeNS = true
		return s
	}
	s.sessions = make(map[int]bool)
	t.mu.Lock()
	for pid := range t.byPID {
		s.sessions[pid] = true
	}
	t.mu.Unlock()
	return s
}

// has reports whether the process st describes belongs to the sandbox.
func (s scope) has(st procStat) bool {
	if st.pid == s.self {
		return false
	}
	return s.wholeNS || s.sessions[st.session]
}

// sandboxProcs returns the stat of every process of the sandbox now,
// ascending by pid. Processes that end while it reads are skipped.
func (t *processTable) sandboxProcs() ([]procStat, error) {
	pids, err := procPids()
	if err != nil {
		return nil, err
	}
	s := t.scope()
	out := make([]procStat, 0, len(pids))
	for _, pid := range pids {
		if pid == s.self {
			continue
		}
		st, err := readStat(pid)
		if err != nil || !s.has(st) {
			continue
		}
		out = append(out, st)
	}
	return out, nil
}

// bootTime is when the host booted, from /proc/stat.
func bootTime() (time.Time, bool) {
	b, _, err := readCapped(procDir+"/stat", 1<<20)
	if err != nil {
		return time.Time{}, false
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "btime "); ok {
			sec, err := strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
			return time.Unix(sec, 0), err == nil
		}
	}
	return time.Time{}, false
}

// userName names uid after the agent's accounts: the default user's
// first, then the others in name order; "" for an unknown uid.
func (t *processTable) userName(uid uint32) string {
	if u, ok := t.opts.Users[t.opts.DefaultUser]; ok && u.UID == uid {
		return u.Name
	}
	for _, n := range slices.Sorted(maps.Keys(t.opts.Users)) {
		if u := t.opts.Users[n]; u.UID == uid {
			return u.Name
		}
	}
	return ""
}

// ListAll lists the sandbox's processes (see the top of this file).
func (t *processTable) ListAll(ctx context.Context, _ *connect.Request[agentv1.ListAllRequest]) (*connect.Response[agentv1.ListAllResponse], error) {
	sts, err := t.sandboxProcs()
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	res := &agentv1.ListAllResponse{Total: uint32(len(sts))}
	if len(sts) > maxListed {
		sts, res.Truncated = sts[:maxListed], true
	}
	type trackedInfo struct {
		tag        string
		background bool
	}
	tracked := make(map[int]trackedInfo)
	t.mu.Lock()
	for pid, p := range t.byPID {
		if !p.retired {
			tracked[pid] = trackedInfo{tag: p.tag, background: p.background}
		}
	}
	t.mu.Unlock()
	boot, bootOK := bootTime()
	budget := maxListArgvSize
	for _, st := range sts {
		if err := ctx.Err(); err != nil {
			return nil, streamErr(err)
		}
		dir := procDir + "/" + strconv.Itoa(st.pid) + "/"
		sp := &agentv1.SandboxProcess{
			Pid:     uint32(st.pid),
			Ppid:    uint32(max(st.ppid, 0)),
			Name:    strings.ToValidUTF8(st.comm, "\uFFFD"),
			State:   string(st.state),
			Session: uint32(max(st.session, 0)),
		}
		if bootOK {
			ticks := int64(min(st.startTicks, 1<<62))
			sp.StartedAtUnixNano = boot.Add(time.Duration(ticks/userHz)*time.Second +
				time.Duration(ticks%userHz)*(time.Second/userHz)).UnixNano()
		}
		if b, _, err := readCapped(dir+"status", 64<<10); err == nil {
			if uid, ok := parseStatusUID(b); ok {
				sp.Uid, sp.User = uid, t.userName(uid)
			}
		}
		if b, _, err := readCapped(dir+"cgroup", 64<<10); err == nil {
			sp.Cgroup = strings.ToValidUTF8(parseCgroup(b), "\uFFFD")
		}
		if budget > 0 {
			b, cut, err := readCapped(dir+"cmdline", min(maxArgvBytes, budget))
			if err == nil {
				budget -= len(b)
				sp.Argv, sp.ArgvTruncated = parseCmdline(b, maxArgvListed, cut)
			}
		} else {
			sp.ArgvTruncated = true
		}
		if ti, ok := tracked[st.pid]; ok {
			sp.Tracked, sp.Tag, sp.Background = true, ti.tag, ti.background
		}
		res.Processes = append(res.Processes, sp)
	}
	return connect.NewResponse(res), nil
}

// SignalAny signals one process of the sandbox by pid.
func (t *processTable) SignalAny(ctx context.Context, req *connect.Request[agentv1.SignalAnyRequest]) (*connect.Response[agentv1.SignalAnyResponse], error) {
	sig, pid := req.Msg.GetSignal(), int(req.Msg.GetPid())
	if sig < 1 || sig > 64 {
		return nil, agentwire.ToConnect(invalidf("signal %d is out of range 1..64", sig))
	}
	if pid < 1 {
		return nil, agentwire.ToConnect(invalidf("a pid is required"))
	}
	s := t.scope()
	if pid == s.self {
		return nil, agentwire.ToConnect(fmt.Errorf("process %d is the agent: %w", pid, errdefs.ErrPermissionDenied))
	}
	t.mu.Lock()
	p := t.byPID[pid]
	live := p != nil && !p.retired
	t.mu.Unlock()
	if live {
		_, err := t.SendSignal(ctx, connect.NewRequest(&agentv1.SendSignalRequest{Process: selectPid(pid), Signal: sig}))
		if err == nil || errdefs.Class(err) != errdefs.ErrFailedPrecondition {
			return connect.NewResponse(&agentv1.SignalAnyResponse{}), err
		}
		// It exited meanwhile; its pid may name another process now.
	}
	if err := signalOne(pid, syscall.Signal(sig), s.has); err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.SignalAnyResponse{}), nil
}

// selectPid selects a process by pid.
func selectPid(pid int) *agentv1.ProcessSelector {
	return &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Pid{Pid: uint32(pid)}}
}

// KillAll kills every process of the sandbox but the agent (see the top of
// this file) and waits until they are all gone from /proc, that is, reaped,
// so that their pids count no more against the sandbox's cap.
func (t *processTable) KillAll(ctx context.Context, req *connect.Request[agentv1.KillAllRequest]) (*connect.Response[agentv1.KillAllResponse], error) {
	wait := time.Duration(req.Msg.GetTimeoutMs()) * time.Millisecond
	switch {
	case wait == 0:
		wait = defaultKillAllWait
	case wait > maxKillAllWait:
		return nil, agentwire.ToConnect(invalidf("timeout %v is longer than %v", wait, maxKillAllWait))
	}
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	killed, left, err := t.killAll(ctx)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if left > 0 {
		return nil, agentwire.ToConnect(fmt.Errorf("killed %d processes, %d still there after %v: %w", killed, left, wait, errdefs.ErrTimeout))
	}
	t.log.Info("killed every process", "killed", killed)
	return connect.NewResponse(&agentv1.KillAllResponse{Killed: uint32(killed)}), nil
}

// killAll kills the sandbox's processes until none is left or ctx ends,
// and returns how many it killed and how many are left.
func (t *processTable) killAll(ctx context.Context) (killed, left int, err error) {
	type key struct {
		pid   int
		start uint64
	}
	seen := make(map[key]bool)
	// count records the live processes about to be killed.
	count := func(sts []procStat) {
		for _, st := range sts {
			if st.state != 'Z' && st.state != 'X' {
				seen[key{st.pid, st.startTicks}] = true
			}
		}
	}
	sts, err := t.sandboxProcs()
	if err != nil {
		return 0, 0, err
	}
	count(sts)
	s := t.scope()
	// First everything at once, so that a fork bomb cannot outrun the
	// per-tree kills below.
	if s.wholeNS {
		if err := killNamespace(); err != nil {
			return 0, 0, err
		}
	}
	// Then every tree the agent started, through its cgroup: that also
	// reaches what sits in a frozen cgroup.
	t.mu.Lock()
	var live []*process
	for _, p := range t.byPID {
		if !p.retired {
			live = append(live, p)
		}
	}
	t.mu.Unlock()
	for _, p := range live {
		t.killTree(ctx, p)
	}
	for {
		t.reapNow()
		sts, err := t.sandboxProcs()
		if err != nil {
			return len(seen), 0, err
		}
		s := t.scope()
		// As PID 1 the agent reaps every zombie, and a zombie still holds
		// its pid; otherwise orphans' zombies are another process's to
		// reap.
		sts = slices.DeleteFunc(sts, func(st procStat) bool { return !s.wholeNS && st.state == 'Z' })
		if len(sts) == 0 {
			break
		}
		count(sts)
		if ctx.Err() != nil {
			return len(seen), len(sts), nil
		}
		if s.wholeNS {
			if err := killNamespace(); err != nil {
				return len(seen), len(sts), err
			}
		} else {
			for _, st := range sts {
				if st.state != 'Z' && st.state != 'X' {
					_ = signalOne(st.pid, syscall.SIGKILL, s.has)
				}
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(killAllPoll):
		}
	}
	// The trees' cgroups are empty now: remove them at once rather than
	// at the next sweep.
	t.sweep()
	return len(seen), 0, nil
}
