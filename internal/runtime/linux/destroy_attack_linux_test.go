package linux

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/runtime/runtimetest"
)

// Issue 11, finding 3: a sandbox whose cgroup tree under work/ was nested
// deeper than the cgroup walk went (32 levels) could not be destroyed: the
// walk failed with E2BIG and the kill returned before any SIGKILL, leaving
// the agent and its processes running. These tests build such trees from
// the daemon's side (however the sandbox got there) and check that
// Destroy, and Recover after a restart, leave nothing of the sandbox.

// sandboxCgroupDirs lists the sandbox's cgroup directory in every mounted
// hierarchy that has one.
func sandboxCgroupDirs(t *testing.T, rt *Runtime, id string) []string {
	t.Helper()
	ents, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	// v2: /sys/fs/cgroup/<parent>/<id>; v1: one per hierarchy.
	if p := filepath.Join("/sys/fs/cgroup", rt.cfg.CgroupParent, id); isCgroupDir(p) {
		return []string{p}
	}
	for _, e := range ents {
		if p := filepath.Join("/sys/fs/cgroup", e.Name(), rt.cfg.CgroupParent, id); isCgroupDir(p) {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

func isCgroupDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// plantDeep starts a setsid'ed sleep in the sandbox, nests a chain of
// depth cgroups under <id>/work in every hierarchy and moves the sleep into
// the deepest, optionally freezing that cgroup by its own state. It
// returns the sleep's host pid.
func plantDeep(t *testing.T, rt *Runtime, inst *Instance, depth int, freeze bool) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := agentclient.New(inst.Dial)
	defer c.Close()
	res, err := c.Exec(ctx, agentclient.ExecRequest{Shell: "setsid sleep 1000 </dev/null >/dev/null 2>&1 &", User: "root"})
	if err != nil || res.Status != agentclient.StatusSuccess {
		t.Fatalf("start sleep: %v %+v", err, res)
	}
	var pid int
	for deadline := time.Now().Add(5 * time.Second); pid == 0 && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		procs, _ := inst.cg.Procs()
		for _, p := range procs {
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
				pid = p
			}
		}
	}
	if pid == 0 {
		t.Fatal("the sleep is not in the sandbox's cgroups")
	}
	chain := strings.Repeat("/d", depth)
	dirs := sandboxCgroupDirs(t, rt, inst.ID())
	if len(dirs) == 0 {
		t.Fatal("no cgroup directories")
	}
	var frozen string
	for _, d := range dirs {
		deepest := filepath.Join(d, "work"+chain)
		if err := os.MkdirAll(deepest, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(deepest, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			t.Fatalf("move the sleep into %s: %v", deepest, err)
		}
		for _, f := range []string{"freezer.state", "cgroup.freeze"} { // v1, v2
			if _, err := os.Stat(filepath.Join(deepest, f)); err == nil && freeze {
				frozen = filepath.Join(deepest, f)
			}
		}
	}
	freezeTo := func(on bool) error {
		v := map[bool]string{true: "FROZEN", false: "THAWED"}[on]
		if filepath.Base(frozen) == "cgroup.freeze" {
			v = map[bool]string{true: "1", false: "0"}[on]
		}
		return os.WriteFile(frozen, []byte(v), 0)
	}
	if freeze {
		if frozen == "" {
			t.Skip("no freezer")
		}
		if err := freezeTo(true); err != nil {
			t.Fatal(err)
		}
	}
	// Should the test fail, leave nothing behind for the next one.
	agentPid := inst.Pid()
	t.Cleanup(func() {
		if frozen != "" {
			_ = freezeTo(false)
		}
		_ = syscall.Kill(agentPid, syscall.SIGKILL)
		_ = syscall.Kill(pid, syscall.SIGKILL)
		time.Sleep(200 * time.Millisecond)
		for _, d := range dirs {
			for p := filepath.Join(d, "work"+chain); strings.HasPrefix(p, d); p = filepath.Dir(p) {
				_ = os.Remove(p)
			}
		}
	})
	return pid
}

// assertSandboxGone checks that nothing of sandbox id is left: no process
// (pids are the agent's and a planted one), cgroup, state directory, host
// mount under it or uid slot.
func assertSandboxGone(t *testing.T, rt *Runtime, id string, pids ...int) {
	t.Helper()
	for _, pid := range pids {
		deadline := time.Now().Add(5 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d of the sandbox still exists (%v)", pid, err)
		}
	}
	if dirs := sandboxCgroupDirs(t, rt, id); len(dirs) != 0 {
		t.Errorf("cgroups left: %v", dirs)
	}
	dir := filepath.Join(rt.cfg.StateDir, id)
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir left (%v)", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(mi), dir) {
		t.Errorf("a host mount under the state dir is left")
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for slot, owner := range rt.slots {
		if owner == id {
			t.Errorf("uid slot %d still reserved", slot)
		}
	}
	if _, ok := rt.live[id]; ok {
		t.Errorf("still a live sandbox of the runtime")
	}
}

func TestDestroyDeepCgroupTree(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name   string
		depth  int
		freeze bool
	}{
		{"depth40", 40, false},
		{"depth200", 200, false},
		{"depth40-frozen", 40, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rt := newRuntime(t)
			i, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("deep"), Rootfs: hostRootfsFor(t)})
			if err != nil {
				t.Fatal(err)
			}
			inst := i.(*Instance)
			pid := plantDeep(t, rt, inst, tc.depth, tc.freeze)
			dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
			defer dcancel()
			if err := inst.Destroy(dctx); err != nil {
				t.Fatalf("destroy: %v", err)
			}
			assertSandboxGone(t, rt, inst.ID(), inst.Pid(), pid)
		})
	}
}

func TestRecoverDeepCgroupTree(t *testing.T) {
	requireRoot(t)
	for _, tc := range []struct {
		name  string
		adopt bool // the agent answers: adopted, then destroyed
	}{
		{"adopted", true},
		// The state file no longer matches the agent (its start time):
		// Recover cannot trust the pid and must kill through the cgroups.
		{"purged", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rt := newRuntime(t)
			i, err := rt.Create(ctx, runtime.Spec{ID: runtimetest.NewID("deeprec"), Rootfs: hostRootfsFor(t)})
			if err != nil {
				t.Fatal(err)
			}
			inst := i.(*Instance)
			pid := plantDeep(t, rt, inst, 60, true)
			if !tc.adopt {
				st := *inst.state
				st.PidStart++
				b, err := json.Marshal(&st)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(inst.dir, stateFile), b, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			// A restarted daemon: a new runtime over the same state dir.
			rt2 := openRuntime(t, rt.cfg.StateDir)
			rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
			defer rcancel()
			adopted, err := rt2.Recover(rctx)
			if err != nil {
				t.Fatalf("recover: %v", err)
			}
			if tc.adopt {
				if len(adopted) != 1 || adopted[0].ID() != inst.ID() {
					t.Fatalf("adopted %d sandboxes, want %s", len(adopted), inst.ID())
				}
				if err := adopted[0].Destroy(rctx); err != nil {
					t.Fatalf("destroy of the adopted sandbox: %v", err)
				}
			} else if len(adopted) != 0 {
				t.Fatalf("adopted %d sandboxes, want none", len(adopted))
			}
			assertSandboxGone(t, rt2, inst.ID(), inst.Pid(), pid)
		})
	}
}
