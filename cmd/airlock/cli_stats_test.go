package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// TestCLIStats: --no-stream prints one row per sandbox (the table, or
// the API's JSON), the live view prints a table per interval and ends
// when the sandboxes end, and bad arguments are usage errors.
func TestCLIStats(t *testing.T) {
	e := newCLIEnv(t)
	id1, id2 := e.create("--cpus", "0.5", "--memory", "256"), e.create()
	start := time.Now()
	for _, id := range []string{id1, id2} {
		if err := e.rt.SetStats(id, func() runtime.Stats {
			return runtime.Stats{CPUTime: time.Since(start) / 4, MemoryBytes: 64 << 20, PeakMemoryBytes: 80 << 20, MemoryLimitBytes: 384 << 20,
				Pids: 5, PidsLimit: 512, DiskUsedBytes: 3 << 20, DiskLimitBytes: 1 << 30}
		}); err != nil {
			t.Fatal(err)
		}
	}
	table := e.ok("", "stats", "--no-stream", "--interval", "200ms", id1, id2).stdout
	for _, want := range []string{"SANDBOX", "CPU %", "MEM / LIMIT", id1, id2, "0.25 / 0.50", "50.0%", "64.0 MiB / 384.0 MiB", "16.7%", "80.0 MiB",
		"3.0 MiB / 1.0 GiB", "5 / 512", "live"} {
		if !strings.Contains(table, want) {
			t.Errorf("stats table lacks %q:\n%s", want, table)
		}
	}
	got := decodeJSON[[]client.SandboxStats](t, e.ok("", "stats", "--no-stream", "--json", "--interval", "100ms", id1).stdout)
	if len(got) != 1 || got[0].SandboxID != id1 || got[0].Memory.CurrentBytes != 64<<20 || got[0].NetworkAbsent == "" {
		t.Errorf("stats --json: %+v", got)
	}

	// Live: a table per interval until the sandbox ends.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go func() {
		time.Sleep(700 * time.Millisecond)
		_ = e.mgr.Destroy(ctx, id2)
	}()
	r := e.runCtx(ctx, strings.NewReader(""), "stats", "--interval", "100ms", id2)
	if r.code != 0 || r.err != nil {
		t.Fatalf("stats (live): code %d, err %v, stderr %q", r.code, r.err, r.stderr)
	}
	if n := strings.Count(r.stdout, "SANDBOX"); n < 3 || !strings.Contains(r.stdout, "ended") {
		t.Errorf("live view drew %d tables, the last without \"ended\":\n%s", n, r.stdout)
	}

	// An unknown sandbox fails; usage errors.
	if r := e.run("", "stats", "--no-stream", "--interval", "100ms", id1, "sb-aaaaaaaaaaaaaaaa"); r.code != 1 || !strings.Contains(r.stderr, "sb-aaaaaaaaaaaaaaaa") || !strings.Contains(r.stdout, id1) {
		t.Errorf("stats with an unknown sandbox: %+v", r)
	}
	for _, args := range [][]string{{"stats"}, {"stats", "--interval", "10ms", id1}, {"stats", "--interval", "2m", id1}} {
		if r := e.run("", args...); r.code != 2 {
			t.Errorf("airlock %v: code %d, err %v; want a usage error", args, r.code, r.err)
		}
	}
}
