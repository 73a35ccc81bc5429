package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// BenchmarkCreateFromPool measures a Create served by the warm pool (the
// refill is excluded from the timing). With the fake runtime it measures
// the manager's own overhead (one agent ping, one state-file write); to
// measure a real backend, build env.rt from it instead of runtimefake.
//
//	go test -run XXX -bench Create -benchtime 200x ./internal/sandbox
func BenchmarkCreateFromPool(b *testing.B) {
	ctx := context.Background()
	e := newEnv(b)
	m := e.manager(Config{PoolSize: map[string]int{"host": 4}, MaxConcurrent: 1000})
	waitPool(b, m)
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		waitPool(b, m)
		b.StartTimer()
		sb, err := m.Create(ctx, Spec{})
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if err := m.Destroy(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// BenchmarkCreateCold measures a Create that goes to the runtime.
func BenchmarkCreateCold(b *testing.B) {
	ctx := context.Background()
	e := newEnv(b)
	m := e.manager(Config{MaxConcurrent: 1000})
	b.ResetTimer()
	for range b.N {
		sb, err := m.Create(ctx, Spec{Limits: runtime.Limits{Pids: 128}})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := m.Destroy(ctx, sb.ID); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}

// waitPool waits until the pool is full and no refill runs, so that the
// timed claim does not compete with background creations.
func waitPool(b *testing.B, m *Manager) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ps := m.PoolStats()[0]
		if ps.Ready == ps.Size && ps.Filling == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatal("pool did not refill")
		}
		time.Sleep(100 * time.Microsecond)
	}
}
