package linux

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// TestThreadsAndFDsPerSandbox checks what a running sandbox costs the
// daemon that created it: no OS thread (the agent's exit is waited for in
// the netpoller, not by a thread blocked in wait4) and one descriptor
// (its pidfd). Created one at a time, so that no concurrent syscall
// makes the Go runtime start threads of its own.
func TestThreadsAndFDsPerSandbox(t *testing.T) {
	requireRoot(t)
	const warm, n = 2, 16
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	rootfs := hostRootfsFor(t)
	var insts []runtime.Instance
	t.Cleanup(func() {
		for _, inst := range insts {
			if err := inst.Destroy(context.Background()); err != nil {
				t.Errorf("destroy %s: %v", inst.ID(), err)
			}
		}
	})
	create := func() {
		t.Helper()
		inst, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("thr"), Rootfs: rootfs})
		if err != nil {
			t.Fatal(err)
		}
		insts = append(insts, inst)
	}
	// The first creates start the threads any create needs (the parked
	// forking thread's replacement, the netpoller's).
	for range warm {
		create()
	}
	threads0, fds0 := selfThreads(t), selfFDs(t)
	for range n {
		create()
	}
	threads1, fds1 := selfThreads(t), selfFDs(t)
	t.Logf("%d more sandboxes: threads %d -> %d, fds %d -> %d", n, threads0, threads1, fds0, fds1)
	// Before the fix each sandbox held a thread in wait4 and two pidfds.
	if d := threads1 - threads0; d > n/4 {
		t.Errorf("threads grew by %d for %d sandboxes; want about none", d, n)
	}
	if d := fds1 - fds0; d > n+2 {
		t.Errorf("descriptors grew by %d for %d sandboxes; want one each (the agent's pidfd)", d, n)
	}
}

// selfThreads is the Threads line of /proc/self/status.
func selfThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Threads:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal(fmt.Errorf("no Threads line in /proc/self/status"))
	return 0
}

// selfFDs counts the open descriptors of this process.
func selfFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}
