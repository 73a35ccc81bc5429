package api

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// burning scripts the fake runtime's stats of a sandbox that uses rate
// CPUs from now on, and whose memory grows by 1 MiB a reading.
func burning(rate float64) func() runtime.Stats {
	start := time.Now()
	var mu sync.Mutex
	var mem uint64 = 10 << 20
	return func() runtime.Stats {
		mu.Lock()
		defer mu.Unlock()
		mem += 1 << 20
		return runtime.Stats{
			CPUTime:          time.Duration(rate * float64(time.Since(start))),
			MemoryBytes:      mem,
			PeakMemoryBytes:  mem + 1,
			MemoryLimitBytes: 640 << 20,
			Pids:             7,
			PidsLimit:        512,
			OOMKills:         2,
			DiskUsedBytes:    4 << 20,
			DiskLimitBytes:   1 << 30,
		}
	}
}

// TestStatsRoute: one sample measures the CPU rate over interval_ms and
// reports the runtime's counters with the sandbox's caps; a sandbox in
// mode none has no network, and says so; bad queries are 400 naming the
// parameter; an ended sandbox is 409.
func TestStatsRoute(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb, err := a.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &client.Limits{CPUs: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.rt.SetStats(sb.ID, burning(0.4)); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	st, err := a.Stats(ctx, sb.ID, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 300*time.Millisecond {
		t.Errorf("a sample over 300ms came after %v", d)
	}
	if st.SandboxID != sb.ID || st.IntervalMS < 300 || st.IntervalMS > 2000 || time.Since(st.Time) > 10*time.Second {
		t.Errorf("sample header: %+v", st)
	}
	if math.Abs(st.CPU.Rate-0.4) > 0.05 || st.CPU.Limit != 0.5 || st.CPU.UsageS <= 0 {
		t.Errorf("cpu %+v, want rate 0.4 of limit 0.5", st.CPU)
	}
	if st.Memory != (client.StatsMemory{CurrentBytes: 12 << 20, PeakBytes: 12<<20 + 1, LimitBytes: 640 << 20, OOMKills: 2}) {
		t.Errorf("memory %+v", st.Memory)
	}
	if st.Pids != (client.StatsPids{Current: 7, Limit: 512}) || st.Disk != (client.StatsDisk{UsedBytes: 4 << 20, LimitBytes: 1 << 30}) {
		t.Errorf("pids %+v, disk %+v", st.Pids, st.Disk)
	}
	if st.Network != nil || !strings.Contains(st.NetworkAbsent, "mode none") {
		t.Errorf("network %+v, absent %q; want none, saying mode none", st.Network, st.NetworkAbsent)
	}
	// Stats are not activity.
	if got, err := a.GetSandbox(ctx, sb.ID); err != nil || !got.LastActivityAt.Equal(sb.LastActivityAt) {
		t.Errorf("last activity moved from %v to %v (%v)", sb.LastActivityAt, got.LastActivityAt, err)
	}

	base := "/v1/sandboxes/" + sb.ID + "/stats"
	for _, tc := range []struct{ query, want string }{
		{"?interval_ms=99", "interval_ms"},
		{"?interval_ms=60001", "interval_ms"},
		{"?interval_ms=1s", "interval_ms"},
		{"?stream=yes", "stream"},
		{"?stream=1&stream=1", "once"},
		{"?every=1", "unknown query parameter"},
	} {
		resp, b := e.do("GET", base+tc.query, keyA, "", nil)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.want) {
			t.Errorf("%s: %d %s, want 400 with %q", tc.query, resp.StatusCode, b, tc.want)
		}
	}
	if resp, b := e.do("GET", base+"?interval_ms=100", keyB, "", nil); resp.StatusCode != http.StatusNotFound {
		t.Errorf("another tenant's stats: %d %s, want 404", resp.StatusCode, b)
	}
	if resp, b := e.do("GET", base+"?interval_ms=100", keyWithout("sandboxes:read"), "", nil); resp.StatusCode != http.StatusForbidden {
		t.Errorf("stats without sandboxes:read: %d %s, want 403", resp.StatusCode, b)
	}
	if _, err := a.Stats(ctx, sb.ID, 50*time.Millisecond); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("client interval 50ms: %v, want invalid", err)
	}
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stats(ctx, sb.ID, 100*time.Millisecond); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stats of a deleted sandbox: %v, want conflict", err)
	}
}

// TestStatsStream: a stream sends a sample every interval, each with the
// CPU rate over its own interval, counts against the cap on requests in
// flight per sandbox (429 past it), and ends when the sandbox ends.
func TestStatsStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newTestEnv(t, func(cfg *Config) { cfg.Limits.MaxInflightPerSandbox = 1 })
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	if err := e.rt.SetStats(sb.ID, burning(0.25)); err != nil {
		t.Fatal(err)
	}
	var samples []*client.SandboxStats
	first := make(chan struct{})
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		done <- a.StreamStats(ctx, sb.ID, 100*time.Millisecond, func(s *client.SandboxStats) error {
			samples = append(samples, s)
			if len(samples) == 1 {
				close(first)
			}
			if len(samples) == 5 {
				// The sandbox ends: so does the stream, cleanly.
				go func() { _ = a.DeleteSandbox(ctx, sb.ID) }()
			}
			return nil
		})
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("stream ended before its first sample: %v", err)
	}
	// The stream holds the sandbox's one slot.
	resp, b := e.do("GET", "/v1/sandboxes/"+sb.ID+"/stats?stream=1&interval_ms=100", keyA, "", nil)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a second stream on a sandbox with one slot: %d %s, want 429 with Retry-After", resp.StatusCode, b)
	}
	// A single sample waits up to an interval too: it needs a slot as well.
	resp, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/stats?interval_ms=100", keyA, "", nil)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a sample on a sandbox with its one slot taken: %d %s, want 429", resp.StatusCode, b)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the stream did not end with its sandbox")
	}
	if len(samples) < 5 {
		t.Fatalf("%d samples", len(samples))
	}
	if took := time.Since(t0); took < 500*time.Millisecond {
		t.Errorf("5 samples at 100ms came in %v", took)
	}
	for i, s := range samples {
		if s.SandboxID != sb.ID || math.Abs(s.CPU.Rate-0.25) > 0.05 || s.IntervalMS < 90 || s.IntervalMS > 1000 {
			t.Errorf("sample %d: %+v", i, s)
		}
		if i > 0 && (s.Memory.CurrentBytes <= samples[i-1].Memory.CurrentBytes || !s.Time.After(samples[i-1].Time)) {
			t.Errorf("sample %d did not move on from %d: %+v", i, i-1, s)
		}
	}
}

// TestStatsProxyNetwork: a sandbox in allowlist mode reports the bytes
// through its egress proxy.
func TestStatsProxyNetwork(t *testing.T) {
	e := newNetAPIEnv(t, egress.Limits{})
	resp, b := e.do("POST", "/v1/sandboxes", keyA, "application/json", []byte(`{"network":{"mode":"allowlist","allow":["a.test"]}}`))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d %s", resp.StatusCode, b)
	}
	var sb wire.Sandbox
	if err := json.Unmarshal(b, &sb); err != nil {
		t.Fatal(err)
	}
	resp, b = e.do("GET", "/v1/sandboxes/"+sb.ID+"/stats?interval_ms=100", keyA, "", nil)
	var st wire.SandboxStats
	if resp.StatusCode != http.StatusOK || json.Unmarshal(b, &st) != nil {
		t.Fatalf("stats: %d %s", resp.StatusCode, b)
	}
	if st.Network == nil || st.Network.Source != wire.NetSourceProxy || st.NetworkAbsent != "" {
		t.Errorf("network %+v, absent %q; want the proxy's counters", st.Network, st.NetworkAbsent)
	}
}

// FuzzStatsQuery: whatever the query, parseStatsQuery either refuses it
// or returns an interval within the bounds.
func FuzzStatsQuery(f *testing.F) {
	for _, s := range []string{"", "stream=1", "interval_ms=100&stream=true", "interval_ms=60001", "x=1", "stream=1&stream=0", "interval_ms=%zz"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := &http.Request{URL: &url.URL{RawQuery: raw}}
		q, err := parseStatsQuery(r)
		if err != nil {
			return
		}
		if q.interval < wire.StatsIntervalMinMS*time.Millisecond || q.interval > wire.StatsIntervalMaxMS*time.Millisecond {
			t.Errorf("query %q: interval %v out of bounds", raw, q.interval)
		}
	})
}
