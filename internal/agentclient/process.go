package agentclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Status is how a process ended. The values are those of the public API.
type Status string

// The statuses of an ended process.
const (
	// StatusSuccess: exited with code 0.
	StatusSuccess Status = "success"
	// StatusError: exited with a non-zero code, or could not be started.
	StatusError Status = "error"
	// StatusTimeout: killed because its timeout elapsed.
	StatusTimeout Status = "timeout"
	// StatusResourceExceeded: killed for exceeding a resource limit.
	StatusResourceExceeded Status = "resource_exceeded"
	// StatusKilled: killed by a signal.
	StatusKilled Status = "killed"
)

// PtySize is the size of a terminal in character cells.
type PtySize struct {
	Cols, Rows uint16
}

// ExecRequest describes a process to run. Exactly one of Argv and Shell
// must be set.
type ExecRequest struct {
	// Argv is the command; Argv[0] is looked up in the child's PATH unless
	// it contains a slash.
	Argv []string
	// Shell is a command line run as `/bin/sh -c Shell`.
	Shell string
	// Cwd is the working directory; relative paths are relative to the
	// user's home, which is also the default.
	Cwd string
	// User is "user" (the default) or "root".
	User string
	// Tag names the process for later calls; unique among running ones.
	Tag string
	// Env is added to (and overrides) the sandbox's base environment.
	Env map[string]string
	// Timeout kills the whole process tree after this long; 0 means none.
	Timeout time.Duration
	// Stdin, when set, is copied to the process, whose stdin is then
	// closed. Without it stdin is /dev/null (or, with Pty, an idle
	// terminal).
	Stdin io.Reader
	// OpenStdin keeps stdin open for SendInput when Stdin is nil (Start
	// only; Exec would never finish).
	OpenStdin bool
	// Pty runs the process on a terminal of this size; its output all
	// arrives on Stdout.
	Pty *PtySize
	// Background keeps the process running when the stream that started
	// it ends (see Start).
	Background bool
	// OutputLimit caps the bytes forwarded per output stream; 0 means the
	// agent's maximum. The rest is discarded and reported as truncated.
	OutputLimit uint64
	// Stdout and Stderr receive the output; nil discards it.
	Stdout, Stderr io.Writer
}

// ExecResult is how a process ended.
type ExecResult struct {
	// PID is the process's pid in the sandbox; 0 if it never started.
	PID    int
	Status Status
	// ExitCode is the exit code, or -1 when killed by a signal. A command
	// that could not be started has 127 (not found) or 126.
	ExitCode int
	// Signal is the signal that killed the process, 0 if it exited.
	Signal                           int
	StdoutTruncated, StderrTruncated bool
	Duration                         time.Duration
	// CPUTime is user plus system time of the process tree.
	CPUTime         time.Duration
	PeakMemoryBytes uint64
	// Error says why the process could not be started, if it could not.
	Error string
}

// ProcessInfo describes a running process, as List reports it.
type ProcessInfo struct {
	PID        int
	Tag        string
	Argv       []string
	Shell      string
	Cwd        string
	User       string
	Pty        bool
	Background bool
	StartedAt  time.Time
}

// Process is a started (or attached) process: a handle bound to its pid
// and to the client that started it, so that its holder feeds its stdin,
// resizes its terminal, signals it and waits for it without looking
// anything up again. Its output is copied to the writers given when it
// was started until its exit; Wait returns the result. A process that
// never started (PID 0) has only Wait: its other methods fail with
// errdefs.ErrFailedPrecondition.
type Process struct {
	// PID is the process's pid in the sandbox; 0 if it never started
	// (then Wait reports why).
	PID int

	c    *Client
	done chan struct{}
	res  *ExecResult
	err  error
}

// started is the error of a call on a process that never started.
func (p *Process) started() error {
	if p.PID == 0 {
		return fmt.Errorf("the process did not start: %w", errdefs.ErrFailedPrecondition)
	}
	return nil
}

// SendInput writes data (at most 1 MiB) to the process's stdin or
// terminal (see Client.SendInput).
func (p *Process) SendInput(ctx context.Context, data []byte) error {
	if err := p.started(); err != nil {
		return err
	}
	return p.c.SendInput(ctx, p.PID, data)
}

// StreamInput copies r to the process's stdin or terminal until r's EOF;
// it does not close stdin (see Client.StreamInput).
func (p *Process) StreamInput(ctx context.Context, r io.Reader) error {
	if err := p.started(); err != nil {
		return err
	}
	return p.c.StreamInput(ctx, p.PID, r)
}

// CloseStdin closes the process's stdin (on a terminal it sends ^D).
func (p *Process) CloseStdin(ctx context.Context) error {
	if err := p.started(); err != nil {
		return err
	}
	return p.c.CloseStdin(ctx, p.PID)
}

// Resize changes the size of the process's terminal.
func (p *Process) Resize(ctx context.Context, size PtySize) error {
	if err := p.started(); err != nil {
		return err
	}
	return p.c.Resize(ctx, p.PID, size)
}

// Signal sends a signal (1..64) to the process; SIGKILL kills its tree.
func (p *Process) Signal(ctx context.Context, signal int) error {
	if err := p.started(); err != nil {
		return err
	}
	return p.c.Signal(ctx, p.PID, signal)
}

// Wait blocks until the process's exit event arrived (or the stream
// failed) and returns the result. When writing output failed, Wait returns
// the result together with that error. A stream that ends without an exit
// event is an errdefs.ErrUnavailable error, never a result.
func (p *Process) Wait() (*ExecResult, error) {
	<-p.done
	return p.res, p.err
}

// Exec runs a process to completion: it starts it, copies req.Stdin to it
// (then closes its stdin), streams its output to req.Stdout and
// req.Stderr and returns its result. A command that cannot be started is
// a result with StatusError, not an error. Cancelling ctx kills the
// process (unless req.Background). Like os/exec, Exec waits for the copy
// of req.Stdin to end, so a Stdin that blocks forever blocks Exec.
func (c *Client) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	p, err := c.Start(ctx, req)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	var inErr error
	if req.Stdin != nil && p.PID != 0 {
		wg.Go(func() { inErr = p.copyStdin(ctx, req.Stdin) })
	}
	res, err := p.Wait()
	wg.Wait()
	if err == nil && inErr != nil {
		// The process may have missed part of its input.
		err = inErr
	}
	return res, err
}

// copyStdin sends r to the process's stdin and closes it. Failures
// because the process exited (or closed its stdin) first are not errors.
func (p *Process) copyStdin(ctx context.Context, r io.Reader) error {
	err := p.StreamInput(ctx, r)
	if err == nil {
		err = p.CloseStdin(ctx)
	}
	if errors.Is(err, errdefs.ErrFailedPrecondition) || errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return err
}

// Start starts a process and returns once the agent reported its pid; its
// output is copied to req.Stdout and req.Stderr in the background. ctx
// bounds the stream that carries the output: when it ends before the
// exit, a process without req.Background is killed, and a background one
// keeps running (attach again with Connect). Start does not copy
// req.Stdin; use SendInput/StreamInput (the process is started with an
// open stdin when req.Stdin is set or req.OpenStdin).
func (c *Client) Start(ctx context.Context, req ExecRequest) (*Process, error) {
	cfg, err := req.config()
	if err != nil {
		return nil, err
	}
	stream, err := c.proc.Start(ctx, connect.NewRequest(&agentv1.StartRequest{Config: cfg}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return attach(c, stream, req.Stdout, req.Stderr)
}

// Connect attaches to a running (or recently exited) process: output from
// now on goes to stdout and stderr (nil discards it), and Wait returns its
// result. Ending ctx detaches without killing the process.
func (c *Client) Connect(ctx context.Context, pid int, stdout, stderr io.Writer) (*Process, error) {
	sel, err := pidSelector(pid)
	if err != nil {
		return nil, err
	}
	stream, err := c.proc.Connect(ctx, connect.NewRequest(&agentv1.ConnectRequest{Process: sel}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	return attach(c, stream, stdout, stderr)
}

// eventStream is what Start and Connect streams have in common.
type eventStream interface {
	Receive() bool
	Err() error
	Close() error
}

type eventMsg interface{ GetEvent() *agentv1.ProcessEvent }

// attach waits for the first event (Started, or the Exit of a process
// that could not start) and copies the rest in the background. The
// process is bound to c, the client whose stream it is.
func attach[M eventMsg, S interface {
	eventStream
	Msg() M
}](c *Client, stream S, stdout, stderr io.Writer) (*Process, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	p := &Process{c: c, done: make(chan struct{})}
	if !stream.Receive() {
		err := endOfStream(stream.Err())
		_ = stream.Close()
		return nil, err
	}
	ev := stream.Msg().GetEvent()
	switch {
	case ev.GetStarted() != nil:
		p.PID = int(ev.GetStarted().GetPid())
	case ev.GetExit() != nil:
		p.res = result(0, ev.GetExit())
		_ = stream.Close()
		close(p.done)
		return p, nil
	default:
		_ = stream.Close()
		return nil, fmt.Errorf("agent: stream did not start with the process's pid: %w", errdefs.ErrInternal)
	}
	go func() {
		defer close(p.done)
		defer stream.Close()
		var werr error
		write := func(w io.Writer, b []byte) {
			if werr == nil {
				if _, err := w.Write(b); err != nil {
					werr = fmt.Errorf("write process output: %w", err)
				}
			}
		}
		for stream.Receive() {
			ev := stream.Msg().GetEvent()
			if out := ev.GetOutput(); out != nil {
				if b := out.GetStdout(); b != nil {
					write(stdout, b)
				}
				if b := out.GetStderr(); b != nil {
					write(stderr, b)
				}
			}
			if exit := ev.GetExit(); exit != nil {
				p.res, p.err = result(p.PID, exit), werr
				return
			}
		}
		p.err = endOfStream(stream.Err())
	}()
	return p, nil
}

// endOfStream is the error of a stream that ended before its exit event.
func endOfStream(err error) error {
	if err == nil || errors.Is(err, io.EOF) {
		return fmt.Errorf("agent: process stream ended without an exit event: %w", errdefs.ErrUnavailable)
	}
	return agentwire.FromConnect(err)
}

func result(pid int, e *agentv1.Exit) *ExecResult {
	r := &ExecResult{
		PID:             pid,
		ExitCode:        int(e.GetExitCode()),
		Signal:          int(e.GetSignal()),
		StdoutTruncated: e.GetStdoutTruncated(),
		StderrTruncated: e.GetStderrTruncated(),
		Duration:        time.Duration(e.GetDurationUs()) * time.Microsecond,
		CPUTime:         time.Duration(e.GetCpuUs()) * time.Microsecond,
		PeakMemoryBytes: e.GetPeakMemoryBytes(),
		Error:           e.GetError(),
	}
	switch e.GetStatus() {
	case agentv1.ExitStatus_EXIT_STATUS_SUCCESS:
		r.Status = StatusSuccess
	case agentv1.ExitStatus_EXIT_STATUS_TIMEOUT:
		r.Status = StatusTimeout
	case agentv1.ExitStatus_EXIT_STATUS_RESOURCE_EXCEEDED:
		r.Status = StatusResourceExceeded
	case agentv1.ExitStatus_EXIT_STATUS_KILLED:
		r.Status = StatusKilled
	default:
		// ERROR, and anything this client does not know: never a success.
		r.Status = StatusError
	}
	return r
}

func (req *ExecRequest) config() (*agentv1.ProcessConfig, error) {
	if req.Timeout < 0 {
		return nil, fmt.Errorf("timeout %v is negative: %w", req.Timeout, errdefs.ErrInvalidArgument)
	}
	ms := (req.Timeout + time.Millisecond - 1) / time.Millisecond
	if ms > math.MaxUint32 {
		return nil, fmt.Errorf("timeout %v is too long: %w", req.Timeout, errdefs.ErrInvalidArgument)
	}
	cfg := &agentv1.ProcessConfig{
		Argv:             req.Argv,
		Shell:            req.Shell,
		Cwd:              req.Cwd,
		Env:              req.Env,
		User:             req.User,
		TimeoutMs:        uint32(ms),
		Stdin:            req.Stdin != nil || req.OpenStdin,
		Tag:              req.Tag,
		Background:       req.Background,
		OutputLimitBytes: req.OutputLimit,
	}
	if req.Pty != nil {
		cfg.Pty = &agentv1.PtySize{Cols: uint32(req.Pty.Cols), Rows: uint32(req.Pty.Rows)}
	}
	return cfg, nil
}

func pidSelector(pid int) (*agentv1.ProcessSelector, error) {
	if pid <= 0 || pid > math.MaxUint32 {
		return nil, fmt.Errorf("pid %d: %w", pid, errdefs.ErrInvalidArgument)
	}
	return &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Pid{Pid: uint32(pid)}}, nil
}

// inputChunk is the size of the messages StreamInput sends.
const inputChunk = 64 << 10

// SendInput writes data (at most 1 MiB) to a process's stdin or terminal.
func (c *Client) SendInput(ctx context.Context, pid int, data []byte) error {
	sel, err := pidSelector(pid)
	if err != nil {
		return err
	}
	_, err = c.proc.SendInput(ctx, connect.NewRequest(&agentv1.SendInputRequest{Process: sel, Data: data}))
	return agentwire.FromConnect(err)
}

// StreamInput copies r to a process's stdin or terminal until r's EOF. It
// does not close stdin.
func (c *Client) StreamInput(ctx context.Context, pid int, r io.Reader) error {
	sel, err := pidSelector(pid)
	if err != nil {
		return err
	}
	stream := c.proc.StreamInput(ctx)
	sendErr := stream.Send(&agentv1.StreamInputRequest{Process: sel})
	buf := make([]byte, inputChunk)
	var readErr error
	for sendErr == nil {
		n, err := r.Read(buf)
		if n > 0 {
			sendErr = stream.Send(&agentv1.StreamInputRequest{Data: buf[:n]})
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = fmt.Errorf("read process input: %w", err)
			}
			break
		}
	}
	// A failed Send means the agent ended the stream; its reason comes
	// with the response.
	_, err = stream.CloseAndReceive()
	if err != nil {
		return agentwire.FromConnect(err)
	}
	if sendErr != nil {
		return fmt.Errorf("agent: send input: %w: %v", errdefs.ErrUnavailable, sendErr)
	}
	return readErr
}

// CloseStdin closes a process's stdin (on a terminal it sends ^D).
func (c *Client) CloseStdin(ctx context.Context, pid int) error {
	sel, err := pidSelector(pid)
	if err != nil {
		return err
	}
	_, err = c.proc.CloseStdin(ctx, connect.NewRequest(&agentv1.CloseStdinRequest{Process: sel}))
	return agentwire.FromConnect(err)
}

// Signal sends a signal (1..64) to a process; SIGKILL kills its tree.
func (c *Client) Signal(ctx context.Context, pid, signal int) error {
	sel, err := pidSelector(pid)
	if err != nil {
		return err
	}
	if signal < 1 || signal > 64 {
		return fmt.Errorf("signal %d: %w", signal, errdefs.ErrInvalidArgument)
	}
	_, err = c.proc.SendSignal(ctx, connect.NewRequest(&agentv1.SendSignalRequest{Process: sel, Signal: int32(signal)}))
	return agentwire.FromConnect(err)
}

// Resize changes the size of a PTY process's terminal.
func (c *Client) Resize(ctx context.Context, pid int, size PtySize) error {
	sel, err := pidSelector(pid)
	if err != nil {
		return err
	}
	_, err = c.proc.Resize(ctx, connect.NewRequest(&agentv1.ResizeRequest{
		Process: sel,
		Size:    &agentv1.PtySize{Cols: uint32(size.Cols), Rows: uint32(size.Rows)},
	}))
	return agentwire.FromConnect(err)
}

// List returns the running processes, ordered by pid.
func (c *Client) List(ctx context.Context) ([]ProcessInfo, error) {
	res, err := c.proc.List(ctx, connect.NewRequest(&agentv1.ListRequest{}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	out := make([]ProcessInfo, 0, len(res.Msg.GetProcesses()))
	for _, pi := range res.Msg.GetProcesses() {
		cfg := pi.GetConfig()
		out = append(out, ProcessInfo{
			PID:        int(pi.GetPid()),
			Tag:        pi.GetTag(),
			Argv:       cfg.GetArgv(),
			Shell:      cfg.GetShell(),
			Cwd:        cfg.GetCwd(),
			User:       cfg.GetUser(),
			Pty:        cfg.GetPty() != nil,
			Background: cfg.GetBackground(),
			StartedAt:  time.Unix(0, pi.GetStartedAtUnixNano()),
		})
	}
	return out, nil
}
