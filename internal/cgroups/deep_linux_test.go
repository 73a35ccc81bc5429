//go:build linux

package cgroups

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// deepChain makes a chain of depth cgroups below rel of the sandbox in
// every hierarchy and returns the path of the deepest, relative to <id>.
func deepChain(t *testing.T, m *Manager, s *Sandbox, rel string, depth int) string {
	t.Helper()
	parts := []string{rel}
	for i := 0; i < depth; i++ {
		parts = append(parts, "d")
	}
	deepest := filepath.Join(parts...)
	for _, h := range m.l.hiers {
		if err := os.MkdirAll(s.testPath(h, deepest), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return deepest
}

// TestKillRemoveDeepTree checks that Kill and Remove do not give up on a
// tree the sandbox built: a chain far deeper than any fixed walk limit,
// its deepest cgroup frozen by its own state with a process inside, and a
// directory wider than one getdents batch. Before, the walk stopped at 32
// levels with E2BIG and Kill returned before sending any signal.
func TestKillRemoveDeepTree(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		deepest := deepChain(t, m, s, "work", 300)
		// Wide: more children than one batch of directory entries.
		fh := freezerHier(m)
		for i := 0; i < dirBatch+10; i++ {
			if err := os.Mkdir(s.testPath(fh, "work", "w"+strconv.Itoa(i)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := startGated(t, s, "exec sleep 1000")
		pid := strconv.Itoa(cmd.Process.Pid)
		for _, h := range m.l.hiers {
			if err := os.WriteFile(s.testPath(h, deepest, "cgroup.procs"), []byte(pid), 0); err != nil {
				t.Fatalf("move into the deepest cgroup: %v", err)
			}
		}
		tab := tables[m.l.v]
		frozen := s.testPath(fh, deepest, tab.freeze.name)
		if err := os.WriteFile(frozen, []byte(tab.frozen), 0); err != nil {
			t.Fatal(err)
		}
		// Should Kill fail, thaw before startGated's cleanup kills and
		// waits (cleanups run last first), or the test would hang.
		t.Cleanup(func() { _ = os.WriteFile(frozen, []byte(tab.thawed), 0) })
		procs, err := s.Procs()
		if err != nil || len(procs) != 1 || procs[0] != cmd.Process.Pid {
			t.Fatalf("Procs = %v, %v; want [%s]", procs, err, pid)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := s.Kill(ctx); err != nil {
			t.Fatalf("Kill: %v", err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			if err == nil || !strings.Contains(err.Error(), "killed") {
				t.Errorf("process after Kill: %v, want killed", err)
			}
		case <-ctx.Done():
			t.Fatal("process not dead after Kill")
		}
		if err := s.Remove(ctx); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		assertGone(t, m, s.ID())
	})
}

// TestRemoveTreeBusyDeep checks that removal of a deep tree with a process
// at the bottom removes nothing it must keep, reports EBUSY (so that
// removeTreeWait retries) and completes once the process is gone.
func TestRemoveTreeBusyDeep(t *testing.T) {
	forEach(t, func(t *testing.T, m *Manager) {
		s := create(t, m, Limits{})
		deepest := deepChain(t, m, s, "work", 100)
		cmd := startGated(t, s, "exec sleep 1000")
		pid := strconv.Itoa(cmd.Process.Pid)
		for _, h := range m.l.hiers {
			if err := os.WriteFile(s.testPath(h, deepest, "cgroup.procs"), []byte(pid), 0); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if err := s.Remove(ctx); err == nil {
			t.Fatal("Remove with a process inside succeeded")
		}
		for _, h := range m.l.hiers {
			if _, err := os.Stat(s.testPath(h, deepest)); err != nil {
				t.Errorf("%s: the busy cgroup is gone: %v", h.name, err)
			}
		}
		cmd.Process.Kill()
		cmd.Wait()
		ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel2()
		if err := s.Remove(ctx2); err != nil {
			t.Fatalf("Remove after the process ended: %v", err)
		}
		assertGone(t, m, s.ID())
	})
}
