package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestRestartAdoption kills the daemon with SIGKILL while sandboxes run
// (one with a background process, one with an exec in flight) and checks
// that the next daemon on the same data directory adopts them with their
// files, records and processes, and removes the unclaimed pool member.
// Then it does the same through a graceful restart.
func TestRestartAdoption(t *testing.T) {
	e := newEnv(t, "--pool-size", "1")
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)

	a, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: 10 * time.Minute, Metadata: map[string]string{"name": "a"}})
	if err != nil {
		t.Fatal(err)
	}
	track(a.ID)
	b, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{
		Timeout:  10 * time.Minute,
		Limits:   &client.Limits{MemoryMB: 256},
		Env:      map[string]string{"E2E_NAME": "bravo"},
		Metadata: map[string]string{"name": "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	track(b.ID)
	for id, content := range map[string]string{a.ID: "alpha", b.ID: "bravo"} {
		if _, err := d.C.WriteFile(ctx, id, "keep/note.txt", strings.NewReader(content)); err != nil {
			t.Fatal(err)
		}
	}

	// A background process in a, detached from the exec that starts it.
	res := mustExec(t, d, a.ID, client.ExecRequest{Command: "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!"})
	bgPID := strings.TrimSpace(string(res.Stdout))
	if _, err := strconv.Atoi(bgPID); err != nil {
		t.Fatalf("background process: stdout %q", res.Stdout)
	}
	bgAlive := func(d *daemon) bool {
		r := mustExec(t, d, a.ID, client.ExecRequest{Cmd: []string{"kill", "-0", bgPID}})
		return r.ExitCode == 0
	}
	bgSurvivesExec := bgAlive(d)
	if !bgSurvivesExec {
		t.Logf("a background process does not outlive the exec that started it; checking files only")
	}

	// An exec in flight in b when the daemon dies.
	started := make(chan struct{})
	streamErr := make(chan error, 1)
	go func() {
		once := false
		_, err := d.C.ExecStream(ctx, b.ID, client.ExecRequest{Command: "echo started; exec sleep 299", Timeout: 5 * time.Minute},
			func(_ client.Stream, data []byte) error {
				if !once && strings.Contains(string(data), "started") {
					once = true
					close(started)
				}
				return nil
			})
		streamErr <- err
	}()
	select {
	case <-started:
	case err := <-streamErr:
		t.Fatalf("streamed exec ended early: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("streamed exec did not start")
	}

	// The unclaimed pool member, which the next daemon must destroy.
	var poolID string
	waitFor(20*time.Second, func() bool {
		for _, id := range e.scanIDs() {
			if id != a.ID && id != b.ID {
				if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", id, "state.json")); err == nil {
					poolID = id
					return true
				}
			}
		}
		return false
	})

	d.Kill()
	if err := <-streamErr; err == nil {
		t.Errorf("the streamed exec succeeded although the daemon was killed")
	}
	for _, id := range []string{a.ID, b.ID} {
		if len(cgroupProcs(id)) == 0 {
			t.Fatalf("sandbox %s has no processes left after the daemon was killed", id)
		}
	}

	d = e.start()
	t.Logf("restart after SIGKILL: serving after %v", d.StartedIn.Round(time.Millisecond))
	waitRecovered(t, d, time.Minute)
	if d.AnnouncedKey != "" {
		t.Errorf("a restart announced a new admin key")
	}
	checkAdopted := func(d *daemon, when string) {
		t.Helper()
		sbs, err := d.C.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			t.Fatalf("%s: list: %v", when, err)
		}
		byID := map[string]client.Sandbox{}
		for _, sb := range sbs {
			byID[sb.ID] = sb
		}
		if len(sbs) != 2 {
			t.Errorf("%s: %d sandboxes listed, want 2: %+v", when, len(sbs), sbs)
		}
		for _, want := range []*client.Sandbox{a, b} {
			got, ok := byID[want.ID]
			if !ok || got.State != client.StateRunning {
				t.Errorf("%s: sandbox %s: %+v, want running", when, want.ID, got)
				continue
			}
			if got.Metadata["name"] != want.Metadata["name"] || got.Limits != want.Limits ||
				got.ExpiresAt.Sub(want.ExpiresAt).Abs() > time.Second || got.Template != want.Template {
				t.Errorf("%s: adopted %+v, created %+v", when, got, want)
			}
		}
		for id, content := range map[string]string{a.ID: "alpha", b.ID: "bravo"} {
			if got := string(readAll(t, d, id, "keep/note.txt")); got != content {
				t.Errorf("%s: file in %s = %q, want %q", when, id, got, content)
			}
			r := mustExec(t, d, id, client.ExecRequest{Command: "echo ok-$E2E_NAME"})
			want := "ok-\n"
			if id == b.ID {
				want = "ok-bravo\n"
			}
			if r.Status != "success" || string(r.Stdout) != want {
				t.Errorf("%s: exec in %s: %q %q, want success %q", when, id, r.Status, r.Stdout, want)
			}
		}
		if bgSurvivesExec && !bgAlive(d) {
			t.Errorf("%s: the background process in %s is gone", when, a.ID)
		}
	}
	checkAdopted(d, "after SIGKILL")

	// The exec that was in flight ended with its stream.
	procs := func(id string) string {
		r := mustExec(t, d, id, client.ExecRequest{Command: "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"})
		return string(r.Stdout)
	}
	if bgSurvivesExec && !strings.Contains(procs(a.ID), "sleep 300") {
		t.Errorf("the process list of %s lacks the background sleep: %q", a.ID, procs(a.ID))
	}
	if !waitFor(10*time.Second, func() bool { return !strings.Contains(procs(b.ID), "sleep 299") }) {
		t.Errorf("the process of the exec whose stream broke still runs in %s: %q", b.ID, procs(b.ID))
	}
	if poolID == "" {
		t.Logf("the pool had no member before the kill; skipping the pool member check")
	} else if !waitFor(10*time.Second, func() bool { return len(sandboxCgroups(poolID)) == 0 }) {
		t.Errorf("the unclaimed pool member %s survived the restart: cgroups %v", poolID, sandboxCgroups(poolID))
	} else if _, err := os.Stat(filepath.Join(e.dir, "sandboxes", poolID)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir of the unclaimed pool member %s: %v, want gone", poolID, err)
	}

	d.Stop()
	d = e.start()
	t.Logf("restart after SIGTERM: serving after %v", d.StartedIn.Round(time.Millisecond))
	waitRecovered(t, d, time.Minute)
	checkAdopted(d, "after SIGTERM")

	// Still usable: a new sandbox and a delete.
	c, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{})
	if err != nil {
		t.Fatal(err)
	}
	track(c.ID)
	if err := d.C.DeleteSandbox(ctx, c.ID); err != nil {
		t.Error(err)
	}
}

// cgroupProcs returns the host pids in sandbox id's cgroups (of the first
// hierarchy that has them).
func cgroupProcs(id string) []int {
	for _, root := range sandboxCgroups(id) {
		var pids []int
		_ = filepath.WalkDir(root, func(p string, de os.DirEntry, err error) error {
			if err != nil || !de.IsDir() {
				return nil
			}
			b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
		if len(pids) > 0 {
			return pids
		}
	}
	return nil
}

// waitRecovered waits until d has adopted or ended every sandbox it found
// at its start (none is adopting or stopping) and returns the list.
func waitRecovered(t *testing.T, d *daemon, within time.Duration) []client.Sandbox {
	t.Helper()
	ctx := ctxT(t, within+10*time.Second)
	var sbs []client.Sandbox
	var err error
	ok := waitFor(within, func() bool {
		sbs, err = d.C.ListSandboxes(ctx, client.ListOptions{})
		if err != nil {
			return false
		}
		for _, sb := range sbs {
			if sb.State == client.StateAdopting || sb.State == client.StateStopping {
				return false
			}
		}
		return true
	})
	if !ok {
		t.Fatalf("recovery not done within %v: %v %+v", within, err, sbs)
	}
	return sbs
}

// slowCPUs is the CPU limit of TestRestartSlow: the least
// the API accepts.
var slowCPUs = sandbox.MinCPUs

// TestRestartSlow restarts the daemon 10 times (SIGKILL
// and SIGTERM in turn) while a sandbox at the least CPU the API accepts
// runs 8 busy loops, and checks that it comes back every time, running,
// and still answers exec within a few seconds. Before the fix adoption
// pinged each agent with a 2 s limit and destroyed those that did not
// answer in time: at the old minimum (0.01 CPU) such a sandbox was
// destroyed by about 2 restarts in 7.
func TestRestartSlow(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 4*time.Minute)
	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: 10 * time.Minute, Limits: &client.Limits{CPUs: slowCPUs}})
	if err != nil {
		t.Fatal(err)
	}
	track(sb.ID)
	mustExec(t, d, sb.ID, client.ExecRequest{Command: "for i in 1 2 3 4 5 6 7 8; do setsid sh -c 'while :; do :; done' </dev/null >/dev/null 2>&1 & done"})
	execTook := func(d *daemon) time.Duration {
		t0 := time.Now()
		r := mustExec(t, d, sb.ID, client.ExecRequest{Cmd: []string{"true"}})
		if r.Status != "success" {
			t.Errorf("exec in the slow sandbox: %+v", r)
		}
		return time.Since(t0)
	}
	time.Sleep(time.Second) // the loops take the quota
	t.Logf("cpus %g, 8 busy loops: exec answered in %v", slowCPUs, execTook(d).Round(time.Millisecond))
	for i := range 10 {
		if i%2 == 0 {
			d.Kill()
		} else {
			d.Stop()
		}
		d = e.start()
		sbs := waitRecovered(t, d, time.Minute)
		if len(sbs) != 1 || sbs[0].ID != sb.ID || sbs[0].State != client.StateRunning {
			t.Fatalf("restart %d: sandboxes %+v, want %s running", i+1, sbs, sb.ID)
		}
	}
	took := execTook(d)
	t.Logf("after 10 restarts: exec answered in %v", took.Round(time.Millisecond))
	if took > 5*time.Second {
		t.Errorf("exec in the slow sandbox took %v, want a few seconds at most", took)
	}
	if r := mustExec(t, d, sb.ID, client.ExecRequest{Command: "pgrep -c -f 'while [:]'"}); strings.TrimSpace(string(r.Stdout)) != "8" {
		t.Errorf("busy loops after the restarts: %q, want 8", r.Stdout)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Error(err)
	}
}

// freezeSandbox freezes every process of sandbox id through its cgroup,
// as a destroy cut short by a kill of the daemon leaves it (the v1 kill
// freezes the tree before it signals it).
func freezeSandbox(t *testing.T, id string) {
	t.Helper()
	for _, dir := range sandboxCgroups(id) {
		for file, value := range map[string]string{"freezer.state": "FROZEN", "cgroup.freeze": "1"} {
			p := filepath.Join(dir, file)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
				t.Fatalf("freeze %s: %v", id, err)
			}
			return
		}
	}
	t.Fatalf("sandbox %s has no freezer cgroup", id)
}

// TestRestartFrozen leaves 6 sandboxes frozen while no
// daemon runs, as a daemon killed during their deletes would, one of them
// with its record saying it was being destroyed. The next daemon must
// serve at once (before the fix each frozen sandbox cost a 2 s ping
// before the API served, and all were destroyed), thaw and adopt the five
// whose destroy was never recorded, finish the destroy of the sixth, and
// record that end in the audit log.
func TestRestartFrozen(t *testing.T) {
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 3*time.Minute)
	var ids []string
	for range 6 {
		sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		track(sb.ID)
		ids = append(ids, sb.ID)
	}
	base := d.StartedIn
	d.Kill()
	for _, id := range ids {
		freezeSandbox(t, id)
	}
	// The sixth was being destroyed: its record says so.
	ending := ids[5]
	recPath := filepath.Join(e.dir, "records", ending+".json")
	b, err := os.ReadFile(recPath)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	rec["ending"] = "requested"
	if b, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(recPath, b, 0o600); err != nil {
		t.Fatal(err)
	}

	d = e.start()
	t.Logf("first start served after %v; with 6 frozen sandboxes after %v", base.Round(time.Millisecond), d.StartedIn.Round(time.Millisecond))
	if d.StartedIn > base+2*time.Second {
		t.Errorf("the daemon served %v after its start with frozen sandboxes (%v without), want at most 2 s more", d.StartedIn, base)
	}
	// Known from the first moment: adopting or running, never not found.
	for _, id := range ids[:5] {
		sb, err := d.C.GetSandbox(ctx, id)
		if err != nil || (sb.State != client.StateAdopting && sb.State != client.StateRunning) {
			t.Errorf("sandbox %s right after the restart: %+v %v, want adopting or running", id, sb, err)
		}
	}
	sbs := waitRecovered(t, d, time.Minute)
	state := map[string]client.State{}
	for _, sb := range sbs {
		state[sb.ID] = sb.State
	}
	for _, id := range ids[:5] {
		if state[id] != client.StateRunning {
			t.Errorf("frozen sandbox %s is %q after the restart, want running", id, state[id])
			continue
		}
		if r := mustExec(t, d, id, client.ExecRequest{Cmd: []string{"true"}}); r.Status != "success" {
			t.Errorf("exec in thawed sandbox %s: %+v", id, r)
		}
	}
	if st, ok := state[ending]; ok && st != client.StateStopped {
		t.Errorf("sandbox %s, whose destroy had begun, is %s after the restart", ending, st)
	}
	if !waitFor(10*time.Second, func() bool { return len(sandboxCgroups(ending)) == 0 }) {
		t.Errorf("sandbox %s, whose destroy had begun, keeps its cgroups", ending)
	}
	for _, id := range ids[:5] {
		if err := d.C.DeleteSandbox(ctx, id); err != nil {
			t.Error(err)
		}
	}
	d.Stop()
	ends := 0
	for _, r := range verifyAudit(t, e) {
		if r.Action == "sandbox.end" && r.Target == ending && r.Outcome == "ok" && strings.Contains(string(r.Details), `"reason":"destroy_interrupted"`) {
			ends++
		}
	}
	if ends != 1 {
		t.Errorf("%d successful sandbox.end records name %s, want 1", ends, ending)
	}
}

// TestRestartMany measures a restart with many sandboxes, one in
// ten of them frozen (as a daemon killed during their deletes would leave
// them): how soon the next daemon serves, and how soon it has adopted
// every one. It runs only when AIRLOCK_E2E_RESTART_SANDBOXES says how
// many sandboxes (docs/BENCHMARKS.md has the command and the figures).
func TestRestartMany(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AIRLOCK_E2E_RESTART_SANDBOXES"))
	if n <= 0 {
		t.Skip("set AIRLOCK_E2E_RESTART_SANDBOXES to the number of sandboxes to restart with")
	}
	e := newEnv(t, "--max-sandboxes", strconv.Itoa(n+10), "--rate-limit", "100000", "--rate-burst", "100000")
	d := e.start()
	ctx := ctxT(t, 30*time.Minute)
	ids := make([]string, n)
	t0 := time.Now()
	var wg sync.WaitGroup
	var failed atomic.Int64
	next := atomic.Int64{}
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Timeout: time.Hour, Limits: &client.Limits{MemoryMB: 64, Pids: 32}})
				if err != nil {
					failed.Add(1)
					t.Errorf("create %d: %v", i, err)
					return
				}
				track(sb.ID)
				ids[i] = sb.ID
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	t.Logf("created %d sandboxes in %v", n, time.Since(t0).Round(time.Millisecond))
	base := d.StartedIn
	d.Kill()
	frozen := 0
	for i, id := range ids {
		if i%10 == 0 {
			freezeSandbox(t, id)
			frozen++
		}
	}
	d = e.start()
	served := d.StartedIn
	t1 := time.Now()
	sbs := waitRecovered(t, d, 10*time.Minute)
	adoptedIn := time.Since(t1)
	running := 0
	for _, sb := range sbs {
		if sb.State == client.StateRunning {
			running++
		}
	}
	t.Logf("restart with %d sandboxes (%d frozen): served after %v (empty data dir: %v), all adopted %v after serving; %d running",
		n, frozen, served.Round(time.Millisecond), base.Round(time.Millisecond), (adoptedIn).Round(time.Millisecond), running)
	if running != n {
		t.Errorf("%d of %d sandboxes running after the restart", running, n)
	}
	if served > 2*time.Second {
		t.Errorf("the daemon served %v after its start, want within 2 s", served)
	}
	for _, i := range []int{0, n / 2, n - 1} {
		if r := mustExec(t, d, ids[i], client.ExecRequest{Cmd: []string{"true"}}); r.Status != "success" {
			t.Errorf("exec in %s: %+v", ids[i], r)
		}
	}
	t2 := time.Now()
	next.Store(0)
	for range 4 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if err := d.C.DeleteSandbox(ctx, ids[i]); err != nil {
					t.Errorf("delete %s: %v", ids[i], err)
				}
			}
		})
	}
	wg.Wait()
	t.Logf("deleted %d sandboxes in %v", n, time.Since(t2).Round(time.Millisecond))
}
