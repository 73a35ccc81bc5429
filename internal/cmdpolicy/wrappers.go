package cmdpolicy

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// wrapper describes a command that runs another command given by its
// arguments: the options it takes, and how many operands come before
// the command it runs.
type wrapper struct {
	// flags take no argument; args take the next word (or, for a short
	// option, the rest of the word: -uroot). A long option may also be
	// written --name=value. Any other option is not understood, and the
	// command fails closed.
	flags, args []string
	// operands is how many words before the command are not options
	// (timeout's duration, chroot's directory).
	operands int
	// assigns skips NAME=VALUE words (env).
	assigns bool
	// digits takes -N (nice -10) as a flag.
	digits bool
}

// wrappers are the commands judged by the command they run.
var wrappers = map[string]wrapper{
	"env": {flags: []string{"-i", "--ignore-environment", "-0", "--null", "-v", "--debug"},
		args: []string{"-u", "--unset", "-C", "--chdir"}, assigns: true},
	"sudo": {flags: []string{"-A", "-b", "-E", "-H", "-k", "-n", "-P", "-S", "-N",
		"--askpass", "--background", "--preserve-env", "--set-home", "--reset-timestamp", "--non-interactive", "--preserve-groups", "--stdin", "--no-update"},
		args: []string{"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "-R",
			"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--command-timeout", "--other-user", "--chroot"}},
	"doas":    {flags: []string{"-n", "-s"}, args: []string{"-u", "-C"}},
	"exec":    {flags: []string{"-c", "-l", "-cl", "-lc"}, args: []string{"-a"}},
	"command": {flags: []string{"-p", "-v", "-V"}},
	"builtin": {},
	"nohup":   {},
	"setsid":  {flags: []string{"-c", "-f", "-w", "--ctty", "--fork", "--wait"}},
	"nice":    {args: []string{"-n", "--adjustment"}, digits: true},
	"timeout": {flags: []string{"-v", "--verbose", "--foreground", "--preserve-status"},
		args: []string{"-s", "--signal", "-k", "--kill-after"}, operands: 1},
	"xargs": {flags: []string{"-0", "--null", "-r", "--no-run-if-empty", "-t", "--verbose", "-p", "--interactive", "-x", "--exit", "-o", "--open-tty"},
		args: []string{"-n", "--max-args", "-L", "--max-lines", "-I", "-d", "--delimiter", "-E", "-s", "--max-chars", "-P", "--max-procs", "-a", "--arg-file", "--process-slot-var"}},
	"stdbuf":  {args: []string{"-i", "-o", "-e", "--input", "--output", "--error"}},
	"time":    {flags: []string{"-p", "-v", "-a", "--portability", "--verbose", "--append"}, args: []string{"-o", "-f", "--output", "--format"}},
	"chroot":  {args: []string{"--userspec", "--groups"}, operands: 1},
	"ionice":  {flags: []string{"-t"}, args: []string{"-c", "-n", "-p", "-P", "-u"}},
	"taskset": {flags: []string{"-a", "--all-tasks"}, args: []string{}, operands: 1},
}

// shells are the commands that run a script given with -c, as a file,
// or on their standard input.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

// wrapper judges the command words run through w: words[0] is the
// wrapper, the rest its options, operands and command.
func (j *judge) wrapper(name string, w wrapper, words []string, open bool, redirs []*syntax.Redirect, depth int) error {
	i := 1
	operands := w.operands
	for i < len(words) {
		a := words[i]
		if a == "--" {
			i++
			break
		}
		if w.assigns && !strings.HasPrefix(a, "-") && strings.Contains(a, "=") {
			i++
			continue
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			if operands > 0 {
				operands--
				i++
				continue
			}
			break
		}
		n, ok := w.option(a)
		if !ok {
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s: option %q is not understood, so the command it runs is not known", name, trunc(a)))
			return nil
		}
		i += n
	}
	for ; operands > 0 && i < len(words); operands-- {
		i++
	}
	if i >= len(words) {
		if open {
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s runs a command that is not static", name))
		}
		if name == "xargs" && !open {
			return j.argv([]string{"echo"}, false, nil, depth) // xargs' default command
		}
		return nil
	}
	return j.argv(words[i:], open, redirs, depth)
}

// option reports how many words the option a takes up (1 or 2), and
// whether the wrapper knows it.
func (w wrapper) option(a string) (int, bool) {
	if w.digits && len(a) > 1 && strings.Trim(a[1:], "0123456789") == "" {
		return 1, true
	}
	if name, _, ok := strings.Cut(a, "="); ok && strings.HasPrefix(a, "--") {
		return 1, contains(w.args, name) || contains(w.flags, name)
	}
	if contains(w.flags, a) {
		return 1, true
	}
	if contains(w.args, a) {
		return 2, true
	}
	if !strings.HasPrefix(a, "--") && len(a) > 2 && contains(w.args, a[:2]) {
		return 1, true // -uroot
	}
	return 0, false
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// shell judges a shell's run: the script of -c, a here-document or
// here-string fed to it, or, when it reads its script from a file or
// its standard input otherwise, nothing more (a file is not judged) or
// the strictest action (a pipe or redirect could feed it anything).
func (j *judge) shell(words []string, open bool, redirs []*syntax.Redirect, depth int) error {
	name := path.Base(words[0])
	dashC := false
	i := 1
	for ; i < len(words); i++ {
		a := words[i]
		if a == "--" || a == "-" {
			i++
			break
		}
		if !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+") {
			break
		}
		if a == "-o" || a == "+o" || a == "-O" || a == "+O" || a == "--rcfile" || a == "--init-file" {
			i++
			continue
		}
		if !strings.HasPrefix(a, "--") && strings.Contains(a[1:], "c") {
			dashC = true
		}
	}
	switch {
	case dashC && i < len(words):
		return j.script(words[i], depth+1)
	case dashC || (open && i >= len(words)):
		j.record(j.p.strictest(), nil, fmt.Sprintf("%s -c with a script that is not static", name))
		return nil
	case i < len(words):
		return nil // a script file: what it runs is not judged
	}
	// The shell reads its script from its standard input.
	for _, r := range redirs {
		if r.N != nil && r.N.Value != "0" {
			continue
		}
		var w *syntax.Word
		switch r.Op {
		case syntax.Hdoc, syntax.DashHdoc:
			w = r.Hdoc
		case syntax.WordHdoc:
			w = r.Word
		default:
			if r.Op == syntax.RdrIn || r.Op == syntax.RdrInOut {
				j.record(j.p.strictest(), nil, fmt.Sprintf("%s reads its script from a file", name))
				return nil
			}
			continue
		}
		src, ok := heredocText(w)
		if !ok {
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s reads a script that is not static", name))
			return nil
		}
		return j.script(src, depth+1)
	}
	j.record(j.p.strictest(), nil, fmt.Sprintf("%s reads its script from its standard input, which could hold any command", name))
	return nil
}

// heredocText is the text of a here-document or here-string when it is
// static.
func heredocText(w *syntax.Word) (string, bool) {
	if w == nil {
		return "", true
	}
	var b strings.Builder
	for _, part := range w.Parts {
		switch x := part.(type) {
		case *syntax.Lit:
			b.WriteString(x.Value)
		case *syntax.SglQuoted:
			if x.Dollar {
				return "", false
			}
			b.WriteString(x.Value)
		case *syntax.DblQuoted:
			for _, q := range x.Parts {
				l, ok := q.(*syntax.Lit)
				if !ok {
					return "", false
				}
				b.WriteString(l.Value)
			}
		default:
			return "", false
		}
	}
	return b.String(), true
}
