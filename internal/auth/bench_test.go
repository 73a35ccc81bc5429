package auth

import (
	"context"
	"testing"
	"time"
)

// BenchmarkAuthenticate is the per-request cost with the record cached
// (the usual case); BenchmarkAuthenticateUncached reads the store every
// time.
func BenchmarkAuthenticate(b *testing.B) {
	benchAuth(b, Options{})
}

func BenchmarkAuthenticateUncached(b *testing.B) {
	benchAuth(b, Options{CacheTTL: -1})
}

func benchAuth(b *testing.B, opts Options) {
	ctx := context.Background()
	s, _ := withTenant(b, opts)
	tok, _, err := s.CreateKey(ctx, "t1", "", []Scope{ScopeExec}, time.Time{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Authenticate(ctx, tok); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkLimiterAllow(b *testing.B) {
	l, _ := NewLimiter(LimiterOptions{Rate: 1e6, Burst: 1000})
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			l.Allow("abcdefghijkl")
		}
	})
}
