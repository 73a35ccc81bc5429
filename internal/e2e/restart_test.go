package e2e

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
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
