package agentclient

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fakeAll answers the sandbox-wide process RPCs.
type fakeAll struct {
	fakeProcs
	calls int
}

func (f *fakeAll) ListAll(context.Context, *connect.Request[agentv1.ListAllRequest]) (*connect.Response[agentv1.ListAllResponse], error) {
	f.calls++
	return connect.NewResponse(&agentv1.ListAllResponse{Total: 9, Truncated: true, Processes: []*agentv1.SandboxProcess{{
		Pid: 3, Ppid: 1, Argv: []string{"sh"}, Name: "sh", Uid: 1000, User: "user", State: "S", Cgroup: "/work/c1",
		Session: 3, StartedAtUnixNano: 1e18, Tracked: true, Tag: "t", Background: true,
	}, {Pid: 4, State: "Z"}}}), nil
}

func (f *fakeAll) SignalAny(_ context.Context, req *connect.Request[agentv1.SignalAnyRequest]) (*connect.Response[agentv1.SignalAnyResponse], error) {
	f.calls++
	if req.Msg.GetPid() == 404 {
		return nil, connect.NewError(connect.CodeNotFound, errors.New("process 404: not found"))
	}
	return connect.NewResponse(&agentv1.SignalAnyResponse{}), nil
}

func (f *fakeAll) KillAll(_ context.Context, req *connect.Request[agentv1.KillAllRequest]) (*connect.Response[agentv1.KillAllResponse], error) {
	f.calls++
	if req.Msg.GetTimeoutMs() == 1000 {
		return nil, connect.NewError(connect.CodeDeadlineExceeded, errors.New("killed 2 processes, 1 still there after 1s"))
	}
	return connect.NewResponse(&agentv1.KillAllResponse{Killed: req.Msg.GetTimeoutMs() / 1000}), nil
}

func TestSandboxProcesses(t *testing.T) {
	ctx := context.Background()
	f := &fakeAll{}
	c := serveFakeProcs(t, f)
	l, err := c.ListAll(ctx)
	if err != nil || l.Total != 9 || !l.Truncated || len(l.Processes) != 2 {
		t.Fatalf("ListAll = %+v, %v", l, err)
	}
	p := l.Processes[0]
	if p.PID != 3 || p.PPID != 1 || p.Argv[0] != "sh" || p.UID != 1000 || p.User != "user" || p.State != "S" ||
		p.Cgroup != "/work/c1" || p.Session != 3 || !p.StartedAt.Equal(time.Unix(0, 1e18)) || !p.Tracked || p.Tag != "t" || !p.Background {
		t.Errorf("process %+v", p)
	}
	if !l.Processes[1].StartedAt.IsZero() {
		t.Errorf("a process without a start time: %v", l.Processes[1].StartedAt)
	}
	if err := c.SignalAny(ctx, 404, 15); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SignalAny(404): %v", err)
	}
	if n, err := c.KillAll(ctx, 5*time.Second); err != nil || n != 5 {
		t.Errorf("KillAll = %d, %v", n, err)
	}
	if _, err := c.KillAll(ctx, time.Second); !errors.Is(err, errdefs.ErrTimeout) {
		t.Errorf("KillAll past its wait: %v", err)
	}
	calls := f.calls
	for name, err := range map[string]error{
		"pid 0":     c.SignalAny(ctx, 0, 15),
		"signal 0":  c.SignalAny(ctx, 3, 0),
		"signal 65": c.SignalAny(ctx, 3, 65),
		"wait":      func() error { _, err := c.KillAll(ctx, MaxKillAllWait+time.Second); return err }(),
		"negative":  func() error { _, err := c.KillAll(ctx, -time.Second); return err }(),
	} {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: %v, want invalid argument", name, err)
		}
	}
	if f.calls != calls {
		t.Errorf("invalid calls reached the agent")
	}
}
