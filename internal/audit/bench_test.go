package audit

import (
	"context"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store/sqlitestore"
)

// Run with:
//
//	CGO_ENABLED=0 go test -run '^$' -bench Append -benchtime 20000x ./internal/audit/
//
// BenchmarkAppendParallel32 runs 32 concurrent appenders back to back
// (the number of goroutines does not depend on GOMAXPROCS), which
// saturates the writer, and reports the p50 and p99 latency of one Append,
// from call to durable commit.

func benchEvent() Event {
	return Event{TenantID: "default", KeyID: "abcdefghijkl", Action: "sandbox.exec", Target: "sb-0123456789abcdef",
		Outcome: "ok", Details: map[string]any{"cmd": []string{"python3", "-c", "print(1)"}, "exit_code": 0, "duration_ms": 12}}
}

func benchLog(b *testing.B, opts sqlitestore.Options) *Log {
	st, err := sqlitestore.Open(context.Background(), filepath.Join(b.TempDir(), "bench.db"), opts)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { st.Close() })
	return newLog(b, st, Options{})
}

func BenchmarkAppendSerial(b *testing.B) {
	l := benchLog(b, sqlitestore.Options{})
	ctx := context.Background()
	e := benchEvent()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for range b.N {
		start := time.Now()
		if err := l.Append(ctx, e); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	reportLatency(b, lat)
}

func BenchmarkAppendParallel32(b *testing.B) {
	benchParallel(b, sqlitestore.Options{}, 32, 0)
}

// BenchmarkAppendParallel32Paced has each of the 32 clients pause 5 ms on
// average (uniformly 0-10 ms) between appends, as independent clients
// running back-to-back short execs would (about 6,000 appends per second
// in all): the log is busy, not saturated.
func BenchmarkAppendParallel32Paced(b *testing.B) {
	benchParallel(b, sqlitestore.Options{}, 32, 5*time.Millisecond)
}

// BenchmarkAppendParallel32FullSync is the same with an fsync per commit
// (sqlitestore.Options.FullSync), which group commit amortizes.
func BenchmarkAppendParallel32FullSync(b *testing.B) {
	benchParallel(b, sqlitestore.Options{FullSync: true}, 32, 0)
}

// benchParallel runs clients goroutines appending b.N events in all,
// each pausing about think between appends, and reports append latencies.
func benchParallel(b *testing.B, opts sqlitestore.Options, clients int, think time.Duration) {
	l := benchLog(b, opts)
	ctx := context.Background()
	e := benchEvent()
	per := b.N/clients + 1
	lats := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for c := range clients {
		lats[c] = make([]time.Duration, 0, per)
		wg.Go(func() {
			<-start
			for range per {
				t0 := time.Now()
				if err := l.Append(ctx, e); err != nil {
					b.Error(err)
					return
				}
				lats[c] = append(lats[c], time.Since(t0))
				if think > 0 { // uniform in [0, 2*think): clients drift apart
					time.Sleep(rand.N(2 * think))
				}
			}
		})
	}
	b.ResetTimer()
	close(start)
	wg.Wait()
	b.StopTimer()
	reportLatency(b, slices.Concat(lats...))
	b.ReportMetric(float64(runtime.GOMAXPROCS(0)), "procs")
}

func reportLatency(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}
