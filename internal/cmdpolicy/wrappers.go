package cmdpolicy

import (
	"fmt"
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// wrapper describes a command that runs another command given by its
// arguments: the options it takes, where the command it runs begins and
// what its words are.
type wrapper struct {
	// flags take no value; args take the next word (or, for a short
	// option, the rest of the word: -uroot); optional ones take a value
	// only when it is attached (-dX, --differences=X). Short options
	// combine as getopt's do (-nE, -lc CMD). A long option with a value
	// may be written --name=value. Any other option is not understood,
	// and the command fails closed.
	flags, args, optional []string
	// operands is how many words before the command are not options
	// (timeout's duration, chroot's directory, su's user).
	operands int
	// assigns skips NAME=VALUE words (env).
	assigns bool
	// digits takes -N (nice -10) as a flag.
	digits bool
	// permute: options may follow the operands and the command's words,
	// as GNU getopt permutes them (su - user -c CMD); otherwise the
	// command begins at the first word after the operands that is not
	// an option, and all the words from there are its own.
	permute bool
	// runs says what the words after the operands are.
	runs runs
	// scripts are options whose value is a shell script (su -c, script
	// -c); tailScripts are words that, where the command would begin,
	// say that the next word is a shell script (flock FILE -c CMD).
	scripts, tailScripts []string
	// shellOpts name the shell that runs the command (su -s).
	shellOpts []string
	// argvOpts make the words an argument list again (watch -x) or, for
	// runsShell, a command run without a shell (runuser -u USER CMD).
	argvOpts []string
	// placeholders are options whose value, in a word of the command,
	// stands for text the wrapper reads (xargs -I{}); an optional one
	// without a value stands for "{}" (xargs -i).
	placeholders []string
	// appends: the wrapper adds words it reads to its command (xargs).
	appends bool
	// configs are options whose value is an ssh_config line, which may
	// name a command to run (ssh -o ProxyCommand=CMD).
	configs []string
	// bare is what runs without a command: nothing (""), "echo"
	// (xargs), or a shell that reads its standard input ("sh").
	bare string
	// judged: the wrapper does work of its own (find lists and deletes
	// files, ssh connects to a host), so the rules and the default judge
	// it too, not only the rules that name it.
	judged bool
}

// runs is what a wrapper's command words are.
type runs int

const (
	// runsArgv: a command and its arguments (env, sudo, timeout).
	runsArgv runs = iota
	// runsScript: a shell script, the words joined by spaces (ssh's
	// remote command, watch).
	runsScript
	// runsShell: the arguments of a shell, which runs the scripts
	// option's value with -c (su, runuser, script).
	runsShell
	// runsFind: find's expression, whose -exec, -execdir, -ok and
	// -okdir run a command up to ";" or "{} +".
	runsFind
	// runsApplet: busybox, whose first word is the applet that runs.
	runsApplet
)

// The options of su and runuser (util-linux).
var (
	suFlags = []string{"-", "-f", "--fast", "-l", "--login", "-m", "-p", "--preserve-environment", "-P", "--pty"}
	suArgs  = []string{"-c", "--command", "-C", "--session-command", "-g", "--group", "-G", "--supp-group",
		"-s", "--shell", "-w", "--whitelist-environment"}
	suScripts = []string{"-c", "--command", "-C", "--session-command"}
)

// wrappers are the commands judged by the command they run.
var wrappers = map[string]wrapper{
	"env": {flags: []string{"-", "-i", "--ignore-environment", "-0", "--null", "-v", "--debug"},
		args: []string{"-u", "--unset", "-C", "--chdir"}, assigns: true},
	"sudo": {flags: []string{"-A", "-b", "-E", "-H", "-k", "-n", "-P", "-S", "-N",
		"--askpass", "--background", "--preserve-env", "--set-home", "--reset-timestamp", "--non-interactive", "--preserve-groups", "--stdin", "--no-update"},
		args: []string{"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-T", "-U", "-R",
			"--user", "--group", "--close-from", "--chdir", "--host", "--prompt", "--role", "--type", "--command-timeout", "--other-user", "--chroot"}},
	"doas":    {flags: []string{"-n", "-s"}, args: []string{"-u", "-C"}},
	"exec":    {flags: []string{"-c", "-l"}, args: []string{"-a"}},
	"command": {flags: []string{"-p", "-v", "-V"}},
	"builtin": {},
	"nohup":   {},
	"setsid":  {flags: []string{"-c", "-f", "-w", "--ctty", "--fork", "--wait"}},
	"nice":    {args: []string{"-n", "--adjustment"}, digits: true},
	"timeout": {flags: []string{"-v", "--verbose", "--foreground", "--preserve-status"},
		args: []string{"-s", "--signal", "-k", "--kill-after"}, operands: 1},
	"xargs": {flags: []string{"-0", "--null", "-r", "--no-run-if-empty", "-t", "--verbose", "-p", "--interactive", "-x", "--exit", "-o", "--open-tty"},
		args:         []string{"-n", "--max-args", "-L", "--max-lines", "-I", "-d", "--delimiter", "-E", "-s", "--max-chars", "-P", "--max-procs", "-a", "--arg-file", "--process-slot-var"},
		optional:     []string{"-i", "--replace", "-e", "--eof", "-l"},
		placeholders: []string{"-I", "-i", "--replace"}, appends: true, bare: "echo"},
	"stdbuf":  {args: []string{"-i", "-o", "-e", "--input", "--output", "--error"}},
	"time":    {flags: []string{"-p", "-v", "-a", "--portability", "--verbose", "--append"}, args: []string{"-o", "-f", "--output", "--format"}},
	"chroot":  {args: []string{"--userspec", "--groups"}, operands: 1},
	"ionice":  {flags: []string{"-t"}, args: []string{"-c", "-n", "-p", "-P", "-u"}},
	"taskset": {flags: []string{"-a", "--all-tasks", "-c", "--cpu-list"}, operands: 1},
	"su": {flags: suFlags, args: suArgs, operands: 1, permute: true, runs: runsShell,
		scripts: suScripts, shellOpts: []string{"-s", "--shell"}},
	"runuser": {flags: suFlags, args: append([]string{"-u", "--user"}, suArgs...), operands: 1, permute: true, runs: runsShell,
		scripts: suScripts, shellOpts: []string{"-s", "--shell"}, argvOpts: []string{"-u", "--user"}},
	"script": {flags: []string{"-a", "--append", "-e", "--return", "-f", "--flush", "--force", "-q", "--quiet"},
		args: []string{"-c", "--command", "-E", "--echo", "-I", "--log-in", "-O", "--log-out", "-B", "--log-io",
			"-T", "--log-timing", "-m", "--logging-format", "-o", "--output-limit"},
		optional: []string{"-t", "--timing"}, operands: 1, permute: true, runs: runsShell, scripts: []string{"-c", "--command"}},
	"find": {runs: runsFind, judged: true},
	"ssh": {flags: []string{"-4", "-6", "-A", "-a", "-C", "-f", "-G", "-g", "-K", "-k", "-M", "-N", "-n", "-q", "-s", "-T", "-t", "-V", "-v", "-X", "-x", "-Y", "-y"},
		args:     []string{"-B", "-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-P", "-p", "-Q", "-R", "-S", "-W", "-w"},
		operands: 1, runs: runsScript, configs: []string{"-o"}, bare: "sh", judged: true},
	"flock": {flags: []string{"-s", "--shared", "-x", "-e", "--exclusive", "-u", "--unlock", "-n", "--nb", "--nonblock",
		"-o", "--close", "-F", "--no-fork", "--verbose"},
		args: []string{"-w", "--wait", "--timeout", "-E", "--conflict-exit-code"}, operands: 1, tailScripts: []string{"-c", "--command"}},
	"watch": {flags: []string{"-b", "--beep", "-c", "--color", "-C", "--no-color", "-e", "--errexit", "-g", "--chgexit",
		"-t", "--no-title", "-w", "--no-wrap", "-x", "--exec", "-p", "--precise", "-r", "--no-rerun"},
		args: []string{"-n", "--interval", "-q", "--equexit"}, optional: []string{"-d", "--differences"},
		runs: runsScript, argvOpts: []string{"-x", "--exec"}},
	"unshare": {flags: []string{"-m", "-u", "-i", "-n", "-p", "-U", "-C", "-T", "-f", "--fork", "-r", "--map-root-user",
		"-c", "--map-current-user", "--map-auto", "--keep-caps"},
		optional: []string{"--mount", "--uts", "--ipc", "--net", "--pid", "--user", "--cgroup", "--time", "--kill-child", "--mount-proc"},
		args: []string{"--map-user", "--map-group", "--map-users", "--map-groups", "--propagation", "--setgroups",
			"-R", "--root", "-w", "--wd", "-S", "--setuid", "-G", "--setgid", "--monotonic", "--boottime"}, bare: "sh"},
	"nsenter": {flags: []string{"-a", "--all", "--preserve-credentials", "-F", "--no-fork", "-Z", "--follow-context"},
		optional: []string{"-m", "--mount", "-u", "--uts", "-i", "--ipc", "-n", "--net", "-p", "--pid", "-C", "--cgroup",
			"-U", "--user", "-T", "--time", "-r", "--root", "-w", "--wd"},
		args: []string{"-t", "--target", "-S", "--setuid", "-G", "--setgid", "-W", "--wdns"}, bare: "sh"},
	"setpriv": {flags: []string{"--nnp", "--no-new-privs", "--clear-groups", "--keep-groups", "--init-groups", "--reset-env"},
		args: []string{"--ambient-caps", "--inh-caps", "--bounding-set", "--ruid", "--euid", "--rgid", "--egid", "--reuid", "--regid",
			"--groups", "--securebits", "--pdeathsig", "--selinux-label", "--apparmor-profile"}},
	"chrt": {flags: []string{"-b", "--batch", "-d", "--deadline", "-f", "--fifo", "-i", "--idle", "-o", "--other", "-r", "--rr",
		"-R", "--reset-on-fork", "-v", "--verbose"},
		args: []string{"-T", "--sched-runtime", "-P", "--sched-period", "-D", "--sched-deadline"}, operands: 1},
	"prlimit": {flags: []string{"--noheadings", "--raw", "--verbose"}, args: []string{"-o", "--output"},
		optional: []string{"--as", "-v", "-c", "--core", "-d", "--data", "-e", "--nice", "-f", "--fsize", "-i", "--sigpending",
			"-l", "--memlock", "-m", "--rss", "-n", "--nofile", "-q", "--msgqueue", "-r", "--rtprio", "-s", "--stack",
			"-t", "--cpu", "-u", "--nproc", "-x", "--locks", "-y", "--rttime"}},
	"busybox": {runs: runsApplet},
}

// shells are the commands that run a script given with -c, as a file,
// or on their standard input.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "mksh": true, "ash": true}

// opt is one option a wrapper was given: its name as written (-c,
// --command), its value if it has one, and how many operands came
// before it.
type opt struct {
	name, value string
	valued      bool
	at          int
}

// parsed is a wrapper's words, taken apart.
type parsed struct {
	opts []opt
	// pos are the operands and the command's words, in order.
	pos []string
	// tail is the script of a tail script option (flock FILE -c CMD).
	tail  string
	tailc bool
}

// last is the value of the last option named one of names.
func (p *parsed) last(names []string) (string, bool) {
	v, ok := "", false
	for _, o := range p.opts {
		if contains(names, o.name) {
			v, ok = o.value, true
		}
	}
	return v, ok
}

// parse takes words apart (words[0] is the wrapper); bad is a reason
// when an option is not understood.
func (w wrapper) parse(name string, words []string) (p parsed, bad string) {
	for i := 1; i < len(words); {
		a := words[i]
		if a == "--" {
			p.pos = append(p.pos, words[i+1:]...)
			break
		}
		if w.assigns && len(p.pos) == 0 && !strings.HasPrefix(a, "-") && strings.Contains(a, "=") {
			i++
			continue
		}
		if len(p.pos) >= w.operands && contains(w.tailScripts, a) {
			if i+1 < len(words) {
				p.tail, p.tailc = words[i+1], true
			}
			break
		}
		if !strings.HasPrefix(a, "-") || (a == "-" && !contains(w.flags, a)) {
			p.pos = append(p.pos, a)
			i++
			if !w.permute && len(p.pos) > w.operands {
				p.pos = append(p.pos, words[i:]...)
				break
			}
			continue
		}
		opts, n, ok := w.option(words[i:])
		if !ok {
			return p, fmt.Sprintf("%s: option %q is not understood, so the command it runs is not known", name, trunc(a))
		}
		for _, o := range opts {
			o.at = len(p.pos)
			p.opts = append(p.opts, o)
		}
		i += n
	}
	return p, ""
}

// option parses the option ws[0], whose value may be ws[1]: the options
// it holds and how many words they take up. It is not ok when the
// wrapper does not know it.
func (w wrapper) option(ws []string) (opts []opt, n int, ok bool) {
	a := ws[0]
	// next is the value of an option that takes the next word; where
	// there is none the wrapper fails, and runs nothing.
	next := func(name string) ([]opt, int, bool) {
		if len(ws) < 2 {
			return []opt{{name: name}}, 1, true
		}
		return []opt{{name: name, value: ws[1], valued: true}}, 2, true
	}
	if w.digits && len(a) > 1 && strings.Trim(a[1:], "0123456789") == "" {
		return []opt{{name: a}}, 1, true
	}
	if strings.HasPrefix(a, "--") {
		name, v, eq := strings.Cut(a, "=")
		switch {
		case contains(w.optional, name) || (eq && (contains(w.args, name) || contains(w.flags, name))):
			return []opt{{name: name, value: v, valued: eq}}, 1, true
		case contains(w.flags, name):
			return []opt{{name: name}}, 1, true
		case contains(w.args, name):
			return next(name)
		}
		return nil, 0, false
	}
	switch {
	case contains(w.flags, a), contains(w.optional, a):
		return []opt{{name: a}}, 1, true
	case contains(w.args, a):
		return next(a)
	}
	// Short options combined, as getopt reads them: flags, then perhaps
	// one that takes the rest of the word or the next word as its value.
	for k := 1; k < len(a); k++ {
		c := "-" + a[k:k+1]
		switch {
		case contains(w.flags, c):
			opts = append(opts, opt{name: c})
		case contains(w.args, c) || contains(w.optional, c):
			if k+1 < len(a) {
				return append(opts, opt{name: c, value: a[k+1:], valued: true}), 1, true
			}
			if contains(w.optional, c) {
				return append(opts, opt{name: c}), 1, true
			}
			o, n, _ := next(c)
			return append(opts, o...), n, true
		default:
			return nil, 0, false
		}
	}
	return opts, 1, true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// wrapper judges what w runs: words[0] is the wrapper, the rest its
// options, operands and command, followed by unresolved words when open.
func (j *judge) wrapper(name string, w wrapper, words []string, open bool, redirs []*syntax.Redirect, depth int) error {
	switch w.runs {
	case runsFind:
		return j.find(words, open, redirs, depth)
	case runsApplet:
		return j.applet(words, open, redirs, depth)
	}
	p, bad := w.parse(name, words)
	if bad != "" {
		j.record(j.p.strictest(), nil, bad)
		return nil
	}
	for _, c := range w.configs {
		for _, o := range p.opts {
			if o.name != c {
				continue
			}
			if cmd, ok := sshCommand(o.value); ok {
				if err := j.script(cmd, depth+1); err != nil {
					return err
				}
			}
		}
	}
	if w.permute && open {
		// An unresolved word could be any option (su's -c) or operand.
		j.record(j.p.strictest(), nil, fmt.Sprintf("%s is given a word that is not static, which could be an option or the command it runs", name))
		return nil
	}
	if p.tailc {
		return j.script(p.tail, depth+1)
	}
	var cmd []string
	if len(p.pos) > w.operands {
		cmd = p.pos[w.operands:]
	}
	_, argv := p.last(w.argvOpts)
	switch w.runs {
	case runsArgv:
		// The command words are the command: judged below.
	case runsShell:
		if argv {
			return j.userCommand(name, p, open, redirs, depth)
		}
		shell := "sh"
		if s, ok := p.last(w.shellOpts); ok {
			shell = s
		}
		sh := []string{shell}
		if s, ok := p.last(w.scripts); ok {
			sh = append(sh, "-c", s)
		}
		return j.argv(append(sh, cmd...), open, redirs, depth)
	case runsScript:
		if argv {
			break
		}
		if open {
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s runs a shell script that is not static", name))
			return nil
		}
		if len(cmd) > 0 {
			return j.script(strings.Join(cmd, " "), depth+1)
		}
	}
	if len(cmd) == 0 {
		switch {
		case open:
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s runs a command that is not static", name))
		case w.bare == "sh":
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s without a command runs a shell that reads its standard input, which could hold any command", name))
		case w.bare != "":
			return j.argv([]string{w.bare}, w.appends, nil, depth)
		}
		return nil
	}
	if ph, ok := p.placeholder(w.placeholders); ok {
		cmd, open = placeheld(cmd, ph, open)
	} else if w.appends {
		open = true
	}
	return j.argv(cmd, open, redirs, depth)
}

// placeholder is the word the last placeholder option names ("{}" for
// one given no value).
func (p *parsed) placeholder(names []string) (string, bool) {
	ph, ok := "", false
	for _, o := range p.opts {
		if contains(names, o.name) {
			ph, ok = o.value, true
			if !o.valued {
				ph = "{}"
			}
		}
	}
	return ph, ok
}

// placeheld cuts cmd at its first word that holds the placeholder ph:
// from there the words are text the wrapper reads, not known here.
func placeheld(cmd []string, ph string, open bool) ([]string, bool) {
	if ph == "" {
		return cmd, open
	}
	for i, w := range cmd {
		if strings.Contains(w, ph) {
			return cmd[:i], true
		}
	}
	return cmd, open
}

// userCommand judges runuser -u USER [--] CMD...: the command runs
// without a shell. runuser's getopt takes options from among the
// command's words too, so one there leaves the command unclear.
func (j *judge) userCommand(name string, p parsed, open bool, redirs []*syntax.Redirect, depth int) error {
	for _, o := range p.opts {
		if o.at > 0 {
			j.record(j.p.strictest(), nil, fmt.Sprintf("%s -u: option %q among the command's words (put the command after --)", name, trunc(o.name)))
			return nil
		}
	}
	if len(p.pos) == 0 {
		j.record(j.p.strictest(), nil, fmt.Sprintf("%s without a command runs a shell that reads its standard input, which could hold any command", name))
		return nil
	}
	return j.argv(p.pos, open, redirs, depth)
}

// find judges the commands of find's -exec, -execdir, -ok and -okdir,
// each up to ";" or "{} +"; "{}" stands for a file's name, so the
// command's words from the first that holds it are not known.
func (j *judge) find(words []string, open bool, redirs []*syntax.Redirect, depth int) error {
	for i := 1; i < len(words); i++ {
		switch words[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
		default:
			continue
		}
		start, end := i+1, -1
		for k := start; k < len(words); k++ {
			if words[k] == ";" || (words[k] == "+" && k > start && words[k-1] == "{}") {
				end = k
				break
			}
		}
		cmd, cmdOpen := words[start:], open
		if end >= 0 {
			cmd, cmdOpen, i = words[start:end], false, end
		} else {
			i = len(words)
		}
		if len(cmd) == 0 && !cmdOpen {
			continue // find refuses an empty command
		}
		cmd, cmdOpen = placeheld(cmd, "{}", cmdOpen)
		if err := j.argv(cmd, cmdOpen, redirs, depth); err != nil {
			return err
		}
	}
	if open {
		j.record(j.p.strictest(), nil, "find's expression holds a word that is not static, which could be -exec and a command")
	}
	return nil
}

// applet judges busybox APPLET ARGS... as the applet; busybox's own
// options (--list, --help, --install) run nothing.
func (j *judge) applet(words []string, open bool, redirs []*syntax.Redirect, depth int) error {
	if len(words) < 2 {
		if open {
			j.record(j.p.strictest(), nil, "busybox runs an applet that is not static")
		}
		return nil
	}
	switch a := words[1]; {
	case a == "--list" || a == "--list-full" || a == "--help" || a == "--install":
		return nil
	case strings.HasPrefix(a, "-"):
		j.record(j.p.strictest(), nil, fmt.Sprintf("busybox: option %q is not understood, so the command it runs is not known", trunc(a)))
		return nil
	}
	return j.argv(words[1:], open, redirs, depth)
}

// sshCommand is the command an ssh_config line given with -o runs, if
// it names one: ProxyCommand, LocalCommand, KnownHostsCommand (run here
// by a shell) or RemoteCommand (by the remote user's shell).
func sshCommand(line string) (string, bool) {
	line = strings.TrimLeft(line, " \t")
	k := strings.IndexAny(line, " \t=")
	if k < 0 {
		return "", false
	}
	key, v := line[:k], strings.TrimLeft(line[k:], " \t")
	v = strings.TrimLeft(strings.TrimPrefix(v, "="), " \t")
	switch strings.ToLower(key) {
	case "proxycommand", "localcommand", "knownhostscommand", "remotecommand":
		return v, v != "" && v != "none"
	}
	return "", false
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
