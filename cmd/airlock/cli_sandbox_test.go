package main

import (
	"strings"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
)

// TestCLIEndedSandbox checks that sandbox get and ls show why and when a
// sandbox ended: here its agent died.
func TestCLIEndedSandbox(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	if err := e.rt.Crash(id); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "get", id, "--json").stdout)
		if got.StoppedAt != nil {
			if got.State != "failed" || got.EndReason != "agent_died" || got.Error == "" {
				t.Errorf("get --json of a sandbox whose agent died: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox did not end: %+v", got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	desc := e.ok("", "sandbox", "get", id).stdout
	for _, want := range []string{"State:", "failed", "Ended:", "End reason:", "agent_died", "Error:"} {
		if !strings.Contains(desc, want) {
			t.Errorf("sandbox get output lacks %q:\n%s", want, desc)
		}
	}
	if table := e.ok("", "sandbox", "ls").stdout; !strings.Contains(table, "failed (agent_died)") {
		t.Errorf("sandbox ls does not say why it ended:\n%s", table)
	}
	r := e.run("", "exec", id, "--", "true")
	if r.code == 0 || r.err == nil || !strings.Contains(r.err.Error(), "has ended") {
		t.Errorf("exec on the ended sandbox: code %d, err %v", r.code, r.err)
	}
}
