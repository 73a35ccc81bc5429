package agentclient

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
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
