//go:build linux

package agent

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// deadlineHarness is an agent with an End that records when it was
// called.
func deadlineHarness(t *testing.T, first time.Time) (*harness, <-chan time.Time) {
	t.Helper()
	ended := make(chan time.Time, 1)
	h := newHarness(t, func(o *Options) {
		o.End = func() { ended <- time.Now() }
		o.Deadline = first
	})
	return h, ended
}

// startSleeper runs a command that leaves a background sleeper
// and returns the sleeper's pid.
func startSleeper(t *testing.T, h *harness) int {
	t.Helper()
	res, out, _ := h.exec(t, agentclient.ExecRequest{Shell: "sleep 307 </dev/null >/dev/null 2>&1 & echo $!"})
	if res.Status != agentclient.StatusSuccess {
		t.Fatalf("exec: %+v", res)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("sleeper pid %q", out)
	}
	return pid
}

// TestDeadlineEndsSandbox: when the deadline the agent was started with
// passes, it kills every process of the sandbox (here, outside a PID
// namespace: the sessions it started, an orphan of a command that has
// exited included) and then calls End; not before.
func TestDeadlineEndsSandbox(t *testing.T) {
	t.Parallel()
	start := time.Now()
	h, ended := deadlineHarness(t, start.Add(1500*time.Millisecond))
	pid := startSleeper(t, h)
	info, err := h.c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.DeadlineInMs == nil || info.GetDeadlineInMs() <= 0 || info.GetDeadlineInMs() > 1500 {
		t.Fatalf("Info's deadline: %v; want within 1.5 s", info.DeadlineInMs)
	}
	select {
	case at := <-ended:
		if d := at.Sub(start); d < 1500*time.Millisecond {
			t.Fatalf("End called %v after start, before the deadline", d)
		} else {
			t.Logf("End called %v after start (deadline 1.5 s)", d.Round(time.Millisecond))
		}
		if !gone(pid) {
			t.Errorf("the orphaned sleeper %d outlived the deadline", pid)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("End not called 10 s after a 1.5 s deadline")
	}
	// A fired deadline cannot be moved any more.
	if _, _, err := h.c.SetDeadline(context.Background(), time.Now().Add(time.Hour)); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("SetDeadline after it fired: %v, want failed precondition", err)
	}
}

// TestSetDeadline: SetDeadline sets, moves (later and earlier) and clears
// the deadline, and Info reports it; a deadline in the past ends the
// sandbox at once.
func TestSetDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h, ended := deadlineHarness(t, time.Time{})
	if info, err := h.c.Info(ctx); err != nil || info.DeadlineInMs != nil {
		t.Fatalf("Info without a deadline: %v, %v", info, err)
	}
	// Set, then move it later: the first time passes without an end.
	left, ok, err := h.c.SetDeadline(ctx, time.Now().Add(500*time.Millisecond))
	if err != nil || !ok || left <= 0 || left > 500*time.Millisecond {
		t.Fatalf("SetDeadline: %v %v %v", left, ok, err)
	}
	if left, ok, err = h.c.SetDeadline(ctx, time.Now().Add(time.Hour)); err != nil || !ok || left < 59*time.Minute {
		t.Fatalf("SetDeadline an hour ahead: %v %v %v", left, ok, err)
	}
	select {
	case <-ended:
		t.Fatal("ended at a deadline that had been moved later")
	case <-time.After(time.Second):
	}
	if info, err := h.c.Info(ctx); err != nil || info.GetDeadlineInMs() < (59*time.Minute).Milliseconds() {
		t.Fatalf("Info after the move: %v, %v", info, err)
	}
	// Clear it, then a bad request.
	if _, ok, err := h.c.SetDeadline(ctx, time.Time{}); err != nil || ok {
		t.Fatalf("clearing: %v %v", ok, err)
	}
	if info, err := h.c.Info(ctx); err != nil || info.DeadlineInMs != nil {
		t.Fatalf("Info after clearing: %v, %v", info, err)
	}
	raw := agentv1connect.NewAgentServiceClient(h.srv.http, "http://agent")
	if _, err := raw.SetDeadline(ctx, connect.NewRequest(&agentv1.SetDeadlineRequest{EndAtUnixNano: -1})); connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("a negative deadline: %v, want invalid argument", err)
	}
	// Moved earlier, into the past: the end comes at once.
	pid := startSleeper(t, h)
	t0 := time.Now()
	if _, _, err := h.c.SetDeadline(ctx, t0.Add(-time.Second)); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-ended:
		t.Logf("End called %v after a deadline in the past was set", at.Sub(t0).Round(time.Millisecond))
		if !gone(pid) {
			t.Errorf("the sleeper %d outlived the deadline", pid)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("End not called after a deadline in the past was set")
	}
}

// TestDeadlineNeedsEnd: an agent without End holds no deadline: New
// refuses a Deadline and SetDeadline answers not supported; Close stops a
// deadline that has not fired.
func TestDeadlineNeedsEnd(t *testing.T) {
	t.Parallel()
	if _, err := New(Options{Root: t.TempDir(), Users: map[string]User{"user": {Name: "user"}}, Deadline: time.Now()}); err == nil {
		t.Error("New took a Deadline without End")
	}
	h := newHarness(t, nil)
	if _, _, err := h.c.SetDeadline(context.Background(), time.Now().Add(time.Minute)); !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("SetDeadline without End: %v, want not supported", err)
	}

	ended := make(chan struct{}, 1)
	a, err := New(Options{Root: t.TempDir(), Users: map[string]User{"user": {Name: "user"}},
		End: func() { ended <- struct{}{} }, Deadline: time.Now().Add(300 * time.Millisecond)})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ended:
		t.Error("a closed agent ended its sandbox at the deadline")
	case <-time.After(time.Second):
	}
}

// TestBootClock: the deadline's clock is CLOCK_BOOTTIME, which runs at
// the pace of the monotonic clock (they differ only by suspends).
func TestBootClock(t *testing.T) {
	b0, m0 := bootNow(), time.Now()
	time.Sleep(50 * time.Millisecond)
	db, dm := bootNow()-b0, time.Since(m0)
	if diff := (db - dm).Abs(); diff > 20*time.Millisecond {
		t.Errorf("boot clock advanced %v while the monotonic clock advanced %v", db, dm)
	}
}
