package e2e

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// daemonThreadsFDs reads the Threads line of /proc/<pid>/status and counts
// /proc/<pid>/fd; kinds says what the descriptors are ("pidfd 24 socket
// 30 ...").
func daemonThreadsFDs(t *testing.T, d *daemon) (threads, fds int, kinds string) {
	t.Helper()
	n, err := procStatusKB(d.Pid(), "Threads")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/proc", strconv.Itoa(d.Pid()), "fd")
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, de := range ents {
		target, err := os.Readlink(filepath.Join(dir, de.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		kind := "file"
		switch {
		case strings.HasPrefix(target, "anon_inode:"):
			kind = strings.Trim(strings.TrimPrefix(target, "anon_inode:"), "[]")
		case strings.HasPrefix(target, "socket:"):
			kind = "socket"
		case strings.HasPrefix(target, "pipe:"):
			kind = "pipe"
		}
		count[kind]++
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, count[k]))
	}
	return int(n), len(ents), strings.Join(parts, ", ")
}

// TestThreads creates sandboxes in steps and reads the
// daemon's threads and open descriptors after each, then again after a
// restart (SIGKILL, adopt all). A sandbox must cost the daemon no OS
// thread: the threads may not grow by more than a quarter of the
// sandboxes added past the first step (before the fix each held one,
// blocked in wait4, and two descriptors). 24 sandboxes by default;
// AIRLOCK_E2E_THREADS_SANDBOXES sets another number (docs/BENCHMARKS.md
// has the figures for 200).
func TestThreads(t *testing.T) {
	n := 24
	if v := os.Getenv("AIRLOCK_E2E_THREADS_SANDBOXES"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 8 {
			t.Fatalf("AIRLOCK_E2E_THREADS_SANDBOXES=%q: want a number of at least 8", v)
		}
	}
	e := newEnv(t, "--max-sandboxes", strconv.Itoa(n+8), "--rate-limit", "100000", "--rate-burst", "100000")
	d := e.start()
	ctx := ctxT(t, 20*time.Minute)
	created := 0
	createUpTo := func(total int) {
		t.Helper()
		var wg sync.WaitGroup
		var mu sync.Mutex
		for range 4 {
			wg.Go(func() {
				for {
					mu.Lock()
					if created >= total || t.Failed() {
						mu.Unlock()
						return
					}
					created++
					mu.Unlock()
					sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: time.Hour, Limits: &client.Limits{MemoryMB: 64, Pids: 32}})
					if err != nil {
						t.Errorf("create: %v", err)
						return
					}
					track(sb.ID)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			t.FailNow()
		}
	}
	step := n / 4
	createUpTo(step)
	threads0, fds0, kinds := daemonThreadsFDs(t, d)
	t.Logf("%d sandboxes: %d threads, %d fds (%s)", step, threads0, fds0, kinds)
	threads, fds := threads0, fds0
	for total := 2 * step; total <= n; total += step {
		createUpTo(total)
		threads, fds, kinds = daemonThreadsFDs(t, d)
		t.Logf("%d sandboxes: %d threads, %d fds (%s)", total, threads, fds, kinds)
	}
	added := n - step
	if threads-threads0 > added/4 {
		t.Errorf("threads grew from %d to %d while %d sandboxes were added; a sandbox must not hold a thread", threads0, threads, added)
	}
	t.Logf("per sandbox added: %.2f threads, %.2f fds", float64(threads-threads0)/float64(added), float64(fds-fds0)/float64(added))

	d.Kill()
	d = e.start()
	sbs := waitRecovered(t, d, 2*time.Minute)
	threads, fds, kinds = daemonThreadsFDs(t, d)
	t.Logf("after a restart, %d sandboxes adopted: %d threads, %d fds (%s)", len(sbs), threads, fds, kinds)
}
