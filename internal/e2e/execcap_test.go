package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// execFloodRSSBoundMiB is the daemon's peak RSS that TestExecFlood allows
// with the default caps, as docs/SECURITY.md ("Requests in flight")
// states it: the soft memory limit (the 512 MiB that requests in flight
// may reserve, exec_memory_mb, plus 128 MiB for everything else) and
// 64 MiB for the binary's own pages and the limit's overshoot.
const execFloodRSSBoundMiB = 512 + 128 + 64

// TestExecFlood fires 1,000 concurrent buffered execs, each flooding
// stdout and stderr with 3 MB (plain text in some sandboxes, control
// characters, which JSON escapes 6 times over, in others), from 5 keys
// over 16 sandboxes, at a daemon with the default caps on execs in
// flight. The requests over a cap must get 429 resource_exhausted with
// the cap named, every other exec must finish with its first MiB of
// output, and the daemon's peak RSS must stay under
// execFloodRSSBoundMiB.
func TestExecFlood(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	const (
		nsb, nkeys, nexecs = 16, 5, 1000
		flood              = 3_000_000
		outCap             = 1 << 20 // the default MaxOutputBytes
	)
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: nexecs, IdleConnTimeout: 30 * time.Second}}
	clients := []*client.Client{d.C}
	for i := 1; i < nkeys; i++ {
		k, err := d.C.CreateKey(ctx, client.CreateKeyRequest{Name: fmt.Sprintf("flood-%d", i), Scopes: []string{"exec", "sandboxes:read"}})
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(d.URL, k.Secret, client.WithHTTPClient(hc))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	ids := make([]string, nsb)
	var cwg sync.WaitGroup
	for i := range ids {
		cwg.Go(func() {
			sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
			if err != nil {
				t.Error(err)
				return
			}
			track(sb.ID)
			ids[i] = sb.ID
		})
	}
	cwg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	// What each sandbox's execs print: 'x' or \x01, on both streams.
	char := func(i int) byte {
		if i%2 == 0 {
			return 'x'
		}
		return 1
	}
	cmd := func(i int) string {
		tr := fmt.Sprintf(`head -c %d /dev/zero | tr '\0' '\%03o'`, flood, char(i))
		return tr + "; " + tr + " >&2"
	}

	before, _ := procStatusKB(d.Pid(), "VmRSS")
	sampler := sampleRSS(d.Pid(), 20*time.Millisecond)
	var ok, refused atomic.Int64
	var mu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		if len(failures) < 10 {
			failures = append(failures, fmt.Sprintf(format, args...))
		}
	}
	start := make(chan struct{})
	var wg sync.WaitGroup
	t0 := time.Now()
	for n := range nexecs {
		wg.Go(func() {
			<-start
			i := n % nsb
			res, err := clients[n%nkeys].Exec(ctx, ids[i], client.ExecRequest{Command: cmd(i), Timeout: time.Minute})
			var ae *client.APIError
			switch {
			case err == nil:
				want := bytes.Repeat([]byte{char(i)}, outCap)
				if res.Status != client.StatusSuccess || !bytes.Equal(res.Stdout, want) || !bytes.Equal(res.Stderr, want) ||
					!res.StdoutTruncated || !res.StderrTruncated {
					fail("exec %d: status %q exit %d, %d+%d bytes of output (truncated %v %v), want %d each",
						n, res.Status, res.ExitCode, len(res.Stdout), len(res.Stderr), res.StdoutTruncated, res.StderrTruncated, outCap)
					return
				}
				ok.Add(1)
			case errors.As(err, &ae) && ae.Status == 429 && ae.Code == "resource_exhausted" &&
				errors.Is(err, client.ErrQuotaExceeded) && strings.Contains(ae.Message, "in flight"):
				refused.Add(1)
			default:
				fail("exec %d: %v", n, err)
			}
		})
	}
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	peak, _ := sampler.Stop()
	hwm, _ := procStatusKB(d.Pid(), "VmHWM")
	summary := fmt.Sprintf("e2e-exec-flood: %d concurrent execs of 2 x %d MB output over %d sandboxes and %d keys in %v: %d finished, %d refused with 429; daemon VmRSS %d MiB before, %d MiB peak; VmHWM %d MiB (bound %d MiB)",
		nexecs, flood/1_000_000, nsb, nkeys, elapsed.Round(time.Millisecond), ok.Load(), refused.Load(), before>>10, peak>>10, hwm>>10, execFloodRSSBoundMiB)
	t.Log(summary)
	fmt.Println(summary)
	for _, f := range failures {
		t.Error(f)
	}
	if ok.Load()+refused.Load() != nexecs {
		t.Errorf("%d finished and %d refused of %d", ok.Load(), refused.Load(), nexecs)
	}
	if refused.Load() == 0 || ok.Load() == 0 {
		t.Errorf("want some execs refused and some finished, got %d and %d", refused.Load(), ok.Load())
	}
	if hwm>>10 > execFloodRSSBoundMiB {
		t.Errorf("the daemon's peak RSS was %d MiB, over the bound of %d MiB", hwm>>10, execFloodRSSBoundMiB)
	}
	// Every slot was given back: as many execs as the caps allow run now.
	for i := range 4 {
		res, err := clients[i].Exec(ctx, ids[i], client.ExecRequest{Command: "echo done"})
		if err != nil || string(res.Stdout) != "done\n" {
			t.Errorf("exec after the flood: %+v, %v", res, err)
		}
	}
}
