package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

func poolReady(m *Manager, template string) int {
	for _, ps := range m.PoolStats() {
		if ps.Template == template {
			return ps.Ready
		}
	}
	return -1
}

func TestPoolClaimAndRefill(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{PoolSize: map[string]int{"host": 2}, MaxConcurrent: 10})
	eventually(t, 5*time.Second, "pool fill", func() bool { return poolReady(m, "host") == 2 })
	if n := len(m.List(Filter{})); n != 0 {
		t.Errorf("pool members are visible as sandboxes: %d", n)
	}

	// From now on a cold create is slow; a claim must not wait for it.
	const delay = 300 * time.Millisecond
	e.rt.SetCreateDelay(delay)
	creates := e.rt.Creates()
	start := time.Now()
	sb, err := m.Create(ctx, Spec{Metadata: map[string]string{"k": "v"}, Env: map[string]string{"A": "1"}})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took >= delay/2 {
		t.Errorf("claim took %v: it waited for a runtime create", took)
	}
	if e.rt.Creates() != creates {
		t.Errorf("claim called runtime Create")
	}
	if sb.State != StateRunning || sb.Metadata["k"] != "v" || sb.Env["A"] != "1" {
		t.Errorf("claimed sandbox = %+v", sb)
	}
	if _, err := os.Stat(filepath.Join(e.stateDir, sb.ID+".json")); err != nil {
		t.Errorf("claim wrote no state file: %v", err)
	}
	if time.Since(sb.CreatedAt) > time.Second {
		t.Errorf("CreatedAt %v is the pool member's creation, not the claim", sb.CreatedAt)
	}
	// The claimed sandbox works.
	if _, err := m.Stat(ctx, sb.ID, "/"); err != nil && !errors.Is(err, errdefs.ErrNotSupported) {
		t.Errorf("Stat on claimed sandbox: %v", err)
	}

	// Non-default limits never come from the pool.
	start = time.Now()
	cold, err := m.Create(ctx, Spec{Limits: runtime.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < delay || cold.Limits.MemoryBytes != 256<<20 {
		t.Errorf("create with custom limits took %v (limits %+v), want a cold create", time.Since(start), cold.Limits)
	}

	// The pool refills in the background.
	eventually(t, 5*time.Second, "pool refill", func() bool { return poolReady(m, "host") == 2 })

	// Claimed sandboxes count against MaxConcurrent; pool members do not.
	m.mu.Lock()
	active := m.active
	m.mu.Unlock()
	if active != 2 {
		t.Errorf("active = %d, want 2 (pool members excluded)", active)
	}
}

func TestPoolSkipsDeadMember(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	m := e.manager(Config{PoolSize: map[string]int{"host": 1}})
	eventually(t, 5*time.Second, "pool fill", func() bool { return poolReady(m, "host") == 1 })
	m.mu.Lock()
	dead := m.pools["host"].members[0].inst.ID()
	m.mu.Unlock()
	if err := e.rt.Crash(dead); err != nil {
		t.Fatal(err)
	}
	sb, err := m.Create(ctx, Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if sb.ID == dead {
		t.Fatal("handed out a pool member whose agent is dead")
	}
	for _, id := range e.rt.Live() {
		if id == dead {
			t.Error("dead pool member not destroyed")
		}
	}
}

func TestPoolBackoff(t *testing.T) {
	e := newEnv(t)
	e.rt.SetCreateError(fmt.Errorf("injected: %w", errdefs.ErrUnavailable))
	start := time.Now()
	m := e.manager(Config{PoolSize: map[string]int{"host": 1}})
	eventually(t, 5*time.Second, "failures", func() bool { return m.PoolStats()[0].Failures >= 3 })
	// Three failures are separated by backoffs of 100 and 200 ms.
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("3 failures in %v: the filler does not back off", d)
	}
	e.rt.SetCreateError(nil)
	eventually(t, 5*time.Second, "recovery", func() bool { return poolReady(m, "host") == 1 })
	if f := m.PoolStats()[0].Failures; f != 0 {
		t.Errorf("failures = %d after success", f)
	}
}

func TestPoolRecycle(t *testing.T) {
	e := newEnv(t)
	m := e.manager(Config{PoolSize: map[string]int{"host": 1}, ReapInterval: 10 * time.Millisecond})
	eventually(t, 5*time.Second, "pool fill", func() bool { return poolReady(m, "host") == 1 })
	m.mu.Lock()
	pm := m.pools["host"].members[0]
	first := pm.inst.ID()
	pm.created = time.Now().Add(-25 * time.Hour) // older than MaxLifetime
	m.mu.Unlock()
	eventually(t, 5*time.Second, "recycle", func() bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		ms := m.pools["host"].members
		return len(ms) == 1 && ms[0].inst.ID() != first
	})
	eventually(t, 5*time.Second, "old member destroyed", func() bool {
		for _, id := range e.rt.Live() {
			if id == first {
				return false
			}
		}
		return true
	})
}

// limitedSource is a template with its own default limits.
type limitedSource struct {
	staticSource
	limits runtime.Limits
}

func (s limitedSource) Limits() runtime.Limits { return s.limits }

// TestTemplateLimits checks that a template's limits fill a request's
// unset fields before the daemon's defaults, that the request still wins,
// that the maxima still apply, and that the template's pool is made with
// its limits so that a default request claims from it.
func TestTemplateLimits(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	tl := runtime.Limits{CPUs: 0.5, MemoryBytes: 256 << 20}
	for _, src := range []limitedSource{
		{staticSource{"small"}, tl},
		{staticSource{"huge"}, runtime.Limits{MemoryBytes: 1 << 40}},
	} {
		if err := e.templates.Replace(src); err != nil {
			t.Fatal(err)
		}
	}
	cfg := Config{PoolSize: map[string]int{"small": 1}, MaxConcurrent: 10,
		DefaultLimits: runtime.Limits{CPUs: 1, MemoryBytes: 512 << 20, Pids: 100, DiskBytes: 1 << 30, NoFile: 1024}}
	m := e.manager(cfg)
	eventually(t, 5*time.Second, "pool fill", func() bool { return poolReady(m, "small") == 1 })

	want := runtime.Limits{CPUs: 0.5, MemoryBytes: 256 << 20, Pids: 100, DiskBytes: 1 << 30, NoFile: 1024}
	creates := e.rt.Creates()
	sb, err := m.Create(ctx, Spec{Template: "small"})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Limits != want {
		t.Errorf("limits = %+v, want the template's over the defaults %+v", sb.Limits, want)
	}
	if e.rt.Creates() != creates {
		t.Error("a request with the template's default limits did not claim from its pool")
	}

	sb, err = m.Create(ctx, Spec{Template: "small", Limits: runtime.Limits{MemoryBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if sb.Limits.MemoryBytes != 128<<20 || sb.Limits.CPUs != 0.5 {
		t.Errorf("limits = %+v, want the request's memory and the template's CPUs", sb.Limits)
	}
	if sb, err := m.Create(ctx, Spec{Template: "other"}); err != nil || sb.Limits != cfg.DefaultLimits {
		t.Errorf("a template without limits: %+v, %v; want the defaults", sb.Limits, err)
	}
	if _, err := m.Create(ctx, Spec{Template: "huge"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a template above the maximum: %v, want ErrInvalidArgument", err)
	}
}
