//go:build linux

package agent

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
)

const reapAllHelperEnv = "AIRLOCK_AGENT_REAPALL_HELPER"

// TestReapAll runs TestReapAllHelper in a child test process: reaping every
// child would steal the children of other tests in this one.
func TestReapAll(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestReapAllHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), reapAllHelperEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestReapAllHelper") {
		t.Fatalf("helper failed: %v\n%s", err, out)
	}
}

// TestReapAllHelper plays PID 1: a subreaper whose agent reaps everything.
func TestReapAllHelper(t *testing.T) {
	if os.Getenv(reapAllHelperEnv) == "" {
		t.Skip("runs only as the child of TestReapAll")
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Skipf("cannot become a subreaper: %v", err)
	}
	h := newHarness(t, func(o *Options) { o.ReapAll = true })

	// Exit codes and signals come through the reaper.
	res, _, _ := h.exec(t, agentclient.ExecRequest{Shell: "exit 5"})
	if res.ExitCode != 5 || res.Status != agentclient.StatusError {
		t.Errorf("exit 5: %+v", res)
	}
	res, _, _ = h.exec(t, agentclient.ExecRequest{Shell: "kill -9 $$"})
	if res.Status != agentclient.StatusKilled || res.Signal != 9 {
		t.Errorf("kill -9: %+v", res)
	}

	// Children that exit at once, concurrently.
	var wg sync.WaitGroup
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := h.c.Exec(context.Background(), agentclient.ExecRequest{Shell: "exit " + strconv.Itoa(i%4)})
			if err != nil || res.ExitCode != i%4 {
				t.Errorf("exec %d: %+v %v", i, res, err)
			}
		}()
	}
	wg.Wait()

	// An orphan reparented to the agent is reaped, not left a zombie.
	_, stdout, _ := h.exec(t, agentclient.ExecRequest{Shell: "sleep 0.2 >/dev/null 2>&1 & echo $!"})
	orphan, err := strconv.Atoi(strings.TrimSpace(stdout))
	if err != nil {
		t.Fatalf("orphan pid %q: %v", stdout, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := os.Stat("/proc/" + strconv.Itoa(orphan)); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("orphan %d was not reaped", orphan)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
