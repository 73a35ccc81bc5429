package e2e

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// The daemon fails closed on cgroup v2 when a controller the sandboxes'
// limits need is withheld: at start, and at a create.

// TestRefuseWithheldController starts a daemon in a container whose
// parent cgroup does not give it the pids controller (cgroup v2 only): it
// must refuse to start, naming pids and the setting to change, before it
// makes anything in its cgroup; `airlock doctor` there must say the same
// and exit 1.
func TestRefuseWithheldController(t *testing.T) {
	e := newEnvWith(t, envOptions{container: true, withhold: []string{"pids"}})
	if d, err := e.tryStart(); err == nil {
		d.Stop()
		t.Fatal("a daemon whose cgroup has no pids controller started")
	}
	// One line per failed check: "  - name: found; fix: ...".
	log := readLog(e, e.n)
	named := slices.ContainsFunc(strings.Split(log, "\n"), func(l string) bool {
		found, fix, _ := strings.Cut(l, "; fix: ")
		return strings.HasPrefix(l, "  - ") && strings.Contains(found, "pids") && strings.Contains(fix, "cgroup.subtree_control")
	})
	if !strings.Contains(log, "mandatory check(s) failed") || !named {
		t.Errorf("the refusal does not name a failed check that names pids, with a fix naming cgroup.subtree_control:\n%s", log)
	}
	if _, err := os.Stat(e.ctr.sandboxParent()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused daemon made its cgroup parent %s (%v)", e.ctr.sandboxParent(), err)
	}

	cmd, release, err := e.command("doctor", "--data-dir", e.dir, "--json")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	release()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("doctor: %v, want exit status 1; output:\n%s", err, out)
	}
	var rep struct {
		Host struct {
			OK     bool          `json:"ok"`
			Checks []doctorCheck `json:"checks"`
		} `json:"host"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("doctor --json: %v:\n%s", err, out)
	}
	if rep.Host.OK || !slices.ContainsFunc(rep.Host.Checks, func(c doctorCheck) bool {
		return c.Status == "fail" && c.Mandatory && strings.Contains(c.Found, "pids") && strings.Contains(c.Fix, "cgroup.subtree_control")
	}) {
		t.Errorf("doctor: ok %v, checks %+v; want a mandatory check failed, naming pids, with a fix naming cgroup.subtree_control", rep.Host.OK, rep.Host.Checks)
	}
}

// doctorCheck is a check of `airlock doctor --json`.
type doctorCheck struct {
	Name      string `json:"name"`
	Status    string `json:"status"`
	Mandatory bool   `json:"mandatory"`
	Found     string `json:"found"`
	Fix       string `json:"fix"`
}

// TestCreateFailsClosed withdraws the pids controller from the daemon's
// cgroup parent while it runs and has no sandbox (cgroup v2 only; the
// kernel allows that then): a create must fail with an error naming pids
// and leave nothing behind, and once the controller is back, creates work
// again. The daemon's start-up checks cannot see this: they passed.
func TestCreateFailsClosed(t *testing.T) {
	if _, err := v2Mount(); err != nil {
		t.Skipf("controllers are given to cgroups on v2 only: %v", err)
	}
	e := newEnv(t)
	d := e.start()
	ctx := ctxT(t, 2*time.Minute)
	ctl := filepath.Join(e.cgroupParentDir(), "cgroup.subtree_control")
	if b, err := os.ReadFile(ctl); err != nil || !slices.Contains(strings.Fields(string(b)), "pids") {
		t.Fatalf("%s: %q, %v; want pids enabled by the daemon", ctl, b, err)
	}
	if err := os.WriteFile(ctl, []byte("-pids"), 0); err != nil {
		t.Fatalf("withdraw pids: %v", err)
	}
	restored := false
	restore := func() {
		if !restored {
			restored = true
			if err := os.WriteFile(ctl, []byte("+pids"), 0); err != nil {
				t.Errorf("give pids back: %v", err)
			}
		}
	}
	t.Cleanup(restore) // before the env's cleanup deletes what is left

	sb, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &client.Limits{Pids: 64}})
	if err == nil {
		track(sb.ID)
		t.Fatalf("created %s without the pids controller", sb.ID)
	}
	if !errors.Is(err, client.ErrNotSupported) || !strings.Contains(err.Error(), "pids") {
		t.Errorf("create without pids: %v; want not supported, naming pids", err)
	}
	t.Logf("create without pids: %v", err)
	if sbs, err := d.C.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(sbs) != 0 {
		t.Errorf("sandboxes listed after the failed create: %+v, %v", sbs, err)
	}
	if left := cgroupTree(e.cgroupParentDir()); len(left) != 1 {
		t.Errorf("cgroups left under the parent: %v", left[1:])
	}
	for _, id := range e.seenIDs() {
		checkGone(t, e, id)
	}
	if pids := mountingProcs(filepath.Join(e.dir, "sandboxes") + "/"); len(pids) > 0 {
		t.Errorf("processes with a mount of a sandbox: %v", pids)
	}

	restore()
	sb, err = d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Limits: &client.Limits{Pids: 64}})
	if err != nil {
		t.Fatalf("create once pids is back: %v", err)
	}
	track(sb.ID)
	if r := mustExec(t, d, sb.ID, client.ExecRequest{Command: "echo ok"}); r.Status != client.StatusSuccess || string(r.Stdout) != "ok\n" {
		t.Errorf("exec: %q %q", r.Status, r.Stdout)
	}
	if err := d.C.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Error(err)
	}
	checkGone(t, e, sb.ID)
}
