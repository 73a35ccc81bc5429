package linux

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

func TestParseNetDev(t *testing.T) {
	const head = "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n"
	const lo = "    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n"
	tests := []struct {
		name    string
		in      string
		want    *runtime.NetStats
		wantErr bool
	}{
		{"loopback only", head + lo, nil, false},
		{"headers only", head, nil, false},
		{"one interface", head + lo + "  eth0: 5000 40 0 0 0 0 0 0 700 7 0 0 0 0 0 0\n",
			&runtime.NetStats{RxBytes: 5000, RxPackets: 40, TxBytes: 700, TxPackets: 7}, false},
		{"two summed", head + "  eth0: 5000 40 0 0 0 0 0 0 700 7 0 0 0 0 0 0\n" + lo + "eth1:1 2 0 0 0 0 0 0 3 4 0 0 0 0 0 0",
			&runtime.NetStats{RxBytes: 5001, RxPackets: 42, TxBytes: 703, TxPackets: 11}, false},
		{"no colon", head + "eth0 1 2 3\n", nil, true},
		{"too few numbers", head + "eth0: 1 2 3\n", nil, true},
		{"not a number", head + "eth0: x 40 0 0 0 0 0 0 700 7 0 0 0 0 0 0\n", nil, true},
	}
	for _, tt := range tests {
		got, err := parseNetDev([]byte(tt.in))
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: err %v, want error %v", tt.name, err, tt.wantErr)
			continue
		}
		if (got == nil) != (tt.want == nil) || (got != nil && *got != *tt.want) {
			t.Errorf("%s: got %+v, want %+v", tt.name, got, tt.want)
		}
	}
}

func FuzzParseNetDev(f *testing.F) {
	f.Add([]byte("a\nb\n  eth0: 5000 40 0 0 0 0 0 0 700 7 0 0 0 0 0 0\n"))
	f.Add([]byte("a\nb\nlo: 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parseNetDev(b) // must not panic
	})
}

// TestStats checks what the native backend reports: the whole sandbox's
// caps read back from its cgroups, the writable layer's size and the
// bytes a file written there takes, CPU time that grows while a loop
// runs, no network interface but loopback, and an error once the
// sandbox is gone.
func TestStats(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	limits := runtime.Limits{CPUs: 0.5, MemoryBytes: 128 << 20, Pids: 64, DiskBytes: 64 << 20}
	sb := runtimetest.Create(t, ctx, rt, hostRootfsFor(t), runtime.Spec{Limits: limits})
	st0, err := sb.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st0.MemoryLimitBytes != 128<<20+AgentMemoryAllowance || st0.PidsLimit != 64+AgentPidsAllowance {
		t.Errorf("limits: memory %d, pids %d; want %d, %d", st0.MemoryLimitBytes, st0.PidsLimit, 128<<20+AgentMemoryAllowance, 64+AgentPidsAllowance)
	}
	if st0.DiskLimitBytes != 64<<20 {
		t.Errorf("disk limit %d, want %d", st0.DiskLimitBytes, 64<<20)
	}
	if st0.Net != nil {
		t.Errorf("net %+v in a sandbox with only loopback, want nil", st0.Net)
	}
	if st0.MemoryBytes == 0 || st0.PeakMemoryBytes < st0.MemoryBytes || st0.Pids == 0 {
		t.Errorf("stats %+v, want memory and pids in use", st0)
	}
	sb.Sh(t, ctx, "head -c 8388608 /dev/urandom > $HOME/blob && timeout 1 sh -c 'while :; do :; done' || true")
	st1, err := sb.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := st1.DiskUsedBytes - st0.DiskUsedBytes; st1.DiskUsedBytes < st0.DiskUsedBytes || d < 8<<20 || d > 10<<20 {
		t.Errorf("disk used went from %d to %d, want about 8 MiB more", st0.DiskUsedBytes, st1.DiskUsedBytes)
	}
	// One second of a busy loop at a 0.5 CPU quota.
	if d := st1.CPUTime - st0.CPUTime; d < 300*time.Millisecond || d > 900*time.Millisecond {
		t.Errorf("CPU time grew by %v over a 1 s busy loop at 0.5 CPU, want about 500ms", d)
	}
	if err := sb.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Stats(ctx); err == nil {
		t.Error("Stats of a destroyed sandbox succeeded")
	} else if !errors.Is(err, errdefs.ErrFailedPrecondition) && !errors.Is(err, errdefs.ErrNotFound) {
		t.Logf("Stats after destroy: %v", err)
	}
}
