package agentclient

import (
	"context"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// SandboxProcess is one process of the sandbox, as ListAll reports it.
type SandboxProcess struct {
	PID, PPID int
	// Argv is the command line, empty for a zombie; ArgvTruncated is set
	// when the agent cut it (64 arguments, 4 KiB, 1 MiB for the list).
	Argv          []string
	ArgvTruncated bool
	// Name is the executable's name as the kernel keeps it (15 bytes).
	Name string
	UID  int
	// User is the account name of UID, "" when the agent does not know it.
	User string
	// State is the /proc state letter (R, S, D, T, t, Z, X, I).
	State string
	// Cgroup is the process's cgroup as seen from inside the sandbox
	// (/work/cN for the Nth process tree the agent started).
	Cgroup string
	// Session is the pid of the started process whose tree holds this one
	// (each leads its own session).
	Session   int
	StartedAt time.Time
	// Tracked is set for the processes the agent started itself and still
	// runs; Tag and Background are theirs.
	Tracked    bool
	Tag        string
	Background bool
}

// ProcessList is what ListAll returns.
type ProcessList struct {
	Processes []SandboxProcess
	// Total counts every process of the sandbox (the agent excluded),
	// those left out too; Truncated is set when some were.
	Total     int
	Truncated bool
}

// ListAll lists every process of the sandbox but the agent, whoever
// started it, ordered by pid.
func (c *Client) ListAll(ctx context.Context) (*ProcessList, error) {
	res, err := c.proc.ListAll(ctx, connect.NewRequest(&agentv1.ListAllRequest{}))
	if err != nil {
		return nil, agentwire.FromConnect(err)
	}
	out := &ProcessList{Total: int(res.Msg.GetTotal()), Truncated: res.Msg.GetTruncated(),
		Processes: make([]SandboxProcess, 0, len(res.Msg.GetProcesses()))}
	for _, p := range res.Msg.GetProcesses() {
		sp := SandboxProcess{
			PID: int(p.GetPid()), PPID: int(p.GetPpid()),
			Argv: p.GetArgv(), ArgvTruncated: p.GetArgvTruncated(),
			Name: p.GetName(), UID: int(p.GetUid()), User: p.GetUser(), State: p.GetState(),
			Cgroup: p.GetCgroup(), Session: int(p.GetSession()),
			Tracked: p.GetTracked(), Tag: p.GetTag(), Background: p.GetBackground(),
		}
		if ns := p.GetStartedAtUnixNano(); ns != 0 {
			sp.StartedAt = time.Unix(0, ns)
		}
		out.Processes = append(out.Processes, sp)
	}
	return out, nil
}

// SignalAny sends a signal (1..64) to any process of the sandbox by pid;
// for one the agent started, SIGKILL kills its whole tree.
func (c *Client) SignalAny(ctx context.Context, pid, signal int) error {
	if pid <= 0 || pid > math.MaxUint32 {
		return fmt.Errorf("pid %d: %w", pid, errdefs.ErrInvalidArgument)
	}
	if signal < 1 || signal > 64 {
		return fmt.Errorf("signal %d: %w", signal, errdefs.ErrInvalidArgument)
	}
	_, err := c.proc.SignalAny(ctx, connect.NewRequest(&agentv1.SignalAnyRequest{Pid: uint32(pid), Signal: int32(signal)}))
	return agentwire.FromConnect(err)
}

// MaxKillAllWait is the longest wait KillAll may ask the agent for.
const MaxKillAllWait = 60 * time.Second

// KillAll kills every process of the sandbox but the agent and returns
// how many it killed once all are gone (reaped), or an errdefs.ErrTimeout
// error when some are still there after wait (0: the agent's default,
// 10 s; at most MaxKillAllWait).
func (c *Client) KillAll(ctx context.Context, wait time.Duration) (int, error) {
	if wait < 0 || wait > MaxKillAllWait {
		return 0, fmt.Errorf("kill-all wait %v is not within 0..%v: %w", wait, MaxKillAllWait, errdefs.ErrInvalidArgument)
	}
	res, err := c.proc.KillAll(ctx, connect.NewRequest(&agentv1.KillAllRequest{TimeoutMs: uint32(wait.Milliseconds())}))
	if err != nil {
		return 0, agentwire.FromConnect(err)
	}
	return int(res.Msg.GetKilled()), nil
}
