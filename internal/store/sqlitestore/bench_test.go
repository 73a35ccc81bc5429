package sqlitestore

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/store/storetest"
)

// BenchmarkAppendAudit measures one transaction of 1 or 32 audit records
// (the hashes are made up; internal/audit benchmarks the whole path).
func BenchmarkAppendAudit(b *testing.B) {
	for _, n := range []int{1, 32} {
		b.Run(fmt.Sprint("batch", n), func(b *testing.B) {
			s := openT(b, filepath.Join(b.TempDir(), "bench.db"))
			ctx := context.Background()
			head := store.AuditHead{Hash: store.GenesisHash}
			recs := make([]store.AuditRecord, n)
			b.ResetTimer()
			for range b.N {
				for i := range recs {
					seq := head.Seq + 1
					recs[i] = store.AuditRecord{Seq: seq, Time: time.Now(), TenantID: "default", KeyID: "abcdefghijkl",
						Action: "sandbox.exec", Target: "sb-0123456789", Outcome: "ok",
						Details:  []byte(`{"cmd":["python3","-c","print(1)"],"duration_ms":12,"exit_code":0}`),
						PrevHash: head.Hash, Hash: storetest.Hash(fmt.Sprint(seq))}
					head = store.AuditHead{Seq: seq, Hash: recs[i].Hash}
				}
				if err := s.AppendAudit(ctx, recs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/record")
		})
	}
}

func BenchmarkGetAPIKey(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "bench.db"))
	ctx := context.Background()
	s.CreateTenant(ctx, store.Tenant{ID: "t", CreatedAt: time.Now()})
	s.CreateAPIKey(ctx, store.APIKey{ID: "k", TenantID: "t", Hash: storetest.Hash("k"), Scopes: []string{"exec"}, CreatedAt: time.Now()})
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.GetAPIKey(ctx, "k"); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
