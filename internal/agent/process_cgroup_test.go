//go:build linux

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fakeCgroups records what the agent asks of its cgroups. Kill kills the
// process group of the pid that Start returned.
type fakeCgroups struct {
	mu        sync.Mutex
	calls     []string
	usage     ExecUsage
	newErr    error
	startErr  error // returned by Start together with the pid
	closeErrs int   // Close fails this many times per cgroup
}

type fakeCgroup struct {
	f          *fakeCgroups
	name       string
	pid        int
	closeFails int
}

func (f *fakeCgroups) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}

func (f *fakeCgroups) called(s string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Contains(f.calls, s)
}

func (f *fakeCgroups) New(name string) (ExecCgroup, error) {
	f.record("new " + name)
	if f.newErr != nil {
		return nil, f.newErr
	}
	return &fakeCgroup{f: f, name: name, closeFails: f.closeErrs}, nil
}

func (c *fakeCgroup) Start(attr *syscall.SysProcAttr, start func() (int, error)) (int, error) {
	if attr == nil || !attr.Setsid {
		return 0, errors.New("Start got no SysProcAttr")
	}
	pid, err := start()
	c.pid = pid
	c.f.record("start " + c.name)
	if err == nil {
		err = c.f.startErr
	}
	return pid, err
}

func (c *fakeCgroup) Kill(ctx context.Context) error {
	c.f.record("kill " + c.name)
	return syscall.Kill(-c.pid, syscall.SIGKILL)
}

func (c *fakeCgroup) Usage() (ExecUsage, error) {
	c.f.record("usage " + c.name)
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.usage, nil
}

func (c *fakeCgroup) Close() error {
	c.f.mu.Lock()
	fail := c.closeFails > 0
	c.closeFails--
	c.f.mu.Unlock()
	if fail {
		c.f.record("close busy " + c.name)
		return fmt.Errorf("cgroup %s busy: %w", c.name, errdefs.ErrFailedPrecondition)
	}
	c.f.record("close " + c.name)
	return nil
}

func TestCgroups(t *testing.T) {
	t.Parallel()
	cgs := &fakeCgroups{usage: ExecUsage{CPUTime: 1500 * time.Millisecond, PeakMemoryBytes: 12345}}
	h := newHarness(t, func(o *Options) { o.Cgroups = cgs })
	ctx := context.Background()

	res, _, _ := h.exec(t, agentclient.ExecRequest{Argv: []string{"true"}})
	if res.Status != agentclient.StatusSuccess || res.CPUTime != 1500*time.Millisecond || res.PeakMemoryBytes != 12345 {
		t.Errorf("result %+v, want the cgroup's usage", res)
	}
	for _, c := range []string{"new p1", "start p1", "usage p1", "close p1"} {
		if !cgs.called(c) {
			t.Errorf("no %q in %v", c, cgs.calls)
		}
	}

	// A timeout kills through the cgroup.
	res, _, _ = h.exec(t, agentclient.ExecRequest{Argv: []string{"sleep", "100"}, Timeout: 100 * time.Millisecond})
	if res.Status != agentclient.StatusTimeout || !cgs.called("kill p2") {
		t.Errorf("timeout: %+v, calls %v", res, cgs.calls)
	}

	// So does SIGKILL; with OOM kills recorded it is a resource failure.
	cgs.mu.Lock()
	cgs.usage.OOMKills = 1
	cgs.mu.Unlock()
	p, err := h.c.Start(ctx, agentclient.ExecRequest{Argv: []string{"sleep", "100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.c.Signal(ctx, p.PID, int(syscall.SIGKILL)); err != nil {
		t.Fatal(err)
	}
	res, err = p.Wait()
	if err != nil || res.Status != agentclient.StatusResourceExceeded || !cgs.called("kill p3") {
		t.Errorf("OOM: %+v %v, calls %v", res, err, cgs.calls)
	}
	if !strings.Contains(res.Error, "out of memory") {
		t.Errorf("OOM error %q does not name memory", res.Error)
	}
	// A failure exit after an OOM kill in the tree (a pipeline stage was
	// killed) is a resource failure too; success stays success.
	res, _, _ = h.exec(t, agentclient.ExecRequest{Shell: "exit 137"})
	if res.Status != agentclient.StatusResourceExceeded || res.ExitCode != 137 {
		t.Errorf("exit 137 with OOM kills: %+v", res)
	}
	res, _, _ = h.exec(t, agentclient.ExecRequest{Shell: "exit 0"})
	if res.Status != agentclient.StatusSuccess {
		t.Errorf("exit 0 with OOM kills: %+v", res)
	}
}

func TestCgroupSweep(t *testing.T) {
	t.Parallel()
	cgs := &fakeCgroups{closeErrs: 1}
	h := newHarness(t, func(o *Options) { o.Cgroups = cgs })
	h.a.procs.mu.Lock()
	h.a.procs.sweepEvery = time.Millisecond
	h.a.procs.mu.Unlock()
	h.exec(t, agentclient.ExecRequest{Argv: []string{"true"}})
	if !cgs.called("close busy p1") {
		t.Fatalf("calls %v, want a failed close", cgs.calls)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !cgs.called("close p1") {
		if time.Now().After(deadline) {
			t.Fatalf("busy cgroup never swept: %v", cgs.calls)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestCgroupNewFails(t *testing.T) {
	t.Parallel()
	cgs := &fakeCgroups{newErr: fmt.Errorf("mkdir /sys/fs/cgroup/secret: %w", errdefs.ErrResourceExhausted)}
	h := newHarness(t, func(o *Options) { o.Cgroups = cgs })
	_, err := h.c.Exec(context.Background(), agentclient.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("Exec: %v, want resource exhausted", err)
	}
	if err != nil && (strings.Contains(err.Error(), "/sys") || strings.Contains(err.Error(), "secret")) {
		t.Errorf("error %q reveals a host path", err)
	}
	if n := h.a.procs.count(); n != 0 {
		t.Errorf("count = %d", n)
	}
}

func TestCgroupStartFailsAfterFork(t *testing.T) {
	t.Parallel()
	// The cgroup could not move the forking thread back: the child runs
	// and must be tracked like any other.
	cgs := &fakeCgroups{startErr: errors.New("move thread back")}
	h := newHarness(t, func(o *Options) { o.Cgroups = cgs })
	res, stdout, _ := h.exec(t, agentclient.ExecRequest{Shell: "echo ran"})
	if res.Status != agentclient.StatusSuccess || stdout != "ran\n" || !cgs.called("close p1") {
		t.Errorf("got %+v %q, calls %v", res, stdout, cgs.calls)
	}
}
