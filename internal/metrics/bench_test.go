package metrics

import (
	"testing"
	"time"
)

// BenchmarkRecordExec is what metrics add to one exec request: the
// request's counter and histogram and the exec's (compare with
// api.BenchmarkExecObserved's round trip).
//
//	CGO_ENABLED=0 go test ./internal/metrics -run '^$' -bench RecordExec -count 6
func BenchmarkRecordExec(b *testing.B) {
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.Request("POST /v1/sandboxes/{id}/exec", 200, 300*time.Microsecond)
		m.Exec(ExecBuffered, "success", 250*time.Microsecond)
	}
}

// BenchmarkRecordExecParallel is the same from every CPU at once (the
// counters' contention).
func BenchmarkRecordExecParallel(b *testing.B) {
	m := New()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Request("POST /v1/sandboxes/{id}/exec", 200, 300*time.Microsecond)
			m.Exec(ExecBuffered, "success", 250*time.Microsecond)
		}
	})
}
