package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestResult(t *testing.T) {
	tests := []struct {
		exit *agentv1.Exit
		want Status
	}{
		{&agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_SUCCESS}, StatusSuccess},
		{&agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_ERROR, ExitCode: 2}, StatusError},
		{&agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_TIMEOUT, ExitCode: -1, Signal: 9}, StatusTimeout},
		{&agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_RESOURCE_EXCEEDED}, StatusResourceExceeded},
		{&agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_KILLED}, StatusKilled},
		{&agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_UNSPECIFIED}, StatusError},
		{&agentv1.Exit{Status: 99}, StatusError},
	}
	for _, tt := range tests {
		if got := result(1, tt.exit); got.Status != tt.want {
			t.Errorf("status %v → %q, want %q", tt.exit.GetStatus(), got.Status, tt.want)
		}
	}
	r := result(42, &agentv1.Exit{ExitCode: -1, Signal: 15, DurationUs: 1500, CpuUs: 250, PeakMemoryBytes: 7,
		StdoutTruncated: true, Error: "x"})
	want := ExecResult{PID: 42, Status: StatusError, ExitCode: -1, Signal: 15, StdoutTruncated: true,
		Duration: 1500 * time.Microsecond, CPUTime: 250 * time.Microsecond, PeakMemoryBytes: 7, Error: "x"}
	if *r != want {
		t.Errorf("result = %+v, want %+v", *r, want)
	}
}

func TestRequestConfig(t *testing.T) {
	cfg, err := (&ExecRequest{Argv: []string{"x"}, Timeout: time.Nanosecond, Pty: &PtySize{Cols: 3, Rows: 4}, OpenStdin: true}).config()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GetTimeoutMs() != 1 || cfg.GetPty().GetCols() != 3 || cfg.GetPty().GetRows() != 4 || !cfg.GetStdin() {
		t.Errorf("config = %v", cfg)
	}
	for _, d := range []time.Duration{-time.Second, 1 << 62} {
		if _, err := (&ExecRequest{Argv: []string{"x"}, Timeout: d}).config(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("timeout %v: %v, want invalid argument", d, err)
		}
	}
}

// fakeProcs misbehaves in the ways a client must survive.
type fakeProcs struct {
	agentv1connect.UnimplementedProcessServiceHandler
	mode string
}

func (f *fakeProcs) Start(ctx context.Context, _ *connect.Request[agentv1.StartRequest], s *connect.ServerStream[agentv1.StartResponse]) error {
	started := &agentv1.StartResponse{Event: &agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Started_{Started: &agentv1.ProcessEvent_Started{Pid: 7}}}}
	switch f.mode {
	case "no exit":
		return s.Send(started)
	case "error after start":
		if err := s.Send(started); err != nil {
			return err
		}
		return connect.NewError(connect.CodeUnavailable, errors.New("agent going away"))
	case "refuse":
		return connect.NewError(connect.CodeResourceExhausted, errors.New("too many processes"))
	case "output first":
		return s.Send(&agentv1.StartResponse{Event: &agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Output_{
			Output: &agentv1.ProcessEvent_Output{Data: &agentv1.ProcessEvent_Output_Stdout{Stdout: []byte("x")}}}}})
	}
	return nil
}

func serveFakeProcs(t *testing.T, h agentv1connect.ProcessServiceHandler) *Client {
	t.Helper()
	dir, err := os.MkdirTemp("", "acl")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "s")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewProcessServiceHandler(h))
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: mux, Protocols: &protocols}
	go func() { _ = srv.Serve(ln) }()
	c := New(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	})
	t.Cleanup(func() {
		c.Close()
		_ = srv.Close()
		_ = os.RemoveAll(dir)
	})
	return c
}

func TestExecStreamFailures(t *testing.T) {
	tests := []struct {
		mode     string
		startErr error // from Start
		waitErr  error // from Wait
	}{
		{"no exit", nil, errdefs.ErrUnavailable},
		{"error after start", nil, errdefs.ErrUnavailable},
		{"refuse", errdefs.ErrResourceExhausted, nil},
		{"output first", errdefs.ErrInternal, nil},
		{"empty", errdefs.ErrUnavailable, nil},
	}
	for _, tt := range tests {
		t.Run(tt.mode, func(t *testing.T) {
			c := serveFakeProcs(t, &fakeProcs{mode: tt.mode})
			p, err := c.Start(context.Background(), ExecRequest{Argv: []string{"x"}})
			if tt.startErr != nil {
				if !errors.Is(err, tt.startErr) {
					t.Fatalf("Start: %v, want %v", err, tt.startErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Wait()
			if res != nil || !errors.Is(err, tt.waitErr) {
				t.Errorf("Wait = %+v, %v; want no result and %v", res, err, tt.waitErr)
			}
			if _, err := c.Exec(context.Background(), ExecRequest{Argv: []string{"x"}}); !errors.Is(err, tt.waitErr) {
				t.Errorf("Exec: %v, want %v", err, tt.waitErr)
			}
		})
	}
}

// fakeHandle records the per-process calls a Process handle makes. Its
// processes run until a signal or the close of their stdin (5 s at most).
type fakeHandle struct {
	agentv1connect.UnimplementedProcessServiceHandler
	noStart bool  // Start reports an exit first: the process never started
	fail    error // what every per-process call answers, when set

	mu    sync.Mutex
	calls []string
	once  sync.Once
	ended chan struct{}
}

func newFakeHandle() *fakeHandle { return &fakeHandle{ended: make(chan struct{})} }

// call records a call and returns what the fake answers it.
func (f *fakeHandle) call(format string, args ...any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	return f.fail
}

func (f *fakeHandle) recorded() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

func (f *fakeHandle) end() { f.once.Do(func() { close(f.ended) }) }

// run sends the Started event of pid, then the Exit once the process ends.
func (f *fakeHandle) run(ctx context.Context, pid uint32, send func(*agentv1.ProcessEvent) error) error {
	if err := send(&agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Started_{Started: &agentv1.ProcessEvent_Started{Pid: pid}}}); err != nil {
		return err
	}
	select {
	case <-f.ended:
	case <-time.After(5 * time.Second): // a test that never ends it fails, not hangs
	case <-ctx.Done():
		return ctx.Err()
	}
	return send(&agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Exit{Exit: &agentv1.Exit{Status: agentv1.ExitStatus_EXIT_STATUS_SUCCESS}}})
}

func (f *fakeHandle) Start(ctx context.Context, _ *connect.Request[agentv1.StartRequest], s *connect.ServerStream[agentv1.StartResponse]) error {
	send := func(ev *agentv1.ProcessEvent) error { return s.Send(&agentv1.StartResponse{Event: ev}) }
	if f.noStart {
		return send(&agentv1.ProcessEvent{Event: &agentv1.ProcessEvent_Exit{Exit: &agentv1.Exit{
			Status: agentv1.ExitStatus_EXIT_STATUS_ERROR, ExitCode: 127, Error: "no such command"}}})
	}
	return f.run(ctx, 7, send)
}

func (f *fakeHandle) Connect(ctx context.Context, req *connect.Request[agentv1.ConnectRequest], s *connect.ServerStream[agentv1.ConnectResponse]) error {
	return f.run(ctx, req.Msg.GetProcess().GetPid(), func(ev *agentv1.ProcessEvent) error {
		return s.Send(&agentv1.ConnectResponse{Event: ev})
	})
}

func (f *fakeHandle) SendInput(_ context.Context, req *connect.Request[agentv1.SendInputRequest]) (*connect.Response[agentv1.SendInputResponse], error) {
	if err := f.call("input %d %s", req.Msg.GetProcess().GetPid(), req.Msg.GetData()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&agentv1.SendInputResponse{}), nil
}

func (f *fakeHandle) StreamInput(_ context.Context, s *connect.ClientStream[agentv1.StreamInputRequest]) (*connect.Response[agentv1.StreamInputResponse], error) {
	var pid uint32
	var data []byte
	for s.Receive() {
		if p := s.Msg().GetProcess(); p != nil {
			pid = p.GetPid()
		}
		data = append(data, s.Msg().GetData()...)
	}
	if err := f.call("stream %d %s", pid, data); err != nil {
		return nil, err
	}
	return connect.NewResponse(&agentv1.StreamInputResponse{}), nil
}

func (f *fakeHandle) CloseStdin(_ context.Context, req *connect.Request[agentv1.CloseStdinRequest]) (*connect.Response[agentv1.CloseStdinResponse], error) {
	if err := f.call("close %d", req.Msg.GetProcess().GetPid()); err != nil {
		return nil, err
	}
	f.end()
	return connect.NewResponse(&agentv1.CloseStdinResponse{}), nil
}

func (f *fakeHandle) Resize(_ context.Context, req *connect.Request[agentv1.ResizeRequest]) (*connect.Response[agentv1.ResizeResponse], error) {
	if err := f.call("resize %d %dx%d", req.Msg.GetProcess().GetPid(), req.Msg.GetSize().GetCols(), req.Msg.GetSize().GetRows()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&agentv1.ResizeResponse{}), nil
}

func (f *fakeHandle) SendSignal(_ context.Context, req *connect.Request[agentv1.SendSignalRequest]) (*connect.Response[agentv1.SendSignalResponse], error) {
	if err := f.call("signal %d %d", req.Msg.GetProcess().GetPid(), req.Msg.GetSignal()); err != nil {
		return nil, err
	}
	f.end()
	return connect.NewResponse(&agentv1.SendSignalResponse{}), nil
}

// TestProcessHandle: a started or attached process's handle sends its
// input, closes its stdin, resizes its terminal and signals it, each to
// its own pid over the client that started it, and Wait returns its end.
func TestProcessHandle(t *testing.T) {
	ctx := context.Background()
	f := newFakeHandle()
	c := serveFakeProcs(t, f)
	p, err := c.Start(ctx, ExecRequest{Argv: []string{"x"}, OpenStdin: true})
	if err != nil || p.PID != 7 {
		t.Fatalf("Start = %+v, %v", p, err)
	}
	steps := []struct {
		name string
		do   func() error
	}{
		{"SendInput", func() error { return p.SendInput(ctx, []byte("ab")) }},
		{"StreamInput", func() error { return p.StreamInput(ctx, strings.NewReader("cd")) }},
		{"Resize", func() error { return p.Resize(ctx, PtySize{Cols: 3, Rows: 4}) }},
		{"Signal", func() error { return p.Signal(ctx, 15) }},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Errorf("%s: %v", s.name, err)
		}
	}
	if res, err := p.Wait(); err != nil || res.PID != 7 || res.Status != StatusSuccess {
		t.Errorf("Wait = %+v, %v", res, err)
	}
	want := []string{"input 7 ab", "stream 7 cd", "resize 7 3x4", "signal 7 15"}
	if got := f.recorded(); !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}

	// An attached process's handle is bound to the pid it attached to.
	f = newFakeHandle()
	c = serveFakeProcs(t, f)
	p, err = c.Connect(ctx, 42, nil, nil)
	if err != nil || p.PID != 42 {
		t.Fatalf("Connect = %+v, %v", p, err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Wait(); err != nil {
		t.Fatal(err)
	}
	if got, want := f.recorded(), []string{"close 42"}; !slices.Equal(got, want) {
		t.Errorf("calls of the attached handle %q, want %q", got, want)
	}

	// Exec copies its Stdin through the handle, then closes it.
	f = newFakeHandle()
	c = serveFakeProcs(t, f)
	if res, err := c.Exec(ctx, ExecRequest{Argv: []string{"x"}, Stdin: strings.NewReader("in")}); err != nil || res.Status != StatusSuccess {
		t.Fatalf("Exec = %+v, %v", res, err)
	}
	if got, want := f.recorded(), []string{"stream 7 in", "close 7"}; !slices.Equal(got, want) {
		t.Errorf("calls of Exec %q, want %q", got, want)
	}
}

// TestProcessHandleErrors: the agent's refusal reaches the holder with
// its class; a bad signal is refused before any call; and a process that
// never started has only Wait.
func TestProcessHandleErrors(t *testing.T) {
	ctx := context.Background()
	f := newFakeHandle()
	c := serveFakeProcs(t, f)
	p, err := c.Start(ctx, ExecRequest{Argv: []string{"x"}, Pty: &PtySize{Cols: 1, Rows: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.end()
	for _, sig := range []int{0, 65} {
		if err := p.Signal(ctx, sig); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Signal(%d) = %v, want invalid argument", sig, err)
		}
	}
	f.mu.Lock()
	f.fail = connect.NewError(connect.CodeNotFound, errors.New("process 7 has exited"))
	f.mu.Unlock()
	if err := p.Resize(ctx, PtySize{Cols: 5, Rows: 5}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Resize of an exited process = %v, want not found", err)
	}
	if got, want := f.recorded(), []string{"resize 7 5x5"}; !slices.Equal(got, want) {
		t.Errorf("calls %q, want %q", got, want)
	}

	f = newFakeHandle()
	f.noStart = true
	c = serveFakeProcs(t, f)
	p, err = c.Start(ctx, ExecRequest{Argv: []string{"x"}, OpenStdin: true})
	if err != nil || p.PID != 0 {
		t.Fatalf("Start of a command that cannot start = %+v, %v", p, err)
	}
	if res, err := p.Wait(); err != nil || res.ExitCode != 127 {
		t.Errorf("Wait = %+v, %v", res, err)
	}
	for name, call := range map[string]func() error{
		"SendInput":   func() error { return p.SendInput(ctx, []byte("x")) },
		"StreamInput": func() error { return p.StreamInput(ctx, strings.NewReader("x")) },
		"CloseStdin":  func() error { return p.CloseStdin(ctx) },
		"Resize":      func() error { return p.Resize(ctx, PtySize{Cols: 1, Rows: 1}) },
		"Signal":      func() error { return p.Signal(ctx, 9) },
	} {
		if err := call(); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("%s of a process that never started = %v, want failed precondition", name, err)
		}
	}
	if got := f.recorded(); len(got) != 0 {
		t.Errorf("a process that never started made calls %q", got)
	}
}
