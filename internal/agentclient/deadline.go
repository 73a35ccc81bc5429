package agentclient

import (
	"context"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
)

// SetDeadline tells the agent when to end its sandbox by itself (kill
// every process, then exit), should nothing have ended it before: at is
// wall-clock time, the zero time clears the deadline. It returns how long
// the agent will wait, as it counts it (ok false when cleared). An agent
// that cannot end its sandbox answers errdefs.ErrNotSupported.
func (c *Client) SetDeadline(ctx context.Context, at time.Time) (left time.Duration, ok bool, err error) {
	var n int64
	if !at.IsZero() {
		n = at.UnixNano()
	}
	res, err := c.info.SetDeadline(ctx, connect.NewRequest(&agentv1.SetDeadlineRequest{EndAtUnixNano: n}))
	if err != nil {
		return 0, false, agentwire.FromConnect(err)
	}
	if res.Msg.DeadlineInMs == nil {
		return 0, false, nil
	}
	return time.Duration(res.Msg.GetDeadlineInMs()) * time.Millisecond, true, nil
}
