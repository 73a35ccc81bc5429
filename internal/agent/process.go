package agent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

const (
	// keepaliveInterval is how long a stream may stay silent before the
	// agent sends a Keepalive event.
	keepaliveInterval = 15 * time.Second
	// exitRetention is how long an exited process stays connectable so
	// that a late Connect still gets its exit event.
	exitRetention = 30 * time.Second
	// maxRetained caps the exited processes kept for late Connects.
	maxRetained = 1024
	// killTimeout bounds the wait for a cgroup to empty after a kill.
	killTimeout = 3 * time.Second
	// sweepInterval is how often cgroups that could not be removed when
	// their process exited (background children remained) are retried.
	sweepInterval = 10 * time.Second
	// janitorTick is how often expired exited processes are forgotten.
	janitorTick = time.Second
	// ptyEOF is what CloseStdin writes to a terminal: ^D.
	ptyEOF = "\x04"
)

// processTable is the ProcessService: it starts processes, tracks them
// until they exit (and for exitRetention after that), and fans their
// output out to the streams attached to them.
//
// Lifecycle of a process: resolve (validate the request) → startProcess
// (reserve a slot, fork, register) → pumps and run goroutines → exit
// status from the reaper → drain output → exit event → retained for late
// Connects → forgotten.
type processTable struct {
	opts   Options
	log    *slog.Logger
	reaper *reaper
	// root resolves working directories inside Options.Root.
	root *fsResolver

	// Tunables, read under mu.
	keepalive  time.Duration
	retention  time.Duration
	sweepEvery time.Duration

	mu       sync.Mutex
	closed   bool
	seq      uint64
	live     int // running processes
	starting int // slots reserved by starts in progress
	byPID    map[int]*process
	byTag    map[string]*process
	reserved map[string]bool // tags of starts in progress
	retired  []*process      // exited, oldest first
	pending  []ExecCgroup    // cgroups that still held processes

	stop chan struct{}
	wg   sync.WaitGroup
}

var _ agentv1connect.ProcessServiceHandler = (*processTable)(nil)

// process is one started process and, through its process group or
// cgroup, its tree.
type process struct {
	pid int
	seq uint64
	tag string
	cfg *agentv1.ProcessConfig // nil once retired
	// retired is set, under the table's lock, when the process has left
	// the live set: it exited and its exit event is being published.
	retired    bool
	started    time.Time
	background bool
	cg         ExecCgroup // nil without Options.Cgroups

	// stdin is the write end of the stdin pipe, or the terminal; nil when
	// the process has no stdin. terminal is set for PTY processes.
	stdin       *os.File
	terminal    bool
	inMu        sync.Mutex // serializes writers
	stdinClosed atomic.Bool
	closeOnce   sync.Once

	stdout, stderr *outStream // stderr is nil for PTY processes
	fan            fanout

	exitCh   chan exitInfo // from the reaper, buffered
	timer    *time.Timer   // the timeout, if any
	timedOut atomic.Bool

	// mu guards exited and pidfd: signals go to a pid only while it is
	// known not to have been reaped (and so cannot have been reused).
	mu       sync.Mutex
	exited   bool
	exitedAt time.Time
	pidfd    int
	done     chan struct{} // closed after the exit event was published
}

// exitInfo is how a process ended, as collected by the reaper.
type exitInfo struct {
	exited bool // exited normally, with code
	code   int
	signal int
	cpu    time.Duration
	maxRSS uint64
	lost   bool // the status could not be collected
}

// startError is a failure to start a process that is reported to the
// caller as an Exit event rather than as an RPC error.
type startError struct {
	code int
	msg  string
}

func (e *startError) Error() string { return e.msg }

func newProcessTable(a *Agent) (*processTable, error) {
	t := &processTable{
		opts:       a.opts,
		log:        a.log,
		keepalive:  keepaliveInterval,
		retention:  exitRetention,
		sweepEvery: sweepInterval,
		byPID:      make(map[int]*process),
		byTag:      make(map[string]*process),
		reserved:   make(map[string]bool),
		stop:       make(chan struct{}),
	}
	if err := cloexecInherited(); err != nil {
		return nil, err
	}
	root, err := newFSResolver(a.opts.Root)
	if err != nil {
		return nil, err
	}
	t.root = root
	r, err := newReaper(a.opts.ReapAll)
	if err != nil {
		_ = root.close()
		return nil, err
	}
	t.reaper = r
	t.wg.Add(1)
	go t.janitor()
	return t, nil
}

// close stops the reaper and the janitor and tries once more to remove
// leftover cgroups. Running processes are not killed; their own goroutines
// end when they exit (without the reaper, under ReapAll, they stay
// zombies until the agent exits).
func (t *processTable) close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	close(t.stop)
	t.mu.Unlock()
	t.wg.Wait()
	t.reaper.close()
	t.sweep()
	return t.root.close()
}

// count returns the number of running processes.
func (t *processTable) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}

// janitor forgets expired exited processes and retries cgroup removal.
func (t *processTable) janitor() {
	defer t.wg.Done()
	tick := time.NewTicker(janitorTick)
	defer tick.Stop()
	lastSweep := time.Now()
	for {
		select {
		case <-t.stop:
			return
		case now := <-tick.C:
			t.forgetExpired(now)
			t.mu.Lock()
			every := t.sweepEvery
			t.mu.Unlock()
			if now.Sub(lastSweep) >= every {
				lastSweep = now
				t.sweep()
			}
		}
	}
}

func (t *processTable) forgetExpired(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for n < len(t.retired) && (now.Sub(t.retired[n].exitTime()) >= t.retention || len(t.retired)-n > maxRetained) {
		t.forgetLocked(t.retired[n])
		n++
	}
	t.retired = slices.Delete(t.retired, 0, n)
}

func (t *processTable) forgetLocked(p *process) {
	if t.byPID[p.pid] == p {
		delete(t.byPID, p.pid)
	}
	if p.tag != "" && t.byTag[p.tag] == p {
		delete(t.byTag, p.tag)
	}
}

// sweep retries removing the cgroups of exited processes.
func (t *processTable) sweep() {
	t.mu.Lock()
	cgs := t.pending
	t.pending = nil
	t.mu.Unlock()
	var still []ExecCgroup
	for _, cg := range cgs {
		if err := cg.Close(); err != nil {
			still = append(still, cg)
		}
	}
	t.mu.Lock()
	t.pending = append(t.pending, still...)
	t.mu.Unlock()
}

// startProcess forks spec's process and registers it. sub, when not nil,
// is subscribed before any output can be produced.
func (t *processTable) startProcess(spec *procSpec, sub *subscriber) (*process, error) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil, fmt.Errorf("agent is shutting down: %w", errdefs.ErrUnavailable)
	}
	if t.live+t.starting >= t.opts.MaxProcesses {
		t.mu.Unlock()
		return nil, fmt.Errorf("%d processes are running, the limit is %d: %w",
			t.live+t.starting, t.opts.MaxProcesses, errdefs.ErrResourceExhausted)
	}
	if spec.tag != "" {
		if old := t.byTag[spec.tag]; t.reserved[spec.tag] || (old != nil && !old.retired) {
			t.mu.Unlock()
			return nil, fmt.Errorf("a process tagged %q is running: %w", spec.tag, errdefs.ErrAlreadyExists)
		}
		t.reserved[spec.tag] = true
	}
	t.starting++
	t.seq++
	p := &process{
		seq:        t.seq,
		tag:        spec.tag,
		cfg:        spec.cfg,
		background: spec.background,
		exitCh:     make(chan exitInfo, 1),
		pidfd:      -1,
		done:       make(chan struct{}),
	}
	t.mu.Unlock()

	unreserve := func() {
		t.mu.Lock()
		t.starting--
		delete(t.reserved, spec.tag)
		t.mu.Unlock()
	}
	if sub != nil {
		p.fan.subscribe(sub)
	}
	if t.opts.Cgroups != nil {
		cg, err := t.opts.Cgroups.New(fmt.Sprintf("p%d", p.seq))
		if err != nil {
			unreserve()
			t.log.Warn("create process cgroup", "err", err)
			return nil, fmt.Errorf("create process cgroup: %w", errdefs.Class(err))
		}
		p.cg = cg
	}
	p.started = time.Now()
	if err := t.spawn(spec, p); err != nil {
		unreserve()
		if p.cg != nil {
			if cerr := p.cg.Close(); cerr != nil {
				t.log.Warn("remove process cgroup", "err", cerr)
			}
		}
		return nil, err
	}

	t.mu.Lock()
	t.starting--
	delete(t.reserved, spec.tag)
	t.live++
	t.byPID[p.pid] = p
	if p.tag != "" {
		t.byTag[p.tag] = p
	}
	t.mu.Unlock()

	go p.stdout.pump(&p.fan)
	if p.stderr != nil {
		go p.stderr.pump(&p.fan)
	}
	if spec.timeout > 0 {
		p.timer = time.AfterFunc(spec.timeout, func() {
			p.timedOut.Store(true)
			ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
			defer cancel()
			t.killTree(ctx, p)
		})
	}
	go t.run(p)
	return p, nil
}

// run waits for p to exit, drains its output, publishes the exit event and
// releases what the process held.
func (t *processTable) run(p *process) {
	info := <-p.exitCh
	exitAt := time.Now()
	p.mu.Lock()
	p.exited = true
	p.exitedAt = exitAt
	p.closePidfdLocked()
	p.mu.Unlock()
	if p.timer != nil {
		p.timer.Stop()
	}
	if !p.terminal {
		p.closeStdin()
	}
	streams := []*outStream{p.stdout}
	if p.stderr != nil {
		streams = append(streams, p.stderr)
	}
	drain(exitAt, streams...)

	exit := &agentv1.Exit{
		DurationUs: uint64(exitAt.Sub(p.started).Microseconds()),
		CpuUs:      uint64(info.cpu.Microseconds()),
		// maxrss is in KiB.
		PeakMemoryBytes: info.maxRSS * 1024,
		StdoutTruncated: p.stdout.truncated.Load(),
		StderrTruncated: p.stderr != nil && p.stderr.truncated.Load(),
	}
	var usage ExecUsage
	if p.cg != nil {
		u, err := p.cg.Usage()
		if err != nil {
			t.log.Warn("read process cgroup usage", "pid", p.pid, "err", err)
		} else {
			usage = u
			exit.CpuUs = uint64(u.CPUTime.Microseconds())
			exit.PeakMemoryBytes = u.PeakMemoryBytes
		}
	}
	switch {
	case info.lost:
		exit.Status = agentv1.ExitStatus_EXIT_STATUS_ERROR
		exit.ExitCode = -1
		exit.Error = "exit status was lost"
	case info.exited:
		exit.ExitCode = int32(info.code)
		switch {
		case info.code == 0:
			exit.Status = agentv1.ExitStatus_EXIT_STATUS_SUCCESS
		case usage.OOMKills > 0:
			// A process of the tree (say, one stage of a shell pipeline)
			// was OOM-killed and the command failed because of it.
			exit.Status = agentv1.ExitStatus_EXIT_STATUS_RESOURCE_EXCEEDED
			exit.Error = limitReason(usage, 0)
		default:
			exit.Status = agentv1.ExitStatus_EXIT_STATUS_ERROR
		}
	default:
		exit.ExitCode = -1
		exit.Signal = int32(info.signal)
		switch {
		case p.timedOut.Load():
			exit.Status = agentv1.ExitStatus_EXIT_STATUS_TIMEOUT
		case usage.OOMKills > 0 || resourceSignal(info.signal):
			exit.Status = agentv1.ExitStatus_EXIT_STATUS_RESOURCE_EXCEEDED
			exit.Error = limitReason(usage, info.signal)
		default:
			exit.Status = agentv1.ExitStatus_EXIT_STATUS_KILLED
		}
	}

	// Leave the live set before publishing, so that a caller that saw the
	// exit can reuse the tag and the slot at once.
	t.mu.Lock()
	t.live--
	p.retired = true
	p.cfg = nil
	t.retired = append(t.retired, p)
	t.mu.Unlock()

	p.fan.finish(&agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Exit{Exit: exit}})
	close(p.done)

	if p.cg != nil {
		if err := p.cg.Close(); err != nil {
			t.mu.Lock()
			t.pending = append(t.pending, p.cg)
			t.mu.Unlock()
		}
	}
}

// exitTime is when p's main process exited; it must only be called on
// retired processes.
func (p *process) exitTime() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitedAt
}

// closeStdin closes the stdin pipe (not a terminal). It is idempotent.
func (p *process) closeStdin() {
	if p.stdin == nil || p.terminal {
		return
	}
	p.closeOnce.Do(func() {
		p.stdinClosed.Store(true)
		_ = p.stdin.Close()
	})
}

// killTree kills p's whole tree: through its cgroup when it has one,
// otherwise through its process group.
func (t *processTable) killTree(ctx context.Context, p *process) {
	t.log.Debug("killing process tree", "pid", p.pid)
	if p.cg != nil {
		err := p.cg.Kill(ctx)
		if err == nil {
			t.log.Debug("killed process tree", "pid", p.pid)
			// The cgroup is empty; the group kill below is belt and braces.
			_ = p.killGroup()
			return
		}
		t.log.Warn("kill process cgroup", "pid", p.pid, "err", err)
	}
	if err := p.killGroup(); err != nil {
		t.log.Warn("kill process group", "pid", p.pid, "err", err)
	}
}

// lookup finds the process sel names. With running, an exited process is
// an error.
func (t *processTable) lookup(sel *agentv1.ProcessSelector, running bool) (*process, error) {
	var p *process
	t.mu.Lock()
	switch s := sel.GetSelector().(type) {
	case *agentv1.ProcessSelector_Pid:
		p = t.byPID[int(s.Pid)]
		if p == nil {
			t.mu.Unlock()
			return nil, fmt.Errorf("process %d: %w", s.Pid, errdefs.ErrNotFound)
		}
	case *agentv1.ProcessSelector_Tag:
		p = t.byTag[s.Tag]
		if p == nil {
			t.mu.Unlock()
			return nil, fmt.Errorf("process tagged %q: %w", s.Tag, errdefs.ErrNotFound)
		}
	default:
		t.mu.Unlock()
		return nil, invalidf("a process pid or tag is required")
	}
	retired := p.retired
	t.mu.Unlock()
	if running && retired {
		return nil, fmt.Errorf("process %d has exited: %w", p.pid, errdefs.ErrFailedPrecondition)
	}
	return p, nil
}

// forward sends sub's events with send until the exit event (sawExit),
// ctx ends or send fails. It sends a Keepalive after t.keepalive without
// events.
func (t *processTable) forward(ctx context.Context, sub *subscriber, send func(*agentv1.ProcessEvent) error) (sawExit bool, err error) {
	t.mu.Lock()
	every := t.keepalive
	t.mu.Unlock()
	keep := time.NewTimer(every)
	defer keep.Stop()
	for {
		select {
		case ev := <-sub.ch:
			if err := send(ev); err != nil {
				return false, err
			}
			if ev.GetExit() != nil {
				return true, nil
			}
		case <-keep.C:
			ka := &agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Keepalive_{Keepalive: &agentv1.ProcessEvent_Keepalive{}}}
			if err := send(ka); err != nil {
				return false, err
			}
		case <-ctx.Done():
			return false, ctx.Err()
		}
		keep.Reset(every)
	}
}

func startedEvent(pid int) *agentv1.ProcessEvent {
	return &agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Started_{Started: &agentv1.ProcessEvent_Started{Pid: uint32(pid)}}}
}

// Start runs a process and streams its events. A command that cannot be
// started (not found: exit code 127; not executable or other exec
// failures: 126) gets no Started event: the stream carries a single Exit
// event with status ERROR and the reason in its error field. Malformed
// requests fail with InvalidArgument before anything runs.
func (t *processTable) Start(ctx context.Context, req *connect.Request[agentv1.StartRequest], stream *connect.ServerStream[agentv1.StartResponse]) error {
	send := func(ev *agentv1.ProcessEvent) error {
		return stream.Send(&agentv1.StartResponse{Event: ev})
	}
	spec, err := t.resolve(req.Msg.GetConfig())
	if err != nil {
		return agentwire.ToConnect(err)
	}
	if spec.path == "" {
		return streamErr(send(startFailure(&startError{code: 127, msg: "executable file not found"})))
	}
	sub := newSubscriber()
	defer sub.leave()
	p, err := t.startProcess(spec, sub)
	if se := (*startError)(nil); errors.As(err, &se) {
		return streamErr(send(startFailure(se)))
	}
	if err != nil {
		return agentwire.ToConnect(err)
	}
	sawExit := false
	err = send(startedEvent(p.pid))
	if err == nil {
		sawExit, err = t.forward(ctx, sub, send)
	}
	if !sawExit && !spec.background {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
		defer cancel()
		t.killTree(kctx, p)
	}
	return streamErr(err)
}

// streamErr maps the error that ended a stream (its context or a failed
// send) onto a Connect error.
func streamErr(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return agentwire.ToConnect(fmt.Errorf("stream: %w", errdefs.ErrCanceled))
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return agentwire.ToConnect(fmt.Errorf("stream: %w", errdefs.ErrTimeout))
	}
	return agentwire.ToConnect(err)
}

func startFailure(se *startError) *agentv1.ProcessEvent {
	return &agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Exit{Exit: &agentv1.Exit{
		Status:   agentv1.ExitStatus_EXIT_STATUS_ERROR,
		ExitCode: int32(se.code),
		Error:    se.msg,
	}}}
}

// Connect attaches to a process. Its first event is Started with the
// process's pid (also when selected by tag), then the output produced from
// then on and the exit event. A process that exited less than
// exitRetention ago gets Started and its Exit at once.
func (t *processTable) Connect(ctx context.Context, req *connect.Request[agentv1.ConnectRequest], stream *connect.ServerStream[agentv1.ConnectResponse]) error {
	p, err := t.lookup(req.Msg.GetProcess(), false)
	if err != nil {
		return agentwire.ToConnect(err)
	}
	send := func(ev *agentv1.ProcessEvent) error {
		return stream.Send(&agentv1.ConnectResponse{Event: ev})
	}
	sub := newSubscriber()
	defer sub.leave()
	exit := p.fan.subscribe(sub)
	if err := send(startedEvent(p.pid)); err != nil {
		return streamErr(err)
	}
	if exit != nil {
		return streamErr(send(exit))
	}
	_, err = t.forward(ctx, sub, send)
	return streamErr(err)
}

// List returns the running processes, ordered by pid.
func (t *processTable) List(ctx context.Context, _ *connect.Request[agentv1.ListRequest]) (*connect.Response[agentv1.ListResponse], error) {
	t.mu.Lock()
	var ps []*process
	for _, p := range t.byPID {
		if !p.retired {
			ps = append(ps, p)
		}
	}
	infos := make([]*agentv1.ProcessInfo, 0, len(ps))
	slices.SortFunc(ps, func(a, b *process) int { return cmp.Compare(a.pid, b.pid) })
	for _, p := range ps {
		infos = append(infos, &agentv1.ProcessInfo{
			Pid:               uint32(p.pid),
			Tag:               p.tag,
			Config:            p.cfg,
			StartedAtUnixNano: p.started.UnixNano(),
		})
	}
	t.mu.Unlock()
	return connect.NewResponse(&agentv1.ListResponse{Processes: infos}), nil
}

// SendInput writes data to a process's stdin or terminal.
func (t *processTable) SendInput(ctx context.Context, req *connect.Request[agentv1.SendInputRequest]) (*connect.Response[agentv1.SendInputResponse], error) {
	p, err := t.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if err := p.writeInput(ctx, req.Msg.GetData()); err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.SendInputResponse{}), nil
}

// StreamInput writes a stream of input to one process. The first message
// selects the process (and may carry data); the others carry data.
func (t *processTable) StreamInput(ctx context.Context, stream *connect.ClientStream[agentv1.StreamInputRequest]) (*connect.Response[agentv1.StreamInputResponse], error) {
	if !stream.Receive() {
		if err := stream.Err(); err != nil {
			return nil, streamErr(err)
		}
		return nil, agentwire.ToConnect(invalidf("the first message must select a process"))
	}
	p, err := t.lookup(stream.Msg().GetProcess(), true)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	for {
		if err := p.writeInput(ctx, stream.Msg().GetData()); err != nil {
			return nil, agentwire.ToConnect(err)
		}
		if !stream.Receive() {
			break
		}
	}
	if err := stream.Err(); err != nil {
		return nil, streamErr(err)
	}
	return connect.NewResponse(&agentv1.StreamInputResponse{}), nil
}

// writeInput writes data to p's stdin, giving up when ctx ends or the
// process has not read it for stdinTimeout.
func (p *process) writeInput(ctx context.Context, data []byte) error {
	if len(data) > maxInputChunk {
		return invalidf("input message is %d bytes, the limit is %d", len(data), maxInputChunk)
	}
	if p.stdin == nil {
		return fmt.Errorf("process %d was started without stdin: %w", p.pid, errdefs.ErrFailedPrecondition)
	}
	if len(data) == 0 {
		return nil
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	return p.writeInputLocked(ctx, data)
}

// stdinTimeout bounds one input write to a process that does not read.
const stdinTimeout = time.Minute

// writePoll is how often a blocked input write checks its context.
const writePoll = 100 * time.Millisecond

func (p *process) writeInputLocked(ctx context.Context, data []byte) error {
	giveUp := time.Now().Add(stdinTimeout)
	defer p.stdin.SetWriteDeadline(time.Time{})
	for len(data) > 0 {
		if p.stdinClosed.Load() {
			return fmt.Errorf("stdin of process %d is closed: %w", p.pid, errdefs.ErrFailedPrecondition)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("write stdin: %w", errdefs.ErrCanceled)
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("process %d is not reading its input: %w", p.pid, errdefs.ErrTimeout)
		}
		_ = p.stdin.SetWriteDeadline(time.Now().Add(writePoll))
		n, err := p.stdin.Write(data)
		data = data[n:]
		switch {
		case err == nil, errors.Is(err, os.ErrDeadlineExceeded):
		case errors.Is(err, os.ErrClosed), errors.Is(err, syscall.EPIPE), errors.Is(err, syscall.EIO):
			return fmt.Errorf("stdin of process %d is closed: %w", p.pid, errdefs.ErrFailedPrecondition)
		default:
			return fmt.Errorf("write stdin of process %d: %w", p.pid, errdefs.ErrUnavailable)
		}
	}
	return nil
}

// CloseStdin closes a process's stdin; on a terminal it sends ^D (EOF for
// a reader in canonical mode). Closing a closed stdin is not an error.
func (t *processTable) CloseStdin(ctx context.Context, req *connect.Request[agentv1.CloseStdinRequest]) (*connect.Response[agentv1.CloseStdinResponse], error) {
	p, err := t.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if p.terminal {
		if err := p.writeInput(ctx, []byte(ptyEOF)); err != nil {
			return nil, agentwire.ToConnect(err)
		}
	} else {
		// Without inMu: closing unblocks a writer stuck on a full pipe.
		p.closeStdin()
	}
	return connect.NewResponse(&agentv1.CloseStdinResponse{}), nil
}

// SendSignal signals a process. SIGKILL kills its whole tree and returns
// once the tree is gone (with cgroups) or signalled.
func (t *processTable) SendSignal(ctx context.Context, req *connect.Request[agentv1.SendSignalRequest]) (*connect.Response[agentv1.SendSignalResponse], error) {
	sig := req.Msg.GetSignal()
	if sig < 1 || sig > 64 {
		return nil, agentwire.ToConnect(invalidf("signal %d is out of range 1..64", sig))
	}
	p, err := t.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if syscall.Signal(sig) == syscall.SIGKILL {
		kctx, cancel := context.WithTimeout(ctx, killTimeout)
		defer cancel()
		t.killTree(kctx, p)
		return connect.NewResponse(&agentv1.SendSignalResponse{}), nil
	}
	if err := p.signal(syscall.Signal(sig)); err != nil {
		return nil, agentwire.ToConnect(err)
	}
	return connect.NewResponse(&agentv1.SendSignalResponse{}), nil
}

// Resize changes the size of a PTY process's terminal.
func (t *processTable) Resize(ctx context.Context, req *connect.Request[agentv1.ResizeRequest]) (*connect.Response[agentv1.ResizeResponse], error) {
	sz, err := checkPtySize(req.Msg.GetSize())
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	p, err := t.lookup(req.Msg.GetProcess(), true)
	if err != nil {
		return nil, agentwire.ToConnect(err)
	}
	if !p.terminal {
		return nil, agentwire.ToConnect(fmt.Errorf("process %d has no terminal: %w", p.pid, errdefs.ErrFailedPrecondition))
	}
	if err := resizePty(p.stdin, sz); err != nil {
		return nil, agentwire.ToConnect(fmt.Errorf("resize terminal of process %d: %w", p.pid, errdefs.ErrFailedPrecondition))
	}
	return connect.NewResponse(&agentv1.ResizeResponse{}), nil
}
