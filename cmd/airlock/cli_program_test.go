package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// TestCLIProgram runs programs in a sandbox and in one of their own: the
// output streams, the exit status is the program's, --json prints the
// result and the (empty) trace, the language follows the file name, and
// a one-shot program leaves no sandbox.
func TestCLIProgram(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	if r := e.ok("", "program", "--sandbox", id, "-l", "bash", "-c", "echo out; echo err >&2"); r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("program: %q %q", r.stdout, r.stderr)
	}
	if r := e.run("exit 7\n", "program", "--sandbox", id, "-l", "bash"); r.code != 7 {
		t.Errorf("exit 7 from stdin: code %d, err %v", r.code, r.err)
	}
	r := e.ok("", "program", "-l", "bash", "-c", "echo once", "--json", "--trace")
	var out programJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Result.ExitCode != 0 || out.ToolCalls == nil || !sandbox.ValidID(out.SandboxID) {
		t.Errorf("--json: %s (%v)", r.stdout, err)
	}
	if l := e.mgr.List(sandbox.Filter{Live: true}); len(l) != 1 {
		t.Errorf("%d live sandboxes after a one-shot program, want the first one", len(l))
	}
	if r := e.run("", "program", "--sandbox", id, "--tool", "x", "-c", "true"); r.code != 2 || !strings.Contains(r.err.Error(), "--sandbox uses the sandbox's own") {
		t.Errorf("--sandbox with --tool: %d %v", r.code, r.err)
	}
	if r := e.run("", "program", "-l", "cobol", "-c", "x"); r.code != exitCannotRun || !strings.Contains(r.err.Error(), "language must be") {
		t.Errorf("a bad language: %d %v", r.code, r.err)
	}
	for file, want := range map[string]string{"a.py": "python", "b.js": "javascript", "c.sh": "bash", "d": "python"} {
		if got := languageOf(file); got != want {
			t.Errorf("languageOf(%s) = %s, want %s", file, got, want)
		}
	}
}
