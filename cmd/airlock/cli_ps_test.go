package main

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// TestCLIProcesses: ps lists what a command left running, kill signals
// one process, kill --all the rest.
func TestCLIProcesses(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	e.ok("", "exec", id, "--", "sh", "-c", "sleep 310 & sleep 311 & exit 0")
	type psList struct {
		Processes []client.Process `json:"processes"`
		Total     int              `json:"total"`
	}
	var ps psList
	live := func() []client.Process {
		t.Helper()
		ps = decodeJSON[psList](t, e.ok("", "ps", id, "--json").stdout)
		var out []client.Process
		for _, p := range ps.Processes {
			if p.State != "zombie" {
				out = append(out, p)
			}
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	var procs []client.Process
	for procs = live(); len(procs) != 2 && time.Now().Before(deadline); procs = live() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procs) != 2 || procs[0].Name != "sleep" || len(procs[0].Cmd) != 2 || procs[0].State != "sleeping" || ps.Total < 2 {
		t.Fatalf("ps --json: %+v", ps)
	}
	table := e.ok("", "ps", id).stdout
	for _, want := range []string{"PID", "COMMAND", "sleep 310", "sleep 311", strconv.Itoa(procs[0].PID)} {
		if !strings.Contains(table, want) {
			t.Errorf("ps table lacks %q:\n%s", want, table)
		}
	}

	// Usage errors.
	for _, args := range [][]string{{"ps"}, {"kill", id}, {"kill", id, "x"}, {"kill", "--all"}, {"kill", "--all", id, "--timeout", "2m"}} {
		if r := e.run("", args...); r.code != 2 {
			t.Errorf("airlock %v: code %d, err %v; want a usage error", args, r.code, r.err)
		}
	}
	if r := e.run("", "kill", "-s", "NOPE", id, strconv.Itoa(procs[0].PID)); r.code != 1 || !strings.Contains(r.stderr, "unknown signal") {
		t.Errorf("kill -s NOPE: %+v", r)
	}

	e.ok("", "kill", "-s", "KILL", id, strconv.Itoa(procs[0].PID))
	deadline = time.Now().Add(5 * time.Second)
	for procs = live(); len(procs) != 1 && time.Now().Before(deadline); procs = live() {
		time.Sleep(10 * time.Millisecond)
	}
	if len(procs) != 1 || procs[0].Cmd[1] != "311" {
		t.Fatalf("after kill: %+v", procs)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(procs[0].PID)); err != nil {
		t.Fatal(err)
	}
	out := decodeJSON[map[string]int](t, e.ok("", "kill", "--all", "--json", id).stdout)
	if out["killed"] != 1 {
		t.Errorf("kill --all --json: %v", out)
	}
	if procs = live(); len(procs) != 0 {
		t.Errorf("after kill --all: %+v", procs)
	}
	if r := e.ok("", "kill", "--all", id, "--timeout", "5s"); !strings.Contains(r.stdout, "Killed 0 processes") {
		t.Errorf("kill --all: %q", r.stdout)
	}
}
