package cmdpolicy

import (
	"errors"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// pushPolicy denies git push, asks for rm, allows the rest.
var pushPolicy = &Policy{Rules: []Rule{
	{Action: Deny, Prefix: []string{"git", "push"}},
	{Action: Ask, Prefix: []string{"rm"}},
	{Action: Allow, Prefix: []string{"git", "status"}},
}}

func TestDecideShell(t *testing.T) {
	for _, tc := range []struct {
		cmd, want string
	}{
		{"git status", Allow},
		{"git log --oneline | head -5", Allow},
		{"git push", Deny},
		{"git push origin main", Deny},
		{"git status; git push", Deny},
		{"git status && git push", Deny},
		{"git status || git push", Deny},
		{"git status | git push", Deny},
		{"git status & git push", Deny},
		{"(git push)", Deny},
		{"{ git push; }", Deny},
		{"echo $(git push)", Deny},
		{"echo `git push`", Deny},
		{"echo \"$(git push)\"", Deny},
		{"cat <(git push)", Deny},
		{"echo $(rm -rf /)", Ask},
		{"X=$(git push)", Deny},
		{"export X=$(git push)", Deny},
		{"bash -c 'git push'", Deny},
		{`bash -c "git push"`, Deny},
		{"sh -c 'git status; git push'", Deny},
		{"bash -lc 'git push'", Deny},
		{"bash -e -c 'git push'", Deny},
		{"bash -o pipefail -c 'git push'", Deny},
		{"/bin/bash -c 'bash -c \"git push\"'", Deny},
		{"eval git push", Deny},
		{"eval 'git push'", Deny},
		{"env X=1 git push", Deny},
		{"env -i PATH=/bin git push", Deny},
		{"env -u HOME git push", Deny},
		{"X=1 git push", Deny},
		{"sudo git push", Deny},
		{"sudo -u root git push", Deny},
		{"sudo -uroot -E git push", Deny},
		{"sudo -- git push", Deny},
		{"exec git push", Deny},
		{"nohup git push &", Deny},
		{"nice -n 5 git push", Deny},
		{"nice -10 git push", Deny},
		{"timeout 5 git push", Deny},
		{"timeout -s KILL 5s git push", Deny},
		{"command git push", Deny},
		{"builtin eval git push", Deny},
		{"echo origin | xargs git push", Deny},
		{"xargs -n 1 git push", Deny},
		{"sudo env X=1 timeout 5 git push", Deny},
		{"g''it push", Deny},
		{`g""it push`, Deny},
		{`\git push`, Deny},
		{`git \push`, Deny},
		{`"git" "push"`, Deny},
		{"/usr/bin/git push", Deny},
		{"./git push", Deny},
		{"bash <<'EOF'\ngit push\nEOF", Deny},
		{"bash <<EOF\ngit status\ngit push\nEOF", Deny},
		{"bash <<< 'git push'", Deny},
		{"cat <<EOF\n$(git push)\nEOF", Deny},
		{"f() { git push; }; f", Deny},
		{"function f { git push; }", Deny},
		{"git() { echo hi; }; git status", Allow},
		{"alias g='git push'; g", Deny},
		{"trap 'git push' EXIT", Deny},
		{"trap -- 'git push' EXIT", Deny},
		{"trap - EXIT; trap 'echo bye' INT", Allow},
		{"if true; then git push; fi", Deny},
		{"for i in 1; do git push; done", Deny},
		{"while false; do git push; done", Deny},
		{"case x in x) git push;; esac", Deny},
		{"! git push", Deny},
		{"time git push", Deny},
		{"[[ $(git push) ]]", Deny},
		{"(( $(git push) ))", Deny},
		{"git status > out.txt", Allow},
		{"git pushx", Allow},
		{"git stash push", Allow},
		{"echo git push", Allow},
		{"echo 'git push'", Allow},
		{"rm -rf /tmp/x", Ask},
		{"git status; rm x; git push", Deny},
		{"", Allow},
		{"# git push", Allow},
	} {
		d := pushPolicy.Decide(tc.cmd)
		if d.Action != tc.want {
			t.Errorf("Decide(%q) = %s (%s), want %s; commands %q", tc.cmd, d.Action, d.Reason, tc.want, d.Commands)
		}
	}
}

// Words that cannot be resolved statically fail closed: they get the
// most restrictive action any rule could give them.
func TestDecideUnresolved(t *testing.T) {
	for _, cmd := range []string{
		"$CMD push",
		"${CMD} status",
		"\"$CMD\" push",
		"$(echo git) push",
		"`echo git` status",
		"git $SUB",
		"git $(echo push)",
		"git pu*",
		"git pu?h",
		"git {push,status}",
		"g* push",
		"~/git push",
		"eval \"$X\"",
		"eval $X",
		"trap \"$X\" EXIT",
		"bash -c \"$X\"",
		"bash -c",
		"echo 'git push' | bash",
		"bash < script.sh",
		"bash <<EOF\n$X\nEOF",
		"sudo $CMD",
		"env $CMD",
		"sudo --weird-option git status",
		"timeout 5 $CMD",
		"git $'push'",
		"git {push,}",
		"git {pu,\"push\"}",
		"git pu{sh,}",
		"git push{,}",
		"git $\"push\"",
		"bash -c 'bash -c \"bash -c \\\"bash -c \\\\\\\"bash -c git\\\\\\\"\\\"\"'",
	} {
		d := pushPolicy.Decide(cmd)
		if d.Action != Deny {
			t.Errorf("Decide(%q) = %s (%s), want deny (fail closed); commands %q", cmd, d.Action, d.Reason, d.Commands)
		}
	}
	// With nothing stricter than ask in the policy, what cannot be
	// resolved is asked for, not denied.
	ask := &Policy{Rules: []Rule{{Action: Ask, Prefix: []string{"git", "push"}}}}
	for _, cmd := range []string{"$CMD push", "git $SUB", "echo x | bash"} {
		if d := ask.Decide(cmd); d.Action != Ask {
			t.Errorf("Decide(%q) = %s, want ask", cmd, d.Action)
		}
	}
	// An unresolved argument after a word that rules out every
	// restrictive rule is no reason to fail closed.
	for _, cmd := range []string{"git status $X", "git log $(date +%s)", "ls *.go", "echo $HOME", "git status {}", "git status {x}", "git status {a,b}"} {
		if d := pushPolicy.Decide(cmd); d.Action != Allow {
			t.Errorf("Decide(%q) = %s (%s), want allow", cmd, d.Action, d.Reason)
		}
	}
	// A policy whose every action is allow allows them all.
	if d := (&Policy{}).Decide("$CMD push"); d.Action != Allow {
		t.Errorf("empty policy: %s", d.Action)
	}
}

func TestDecideRejects(t *testing.T) {
	for _, cmd := range []string{
		"echo 'unterminated",
		"if then fi",
		"echo $(",
		strings.Repeat("a", MaxInputBytes+1),
		strings.Repeat("true;", MaxCommands+1),
	} {
		if d := pushPolicy.Decide(cmd); d.Action != Deny || d.Reason == "" {
			t.Errorf("Decide(%.40q) = %s (%s), want deny", cmd, d.Action, d.Reason)
		}
	}
	if d := (&Policy{}).Decide("echo 'unterminated"); d.Action != Deny {
		t.Errorf("an unparseable line under an allow-all policy: %s, want deny", d.Action)
	}
}

func TestDecideArgv(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"git", "status"}, Allow},
		{[]string{"git", "push"}, Deny},
		{[]string{"/usr/bin/git", "push", "origin"}, Deny},
		{[]string{"git", "status; git push"}, Allow}, // one argument, no shell
		{[]string{"bash", "-c", "git status; git push"}, Deny},
		{[]string{"sh", "-c", "$X"}, Deny},
		{[]string{"env", "A=1", "git", "push"}, Deny},
		{[]string{"sudo", "-u", "root", "sh", "-c", "git push"}, Deny},
		{[]string{"git", "$(x)"}, Allow}, // literal in argv form
		{[]string{"rm", "-rf", "/"}, Ask},
		{nil, Deny},
		{[]string{strings.Repeat("a", MaxInputBytes)}, Deny},
	} {
		d := pushPolicy.DecideArgv(tc.argv)
		if d.Action != tc.want {
			t.Errorf("DecideArgv(%.60q) = %s (%s), want %s", tc.argv, d.Action, d.Reason, tc.want)
		}
	}
}

func TestDecideRulesAndDefault(t *testing.T) {
	// Default deny with an allow list: the strictest matching rule wins,
	// whatever the order.
	p := &Policy{Default: Deny, Rules: []Rule{
		{Action: Allow, Prefix: []string{"git", "*"}},
		{Action: Allow, Prefix: []string{"ls"}},
		{Action: Ask, Prefix: []string{"git", "push"}},
	}}
	for cmd, want := range map[string]string{
		"ls -la":                 Allow,
		"git status":             Allow,
		"git":                    Deny, // git * needs a second word
		"git push":               Ask,
		"curl example.com":       Deny,
		"ls | curl x":            Deny,
		"env X=1 git status":     Allow, // the wrapper is judged by what it runs
		"sudo git status":        Allow,
		"bash -c 'ls'":           Allow,
		"bash -c 'ls; curl x'":   Deny,
		"$X":                     Deny,
		"git $X":                 Deny, // could be nothing (no rule) or push
		"timeout 3 git log":      Allow,
		"xargs":                  Deny, // runs echo
		"command -v ls":          Allow,
		"git status 2>/dev/null": Allow,
	} {
		d := p.Decide(cmd)
		if d.Action != want {
			t.Errorf("Decide(%q) = %s (%s), want %s", cmd, d.Action, d.Reason, want)
		}
	}
	// A rule naming a wrapper judges the wrapper too.
	p = &Policy{Rules: []Rule{{Action: Deny, Prefix: []string{"sudo"}}}}
	if d := p.Decide("sudo ls"); d.Action != Deny || d.Rule == nil || d.Rule.Prefix[0] != "sudo" {
		t.Errorf("sudo ls: %+v", d)
	}
}

func TestDecision(t *testing.T) {
	d := pushPolicy.Decide("git status && echo $(git push origin) | wc -l")
	if d.Action != Deny || d.Rule == nil || !slices.Equal(d.Rule.Prefix, []string{"git", "push"}) {
		t.Fatalf("decision %+v", d)
	}
	if !strings.Contains(d.Reason, "git push origin") {
		t.Errorf("reason %q does not name the command", d.Reason)
	}
	want := [][]string{{"git", "status"}, {"echo", Unresolved}, {"git", "push", "origin"}, {"wc", "-l"}}
	if !slices.EqualFunc(d.Commands, want, slices.Equal) {
		t.Errorf("commands %q, want %q", d.Commands, want)
	}
	d = (&Policy{Default: Ask}).Decide("ls")
	if d.Action != Ask || d.Rule != nil || !strings.Contains(d.Reason, "default") {
		t.Errorf("default decision %+v", d)
	}
}

func TestValidate(t *testing.T) {
	good := []*Policy{nil, {}, {Default: Deny}, pushPolicy, {Rules: []Rule{{Action: Ask, Prefix: []string{"git", "*", "--force"}}}}}
	for _, p := range good {
		if err := p.Validate(); err != nil {
			t.Errorf("Validate(%+v): %v", p, err)
		}
	}
	many := make([]Rule, MaxRules+1)
	for i := range many {
		many[i] = Rule{Action: Allow, Prefix: []string{"ls"}}
	}
	bad := []*Policy{
		{Default: "block"},
		{Rules: []Rule{{Action: "permit", Prefix: []string{"ls"}}}},
		{Rules: []Rule{{Action: Allow}}},
		{Rules: []Rule{{Action: Allow, Prefix: []string{""}}}},
		{Rules: []Rule{{Action: Allow, Prefix: []string{"*"}}}},
		{Rules: []Rule{{Action: Allow, Prefix: []string{"a\x00b"}}}},
		{Rules: []Rule{{Action: Allow, Prefix: []string{strings.Repeat("a", MaxWordBytes+1)}}}},
		{Rules: []Rule{{Action: Allow, Prefix: make([]string, MaxPrefixWords+1)}}},
		{Rules: many},
	}
	for _, p := range bad {
		if err := p.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Validate(%.80v) = %v, want invalid argument", p, err)
		}
	}
}

// Decide never panics, and a line that holds git push in any spelling
// it resolves is never allowed by a policy that denies it.
func FuzzDecide(f *testing.F) {
	for _, s := range []string{"git push", "bash -c 'eval \"git push\"'", "sudo -u x env A=1 timeout 3 git push",
		"f() { $X; }; f", "cat <<EOF\n$(git push)\nEOF", "xargs -I{} sh -c {}", "a=$((1+2)) b=${c:-d} e",
		"su - root -lc 'git push'", "find . -exec git push {} +", "ssh -p22 h 'git push'", "watch -dn1 git push",
		"flock -xn f -c 'git push'", "runuser -u x -- busybox git push", "ssh -oProxyCommand='git push' h"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d := pushPolicy.Decide(s)
		if d.Action != Allow && d.Action != Ask && d.Action != Deny {
			t.Fatalf("Decide(%q) = action %q", s, d.Action)
		}
		if len(d.Commands) > MaxCommands {
			t.Fatalf("Decide(%q) judged %d commands", s, len(d.Commands))
		}
		for _, c := range d.Commands {
			if len(c) >= 2 && path.Base(c[0]) == "git" && c[1] == "push" && d.Action != Deny {
				t.Fatalf("Decide(%q) = %s with git push among %q", s, d.Action, d.Commands)
			}
		}
	})
}
