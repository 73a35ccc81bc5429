package sqlitestore

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/store"
)

// BenchmarkGetPolicy measures the read the gateway makes on every tool
// call (internal/daemon's storePolicies): a tenant's 4 KiB policy text.
func BenchmarkGetPolicy(b *testing.B) {
	s := openT(b, filepath.Join(b.TempDir(), "bench.db"))
	ctx := context.Background()
	if err := s.CreateTenant(ctx, store.Tenant{ID: "t", CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	text := strings.Repeat("permit(principal, action, resource);\n", 4096/37)
	if err := s.PutPolicy(ctx, "t", text, time.Now()); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if got, _, err := s.GetPolicy(ctx, "t"); err != nil || len(got) != len(text) {
			b.Fatal(len(got), err)
		}
	}
}
