package linux

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// TestManyIdleSandboxes holds 500 sandboxes running at once on this
// 2-core machine: every one is created without error, answers its agent
// and runs a command while all the others are up, and all of them are
// destroyed without leaving a process, cgroup or uid slot behind. It also
// reports the host memory they cost (agent PSS per sandbox).
func TestManyIdleSandboxes(t *testing.T) {
	requireRoot(t)
	n := 500
	if testing.Short() {
		n = 50
	}
	const workers = 8
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	rootfs := hostRootfsFor(t)

	insts := make([]runtime.Instance, n)
	t.Cleanup(func() {
		var wg sync.WaitGroup
		sem := make(chan struct{}, workers)
		for _, inst := range insts {
			if inst == nil {
				continue
			}
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				if err := inst.Destroy(context.Background()); err != nil {
					t.Errorf("destroy %s: %v", inst.ID(), err)
				}
			})
		}
		wg.Wait()
	})

	start := time.Now()
	forAll(t, n, workers, func(i int) error {
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("many"), Rootfs: rootfs})
		if err != nil {
			return fmt.Errorf("create %d: %w", i, err)
		}
		insts[i] = inst
		return nil
	})
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("%d sandboxes created in %v", n, time.Since(start).Round(time.Millisecond))

	// With every sandbox up, each one still answers and runs a command.
	start = time.Now()
	forAll(t, n, workers, func(i int) error {
		c := agentclient.New(insts[i].Dial)
		defer c.Close()
		res, err := c.Exec(ctx, agentclient.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo $$"}})
		if err != nil || res.Status != agentclient.StatusSuccess {
			return fmt.Errorf("sandbox %d: exec: %v %+v", i, err, res)
		}
		return nil
	})
	t.Logf("one exec in each of %d running sandboxes in %v", n, time.Since(start).Round(time.Millisecond))

	var pss uint64
	for _, inst := range insts {
		p, err := processPSS(inst.(*Instance).Pid())
		if err != nil {
			t.Fatalf("pss: %v", err)
		}
		pss += p
	}
	t.Logf("agent memory: %.2f MiB PSS per idle sandbox", float64(pss)/float64(n)/(1<<20))

	rt.mu.Lock()
	live := len(rt.live)
	rt.mu.Unlock()
	if live != n {
		t.Errorf("runtime tracks %d live sandboxes, want %d", live, n)
	}
}

// forAll runs f(0..n-1) on workers goroutines and reports every error.
func forAll(t *testing.T, n, workers int, f func(i int) error) {
	t.Helper()
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				if err := f(i); err != nil {
					t.Error(err)
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
