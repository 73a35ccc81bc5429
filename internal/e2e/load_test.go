package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

// loadExecs is the execs per client of TestLoad: AIRLOCK_E2E_LOAD_EXECS,
// default 50.
func loadExecs(t *testing.T) int {
	v := os.Getenv("AIRLOCK_E2E_LOAD_EXECS")
	if v == "" {
		return 50
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1_000_000 {
		t.Fatalf("AIRLOCK_E2E_LOAD_EXECS=%q: want a count from 1 to 1000000", v)
	}
	return n
}

// TestLoad runs 32 clients, each doing M execs of `true` back to back,
// over 4 sandboxes. Any failed request fails the test; the latencies and
// the daemon's memory are reported, not judged.
func TestLoad(t *testing.T) {
	e := newEnv(t, "--rate-limit", "100000", "--rate-burst", "100000")
	d := e.start()
	const clients, nsb = 32, 4
	m := loadExecs(t)
	ctx := ctxT(t, 10*time.Minute+time.Duration(m)*time.Second)

	ids := make([]string, nsb)
	for i := range ids {
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		ids[i] = sb.ID
		mustExec(t, d, sb.ID, client.ExecRequest{Cmd: []string{"true"}}) // warm
	}

	rssBefore, _ := procStatusKB(d.Pid(), "VmRSS")
	sampler := sampleRSS(d.Pid(), 50*time.Millisecond)
	lat := make([][]time.Duration, clients)
	var failures atomic.Int64
	var firstErr sync.Once
	var firstMsg string
	var wg sync.WaitGroup
	t0 := time.Now()
	for c := range clients {
		wg.Go(func() {
			id := ids[c%nsb]
			lat[c] = make([]time.Duration, 0, m)
			for range m {
				s := time.Now()
				res, err := d.C.Exec(ctx, id, client.ExecRequest{Cmd: []string{"true"}})
				lat[c] = append(lat[c], time.Since(s))
				if err == nil && res.Status != "success" {
					err = fmt.Errorf("status %q exit %d: %s", res.Status, res.ExitCode, res.Error)
				}
				if err != nil {
					failures.Add(1)
					firstErr.Do(func() { firstMsg = err.Error() })
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	peak, _ := sampler.Stop()
	rss, _ := procStatusKB(d.Pid(), "VmRSS")
	hwm, _ := procStatusKB(d.Pid(), "VmHWM")

	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	total := len(all)
	p50, p99, pmax := percentile(all, 50), percentile(all, 99), all[len(all)-1]
	summary := fmt.Sprintf("e2e-load: %d clients x %d execs of `true` over %d sandboxes: %d execs in %v (%.0f/s), %d errors; latency p50 %v p99 %v max %v; daemon VmRSS %d MiB before, %d MiB peak, %d MiB after, VmHWM %d MiB",
		clients, m, nsb, total, elapsed.Round(time.Millisecond), float64(total)/elapsed.Seconds(), failures.Load(),
		p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond), pmax.Round(10*time.Microsecond),
		rssBefore>>10, peak>>10, rss>>10, hwm>>10)
	t.Log(summary)
	fmt.Println(summary)
	if n := failures.Load(); n > 0 {
		t.Errorf("%d of %d execs failed; first: %s", n, total, firstMsg)
	}
}

// TestAPIOverhead measures, in one run and interleaved, the latency of
// exec `true` through the HTTP API and straight to the sandbox's agent on
// its control socket, and reports the difference: what the API, auth,
// audit and the manager add to an exec.
func TestAPIOverhead(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 5*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)

	sock := filepath.Join(e.dir, "sandboxes", sb.ID, "agent.sock")
	ac := agentclient.New(func(ctx context.Context) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", sock)
	})
	defer ac.Close()

	viaAPI := func() time.Duration {
		t0 := time.Now()
		res, err := d.C.Exec(ctx, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		el := time.Since(t0)
		if err != nil || res.Status != "success" {
			t.Fatalf("exec via the API: %+v %v", res, err)
		}
		return el
	}
	direct := func() time.Duration {
		t0 := time.Now()
		// What the API asks of the agent for a buffered exec.
		res, err := ac.Exec(ctx, agentclient.ExecRequest{
			Argv: []string{"true"}, Timeout: time.Minute, OutputLimit: 1 << 20,
			Stdout: io.Discard, Stderr: io.Discard,
		})
		el := time.Since(t0)
		if err != nil || res.Status != agentclient.StatusSuccess {
			t.Fatalf("exec on the agent socket: %+v %v", res, err)
		}
		return el
	}
	for range 20 { // warm both paths
		viaAPI()
		direct()
	}
	const n = 300
	api, agent := make([]time.Duration, 0, n), make([]time.Duration, 0, n)
	for i := range n {
		if i%2 == 0 {
			api = append(api, viaAPI())
			agent = append(agent, direct())
		} else {
			agent = append(agent, direct())
			api = append(api, viaAPI())
		}
	}
	slices.Sort(api)
	slices.Sort(agent)
	pa, pd := percentile(api, 50), percentile(agent, 50)
	over := pa - pd
	summary := fmt.Sprintf("e2e-overhead: exec `true`, %d interleaved runs each: API p50 %v p90 %v; agent socket p50 %v p90 %v; API overhead at p50 %v",
		n, pa.Round(time.Microsecond), percentile(api, 90).Round(time.Microsecond),
		pd.Round(time.Microsecond), percentile(agent, 90).Round(time.Microsecond), over.Round(time.Microsecond))
	t.Log(summary)
	fmt.Println(summary)
	if over > 20*time.Millisecond {
		t.Errorf("the API adds %v to the p50 of an exec; want under 20ms", over)
	}
}
