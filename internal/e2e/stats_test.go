package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestStats checks per-sandbox stats against a real daemon: a sandbox
// burning CPU with two busy loops under a 0.5 CPU limit shows a rate near
// its limit, one filling memory shows its memory rising from sample to
// sample, the caps are the sandbox's limits plus the agent's allowances,
// and `airlock stats --no-stream` prints both.
func TestStats(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	create := func(l client.Limits) string {
		t.Helper()
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &l})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		return sb.ID
	}
	burn := create(client.Limits{CPUs: 0.5, MemoryMB: 256, Pids: 64})
	fill := create(client.Limits{MemoryMB: 512})
	const loop = "setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &"
	mustExec(t, d, burn, client.ExecRequest{Command: loop + " " + loop})
	// tail keeps its newline-free input in memory: 16 MiB more every
	// half second (slower where starting a process is slow), 256 MiB in
	// all.
	mustExec(t, d, fill, client.ExecRequest{Command: "setsid sh -c '(for i in $(seq 1 16); do head -c 16777216 /dev/zero; sleep 0.5; done) | tail' </dev/null >/dev/null 2>&1 &"})

	const samples = 6
	got := map[string][]*client.SandboxStats{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range []string{burn, fill} {
		wg.Go(func() {
			sctx, cancel := context.WithCancel(ctx)
			defer cancel()
			errDone := errors.New("done")
			err := d.C.StreamStats(sctx, id, time.Second, func(s *client.SandboxStats) error {
				mu.Lock()
				defer mu.Unlock()
				got[id] = append(got[id], s)
				if len(got[id]) == samples {
					return errDone
				}
				return nil
			})
			if !errors.Is(err, errDone) {
				t.Errorf("stats stream of %s: %v", id, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	var rates []float64
	for i, s := range got[burn] {
		t.Logf("burn sample %d: cpu %.3f of %.2f (usage %.2fs), memory %d, pids %d/%d", i, s.CPU.Rate, s.CPU.Limit, s.CPU.UsageS, s.Memory.CurrentBytes, s.Pids.Current, s.Pids.Limit)
		if i > 0 { // the loops may have started within the first
			rates = append(rates, s.CPU.Rate)
		}
	}
	// Each sample's rate is over one second; over the five a loaded
	// host's scheduling evens out.
	b0, b := got[burn][0], got[burn][samples-1]
	avg := (b.CPU.UsageS - b0.CPU.UsageS) / b.Time.Sub(b0.Time).Seconds()
	sort.Float64s(rates)
	t.Logf("CPU rate over %v: %.3f; per second: %v", b.Time.Sub(b0.Time).Round(time.Millisecond), avg, rates)
	if avg < 0.35 || avg > 0.6 {
		t.Errorf("CPU rate %.3f of a sandbox burning CPU under a 0.5 CPU limit, want 0.35 to 0.6 (per second: %v)", avg, rates)
	}
	if b.CPU.Limit != 0.5 || b.Memory.LimitBytes != (256+128)<<20 || b.Pids.Limit != 64+256 || b.Pids.Current < 3 ||
		b.Disk.LimitBytes == 0 || b.Network != nil || !strings.Contains(b.NetworkAbsent, "mode none") {
		t.Errorf("burn's last sample: %+v", b)
	}

	rises := 0
	for i, s := range got[fill] {
		t.Logf("fill sample %d: memory %d (peak %d) of %d, disk %d", i, s.Memory.CurrentBytes, s.Memory.PeakBytes, s.Memory.LimitBytes, s.Disk.UsedBytes)
		if i > 0 && s.Memory.CurrentBytes > got[fill][i-1].Memory.CurrentBytes+1<<20 {
			rises++
		}
	}
	first, last := got[fill][0], got[fill][samples-1]
	if rises < samples-2 || last.Memory.CurrentBytes < first.Memory.CurrentBytes+8<<20 || last.Memory.PeakBytes < last.Memory.CurrentBytes {
		t.Errorf("memory of the filling sandbox rose %d times of %d, from %d to %d (peak %d); want it rising by at least 8 MiB",
			rises, samples-1, first.Memory.CurrentBytes, last.Memory.CurrentBytes, last.Memory.PeakBytes)
	}

	// The CLI's table and JSON.
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, binPath, args...)
		cmd.Env = append(daemonEnv(), "AIRLOCK_URL="+d.URL, "AIRLOCK_API_KEY="+d.Key)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("airlock %v: %v (%s)", args, err, out)
		}
		return string(out)
	}
	table := cli("stats", "--no-stream", burn, fill)
	t.Logf("airlock stats --no-stream:\n%s", table)
	for _, want := range []string{"SANDBOX", "CPU %", burn, fill, "/ 0.50", "/ 384.0 MiB", "/ 320"} {
		if !strings.Contains(table, want) {
			t.Errorf("airlock stats lacks %q", want)
		}
	}
	var js []client.SandboxStats
	if err := json.Unmarshal([]byte(cli("stats", "--no-stream", "--json", "--interval", "500ms", burn)), &js); err != nil || len(js) != 1 || js[0].SandboxID != burn {
		t.Errorf("airlock stats --json: %+v, %v", js, err)
	}

	// Stats end with the sandbox.
	if err := d.C.DeleteSandbox(ctx, burn); err != nil {
		t.Fatal(err)
	}
	if _, err := d.C.Stats(ctx, burn, 100*time.Millisecond); !errors.Is(err, client.ErrConflict) {
		t.Errorf("stats of a deleted sandbox: %v, want 409", err)
	}
}

// TestHealthProbe stops a sandbox's agent (SIGSTOP from the host: alive,
// not answering) and checks the health policy against a real daemon
// probing every 500ms: the sandbox is unhealthy within one interval and
// a probe's timeout, still running; after 4 probes missed in a row it
// is ended (failed, agent_unhealthy), released, and refuses requests;
// an agent that answers again (SIGCONT) before that makes its sandbox
// healthy again. Every change and the end are in the audit log. (An
// agent killed outright is ended at once, agent_died: see
// TestAgentDeathReleased.)
func TestHealthProbe(t *testing.T) {
	const interval = 500 * time.Millisecond
	e := newEnv(t, "--health-interval", interval.String(), "--health-failures", "4")
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)
	var ids []string
	for range 2 {
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		ids = append(ids, sb.ID)
	}
	hung, back := ids[0], ids[1]
	var sb *client.Sandbox
	var err error
	health := func(id string) string {
		sb, err = d.C.GetSandbox(ctx, id)
		if err != nil || sb.Health == nil {
			return ""
		}
		return sb.Health.Status
	}
	if !waitFor(5*time.Second, func() bool { return health(hung) == client.HealthHealthy && health(back) == client.HealthHealthy }) {
		t.Fatalf("no probe within 5 s: %+v, %v", sb, err)
	}

	// An agent that answers again.
	pid := agentPid(t, e, back)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if !waitFor(5*time.Second, func() bool { return health(back) == client.HealthUnhealthy }) {
		_ = syscall.Kill(pid, syscall.SIGCONT)
		t.Fatalf("a stopped agent's sandbox is %+v, %v; want unhealthy", sb, err)
	}
	took := time.Since(t0)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("unhealthy %v after SIGSTOP: %+v", took.Round(time.Millisecond), *sb.Health)
	// One interval to the next probe, and its timeout (the interval,
	// shorter than 2 s), with room for a busy host.
	if took > 2*interval+time.Second {
		t.Errorf("unhealthy %v after the agent stopped, want within about %v", took, 2*interval)
	}
	if sb.State != client.StateRunning || sb.Health.Missed < 1 || sb.Health.Error == "" {
		t.Errorf("unhealthy sandbox: state %s, health %+v; want running with a missed probe", sb.State, sb.Health)
	}
	if !waitFor(5*time.Second, func() bool { return health(back) == client.HealthHealthy }) {
		t.Fatalf("after SIGCONT the sandbox is %+v, %v; want healthy", sb, err)
	}
	if sb.State != client.StateRunning || sb.Health.Missed != 0 {
		t.Errorf("recovered sandbox: %s, %+v", sb.State, sb.Health)
	}
	mustExec(t, d, back, client.ExecRequest{Command: "true"})

	// An agent that stays stopped.
	pid = agentPid(t, e, hung)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	if !waitFor(5*time.Second, func() bool { return health(hung) == client.HealthUnhealthy }) {
		t.Fatalf("a stopped agent's sandbox is %+v, %v; want unhealthy", sb, err)
	}
	t.Logf("unhealthy %v after SIGSTOP", time.Since(t0).Round(time.Millisecond))
	if !waitFor(15*time.Second, func() bool {
		sb, err = d.C.GetSandbox(ctx, hung)
		return err == nil && !sb.StoppedAt.IsZero()
	}) {
		t.Fatalf("the sandbox of a stopped agent did not end: %+v, %v", sb, err)
	}
	took = time.Since(t0)
	t.Logf("ended %v after SIGSTOP: %+v, %+v", took.Round(time.Millisecond), sb, *sb.Health)
	if sb.State != client.StateFailed || sb.EndReason != client.EndAgentUnhealthy || !strings.Contains(sb.Error, "stopped answering") || sb.Health.Missed < 4 {
		t.Errorf("ended sandbox: %+v (health %+v); want failed, agent_unhealthy, 4 probes missed", sb, sb.Health)
	}
	// Four misses: at most four intervals and four timeouts.
	if took > 8*interval+3*time.Second {
		t.Errorf("ended %v after the agent stopped", took)
	}
	if _, err := d.C.Exec(ctx, hung, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrConflict) || !strings.Contains(err.Error(), "stopped answering") {
		t.Errorf("exec on the ended sandbox: %v; want 409 saying its agent stopped answering", err)
	}
	if cg := sandboxCgroups(hung); len(cg) > 0 {
		t.Errorf("cgroups kept: %v", cg)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("the stopped agent's pid %d: %v, want gone", pid, err)
	}
	if got, err := d.C.GetSandbox(ctx, back); err != nil || got.State != client.StateRunning {
		t.Errorf("the recovered sandbox: %+v, %v; want running", got, err)
	}

	d.Stop()
	recs := verifyAudit(t, e)
	if got := endRecords(t, recs)[hung]; got != client.EndAgentUnhealthy {
		t.Errorf("audit: the end of %s is recorded as %q, want %s", hung, got, client.EndAgentUnhealthy)
	}
	changes := map[string][]string{}
	for _, r := range recs {
		if r.Action == "sandbox.health" {
			var det struct {
				Status string `json:"status"`
			}
			_ = json.Unmarshal(r.Details, &det)
			changes[r.Target] = append(changes[r.Target], det.Status)
		}
	}
	// A loaded host may make an agent miss a probe more: the records
	// alternate, the stopped one's last is unhealthy.
	for id, want := range map[string][]string{hung: {"unhealthy"}, back: {"unhealthy", "healthy"}} {
		c := changes[id]
		if len(c) < len(want) || !slices.Equal(c[:len(want)], want) || c[len(c)-1] != want[len(want)-1] {
			t.Errorf("sandbox.health records of %s: %v, want %v", id, c, want)
		}
		for i := 1; i < len(c); i++ {
			if c[i] == c[i-1] {
				t.Errorf("sandbox.health records of %s repeat a status: %v", id, c)
			}
		}
	}
}
