package api

import (
	"bytes"
	"context"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/auth"
)

// The API's overhead on one exec: the same command through HTTP, JSON,
// authentication, the ownership check and the audit log (a fake), versus
// Manager.Exec called directly. Run both in one go:
//
//	CGO_ENABLED=0 go test ./internal/api -run '^$' -bench 'Exec(API|Direct)' -benchtime 200x

// benchCommand prints a little, so that output is carried both ways.
var benchCommand = []string{"echo", "hello"}

func BenchmarkExecAPI(b *testing.B) {
	ctx := context.Background()
	e := newTestEnv(b)
	c := e.client(keyA)
	sb := e.sandbox(ctx)
	b.ResetTimer()
	for b.Loop() {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: benchCommand})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
			b.Fatal(res, err)
		}
		e.audit.take()
	}
}

func BenchmarkExecDirect(b *testing.B) {
	ctx := context.Background()
	e := newTestEnv(b)
	sb := e.sandbox(ctx)
	b.ResetTimer()
	for b.Loop() {
		var out bytes.Buffer
		res, err := e.mgr.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: benchCommand, Stdout: &out})
		if err != nil || res.ExitCode != 0 || out.String() != "hello\n" {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkExecAPIReal is BenchmarkExecAPI over the daemon's real
// authentication (auth.Service on SQLite), rate limiter and audit log
// (group commit on SQLite), so that a CPU profile of it shows where the
// API's own time goes:
//
//	CGO_ENABLED=0 go test ./internal/api -run '^$' -bench ExecAPIReal -benchtime 2000x -cpuprofile cpu.out
func BenchmarkExecAPIReal(b *testing.B) {
	ctx := context.Background()
	lim, err := auth.NewLimiter(auth.LimiterOptions{Rate: 1e6, Burst: 1e6})
	if err != nil {
		b.Fatal(err)
	}
	e := newRealEnv(b, func(c *Config) { c.Limiter = lim })
	c := e.client(e.adminA)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: benchCommand})
		if err != nil || res.ExitCode != 0 || string(res.Stdout) != "hello\n" {
			b.Fatal(res, err)
		}
	}
}

// BenchmarkExecOverhead interleaves execs through the API (over the real
// auth, limiter and audit log, as in BenchmarkExecAPIReal) with execs
// through Manager.Exec, and reports both p50s and their difference: the
// in-process counterpart of internal/e2e's TestAPIOverhead.
func BenchmarkExecOverhead(b *testing.B) {
	ctx := context.Background()
	lim, err := auth.NewLimiter(auth.LimiterOptions{Rate: 1e6, Burst: 1e6})
	if err != nil {
		b.Fatal(err)
	}
	e := newRealEnv(b, func(c *Config) { c.Limiter = lim })
	c := e.client(e.adminA)
	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		b.Fatal(err)
	}
	viaAPI := func() time.Duration {
		t0 := time.Now()
		res, err := c.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		return time.Since(t0)
	}
	direct := func() time.Duration {
		t0 := time.Now()
		res, err := e.mgr.Exec(ctx, sb.ID, agentclient.ExecRequest{Argv: []string{"true"}, Timeout: time.Minute,
			OutputLimit: 1 << 20, Stdout: io.Discard, Stderr: io.Discard})
		if err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
		return time.Since(t0)
	}
	for range 10 {
		viaAPI()
		direct()
	}
	var api, dir []time.Duration
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if i%2 == 0 {
			api = append(api, viaAPI())
			dir = append(dir, direct())
		} else {
			dir = append(dir, direct())
			api = append(api, viaAPI())
		}
		i++
	}
	b.StopTimer()
	slices.Sort(api)
	slices.Sort(dir)
	pa, pd := api[len(api)/2], dir[len(dir)/2]
	b.ReportMetric(float64(pa.Microseconds()), "api-p50-µs")
	b.ReportMetric(float64(pd.Microseconds()), "direct-p50-µs")
	b.ReportMetric(float64((pa - pd).Microseconds()), "overhead-p50-µs")
}
