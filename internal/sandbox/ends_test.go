package sandbox

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestAgentDeathEndsAtOnce kills the agent of a created, a claimed and an
// adopted sandbox and checks that each is failed within a second, not at
// the next health check (they are off), that operations on it fail with
// a failed precondition naming the agent's death, that it is released at
// once (nothing left in the runtime, its record file gone, its
// MaxConcurrent slot free for the next create), that its end is recorded
// as agent_died, and that it stays visible as failed.
func TestAgentDeathEndsAtOnce(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ends := &endLog{}
	cfg := Config{MaxConcurrent: 1, Ends: ends, PoolSize: map[string]int{"other": 1}}
	m1 := e.newManager(cfg)
	if err := m1.Start(ctx); err != nil {
		t.Fatal(err)
	}

	die := func(m *Manager, id string) {
		t.Helper()
		t0 := time.Now()
		if err := e.rt.Crash(id); err != nil {
			t.Fatal(err)
		}
		eventually(t, time.Second, "failed state", func() bool { return stateOf(m, id) == StateFailed })
		t.Logf("%s failed %v after its agent died", id, time.Since(t0).Round(time.Microsecond))
		_, err := m.Exec(ctx, id, agentclient.ExecRequest{Argv: []string{"true"}})
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "agent") {
			t.Errorf("exec on a sandbox whose agent died = %v, want a failed precondition naming the agent", err)
		}
		eventually(t, time.Second, "release", func() bool {
			sb, err := m.Get(id)
			return err == nil && sb.Ended()
		})
		sb, _ := m.Get(id)
		if sb.State != StateFailed || sb.EndReason != EndAgentDied || sb.Error == "" || sb.Env != nil {
			t.Errorf("after the release: %+v, want failed, agent_died, an error, no env", sb)
		}
		if slices.Contains(e.rt.Live(), id) {
			t.Errorf("%s is still held by the runtime", id)
		}
		if _, err := os.Stat(filepath.Join(e.stateDir, id+".json")); !os.IsNotExist(err) {
			t.Errorf("record file of %s kept: %v", id, err)
		}
		if got := ends.reasons()[id]; got != EndAgentDied {
			t.Errorf("end of %s recorded as %q, want %q", id, got, EndAgentDied)
		}
		if err := m.Destroy(ctx, id); err != nil {
			t.Errorf("destroy of an ended sandbox: %v", err)
		}
		if s := stateOf(m, id); s != StateFailed {
			t.Errorf("after Destroy it is %q; an ended sandbox keeps its end", s)
		}
	}

	cold, err := m1.Create(ctx, Spec{Owner: "t", Env: map[string]string{"SECRET": "x"}})
	if err != nil {
		t.Fatal(err)
	}
	die(m1, cold.ID)
	// MaxConcurrent is 1: the dead sandbox no longer holds the slot.
	eventually(t, 5*time.Second, "pool fill", func() bool { return m1.PoolStats()[0].Ready == 1 })
	claimed, err := m1.Create(ctx, Spec{Owner: "t", Template: "other"})
	if err != nil {
		t.Fatalf("create after the death: %v", err)
	}
	die(m1, claimed.ID)
	kept, err := m1.Create(ctx, Spec{Owner: "t"})
	if err != nil {
		t.Fatal(err)
	}

	// A restarted manager watches the agents it adopts.
	crash(m1)
	m2 := e.recovered(cfg)
	if s := stateOf(m2, kept.ID); s != StateRunning {
		t.Fatalf("adopted sandbox is %q", s)
	}
	die(m2, kept.ID)
	if _, err := m2.Create(ctx, Spec{Owner: "t"}); err != nil {
		t.Errorf("create after the adopted sandbox died: %v", err)
	}
}

// TestEndsRecordedAndRetained checks that every end the manager decides
// (expiry, idle timeout) is reported with its reason, that the ended
// sandbox stays visible as stopped, with its reason and time, until
// EndedRetention passes, that operations on it say it has ended, and
// that only the latest MaxEnded ends are kept.
func TestEndsRecordedAndRetained(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ends := &endLog{}
	const retention = 400 * time.Millisecond
	m := e.manager(Config{ReapInterval: 10 * time.Millisecond, EndedRetention: retention, MaxEnded: 3, Ends: ends})
	expired, err := m.Create(ctx, Spec{Owner: "t", Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	idle, err := m.Create(ctx, Spec{Owner: "t", IdleTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	deleted, err := m.Create(ctx, Spec{Owner: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, deleted.ID); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{expired.ID: EndExpired, idle.ID: EndIdle, deleted.ID: EndDeleted}
	eventually(t, 2*time.Second, "ends", func() bool {
		for id := range want {
			if sb, err := m.Get(id); err != nil || !sb.Ended() {
				return false
			}
		}
		return true
	})
	for id, reason := range want {
		sb, _ := m.Get(id)
		if sb.State != StateStopped || sb.EndReason != reason || sb.StoppedAt.IsZero() {
			t.Errorf("%s: %s %q at %v, want stopped, %q", id, sb.State, sb.EndReason, sb.StoppedAt, reason)
		}
		_, err := m.Exec(ctx, id, agentclient.ExecRequest{Argv: []string{"true"}})
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "has ended") {
			t.Errorf("exec on %s (%s) = %v, want a failed precondition saying it has ended", id, reason, err)
		}
		if _, err := m.SetTimeout(ctx, id, time.Minute); !errors.Is(err, errdefs.ErrFailedPrecondition) {
			t.Errorf("SetTimeout on ended %s = %v", id, err)
		}
	}
	// Only the manager's own ends are reported; the caller of Destroy
	// records its own.
	if got, wantEnds := ends.reasons(), map[string]string{expired.ID: EndExpired, idle.ID: EndIdle}; !maps.Equal(got, wantEnds) {
		t.Errorf("ends reported %v, want %v", got, wantEnds)
	}
	if got := m.List(Filter{Owner: "t", Live: true}); len(got) != 0 {
		t.Errorf("live filter lists %d ended sandboxes", len(got))
	}
	if got := m.List(Filter{Owner: "t"}); len(got) != 3 {
		t.Errorf("list shows %d sandboxes, want the 3 ended ones", len(got))
	}

	// MaxEnded: a fourth end pushes out the oldest.
	fourth, err := m.Create(ctx, Spec{Owner: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Destroy(ctx, fourth.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(m.List(Filter{Owner: "t"})); n != 3 {
		t.Errorf("%d ended sandboxes kept, want MaxEnded 3", n)
	}
	// Retention: then they are gone.
	eventually(t, 5*retention, "retention", func() bool { return len(m.List(Filter{})) == 0 })
	if _, err := m.Get(fourth.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Get after the retention = %v, want not found", err)
	}
}

// TestEndedRetentionValidated checks the config bounds.
func TestEndedRetentionValidated(t *testing.T) {
	for _, n := range []int{-1, maxEnded + 1} {
		cfg := Config{StateDir: t.TempDir(), MaxEnded: n}.withDefaults()
		if err := cfg.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("MaxEnded %d: %v, want invalid argument", n, err)
		}
	}
	if c := (Config{}).withDefaults(); c.EndedRetention != time.Hour || c.MaxEnded != 1000 {
		t.Errorf("defaults: retention %v, max %d", c.EndedRetention, c.MaxEnded)
	}
}
