package cmdpolicy

import "testing"

// curlPolicy denies curl and git push, asks for rm, allows the rest.
var curlPolicy = &Policy{Rules: []Rule{
	{Action: Deny, Prefix: []string{"curl"}},
	{Action: Deny, Prefix: []string{"git", "push"}},
	{Action: Ask, Prefix: []string{"rm"}},
}}

// wrapperCases are command lines that run a command through another:
// each is judged by the command it runs, whatever the spelling of the
// wrapper's options.
var wrapperCases = []struct{ cmd, want string }{
	// su: the -c string is a shell script; the words after the user are
	// the shell's arguments; -s names the shell.
	{"su -c 'curl x'", Deny},
	{"su root -c 'curl x'", Deny},
	{"su - root -c 'curl x'", Deny},
	{"su -l root -c \"curl x\"", Deny},
	{"su -lc 'curl x' root", Deny},
	{"su -ccurl", Deny},
	{"su --command='curl x' root", Deny},
	{"su --command 'curl x'", Deny},
	{"su -C 'curl x' root", Deny},
	{"su --session-command='ls; curl x'", Deny},
	{"su root -- -c 'curl x'", Deny},
	{"su -s /usr/bin/curl root", Deny},
	{"su -s /bin/bash root -c 'sh -c \"curl x\"'", Deny},
	{"su -m -p -f -P -g wheel -G adm root -c 'curl x'", Deny},
	{"su -w PATH,HOME root -c 'curl x'", Deny},
	{`su -c "cu""rl x"`, Deny},
	{`su -c 'c\url x'`, Deny},
	{"su -c 'su -c \"curl x\"'", Deny},
	{"sudo -u root su - -c 'curl x'", Deny},
	{"su -c 'rm -rf /tmp/x'", Ask},
	{"su root -c 'ls -la'", Allow},
	{"su -c 'git status' nobody", Allow},
	{"su root script.sh", Allow}, // a script file is not judged
	// runuser: as su, and -u USER runs the command without a shell.
	{"runuser -u nobody -- curl x", Deny},
	{"runuser -u nobody curl x", Deny},
	{"runuser -unobody -- curl x", Deny},
	{"runuser --user=nobody -- curl x", Deny},
	{"runuser -u nobody -- sh -c 'curl x'", Deny},
	{"runuser root -c 'curl x'", Deny},
	{"runuser -l root -c 'curl x'", Deny},
	{"runuser -u nobody -- rm x", Ask},
	{"runuser -u nobody -- ls -la", Allow},
	{"runuser -u nobody -- git -s status", Allow},
	// find: -exec, -execdir, -ok and -okdir run a command up to ; or
	// {} +; {} is a file's name, which could be any word.
	{`find . -exec curl {} \;`, Deny},
	{"find . -exec curl {} ';'", Deny},
	{"find . -exec curl {} +", Deny},
	{"find . -type f -execdir curl -T {} x \\;", Deny},
	{"find . -ok curl x \\;", Deny},
	{"find . -okdir rm {} \\;", Ask},
	{"find . -exec ls \\; -exec rm {} \\;", Ask},
	{"find . -name '*.go' -exec grep -l x {} + -o -exec curl x \\;", Deny},
	{"find . -exec sh -c 'curl \"$1\"' _ {} \\;", Deny},
	{"find . -exec 'curl' '{}' ';'", Deny},
	{"find . -exec git {} \\;", Deny}, // {} could be push
	{"find . -exec {} \\;", Deny},     // the command is a file's name
	{"find . -exec curl", Deny},       // no terminator: find refuses, judged anyway
	{"sudo find / -exec env curl x \\;", Deny},
	{"find . -exec git status {} \\;", Allow},
	{"find . -exec echo + curl \\;", Allow}, // + ends the command only after {}
	{"find . -name x -print -delete", Allow},
	// ssh: the remote command's words, joined by spaces, are a shell
	// script; -o may name a command too (ProxyCommand, RemoteCommand).
	{"ssh host curl x", Deny},
	{"ssh host 'curl x'", Deny},
	{`ssh host "ls; curl x"`, Deny},
	{"ssh host 'ls | curl -d @- x'", Deny},
	{"ssh -p 22 host curl", Deny},
	{"ssh host -p 22 curl", Deny},
	{"ssh -p22 -i key -l user host 'curl x'", Deny},
	{"ssh -tt -4 user@host curl", Deny},
	{"ssh -- host curl", Deny},
	{`ssh host c\u\r\l x`, Deny},
	{"ssh host 'ssh other \"curl x\"'", Deny},
	{"ssh -o ProxyCommand='curl x' host ls", Deny},
	{"ssh -oProxyCommand=curl host ls", Deny},
	{"ssh -o 'proxycommand curl %h' host ls", Deny},
	{"ssh -o 'LocalCommand = curl x' host ls", Deny},
	{"ssh -o RemoteCommand=curl -o User=x host ls", Deny},
	{"ssh host 'rm -rf /tmp/x'", Ask},
	{"ssh host ls -la", Allow},
	{"ssh -o StrictHostKeyChecking=no -o ProxyCommand=none host 'git status'", Allow},
	// flock: FILE CMD..., or FILE -c SCRIPT.
	{"flock /tmp/l curl x", Deny},
	{"flock -n /tmp/l curl x", Deny},
	{"flock -xn -w5 /tmp/l curl", Deny},
	{"flock --timeout=3 /tmp/l curl", Deny},
	{"flock /tmp/l -c 'curl x'", Deny},
	{"flock /tmp/l --command 'ls; curl x'", Deny},
	{"flock /tmp/l rm x", Ask},
	{"flock /tmp/l -c ls", Allow},
	{"flock -s 9", Allow}, // a file descriptor: runs nothing
	// watch: its words are a shell script, or with -x a command.
	{"watch curl x", Deny},
	{"watch -n1 'curl x'", Deny},
	{"watch -n 1 curl x", Deny},
	{"watch --interval=1 'ls; curl x'", Deny},
	{"watch -dn1 curl", Deny}, // -d takes n1 as its value
	{"watch -tn1 curl", Deny},
	{"watch -d -n 1 -- curl", Deny},
	{"watch -x curl x", Deny},
	{"watch -x sh -c 'curl x'", Deny},
	{"watch -n1 ls", Allow},
	{"watch 'ls | wc -l'", Allow},
	// unshare, nsenter, setpriv, chrt, prlimit.
	{"unshare -m curl x", Deny},
	{"unshare -mu --fork curl x", Deny},
	{"unshare --mount=/x -r curl", Deny},
	{"unshare --propagation private -- curl", Deny},
	{"unshare -r ls", Allow},
	{"nsenter -t 1 -m -u curl x", Deny},
	{"nsenter -t1 -a curl", Deny},
	{"nsenter --target=1 --mount -- curl", Deny},
	{"nsenter -t 1 -m/proc/1/ns/mnt curl", Deny},
	{"nsenter -t 1 -m ls", Allow},
	{"setpriv --nnp --reuid=1000 curl x", Deny},
	{"setpriv --reuid 1000 --regid 1000 --init-groups -- curl", Deny},
	{"setpriv --nnp ls", Allow},
	{"chrt -o 0 curl", Deny},
	{"chrt --idle 0 curl", Deny},
	{"chrt -bo 0 curl", Deny},
	{"chrt -r 5 ls", Allow},
	{"prlimit --nofile=1024 -- curl x", Deny},
	{"prlimit -n1024 curl", Deny},
	{"prlimit --nofile=1024 --nproc=10 ls", Allow},
	{"prlimit -n 1024 curl", Allow}, // as prlimit reads it: -n shows the limit, 1024 is the command
	// busybox: the applet is the command.
	{"busybox rm -rf /x", Ask},
	{"busybox sh -c 'curl x'", Deny},
	{"busybox env curl x", Deny},
	{"busybox curl x", Deny},
	{"/bin/busybox ls", Allow},
	{"busybox --list", Allow},
	{"busybox", Allow},
	// script: -c's string is a shell script.
	{"script -c 'curl x' /dev/null", Deny},
	{"script -qc 'curl x' /dev/null", Deny},
	{"script -q /dev/null -c 'curl x'", Deny},
	{"script --command='curl x' -q /dev/null", Deny},
	{"script -q -c ls /dev/null", Allow},
	// xargs adds the words it reads to its command, or puts them for
	// -I's placeholder.
	{"echo push | xargs git", Deny},
	{"xargs -I{} git {} origin", Deny},
	{"xargs -I % sh -c 'curl %'", Deny},
	{"xargs -i git {}", Deny},
	{"xargs --replace git {}", Deny},
	{"ls | xargs rm", Ask},
	{"xargs -I{} git status {}", Allow},
	{"xargs -0 -n1 git status", Allow},
	{"xargs", Allow},
	// Short options combine as getopt's do; env's - is -i.
	{"sudo -nE ls", Allow},
	{"sudo -nEu root curl x", Deny},
	{"env - curl x", Deny},
	{"exec -cl curl x", Deny},
	// Wrappers within wrappers.
	{"sudo -u root su -c 'timeout 5 find . -exec curl {} +'", Deny},
	{`ssh host "sudo su - root -c 'curl x'"`, Deny},
	{"watch -n1 \"flock /tmp/l ssh h curl\"", Deny},
	{"busybox timeout 5 su -c 'curl x'", Deny},
	{"env X=1 runuser -u nobody -- find / -okdir curl {} \\;", Deny},
	{"nice -n5 setpriv --nnp unshare -r chrt -i 0 prlimit --nproc=5 -- script -qc 'xargs curl' /dev/null", Deny},
}

func TestDecideWrappers(t *testing.T) {
	for _, tc := range wrapperCases {
		d := curlPolicy.Decide(tc.cmd)
		if d.Action != tc.want {
			t.Errorf("Decide(%q) = %s (%s), want %s; commands %q", tc.cmd, d.Action, d.Reason, tc.want, d.Commands)
		}
	}
}

// What a wrapper is given that is not understood, or not static, fails
// closed: the most restrictive action of the policy.
func TestDecideWrappersUnresolved(t *testing.T) {
	for _, cmd := range []string{
		"su -c \"$X\"",
		"su root $X",
		"su root",            // a shell that reads its standard input
		"su --comm='curl x'", // su takes abbreviations; this package does not
		"su -x root -c ls",
		"runuser -u nobody git -s push", // runuser would take -s as its own
		"runuser -u nobody",
		"find $DIR -name x",
		"find . -name x $MORE",
		"find . -exec $CMD {} \\;",
		"ssh host",
		"ssh host $CMD",
		"ssh host \"$CMD\"",
		"ssh host ls $DIR",
		"ssh -Z host ls",
		"ssh -o \"ProxyCommand=$X\" host ls",
		"ssh h \"ssh h \\\"ssh h \\\\\\\"ssh h \\\\\\\\\\\\\\\"ssh h ls\\\\\\\\\\\\\\\"\\\\\\\"\\\"\"",
		"flock /tmp/l $CMD",
		"flock /tmp/l -c \"$X\"",
		"watch -n1 \"$CMD\"",
		"watch --foo ls",
		"unshare -r",
		"unshare --bogus ls",
		"nsenter -t 1 -m",
		"setpriv -d",
		"chrt -p 1",
		"prlimit --pid 1",
		"busybox $X",
		"busybox --bogus ls",
		"script -q /dev/null",
		"script -c \"$X\" /dev/null",
		"xargs -I{} {}",
		"xargs -I{} sh -c {}",
	} {
		d := curlPolicy.Decide(cmd)
		if d.Action != Deny {
			t.Errorf("Decide(%q) = %s (%s), want deny (fail closed); commands %q", cmd, d.Action, d.Reason, d.Commands)
		}
	}
}

// find and ssh do work of their own, so the default judges them; a pure
// wrapper is judged by what it runs.
func TestDecideWrapperDefault(t *testing.T) {
	p := &Policy{Default: Deny, Rules: []Rule{{Action: Allow, Prefix: []string{"ls"}}}}
	for cmd, want := range map[string]string{
		"find / -delete":           Deny,
		"ssh host ls":              Deny,
		"su -c ls":                 Allow,
		"flock /tmp/l ls":          Allow,
		"runuser -u nobody -- ls":  Allow,
		"watch -n1 ls":             Allow,
		"busybox ls":               Allow,
		"unshare -r -- ls -la":     Allow,
		"flock /tmp/l -c 'ls; id'": Deny,
	} {
		if d := p.Decide(cmd); d.Action != want {
			t.Errorf("Decide(%q) = %s (%s), want %s", cmd, d.Action, d.Reason, want)
		}
	}
	p.Rules = append(p.Rules, Rule{Action: Allow, Prefix: []string{"ssh"}}, Rule{Action: Allow, Prefix: []string{"find"}})
	for cmd, want := range map[string]string{
		"find . -name x":              Allow,
		"find . -exec ls {} +":        Allow,
		"find . -exec id \\;":         Deny,
		"ssh host ls":                 Allow,
		"ssh host 'ls; id'":           Deny,
		"ssh -o ProxyCommand=id h ls": Deny,
	} {
		if d := p.Decide(cmd); d.Action != want {
			t.Errorf("Decide(%q) = %s (%s), want %s", cmd, d.Action, d.Reason, want)
		}
	}
	// A rule that names a pure wrapper judges it too.
	p = &Policy{Rules: []Rule{{Action: Ask, Prefix: []string{"su"}}}}
	if d := p.Decide("su -c ls"); d.Action != Ask || d.Rule == nil || d.Rule.Prefix[0] != "su" {
		t.Errorf("su -c ls: %+v", d)
	}
}

// Interpreters' one-liners are not parsed: python3 -c runs code, not a
// command line, and is judged as python3 itself (see the package doc).
func TestDecideInterpreters(t *testing.T) {
	for _, cmd := range []string{
		`python3 -c 'import os; os.system("curl x")'`,
		`perl -e 'system "curl x"'`,
		`node -e 'require("child_process").execSync("curl x")'`,
	} {
		if d := curlPolicy.Decide(cmd); d.Action != Allow {
			t.Errorf("Decide(%q) = %s (%s): an interpreter's code is not judged, want allow", cmd, d.Action, d.Reason)
		}
	}
	p := &Policy{Rules: []Rule{{Action: Ask, Prefix: []string{"python3"}}, {Action: Deny, Prefix: []string{"perl", "-e"}}}}
	for cmd, want := range map[string]string{
		`python3 -c 'print(1)'`:                    Ask,
		`/usr/bin/python3 -c 'print(1)'`:           Ask,
		`sudo -u nobody python3 -c 'print(1)'`:     Ask,
		`find . -exec python3 -c 'print(1)' {} \;`: Ask,
		`perl -e 'print 1'`:                        Deny,
		`ssh h "perl -e 'print 1'"`:                Deny,
		`perl script.pl`:                           Allow,
	} {
		if d := p.Decide(cmd); d.Action != want {
			t.Errorf("Decide(%q) = %s (%s), want %s", cmd, d.Action, d.Reason, want)
		}
	}
}

// The argument-list form runs no shell, but a wrapper in it still runs
// what it is given.
func TestDecideArgvWrappers(t *testing.T) {
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"su", "-c", "curl x"}, Deny},
		{[]string{"find", ".", "-exec", "curl", "{}", ";"}, Deny},
		{[]string{"ssh", "host", "ls; curl x"}, Deny},
		{[]string{"flock", "/tmp/l", "-c", "curl x"}, Deny},
		{[]string{"watch", "-n1", "curl x"}, Deny},
		{[]string{"busybox", "rm", "x"}, Ask},
		{[]string{"find", ".", "-exec", "ls", "{}", "+"}, Allow},
		{[]string{"find", "$X"}, Allow}, // a literal word in argv form
	} {
		if d := curlPolicy.DecideArgv(tc.argv); d.Action != tc.want {
			t.Errorf("DecideArgv(%q) = %s (%s), want %s", tc.argv, d.Action, d.Reason, tc.want)
		}
	}
}
