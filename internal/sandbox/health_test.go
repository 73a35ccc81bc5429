package sandbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// healthLog is a HealthRecorder that keeps what it is told.
type healthLog struct {
	mu      sync.Mutex
	changes []HealthChange
}

func (l *healthLog) HealthChanged(_ context.Context, c HealthChange) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.changes = append(l.changes, c)
}

func (l *healthLog) of(id string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, c := range l.changes {
		if c.ID == id {
			out = append(out, fmt.Sprintf("%s/%d", c.Status, c.Missed))
		}
	}
	return out
}

// TestHealthPolicy: an agent that stops answering (alive: Exited stays
// open) makes its sandbox unhealthy at the first missed probe, still
// running and reported, then ended with EndAgentUnhealthy after
// HealthFailures misses in a row, on the record like the other ends; a
// healthy sandbox beside it is untouched.
func TestHealthPolicy(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ends, health := &endLog{}, &healthLog{}
	m := e.manager(Config{HealthInterval: 20 * time.Millisecond, HealthTimeout: 100 * time.Millisecond, HealthFailures: 3, Ends: ends, Health: health})
	sb, err := m.Create(ctx, Spec{Owner: "tenant"})
	if err != nil {
		t.Fatal(err)
	}
	ok, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "the first probes", func() bool {
		a, _ := m.Get(sb.ID)
		b, _ := m.Get(ok.ID)
		return a.Health.Status == HealthHealthy && b.Health.Status == HealthHealthy
	})
	if err := e.rt.Hang(sb.ID); err != nil { // alive, but not answering
		t.Fatal(err)
	}
	hung := time.Now()
	eventually(t, 5*time.Second, "unhealthy", func() bool {
		got, _ := m.Get(sb.ID)
		return got.Health.Status == HealthUnhealthy
	})
	got, _ := m.Get(sb.ID)
	if got.State != StateRunning && got.EndReason != EndAgentUnhealthy {
		t.Errorf("unhealthy sandbox is %q (end %q), want running until its misses reach the limit", got.State, got.EndReason)
	}
	eventually(t, 5*time.Second, "the end", func() bool {
		got, _ := m.Get(sb.ID)
		return got.Ended()
	})
	took := time.Since(hung)
	got, _ = m.Get(sb.ID)
	if got.State != StateFailed || got.EndReason != EndAgentUnhealthy || got.Error != agentUnhealthyError || got.Health.Missed < 3 {
		t.Errorf("ended sandbox = state %q, end %q, error %q, health %+v; want failed, %s after 3 misses", got.State, got.EndReason, got.Error, got.Health, EndAgentUnhealthy)
	}
	// Three misses: at most three intervals and three timeouts, and the
	// destroy; far less than the 5 s the waits allow.
	if took > 2*time.Second {
		t.Errorf("ended %v after the agent hung", took)
	}
	if slices.Contains(e.rt.Live(), sb.ID) {
		t.Error("the runtime still holds the ended sandbox")
	}
	if r := ends.reasons()[sb.ID]; r != EndAgentUnhealthy {
		t.Errorf("end recorded as %q, want %q", r, EndAgentUnhealthy)
	}
	if c := health.of(sb.ID); len(c) != 1 || c[0] != "unhealthy/1" {
		t.Errorf("health changes reported %v, want [unhealthy/1]", c)
	}
	if _, err := m.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"true"}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("Exec on the ended sandbox = %v, want failed precondition", err)
	}
	if b, _ := m.Get(ok.ID); b.State != StateRunning || b.Health.Status != HealthHealthy || b.Health.Missed != 0 {
		t.Errorf("healthy sandbox is %q, health %+v", b.State, b.Health)
	}
	if c := health.of(ok.ID); len(c) != 0 {
		t.Errorf("healthy sandbox's changes reported: %v", c)
	}
}

// TestHealthRecovers: an agent that misses fewer probes in a row than
// HealthFailures and then answers is healthy again, reported both ways,
// and its count starts over.
func TestHealthRecovers(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	health := &healthLog{}
	m := e.manager(Config{HealthFailures: 2, Health: health}) // no probe loop: driven by hand
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	m.mu.Lock()
	rec := m.records[sb.ID]
	m.mu.Unlock()
	miss := fmt.Errorf("probe: %w", errdefs.ErrTimeout)
	t0 := time.Now()
	m.recordHealth(ctx, rec, nil, t0)
	m.recordHealth(ctx, rec, miss, t0.Add(time.Second))
	got, _ := m.Get(sb.ID)
	if h := got.Health; got.State != StateRunning || h.Status != HealthUnhealthy || h.Missed != 1 || h.Error != "its agent did not answer in time" || !h.Since.Equal(t0.Add(time.Second)) {
		t.Fatalf("after one miss: state %q, health %+v", got.State, got.Health)
	}
	m.recordHealth(ctx, rec, nil, t0.Add(2*time.Second))
	got, _ = m.Get(sb.ID)
	if h := got.Health; got.State != StateRunning || h.Status != HealthHealthy || h.Missed != 0 || h.Error != "" {
		t.Fatalf("after an answer: state %q, health %+v", got.State, got.Health)
	}
	// One miss again does not end it: the count started over.
	m.recordHealth(ctx, rec, miss, t0.Add(3*time.Second))
	if got, _ = m.Get(sb.ID); got.State != StateRunning {
		t.Fatalf("one miss after recovering: %q", got.State)
	}
	m.recordHealth(ctx, rec, fmt.Errorf("dial: %w", errdefs.ErrUnavailable), t0.Add(4*time.Second))
	got, _ = m.Get(sb.ID)
	if got.EndReason != EndAgentUnhealthy || got.State != StateFailed || got.Health.Error != "its agent refused the connection" {
		t.Errorf("after two misses in a row: state %q, end %q, health %+v", got.State, got.EndReason, got.Health)
	}
	if c := health.of(sb.ID); !slices.Equal(c, []string{"unhealthy/1", "healthy/0", "unhealthy/1"}) {
		t.Errorf("changes reported %v", c)
	}
}
