package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/audit"
)

// liveProcs lists the sandbox's processes that are not zombies (under the
// fake runtime orphans are reparented outside the sandbox, whose init
// reaps them when it pleases).
func liveProcs(t *testing.T, c *client.Client, id string) []client.Process {
	t.Helper()
	l, err := c.ListProcesses(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if l.Total != len(l.Processes) || l.Truncated {
		t.Errorf("list: total %d, truncated %v, %d processes", l.Total, l.Truncated, len(l.Processes))
	}
	return slices.DeleteFunc(l.Processes, func(p client.Process) bool { return p.State == "zombie" })
}

// findCmd returns the listed process whose command line is cmd.
func findCmd(ps []client.Process, cmd ...string) *client.Process {
	for i := range ps {
		if slices.Equal(ps[i].Cmd, cmd) {
			return &ps[i]
		}
	}
	return nil
}

// processAlive reports whether pid runs (not a zombie).
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

func TestProcesses(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)

	// A command that returns at once and leaves two processes behind.
	res, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "sleep 300 & sleep 301 & exit 0"})
	if err != nil || res.Status != client.StatusSuccess {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	var ps []client.Process
	waitUntil(t, 5*time.Second, "the background processes to be listed", func() bool {
		ps = liveProcs(t, a, sb.ID)
		return len(ps) == 2
	})
	s1, s2 := findCmd(ps, "sleep", "300"), findCmd(ps, "sleep", "301")
	if s1 == nil || s2 == nil {
		t.Fatalf("processes %+v; want the two sleeps", ps)
	}
	if s1.StartedByAgent || s1.State != "sleeping" || s1.Name != "sleep" || s1.Session != s2.Session ||
		s1.User == "" || time.Since(s1.StartedAt) > time.Minute {
		t.Errorf("listed %+v", *s1)
	}

	// Validation.
	for _, tc := range []struct{ pid, body, code string }{
		{"abc", `{"signal":"TERM"}`, CodeInvalidArgument},
		{"0", `{"signal":"TERM"}`, CodeInvalidArgument},
		{"012", `{"signal":"TERM"}`, CodeInvalidArgument},
		{strconv.Itoa(s1.PID), `{"signal":"NOPE"}`, CodeInvalidArgument},
		{strconv.Itoa(s1.PID), `{"signal":65}`, CodeInvalidArgument},
		{strconv.Itoa(s1.PID), `{"signal":"0"}`, CodeInvalidArgument},
		{strconv.Itoa(s1.PID), `{"signal":1.5}`, CodeInvalidArgument},
		{strconv.Itoa(s1.PID), `{}`, CodeInvalidArgument},
		{strconv.Itoa(s1.PID), `{"signal":"TERM","x":1}`, CodeInvalidArgument},
		{"4000000", `{"signal":"TERM"}`, CodeNotFound},
	} {
		resp, body := e.do("POST", "/v1/sandboxes/"+sb.ID+"/processes/"+tc.pid+"/signal", keyA, "application/json", []byte(tc.body))
		if got := errCode(t, body); got != tc.code {
			t.Errorf("signal %s %s: %d %s, want %s", tc.pid, tc.body, resp.StatusCode, body, tc.code)
		}
	}
	if !processAlive(s1.PID) {
		t.Fatal("a refused signal killed the process")
	}
	e.audit.take()

	// A signal by name reaches a process no request started.
	if err := a.SignalProcess(ctx, sb.ID, s1.PID, "sigterm"); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the signalled process to end", func() bool { return !processAlive(s1.PID) })
	if !processAlive(s2.PID) {
		t.Error("the signal reached another process")
	}
	evs := e.audit.take()
	if len(evs) != 2 || evs[0].Action != ActionProcessSignal || evs[0].Outcome != audit.OutcomeIntent ||
		evs[1].Outcome != audit.OutcomeOK || evs[1].Details["pid"] != s1.PID || evs[1].Details["signal"] != int(syscall.SIGTERM) {
		t.Errorf("audit of the signal: %+v", evs)
	}

	// The output of a running command, followed from another request.
	var stream sync.WaitGroup
	stream.Go(func() {
		_, _ = a.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "sleep 0.5; for i in 1 2 3; do echo tick $i; sleep 0.2; done; exit 4"}, nil)
	})
	var runner *client.Process
	waitUntil(t, 5*time.Second, "the command to run", func() bool {
		for _, p := range liveProcs(t, a, sb.ID) {
			if p.StartedByAgent {
				runner = &p
				return true
			}
		}
		return false
	})
	var out strings.Builder
	fres, err := a.FollowProcess(ctx, sb.ID, runner.PID, func(s client.Stream, data []byte) error {
		if s == client.Stdout {
			out.Write(data)
		}
		return nil
	})
	stream.Wait()
	if err != nil || fres.ExitCode != 4 || out.String() != "tick 1\ntick 2\ntick 3\n" {
		t.Errorf("follow: %+v, %v, output %q", fres, err, out.String())
	}
	if _, err := a.FollowProcess(ctx, sb.ID, s2.PID, nil); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("following a process the agent did not start: %v, want not found", err)
	}

	// Another tenant finds nothing, and changes nothing.
	b := e.client(keyB)
	if _, err := b.ListProcesses(ctx, sb.ID); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant B lists: %v", err)
	}
	if err := b.SignalProcess(ctx, sb.ID, s2.PID, "KILL"); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant B signals: %v", err)
	}
	if _, err := b.KillAllProcesses(ctx, sb.ID, 0); !errors.Is(err, client.ErrNotFound) {
		t.Errorf("tenant B kills all: %v", err)
	}
	if !processAlive(s2.PID) {
		t.Fatal("tenant B's requests killed tenant A's process")
	}
	e.audit.take()

	// Kill everything.
	if _, err := a.KillAllProcesses(ctx, sb.ID, 2*time.Minute); !errors.Is(err, client.ErrInvalid) {
		t.Errorf("kill-all waiting 2m: %v, want invalid", err)
	}
	if resp, body := e.do("POST", "/v1/sandboxes/"+sb.ID+"/processes/kill", keyA, "application/json", []byte(`{"timeout_s":61}`)); errCode(t, body) != CodeInvalidArgument {
		t.Errorf("kill-all with timeout_s 61: %d %s", resp.StatusCode, body)
	}
	if _, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "sleep 302 & exit 0"}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 5*time.Second, "the second sleeper", func() bool { return len(liveProcs(t, a, sb.ID)) == 2 })
	e.audit.take()
	n, err := a.KillAllProcesses(ctx, sb.ID, 5*time.Second)
	if err != nil || n != 2 {
		t.Fatalf("kill-all = %d, %v; want 2", n, err)
	}
	if ps := liveProcs(t, a, sb.ID); len(ps) != 0 || processAlive(s2.PID) {
		t.Errorf("after kill-all: %+v", ps)
	}
	evs = e.audit.take()
	if len(evs) != 2 || evs[0].Action != ActionProcessKillAll || evs[1].Outcome != audit.OutcomeOK ||
		evs[1].Details["killed"] != 2 || evs[1].Details["timeout_s"] != int64(5) {
		t.Errorf("audit of the kill-all: %+v", evs)
	}
	if res, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo ok"}); err != nil || string(res.Stdout) != "ok\n" {
		t.Errorf("exec after kill-all: %+v, %v", res, err)
	}
}

// TestProcessesAuditDown: a mutation whose intent cannot be recorded is
// not carried out.
func TestProcessesAuditDown(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	if _, err := a.Exec(ctx, sb.ID, client.ExecRequest{Command: "sleep 300 & exit 0"}); err != nil {
		t.Fatal(err)
	}
	var ps []client.Process
	waitUntil(t, 5*time.Second, "the sleeper", func() bool { ps = liveProcs(t, a, sb.ID); return len(ps) == 1 })
	e.audit.setFail(errors.New("disk full"))
	if err := a.SignalProcess(ctx, sb.ID, ps[0].PID, "KILL"); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("signal without audit: %v", err)
	}
	if _, err := a.KillAllProcesses(ctx, sb.ID, 0); !errors.Is(err, client.ErrUnavailable) {
		t.Errorf("kill-all without audit: %v", err)
	}
	if !processAlive(ps[0].PID) {
		t.Fatal("an unaudited request killed the process")
	}
	e.audit.setFail(nil)
	if _, err := a.KillAllProcesses(ctx, sb.ID, 0); err != nil {
		t.Fatal(err)
	}
}

// TestProcessesOfEndedSandbox: a signal or a kill-all on a sandbox that
// has ended is refused before its intent is recorded (one outcome record,
// failed_precondition), saying that the sandbox ended and why; the list
// and the output routes answer the same.
func TestProcessesOfEndedSandbox(t *testing.T) {
	ctx := context.Background()
	e := newTestEnv(t)
	a := e.client(keyA)
	sb := e.sandbox(ctx)
	if err := a.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	e.audit.take()
	want := "sandbox " + sb.ID + " has ended (deleted)"
	for _, tc := range []struct{ method, path, body, action string }{
		{"POST", "/processes/1/signal", `{"signal":"TERM"}`, ActionProcessSignal},
		{"POST", "/processes/kill", `{}`, ActionProcessKillAll},
		{"GET", "/processes", "", ""},
		{"GET", "/processes/1/output", "", ""},
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		resp, got := e.do(tc.method, "/v1/sandboxes/"+sb.ID+tc.path, keyA, "application/json", body)
		if resp.StatusCode != http.StatusConflict || errCode(t, got) != CodeFailedPrecondition || !strings.Contains(string(got), want) {
			t.Errorf("%s %s: %d %s, want 409 %s saying %q", tc.method, tc.path, resp.StatusCode, got, CodeFailedPrecondition, want)
		}
		evs := e.audit.take()
		if tc.action == "" {
			if len(evs) != 0 {
				t.Errorf("%s %s is audited: %+v", tc.method, tc.path, evs)
			}
			continue
		}
		if len(evs) != 1 || evs[0].Action != tc.action || evs[0].Outcome != CodeFailedPrecondition || evs[0].IntentSeq != 0 {
			t.Errorf("audit of %s %s: %+v, want one outcome record %s without an intent", tc.method, tc.path, evs, CodeFailedPrecondition)
		}
	}
}

func TestParseSignal(t *testing.T) {
	for in, want := range map[string]int{"TERM": 15, "sigkill": 9, "SIGHUP": 1, "Usr1": int(syscall.SIGUSR1), "9": 9, "64": 64} {
		if got, err := parseSignal(in); err != nil || got != want {
			t.Errorf("parseSignal(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "65", "-9", "SIG", "TERMX", "RTMIN"} {
		if got, err := parseSignal(in); err == nil {
			t.Errorf("parseSignal(%q) = %d, want an error", in, got)
		}
	}
}
