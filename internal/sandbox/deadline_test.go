package sandbox

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// agentOf returns the agent client of sandbox id, which must be running.
func agentOf(t *testing.T, m *Manager, id string) *agentclient.Client {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	rec, ok := m.records[id]
	if !ok || rec.sb.State != StateRunning {
		t.Fatalf("sandbox %s is not running", id)
	}
	return rec.client
}

// agentDeadlineIn asks the agent of sandbox id how long until it ends the
// sandbox by itself; ok is false when it has no deadline.
func agentDeadlineIn(t *testing.T, c *agentclient.Client) (time.Duration, bool) {
	t.Helper()
	info, err := c.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.DeadlineInMs == nil {
		return 0, false
	}
	return time.Duration(info.GetDeadlineInMs()) * time.Millisecond, true
}

// wantAgentDeadline checks that the agent of sandbox id ends it
// DeadlineGrace after exp.
func wantAgentDeadline(t *testing.T, m *Manager, id, what string) {
	t.Helper()
	sb, err := m.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	left, ok := agentDeadlineIn(t, agentOf(t, m, id))
	want := time.Until(sb.ExpiresAt.Add(m.cfg.DeadlineGrace))
	if !ok || (left-want).Abs() > time.Second {
		t.Errorf("%s: the agent ends the sandbox in %v (set %v), want %v: its expiry plus the grace", what, left, ok, want.Round(time.Millisecond))
	}
}

// TestAgentDeadlineFollowsExpiry: the agent of every sandbox holds the
// sandbox's expiry plus DeadlineGrace: cold creates, claimed pool members
// (an unclaimed one holds none), after SetTimeout longer and shorter, and
// after a restart that finds the agent's deadline out of step with the
// record.
func TestAgentDeadlineFollowsExpiry(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	cfg := Config{MaxLifetime: 2 * time.Hour, DefaultTimeout: 10 * time.Minute, PoolSize: map[string]int{"other": 1}}
	m := e.manager(cfg)
	cold, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	wantAgentDeadline(t, m, cold.ID, "cold create")

	// The pool member holds no deadline until it is claimed.
	eventually(t, 10*time.Second, "the pool to fill", func() bool { return m.PoolStats()[0].Ready == 1 })
	m.mu.Lock()
	member := m.pools["other"].members[0]
	m.mu.Unlock()
	if left, ok := agentDeadlineIn(t, member.client); ok {
		t.Errorf("an unclaimed pool member's agent ends it in %v", left)
	}
	claimed, err := m.Create(ctx, Spec{Template: "other", Timeout: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if claimed.ID != member.inst.ID() {
		t.Fatalf("created %s, not the pool member %s", claimed.ID, member.inst.ID())
	}
	wantAgentDeadline(t, m, claimed.ID, "claimed")

	for _, d := range []time.Duration{time.Hour, time.Minute} {
		if _, err := m.SetTimeout(ctx, cold.ID, d); err != nil {
			t.Fatal(err)
		}
		wantAgentDeadline(t, m, cold.ID, "SetTimeout "+d.String())
	}

	// A SetTimeout cut by a crash after it told the agent: the next
	// manager gives the agent the record's deadline again.
	if _, _, err := agentOf(t, m, cold.ID).SetDeadline(ctx, time.Now().Add(90*time.Minute)); err != nil {
		t.Fatal(err)
	}
	crash(m)
	m2 := e.recovered(cfg)
	wantAgentDeadline(t, m2, cold.ID, "adopted")
}

// TestAgentDeadlineWithoutDaemon: with no manager running, a sandbox
// ends at its expiry plus the grace by its agent's own doing, its
// processes with it; the next manager records that end as expired (a
// sandbox whose agent is gone before its expiry stays agent_gone).
func TestAgentDeadlineWithoutDaemon(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	cfg := Config{DeadlineGrace: 300 * time.Millisecond}
	m := e.manager(cfg)
	short, err := m.Create(ctx, Spec{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Exec(ctx, short.ID, agentclient.ExecRequest{Shell: "sleep 300 >/dev/null 2>&1 &"}); err != nil {
		t.Fatal(err)
	}
	long, err := m.Create(ctx, Spec{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	crashed, err := m.Create(ctx, Spec{Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	inst := m.records[short.ID].inst
	m.mu.Unlock()
	crash(m)
	if err := e.rt.Crash(crashed.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inst.Exited():
		if late := time.Since(short.ExpiresAt); late < cfg.DeadlineGrace {
			t.Errorf("the agent ended its sandbox %v after its expiry, before the grace %v", late, cfg.DeadlineGrace)
		} else {
			t.Logf("ended by its agent %v after its expiry", late.Round(time.Millisecond))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the sandbox runs 10 s after its expiry with no manager")
	}

	ends := &endLog{}
	cfg.Ends = ends
	m2 := e.recovered(cfg)
	want := map[string]string{short.ID: EndExpired, crashed.ID: EndAgentGone}
	if got := ends.reasons(); !maps.Equal(got, want) {
		t.Errorf("ends recorded %v, want %v", got, want)
	}
	if sb, err := m2.Get(short.ID); err != nil || sb.State != StateStopped || sb.EndReason != EndExpired || sb.Error != "" {
		t.Errorf("the expired sandbox: %+v, %v; want stopped, expired", sb, err)
	}
	if _, err := m2.Exec(ctx, short.ID, agentclient.ExecRequest{Shell: "true"}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("exec in the expired sandbox: %v", err)
	}
	if live := e.rt.Live(); slices.Contains(live, short.ID) || !slices.Contains(live, long.ID) {
		t.Errorf("live after recovery: %v; want %s alone of the two", live, long.ID)
	}
}

// TestAgentDeadlineWhileDaemonRuns: when the agent ends its sandbox while
// the manager runs (its reaper did not get there first: here it never
// runs), the end is recorded as expired, not as a dead agent.
func TestAgentDeadlineWhileDaemonRuns(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ends := &endLog{}
	m := e.manager(Config{ReapInterval: time.Hour, DeadlineGrace: 200 * time.Millisecond, Ends: ends})
	sb, err := m.Create(ctx, Spec{Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the sandbox to end", func() bool {
		got, err := m.Get(sb.ID)
		return err == nil && got.Ended()
	})
	got, _ := m.Get(sb.ID)
	if got.State != StateStopped || got.EndReason != EndExpired {
		t.Errorf("ended by its agent at its deadline: %+v; want stopped, expired", got)
	}
	if r := ends.reasons()[sb.ID]; r != EndExpired {
		t.Errorf("end recorded as %q, want expired", r)
	}
}

// TestSetTimeoutNeedsAgent: a SetTimeout the agent does not take changes
// nothing: the agent would otherwise end the sandbox before the daemon's
// new expiry.
func TestSetTimeoutNeedsAgent(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{HealthTimeout: 200 * time.Millisecond})
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.Hang(sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.SetTimeout(ctx, sb.ID, time.Hour); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("SetTimeout with a hung agent: %v, want unavailable", err)
	}
	if got, _ := m.Get(sb.ID); !got.ExpiresAt.Equal(sb.ExpiresAt) {
		t.Errorf("the refused SetTimeout moved the expiry from %v to %v", sb.ExpiresAt, got.ExpiresAt)
	}
}
