package e2e

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestAPILatency measures, through the API of a real daemon, the two
// paths every agent takes first: a cold create (no pool) followed by its
// first exec, and the round trip of an exec of `true` in a running
// sandbox. It reports p50 and p90 and judges only errors: to compare two
// builds, run it with AIRLOCK_E2E_BIN set to each, alternately (see
// docs/BENCHMARKS.md).
func TestAPILatency(t *testing.T) {
	e := newEnv(t, "--pool-size", "0", "--rate-limit", "100000", "--rate-burst", "100000")
	d := e.start()
	ctx := ctxT(t, 5*time.Minute)
	execTrue := func(id string) time.Duration {
		t0 := time.Now()
		res, err := d.C.Exec(ctx, id, client.ExecRequest{Cmd: []string{"true"}})
		el := time.Since(t0)
		if err != nil || res.Status != "success" {
			t.Fatalf("exec true: %+v %v", res, err)
		}
		return el
	}

	const creates = 30
	cold := make([]time.Duration, 0, creates)
	for range creates {
		t0 := time.Now()
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		execTrue(sb.ID)
		cold = append(cold, time.Since(t0))
		if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
			t.Fatal(err)
		}
	}

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	for range 20 {
		execTrue(sb.ID)
	}
	const execs = 500
	rt := make([]time.Duration, 0, execs)
	for range execs {
		rt = append(rt, execTrue(sb.ID))
	}
	slices.Sort(cold)
	slices.Sort(rt)
	summary := fmt.Sprintf("e2e-latency: create→first exec (cold, %d): p50 %v p90 %v; exec `true` round trip (%d): p50 %v p90 %v",
		creates, percentile(cold, 50).Round(10*time.Microsecond), percentile(cold, 90).Round(10*time.Microsecond),
		execs, percentile(rt, 50).Round(time.Microsecond), percentile(rt, 90).Round(time.Microsecond))
	t.Log(summary)
	fmt.Println(summary)
}
