package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

// TestCLIListQuietAndRemoveAll: ls -q prints IDs only; rm --all lists
// without --force and removes with it, only the caller's tenant's
// sandboxes (and, with -m, those with that metadata).
func TestCLIListQuietAndRemoveAll(t *testing.T) {
	e := newCLIEnv(t)
	a1, a2 := e.create("-m", "job=1"), e.create("-m", "job=2")
	op := e.env[envAPIKey]
	other := strings.TrimSpace(e.ok("", "tenants", "create", "--id", "other", "Other").stdout)
	e.env[envAPIKey] = other
	b1 := e.create()
	e.env[envAPIKey] = op

	ids := strings.Fields(e.ok("", "sandbox", "ls", "-q").stdout)
	slices.Sort(ids)
	want := []string{a1, a2}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("ls -q = %v, want %v", ids, want)
	}
	if r := e.run("", "sandbox", "ls", "-q", "--json"); r.code != 2 {
		t.Errorf("ls -q --json: %+v", r)
	}
	// Without --force nothing goes.
	r := e.run("", "sandbox", "rm", "--all")
	if r.code != 2 || r.err == nil || !strings.Contains(r.err.Error(), "would remove 2 sandboxes") ||
		!strings.Contains(r.err.Error(), "--force") || len(e.live()) != 3 {
		t.Errorf("rm --all without --force: %+v, %d live", r, len(e.live()))
	}
	for _, bad := range [][]string{{"sandbox", "rm", "--all", a1}, {"sandbox", "rm", "-m", "job=1", a1}} {
		if r := e.run("", bad...); r.code != 2 {
			t.Errorf("%v: %+v", bad, r)
		}
	}
	if r := e.ok("", "sandbox", "rm", "--all", "-m", "job=1", "-f"); r.stdout != a1+"\n" {
		t.Errorf("rm --all -m job=1 -f printed %q", r.stdout)
	}
	if r := e.ok("", "sandbox", "rm", "--all", "--force"); r.stdout != a2+"\n" {
		t.Errorf("rm --all --force printed %q", r.stdout)
	}
	if live := e.live(); len(live) != 1 || live[0].ID != b1 {
		t.Errorf("live after rm --all: %+v, want only the other tenant's %s", live, b1)
	}
	if r := e.ok("", "sandbox", "rm", "--all", "-y"); r.stdout != "" || !strings.Contains(r.stderr, "no live sandboxes") {
		t.Errorf("rm --all with none left: %+v", r)
	}
}

// TestCLIPrune: prune removes the caller's failed sandboxes that still
// hold something, and leaves running ones alone.
func TestCLIPrune(t *testing.T) {
	e := newCLIEnv(t)
	running, broken := e.create(), e.create()
	e.rt.SetDestroyError(errors.New("a process survived"))
	if err := e.rt.Crash(broken); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		sb := decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "get", broken, "--json").stdout)
		if sb.State == "failed" {
			if sb.StoppedAt != nil {
				t.Fatalf("the failed sandbox was released although its release fails: %+v", sb)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox did not fail: %+v", sb)
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.rt.SetDestroyError(nil)
	if r := e.ok("", "prune"); r.stdout != broken+"\n" {
		t.Errorf("prune printed %q, want %s", r.stdout, broken)
	}
	for _, sb := range e.live() {
		if sb.ID == broken && sb.StoppedAt.IsZero() || sb.ID == running && sb.State != "running" {
			t.Errorf("after prune: %s is %s (ended %v)", sb.ID, sb.State, sb.StoppedAt)
		}
	}
	if r := e.ok("", "prune"); r.stdout != "" || !strings.Contains(r.stderr, "no failed sandboxes") {
		t.Errorf("second prune: %+v", r)
	}
}

// TestCLIIdleTimeout: --idle-timeout reaches the sandbox.
func TestCLIIdleTimeout(t *testing.T) {
	e := newCLIEnv(t)
	sb := decodeJSON[wire.Sandbox](t, e.ok("", "sandbox", "create", "--idle-timeout", "5m", "--json").stdout)
	if sb.IdleTimeoutS != 300 {
		t.Errorf("idle_timeout_s = %d, want 300", sb.IdleTimeoutS)
	}
	if r := e.run("", "sandbox", "create", "--idle-timeout", "soon"); r.code != 2 {
		t.Errorf("bad --idle-timeout: %+v", r)
	}
}

// TestCLIExecJSON: exec and run --json print one object with the output
// and how the command ended, and keep the command's exit status.
func TestCLIExecJSON(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	r := e.run("in", "exec", "--json", id, "--", "sh", "-c", "cat; echo err >&2; printf '\\377' >&2; exit 3")
	if r.code != 3 {
		t.Errorf("exit status %d, want 3: %+v", r.code, r)
	}
	got := decodeJSON[execJSON](t, r.stdout)
	if got.Status != client.StatusError || got.ExitCode != 3 || got.Stdout != "in" || got.Stderr != "" || got.StderrB64 != "ZXJyCv8=" || got.SandboxID != "" {
		t.Errorf("exec --json = %+v", got)
	}
	r = e.ok("", "run", "--json", "--", "echo", "hi")
	got = decodeJSON[execJSON](t, r.stdout)
	if got.Status != client.StatusSuccess || got.Stdout != "hi\n" || !strings.HasPrefix(got.SandboxID, "sb-") {
		t.Errorf("run --json = %+v", got)
	}
	if len(e.live()) != 1 {
		t.Errorf("run left its sandbox: %+v", e.live())
	}
}

// TestCLIShellCommand: shell ID -- CMD runs CMD (quoted as given) on a
// terminal instead of the login shell.
func TestCLIShellCommand(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	var out syncBuffer
	c := &cli{stdin: strings.NewReader(""), stdout: &out, stderr: &out,
		getenv: func(k string) string { return e.env[k] }, hc: e.srv.Client()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code, err := c.main(ctx, []string{"shell", id, "--", "sh", "-c", "echo \"it's $((6*7))\"; exit 5"})
	if code != 5 || err != nil || !strings.Contains(out.String(), "it's 42") {
		t.Errorf("shell -- CMD: code %d, err %v, output %q", code, err, out.String())
	}
	for in, want := range map[string]string{"a": "a", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$HOME": "'$HOME'", "x=1,y/z": "x=1,y/z"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}

// TestCLIFiles: files ls, mkdir and rm.
func TestCLIFiles(t *testing.T) {
	e := newCLIEnv(t)
	id := e.create()
	e.ok("", "files", "mkdir", id, "d1/sub", "d2")
	e.ok("hello", "cp", "-", id+":d1/sub/f.txt")
	table := e.ok("", "files", "ls", id).stdout
	for _, want := range []string{"MODE", "NAME", "d1", "d2", "drwx"} {
		if !strings.Contains(table, want) {
			t.Errorf("files ls lacks %q:\n%s", want, table)
		}
	}
	deep := e.ok("", "files", "ls", "-d", "3", id, "d1").stdout
	if !strings.Contains(deep, "/d1/sub/f.txt") || !strings.Contains(deep, " 5 ") {
		t.Errorf("files ls -d 3:\n%s", deep)
	}
	list := decodeJSON[struct {
		Entries   []client.FileInfo `json:"entries"`
		Truncated bool              `json:"truncated"`
	}](t, e.ok("", "files", "ls", "--json", id, "d1/sub").stdout)
	if len(list.Entries) != 1 || list.Entries[0].Name != "f.txt" || list.Entries[0].Size != 5 {
		t.Errorf("files ls --json: %+v", list)
	}
	if r := e.run("", "files", "rm", id, "d1"); r.code != 1 || !strings.Contains(r.stderr, "d1") {
		t.Errorf("rm of a directory without -r: %+v", r)
	}
	if r := e.ok("", "files", "rm", "-r", id, "d1", "d2"); r.stdout != "d1\nd2\n" {
		t.Errorf("files rm -r printed %q", r.stdout)
	}
	if r := e.ok("", "files", "ls", "--json", id); strings.Contains(r.stdout, `"d1"`) {
		t.Errorf("d1 is still there: %s", r.stdout)
	}
	for _, bad := range [][]string{{"files"}, {"files", "ls"}, {"files", "ls", "-d", "0", id}, {"files", "mkdir", id}, {"files", "cat", id}} {
		if r := e.run("", bad...); r.code != 2 {
			t.Errorf("%v: %+v", bad, r)
		}
	}
	if got := fileMode(client.FileInfo{Type: "file", Mode: 0o4755}); got != "-rwsr-xr-x" {
		t.Errorf("fileMode(setuid) = %q", got)
	}
	if got := fileMode(client.FileInfo{Type: "dir", Mode: 0o1777}); got != "drwxrwxrwt" {
		t.Errorf("fileMode(sticky dir) = %q", got)
	}
}

// TestCLIContexts: contexts ls, restart, interrupt and rm.
func TestCLIContexts(t *testing.T) {
	e := newCodeCLIEnv(t)
	id := e.create()
	e.ok("", "code", id, "-c", "x = 1")
	e.ok("", "code", id, "-l", "bash", "-c", "y=2")
	list := decodeJSON[[]client.CodeContext](t, e.ok("", "contexts", "ls", "--json", id).stdout)
	if len(list) != 2 {
		t.Fatalf("contexts ls --json: %+v", list)
	}
	table := e.ok("", "contexts", "ls", id).stdout
	for _, want := range []string{"LANGUAGE", "python", "bash", "(default)", "idle"} {
		if !strings.Contains(table, want) {
			t.Errorf("contexts ls lacks %q:\n%s", want, table)
		}
	}
	py := list[0].ID
	if list[0].Language != "python" {
		py = list[1].ID
	}
	if r := e.ok("", "contexts", "interrupt", id, py); !strings.Contains(r.stdout, "no cell was running") {
		t.Errorf("interrupt: %q", r.stdout)
	}
	x := decodeJSON[client.CodeContext](t, e.ok("", "contexts", "restart", "--json", id, py).stdout)
	if x.ID != py || x.State != "idle" {
		t.Errorf("restart: %+v", x)
	}
	if r := e.run("", "code", id, "-c", "x"); r.code == 0 {
		t.Errorf("x survived the restart: %+v", r)
	}
	if r := e.ok("", "contexts", "rm", id, py); r.stdout != py+"\n" {
		t.Errorf("rm printed %q", r.stdout)
	}
	if l := decodeJSON[[]client.CodeContext](t, e.ok("", "contexts", "ls", "--json", id).stdout); len(l) != 1 {
		t.Errorf("after rm: %+v", l)
	}
	if r := e.run("", "contexts", "rm", id, "nope"); r.code != 1 || !strings.Contains(r.stderr, "nope") {
		t.Errorf("rm of a missing context: %+v", r)
	}
}

// TestCompletion: the scripts parse, offer every verb (completion's table
// is kept equal to the verbs here) and subcommands, and complete sandbox
// IDs from sandbox ls -q where an ID goes.
func TestCompletion(t *testing.T) {
	for name := range (&cli{}).verbs() {
		if _, ok := completions[name]; !ok && !completionAliases[name] {
			t.Errorf("verb %q is neither completed nor an alias", name)
		}
	}
	for name := range completions {
		if _, ok := (&cli{}).verbs()[name]; !ok && !slices.Contains([]string{"serve", "demo", "version", "help"}, name) {
			t.Errorf("completion offers %q, which is no verb", name)
		}
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash is not installed")
	}
	dir := t.TempDir()
	var out strings.Builder
	c := &cli{stdout: &out}
	if code, err := c.main(context.Background(), []string{"completion", "bash"}); code != 0 || err != nil {
		t.Fatal(code, err)
	}
	script := filepath.Join(dir, "airlock.bash")
	if err := os.WriteFile(script, []byte(out.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	// A fake airlock on PATH answers sandbox ls -q.
	fake := "#!/bin/sh\n[ \"$1 $2 $3\" = \"sandbox ls -q\" ] && echo sb-aaaaaaaaaaaaaaaa && echo sb-bbbbbbbbbbbbbbbb\n"
	if err := os.WriteFile(filepath.Join(dir, "airlock"), []byte(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = shellQuote(w)
		}
		cmd := exec.Command(bash, "-c", "source "+script+"; COMP_WORDS=("+strings.Join(quoted, " ")+"); COMP_CWORD="+
			strconv.Itoa(len(words)-1)+`; _airlock; echo "${COMPREPLY[*]}"`)
		cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"))
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %v %s", words, err, b)
		}
		return strings.TrimSpace(string(b))
	}
	for _, tt := range []struct {
		words []string
		want  string
	}{
		{[]string{"airlock", "tem"}, "template"},
		{[]string{"airlock", "template", "i"}, "import inspect"},
		{[]string{"airlock", "exec", "sb-a"}, "sb-aaaaaaaaaaaaaaaa"},
		{[]string{"airlock", "exec", "sb-aaaaaaaaaaaaaaaa", "ech"}, ""},
		{[]string{"airlock", "files", "ls", "sb-b"}, "sb-bbbbbbbbbbbbbbbb"},
		{[]string{"airlock", "--url", "http://x", "shell", ""}, "sb-aaaaaaaaaaaaaaaa sb-bbbbbbbbbbbbbbbb"},
		{[]string{"airlock", "completion", ""}, "bash zsh"},
	} {
		if got := complete(tt.words...); got != tt.want {
			t.Errorf("complete %q = %q, want %q", tt.words, got, tt.want)
		}
	}
	out.Reset()
	if code, err := c.main(context.Background(), []string{"completion", "zsh"}); code != 0 || err != nil ||
		!strings.HasPrefix(out.String(), "#compdef airlock\n") || !strings.Contains(out.String(), "bashcompinit") {
		t.Errorf("completion zsh: %d %v %q", code, err, out.String()[:min(80, out.Len())])
	}
	if code, _ := c.main(context.Background(), []string{"completion", "fish"}); code != 2 {
		t.Errorf("completion fish: %d", code)
	}
}

// synopsisFlagRe finds the flags a usage synopsis names.
var synopsisFlagRe = regexp.MustCompile(`[\s\[(|](--?[a-zA-Z][a-zA-Z-]*)`)

// TestHelpNamesRealFlags: every flag the synopses of these verbs' help
// name is a flag of one of their subcommands, and every subcommand's help
// prints its usage and flags.
func TestHelpNamesRealFlags(t *testing.T) {
	groups := map[string][]string{
		"prune":      {""},
		"completion": {""},
		"exec":       {""},
		"run":        {""},
		"shell":      {""},
		"audit":      {"", "verify", "checkpoint"},
		"files":      {"ls", "mkdir", "rm"},
		"contexts":   {"ls", "rm", "restart", "interrupt"},
		"sandbox":    {"create", "ls", "get", "rm", "extend"},
		"template":   {"build", "import", "ls", "inspect", "rm"},
		"secrets":    {"set", "ls", "rm"},
		"tools":      {"create", "ls", "show", "rm"},
		"toolsets":   {"create", "ls", "show", "rm"},
		"policy":     {"set", "show", "rm"},
	}
	for verb, subs := range groups {
		flags := map[string]bool{"--url": true}
		var usage string
		for _, sub := range subs {
			args := []string{verb}
			if sub != "" {
				args = append(args, sub)
			}
			var out strings.Builder
			c := &cli{stdout: &out}
			if code, err := c.main(context.Background(), append(args, "--help")); code != 0 || err != nil {
				t.Fatalf("%v --help: %d %v", args, code, err)
			}
			help, defs, ok := strings.Cut(out.String(), "\nFlags:\n")
			if !ok {
				t.Fatalf("%v --help has no flags section:\n%s", args, out.String())
			}
			usage = help
			for _, m := range regexp.MustCompile(`(?m)^  (-[a-zA-Z-]+)`).FindAllStringSubmatch(defs, -1) {
				flags[m[1]] = true
				flags["-"+m[1]] = true // the flag package takes -x and --x alike
			}
		}
		for _, line := range strings.Split(usage, "\n") {
			l := strings.TrimSpace(line)
			if !strings.HasPrefix(l, "airlock ") && !strings.HasPrefix(l, "usage: airlock ") && !strings.HasPrefix(l, "[") {
				continue
			}
			for _, m := range synopsisFlagRe.FindAllStringSubmatch(line, -1) {
				if !flags[m[1]] {
					t.Errorf("%s help names %s, which is no flag of it: %q", verb, m[1], l)
				}
			}
		}
	}
}
