package linux

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// Issue 11, finding 4: files written through the file API are tmpfs pages
// the kernel charges to the agent's cgroup, which had no memory limit (nor
// had <id>): a 900 MB upload into a 256 MB sandbox held 928 MB outside the
// cap.

// v1CgroupFile reads a file of the sandbox's cgroup (rel below <id>) in
// the v1 hierarchy ctrl, skipping the test on a host without it.
func v1CgroupFile(t *testing.T, rt *Runtime, ctrl, id, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, rt.cfg.CgroupParent, id, rel))
	if errors.Is(err, os.ErrNotExist) {
		t.Skipf("no v1 %s hierarchy with %s", ctrl, rel)
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSandboxCgroupCaps checks that the sandbox's cgroup as a whole carries
// the memory (no swap) and pids caps: its code's limits plus the agent's
// allowances.
func TestSandboxCgroupCaps(t *testing.T) {
	requireRoot(t)
	ctx := context.Background()
	rt := newRuntime(t)
	sb := runtimetest.Create(t, ctx, rt, hostRootfsFor(t), runtime.Spec{Limits: runtime.Limits{MemoryBytes: 64 << 20, Pids: 64}})
	id := sb.ID()
	mem := strconv.Itoa(64<<20 + AgentMemoryAllowance)
	if got := v1CgroupFile(t, rt, "memory", id, "memory.limit_in_bytes"); got != mem {
		t.Errorf("<id> memory.limit_in_bytes = %s, want %s", got, mem)
	}
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup/memory", rt.cfg.CgroupParent, id, "memory.memsw.limit_in_bytes")); err == nil {
		if got := v1CgroupFile(t, rt, "memory", id, "memory.memsw.limit_in_bytes"); got != mem {
			t.Errorf("<id> memory.memsw.limit_in_bytes = %s, want %s (no swap)", got, mem)
		}
	}
	if got, want := v1CgroupFile(t, rt, "pids", id, "pids.max"), strconv.Itoa(64+AgentPidsAllowance); got != want {
		t.Errorf("<id> pids.max = %s, want %s", got, want)
	}
	if got := v1CgroupFile(t, rt, "memory", id, "work/memory.limit_in_bytes"); got != strconv.Itoa(64<<20) {
		t.Errorf("work memory.limit_in_bytes = %s, want %d", got, 64<<20)
	}
	// The agent's own working set under load (what AgentMemoryAllowance
	// must hold beside fsMemoryReserve): 32 concurrent execs streaming
	// 4 MiB of output each.
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = sb.Client.Exec(ctx, agentclient.ExecRequest{Shell: "head -c 4M /dev/zero", Stdout: io.Discard})
		}()
	}
	wg.Wait()
	peak, _ := strconv.ParseInt(v1CgroupFile(t, rt, "memory", id, "agent/memory.max_usage_in_bytes"), 10, 64)
	t.Logf("agent/ peak under load: %d MiB", peak>>20)
	if peak > AgentMemoryAllowance/2 {
		t.Errorf("agent/ peaked at %d MiB under load: more than half the allowance", peak>>20)
	}
}

// TestUploadBeyondMemoryCap uploads twice the sandbox's memory limit into a
// sandbox with a large disk: the write must fail with a resource-exhausted
// error (not an OOM kill of the agent), the sandbox must stay usable, and
// the sandbox's cgroup must never have held more than its cap.
func TestUploadBeyondMemoryCap(t *testing.T) {
	requireRoot(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := newRuntime(t)
	const limit = 64 << 20
	sb := runtimetest.Create(t, ctx, rt, hostRootfsFor(t), runtime.Spec{Limits: runtime.Limits{MemoryBytes: limit, DiskBytes: 1 << 30}})
	inst := sb.Instance.(*Instance)
	id := sb.ID()
	v1CgroupFile(t, rt, "memory", id, "memory.max_usage_in_bytes") // skip without v1 memory
	agentPid := inst.Pid()

	_, err := sb.Client.WriteFile(ctx, "/tmp/big", io.LimitReader(zeros{}, 2*limit), agentclient.WriteOptions{})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "memory limit") {
		t.Fatalf("upload of twice the memory limit: %v, want a resource-exhausted error naming the memory limit", err)
	}
	if start, err := procStartTime(agentPid); err != nil || start != inst.state.PidStart {
		t.Fatalf("the agent died during the upload (%v)", err)
	}
	// Usable: a command runs, and a small upload and its read-back work.
	res, out, _ := sb.Run(t, ctx, agentclient.ExecRequest{Shell: "ls /tmp; echo ok"})
	if res.Status != agentclient.StatusSuccess || !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "big") {
		t.Fatalf("after the upload: %+v %q (no partial file may be left)", res, out)
	}
	if _, err := sb.Client.WriteFile(ctx, "/tmp/small", strings.NewReader("hello"), agentclient.WriteOptions{}); err != nil {
		t.Fatalf("small upload after the failed one: %v", err)
	}
	peak, err := strconv.ParseInt(v1CgroupFile(t, rt, "memory", id, "memory.max_usage_in_bytes"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	agentPeak, _ := strconv.ParseInt(v1CgroupFile(t, rt, "memory", id, "agent/memory.max_usage_in_bytes"), 10, 64)
	t.Logf("<id> peak %d MiB, agent/ peak %d MiB, cap %d MiB", peak>>20, agentPeak>>20, (limit+AgentMemoryAllowance)>>20)
	if peak > limit+AgentMemoryAllowance {
		t.Errorf("<id> peak memory %d above the cap %d", peak, limit+AgentMemoryAllowance)
	}
	if oom := v1CgroupFile(t, rt, "memory", id, "agent/memory.oom_control"); !strings.Contains(oom, "oom_kill 0") {
		t.Errorf("OOM kill in agent/: %q", oom)
	}
}

// zeros is an endless reader of zero bytes.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
