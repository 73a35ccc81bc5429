package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
)

const cliPolicy = `@id("no-big")
forbid(principal, action, resource == Airlock::Tool::"pay") when { context.args.amount > 100 };
permit(principal, action, resource);
`

// TestCLIPolicy: policy set from a file and from stdin, show, show
// --json and rm; a text that does not parse, an empty file and rm with
// none exit non-zero with the daemon's words.
func TestCLIPolicy(t *testing.T) {
	e := newCLIEnv(t)
	if r := e.run("", "policy", "show"); r.code == 0 || !strings.Contains(r.stderr+errText(r.err), "not found") {
		t.Errorf("show with none: %d %q %v", r.code, r.stderr, r.err)
	}
	file := filepath.Join(t.TempDir(), "policy.cedar")
	if err := os.WriteFile(file, []byte(cliPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.ok("", "policy", "set", "-f", file); r.stdout != "Set the tool-call policy (147 bytes)\n" {
		t.Errorf("set printed %q", r.stdout)
	}
	if r := e.ok("", "policy", "show"); r.stdout != cliPolicy {
		t.Errorf("show printed %q, want the text as set", r.stdout)
	}
	if r := e.run("permit(principal, action, resource);\nforbid(principal action);", "policy", "set", "-f", "-"); r.code == 0 || !strings.Contains(r.stderr+errText(r.err), ":2:24") {
		t.Errorf("set of a text that does not parse: %d %q %v, want the position", r.code, r.stderr, r.err)
	}
	if r := e.ok("", "policy", "show"); r.stdout != cliPolicy {
		t.Errorf("a refused set changed the policy: %q", r.stdout)
	}
	p := decodeJSON[wire.Policy](t, e.ok("permit(principal, action, resource);", "policies", "set", "-f", "-", "--json").stdout)
	if p.Cedar != "permit(principal, action, resource);" || p.UpdatedAt.IsZero() {
		t.Errorf("set --json = %+v", p)
	}
	if got := decodeJSON[wire.Policy](t, e.ok("", "policy", "show", "--json").stdout); got.Cedar != p.Cedar {
		t.Errorf("show --json = %+v", got)
	}
	if r := e.run(" \n", "policy", "set", "-f", "-"); r.code != 2 || !strings.Contains(r.stderr+errText(r.err), "empty") {
		t.Errorf("set of an empty text: %d %q %v", r.code, r.stderr, r.err)
	}
	if r := e.ok("", "policy", "rm"); r.stdout != "Removed the tool-call policy\n" {
		t.Errorf("rm printed %q", r.stdout)
	}
	if r := e.run("", "policy", "rm"); r.code == 0 || !strings.Contains(r.stderr+errText(r.err), "not found") {
		t.Errorf("rm with none: %d %q %v", r.code, r.stderr, r.err)
	}
	for _, args := range [][]string{{"policy"}, {"policy", "set"}, {"policy", "show", "x"}, {"policy", "rm", "x"}, {"policy", "nope"}} {
		if r := e.run("", args...); r.code != 2 {
			t.Errorf("%q: exit %d, want 2", args, r.code)
		}
	}
}
