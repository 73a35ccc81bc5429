// Package cmdpolicy decides whether a command line given to exec may
// run: an allow/ask/deny policy over argv prefixes, judged on the parsed
// shell syntax (mvdan.cc/sh/v3), never on substrings of the text.
//
// Every simple command the line holds is judged: those of pipelines,
// lists, subshells, blocks, functions, loops, command and process
// substitutions, those given to a shell as a string (bash -c, sh -c,
// eval, a static here-document fed to a shell), and those run through a
// command that runs another (see wrappers): env, sudo, exec, timeout,
// nice, xargs, su and runuser (-c's string is a shell script; runuser -u
// USER runs a command), find's -exec, -execdir, -ok and -okdir, ssh (the
// remote command is a shell script, as are -o ProxyCommand and the
// like), flock (FILE CMD, FILE -c SCRIPT), watch, script -c, unshare,
// nsenter, setpriv, chrt, prlimit and busybox (its applet). Their
// options are read as getopt reads them (combined short flags, values
// attached or not, --name=value). The decision is the most restrictive
// over the commands (deny > ask > allow). What cannot be resolved
// statically (a command word or argument from a variable, a
// substitution or a glob, an option of a wrapper this package does not
// know, a shell reading a script from a pipe, find's or xargs' {} in a
// command's name) fails closed: it gets the most restrictive action the
// policy could give any command.
//
// Interpreters' one-liners (python3 -c, perl -e, node -e, ruby -e) run
// code, not command lines: they are judged as the interpreter itself (a
// rule on python3 matches python3 -c '...'), and what the code runs is
// not; the package does not pretend to parse them. Put interpreters on
// ask or deny where that matters.
//
// The policy is a guard-rail for agents, not a security boundary: it
// judges the command line the API receives, nothing a process runs
// later (a script written to a file and run, an interpreter's code).
// The sandbox is the boundary.
package cmdpolicy

import (
	"fmt"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"mvdan.cc/sh/v3/expand"
	"mvdan.cc/sh/v3/syntax"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The actions of a rule and of a decision, from the least restrictive.
const (
	Allow = "allow"
	Ask   = "ask"
	Deny  = "deny"
)

// Caps on policies and on the commands judged.
const (
	MaxRules        = 256
	MaxPrefixWords  = 32
	MaxWordBytes    = 256
	MaxInputBytes   = 64 << 10
	MaxCommands     = 1000
	maxNestingDepth = 4 // bash -c / eval / here-documents within each other
)

// Any, as a word of a Rule's Prefix, matches any one word.
const Any = "*"

// Rule gives Action to every command whose argv begins with Prefix. The
// first word is compared by its base name (a rule for "git" matches
// /usr/bin/git); Any matches any one word.
type Rule struct {
	Action string   `json:"action"`
	Prefix []string `json:"prefix"`
}

// Policy is a list of rules and the action of a command no rule
// matches. A command matched by several rules gets the most restrictive
// of their actions, whatever their order.
type Policy struct {
	Rules []Rule `json:"rules,omitempty"`
	// Default is the action of a command no rule matches; "" is Allow.
	Default string `json:"default,omitempty"`
}

// Decision is the judgment of one command line.
type Decision struct {
	// Action is Allow, Ask or Deny: the most restrictive over Commands.
	Action string
	// Rule is the rule that gave Action, nil when the policy's default
	// or a failure to resolve the line did.
	Rule *Rule
	// Commands are the argv of the commands judged, in the order they
	// were found; a word that could not be resolved statically ends its
	// argv as "…" (see Unresolved).
	Commands [][]string
	// Reason says in words why Action was decided.
	Reason string
}

// Unresolved ends an argv in Decision.Commands where its next word could
// not be resolved statically.
const Unresolved = "…"

// rank orders actions by restrictiveness.
func rank(a string) int {
	switch a {
	case Allow, "":
		return 0
	case Ask:
		return 1
	}
	return 2
}

// Validate checks the policy's actions and rules.
func (p *Policy) Validate() error {
	if p == nil {
		return nil
	}
	if !validAction(p.Default) && p.Default != "" {
		return fmt.Errorf("command policy: default %q is not allow, ask or deny: %w", trunc(p.Default), errdefs.ErrInvalidArgument)
	}
	if len(p.Rules) > MaxRules {
		return fmt.Errorf("command policy: %d rules, at most %d are allowed: %w", len(p.Rules), MaxRules, errdefs.ErrInvalidArgument)
	}
	for i, r := range p.Rules {
		if !validAction(r.Action) {
			return fmt.Errorf("command policy: rule %d: action %q is not allow, ask or deny: %w", i, trunc(r.Action), errdefs.ErrInvalidArgument)
		}
		if len(r.Prefix) == 0 || len(r.Prefix) > MaxPrefixWords {
			return fmt.Errorf("command policy: rule %d: prefix must have 1 to %d words: %w", i, MaxPrefixWords, errdefs.ErrInvalidArgument)
		}
		for _, w := range r.Prefix {
			if w == "" || len(w) > MaxWordBytes || !utf8.ValidString(w) || strings.IndexByte(w, 0) >= 0 {
				return fmt.Errorf("command policy: rule %d: prefix words must be non-empty UTF-8 without NUL bytes, at most %d bytes: %w", i, MaxWordBytes, errdefs.ErrInvalidArgument)
			}
		}
		if r.Prefix[0] == Any {
			return fmt.Errorf("command policy: rule %d: the first prefix word must name a command, not %q (use default for every command): %w", i, Any, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func validAction(a string) bool { return a == Allow || a == Ask || a == Deny }

func trunc(s string) string {
	if len(s) > 64 {
		s = strings.ToValidUTF8(s[:64], "") + "..."
	}
	return s
}

func (p *Policy) defaultAction() string {
	if p.Default == "" {
		return Allow
	}
	return p.Default
}

// strictest is the most restrictive action the policy gives any command:
// what a command that cannot be resolved gets.
func (p *Policy) strictest() string {
	a := p.defaultAction()
	for _, r := range p.Rules {
		if rank(r.Action) > rank(a) {
			a = r.Action
		}
	}
	return a
}

// Decide judges a shell command line (exec's command form, run by a
// shell). A line that does not parse, is longer than MaxInputBytes or
// holds more than MaxCommands commands is denied. p must be valid.
func (p *Policy) Decide(command string) Decision {
	if len(command) > MaxInputBytes {
		return Decision{Action: Deny, Reason: fmt.Sprintf("the command is longer than %d bytes", MaxInputBytes)}
	}
	j := &judge{p: p, d: Decision{Action: Allow}}
	if err := j.script(command, 0); err != nil {
		return Decision{Action: Deny, Commands: j.d.Commands, Reason: err.Error()}
	}
	return j.result()
}

// DecideArgv judges an argument list (exec's cmd form, run without a
// shell): the argv itself, and what it runs through a wrapper or a
// shell's -c.
func (p *Policy) DecideArgv(argv []string) Decision {
	j := &judge{p: p, d: Decision{Action: Allow}}
	n := 0
	for _, a := range argv {
		n += len(a) + 1
	}
	if n > MaxInputBytes {
		return Decision{Action: Deny, Reason: fmt.Sprintf("the command is longer than %d bytes", MaxInputBytes)}
	}
	if len(argv) == 0 {
		return Decision{Action: Deny, Reason: "the command is empty"}
	}
	if err := j.argv(argv, false, nil, 0); err != nil {
		return Decision{Action: Deny, Commands: j.d.Commands, Reason: err.Error()}
	}
	return j.result()
}

// judge collects the commands of one line and the decision so far.
type judge struct {
	p *Policy
	d Decision
	// set is whether an action was recorded (d.Reason is then its).
	set bool
}

func (j *judge) result() Decision {
	if !j.set {
		j.d.Reason = "no command"
	}
	return j.d
}

// record raises the decision to action when that is more restrictive
// (or the first one recorded).
func (j *judge) record(action string, rule *Rule, reason string) {
	if !j.set || rank(action) > rank(j.d.Action) {
		j.d.Action, j.d.Rule, j.d.Reason, j.set = action, rule, reason, true
	}
}

// script parses src as a bash script and judges its commands.
func (j *judge) script(src string, depth int) error {
	if depth > maxNestingDepth {
		j.record(j.p.strictest(), nil, fmt.Sprintf("shell strings are nested more than %d deep", maxNestingDepth))
		return nil
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		return fmt.Errorf("the command does not parse: %v", err)
	}
	var werr error
	syntax.Walk(f, func(n syntax.Node) bool {
		if werr != nil {
			return false
		}
		st, ok := n.(*syntax.Stmt)
		if !ok {
			return true
		}
		if call, ok := st.Cmd.(*syntax.CallExpr); ok && len(call.Args) > 0 {
			words, open := staticWords(call.Args)
			werr = j.argv(words, open, st.Redirs, depth)
		}
		return true // its words' substitutions hold commands too
	})
	return werr
}

// staticWords resolves a command's words up to the first that is not
// static; open says whether there is one.
func staticWords(ws []*syntax.Word) (words []string, open bool) {
	for _, w := range ws {
		s, ok := staticWord(w)
		if !ok {
			return words, true
		}
		words = append(words, s)
	}
	return words, false
}

// staticWord is the value of w after quote removal when it holds no
// expansion at all (no parameter, arithmetic or command substitution,
// glob, brace or tilde), so that it is one word whatever the
// environment and the files. A brace expansion needs an unquoted {, }
// and , or .. ({a,b}, {1..3}); {} alone (find's, xargs') is a word.
func staticWord(w *syntax.Word) (string, bool) {
	var bare strings.Builder // the unquoted text
	for i, part := range w.Parts {
		switch x := part.(type) {
		case *syntax.Lit:
			u := unescaped(x.Value)
			if strings.ContainsAny(u, "*?[") || (i == 0 && strings.HasPrefix(x.Value, "~")) {
				return "", false
			}
			bare.WriteString(u)
		case *syntax.SglQuoted:
			if x.Dollar {
				return "", false
			}
		case *syntax.DblQuoted:
			if x.Dollar {
				return "", false
			}
			for _, q := range x.Parts {
				if _, ok := q.(*syntax.Lit); !ok {
					return "", false
				}
			}
		default:
			return "", false
		}
	}
	if b := bare.String(); strings.Contains(b, "{") && strings.Contains(b, "}") && (strings.Contains(b, ",") || strings.Contains(b, "..")) {
		return "", false
	}
	fields, err := expand.Fields(nil, w)
	if err != nil || len(fields) != 1 {
		return "", false
	}
	return fields[0], true
}

// unescaped drops the characters of an unquoted literal that a
// backslash escapes, so that \* is not taken for a glob.
func unescaped(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' {
			i++
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// argv judges one command: its resolved words, followed by more that
// are not resolved when open, and redirs of its statement.
func (j *judge) argv(words []string, open bool, redirs []*syntax.Redirect, depth int) error {
	if len(j.d.Commands) >= MaxCommands {
		return fmt.Errorf("the command holds more than %d commands", MaxCommands)
	}
	shown := slices.Clone(words)
	if open {
		shown = append(shown, Unresolved)
	}
	j.d.Commands = append(j.d.Commands, shown)
	if len(words) == 0 {
		j.record(j.p.strictest(), nil, "the command name is not static (a variable or substitution); it could be any command")
		return nil
	}
	name := path.Base(words[0])
	if w, ok := wrappers[name]; ok {
		if w.judged {
			j.match(words, open)
		} else {
			j.ruleOnly(words, open)
		}
		return j.wrapper(name, w, words, open, redirs, depth)
	}
	if shells[name] {
		j.ruleOnly(words, open)
		return j.shell(words, open, redirs, depth)
	}
	switch name {
	case "eval":
		j.ruleOnly(words, open)
		if open {
			j.record(j.p.strictest(), nil, "eval of a string that is not static")
			return nil
		}
		return j.script(strings.Join(words[1:], " "), depth+1)
	case "trap":
		// trap's action is a script the shell runs later.
		j.ruleOnly(words, open)
		if open {
			j.record(j.p.strictest(), nil, "trap of an action that is not static")
			return nil
		}
		args := words[1:]
		if len(args) > 0 && args[0] == "--" {
			args = args[1:]
		}
		if len(args) > 1 && args[0] != "-" && !strings.HasPrefix(args[0], "-") {
			return j.script(args[0], depth+1)
		}
		return nil
	case "alias":
		// Aliases do not expand in a non-interactive shell unless it is
		// told to; judge each definition's value as a command anyway.
		j.match(words, open)
		if open {
			j.record(j.p.strictest(), nil, "an alias that is not static")
			return nil
		}
		for _, def := range words[1:] {
			if _, v, ok := strings.Cut(def, "="); ok {
				if err := j.script(v, depth+1); err != nil {
					return err
				}
			}
		}
		return nil
	}
	j.match(words, open)
	return nil
}

// match judges words against the rules: the most restrictive action of
// the rules that match, or could match once the unresolved words are
// known (open), and the default when no rule surely matches.
func (j *judge) match(words []string, open bool) {
	action, rule, sure := "", (*Rule)(nil), false
	for i := range j.p.Rules {
		r := &j.p.Rules[i]
		m, s := prefixMatch(r.Prefix, words, open)
		if !m {
			continue
		}
		sure = sure || s
		if rule == nil || rank(r.Action) > rank(action) {
			action, rule = r.Action, r
		}
	}
	cmd := strings.Join(words, " ")
	if open {
		cmd += " " + Unresolved
	}
	if !sure && (rule == nil || rank(j.p.defaultAction()) > rank(action)) {
		j.record(j.p.defaultAction(), nil, fmt.Sprintf("%q: no rule matches; the policy's default", trunc(cmd)))
		return
	}
	j.record(action, rule, fmt.Sprintf("%q: rule %s %q", trunc(cmd), rule.Action, strings.Join(rule.Prefix, " ")))
}

// ruleOnly judges a wrapper or shell by the rules that name it, not by
// the default: what it runs is judged on its own.
func (j *judge) ruleOnly(words []string, open bool) {
	name := path.Base(words[0])
	for i := range j.p.Rules {
		r := &j.p.Rules[i]
		if path.Base(r.Prefix[0]) != name {
			continue
		}
		if m, _ := prefixMatch(r.Prefix, words, open); m {
			j.record(r.Action, r, fmt.Sprintf("%q: rule %s %q", trunc(strings.Join(words, " ")), r.Action, strings.Join(r.Prefix, " ")))
		}
	}
}

// prefixMatch reports whether prefix matches words (m) and whether it
// does whatever the unresolved words are (sure).
func prefixMatch(prefix, words []string, open bool) (m, sure bool) {
	for i, p := range prefix {
		if i >= len(words) {
			return open, false
		}
		w := words[i]
		if i == 0 {
			p, w = path.Base(p), path.Base(w)
		}
		if p != Any && p != w {
			return false, false
		}
	}
	return true, true
}
