package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	wire "github.com/airlock-sandbox/airlock/api"
)

const cliTool = `{
  "name": "list_team",
  "description": "Members of a team.",
  "input_schema": {"type": "object", "properties": {"team": {"type": "string"}}},
  "upstream": {"kind": "http", "http": {"method": "GET", "url": "https://people.example.com/teams/{args.team}",
    "headers": {"Authorization": "Bearer {secret.PEOPLE_TOKEN}"}}}
}`

// TestCLITools: tools create from a file and from stdin, --replace, ls,
// show and rm; toolsets create, ls, show and rm; refusals exit non-zero
// with the daemon's words.
func TestCLITools(t *testing.T) {
	e := newCLIEnv(t)
	file := filepath.Join(t.TempDir(), "tool.json")
	if err := os.WriteFile(file, []byte(cliTool), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := e.ok("", "tools", "create", "-f", file); r.stdout != "Registered tool list_team\n" {
		t.Errorf("create printed %q", r.stdout)
	}
	caller := `{"name":"ask_human","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"description":"asks"}`
	tl := decodeJSON[wire.Tool](t, e.ok(caller, "tool", "create", "-f", "-", "--json").stdout)
	if tl.Name != "ask_human" || tl.Upstream.Kind != "caller" || tl.CreatedAt.IsZero() {
		t.Errorf("create --json = %+v", tl)
	}
	if r := e.run("", "tools", "create", "-f", file); r.code == 0 || !strings.Contains(r.stderr+errText(r.err), "already exists") {
		t.Errorf("create again: %d %q %v", r.code, r.stderr, r.err)
	}
	if r := e.ok(strings.Replace(caller, "asks", "asks a person", 1), "tools", "create", "--replace", "-f", "-"); r.stdout != "Replaced tool ask_human\n" {
		t.Errorf("create --replace printed %q", r.stdout)
	}
	table := e.ok("", "tools", "ls").stdout
	for _, want := range []string{"NAME", "UPSTREAM", "ask_human", "caller", "asks a person", "list_team", "GET https://people.example.com/teams/{args.team}"} {
		if !strings.Contains(table, want) {
			t.Errorf("tools ls lacks %q:\n%s", want, table)
		}
	}
	list := decodeJSON[wire.ToolList](t, e.ok("", "tools", "ls", "--json").stdout)
	if len(list.Tools) != 2 || list.Tools[0].Name != "ask_human" || list.Tools[1].Name != "list_team" {
		t.Errorf("tools ls --json = %+v", list)
	}
	shown := decodeJSON[wire.Tool](t, e.ok("", "tools", "show", "list_team").stdout)
	if shown.Upstream.HTTP == nil || shown.Upstream.HTTP.Headers["Authorization"] != "Bearer {secret.PEOPLE_TOKEN}" {
		t.Errorf("tools show = %+v", shown)
	}

	if r := e.ok("", "toolsets", "create", "people", "list_team", "ask_human"); r.stdout != "Registered toolset people (2 tools)\n" {
		t.Errorf("toolsets create printed %q", r.stdout)
	}
	if r := e.ok("", "toolsets", "show", "people"); r.stdout != "list_team\nask_human\n" {
		t.Errorf("toolsets show printed %q", r.stdout)
	}
	s := decodeJSON[wire.Toolset](t, e.ok("", "toolset", "create", "--replace", "--json", "people", "list_team").stdout)
	if !slices.Equal(s.Tools, []string{"list_team"}) {
		t.Errorf("toolsets create --replace = %+v", s)
	}
	if table := e.ok("", "toolsets", "ls").stdout; !strings.Contains(table, "people") || !strings.Contains(table, "list_team") {
		t.Errorf("toolsets ls:\n%s", table)
	}
	if r := e.run("", "toolsets", "create", "bad", "nope"); r.code == 0 || !strings.Contains(r.stderr+errText(r.err), "tool nope is not registered") {
		t.Errorf("toolset of an unknown tool: %d %q %v", r.code, r.stderr, r.err)
	}
	if r := e.ok("", "toolsets", "rm", "people"); r.stdout != "people\n" {
		t.Errorf("toolsets rm printed %q", r.stdout)
	}
	if r := e.ok("", "tools", "rm", "list_team", "ask_human"); r.stdout != "list_team\nask_human\n" {
		t.Errorf("tools rm printed %q", r.stdout)
	}
	if r := e.run("", "tools", "rm", "list_team"); r.code != 1 || !strings.Contains(r.stderr, "not found") {
		t.Errorf("tools rm of a removed tool: %d %q", r.code, r.stderr)
	}
	if l := decodeJSON[wire.ToolList](t, e.ok("", "tools", "ls", "--json").stdout); len(l.Tools) != 0 {
		t.Errorf("after rm, tools = %+v", l.Tools)
	}
}

// TestCLIToolsRefused: a bad file or bad usage is refused before any
// request (exit 2); a tool the daemon refuses names the field.
func TestCLIToolsRefused(t *testing.T) {
	e := newCLIEnv(t)
	for _, c := range []struct {
		stdin string
		args  []string
		code  int
		want  string
	}{
		{"", []string{"tools"}, 2, "needs a subcommand"},
		{"", []string{"tools", "frob"}, 2, "unknown tools subcommand"},
		{"", []string{"tools", "create"}, 2, "usage: airlock tools create -f FILE"},
		{"", []string{"tools", "create", "-f", filepath.Join(t.TempDir(), "missing.json")}, 2, "reading the tool"},
		{`{"name":"x"`, []string{"tools", "create", "-f", "-"}, 2, "is not a tool"},
		{`{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"extra":1}`, []string{"tools", "create", "-f", "-"}, 2, "unknown field"},
		{`{"input_schema":{"type":"object"},"upstream":{"kind":"caller"}}`, []string{"tools", "create", "-f", "-"}, 2, "has no name"},
		{`{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"caller"}} {}`, []string{"tools", "create", "-f", "-"}, 2, "data after"},
		{`{"name":"x","input_schema":{"type":"object"},"upstream":{"kind":"caller"},"governance":{"timeout_s":1000}}`, []string{"tools", "create", "-f", "-"}, 1, "governance.timeout_s"},
		{"", []string{"tools", "show"}, 2, "usage: airlock tools show NAME"},
		{"", []string{"tools", "rm"}, 2, "usage: airlock tools rm NAME"},
		{"", []string{"toolsets", "create"}, 2, "usage: airlock toolsets create NAME"},
		{"", []string{"toolsets", "show", "nope"}, 1, "not found"},
	} {
		r := e.run(c.stdin, c.args...)
		if r.code != c.code || !strings.Contains(r.stderr+errText(r.err), c.want) {
			t.Errorf("airlock %s: code %d, stderr %q, err %v; want %d saying %q", strings.Join(c.args, " "), r.code, r.stderr, r.err, c.code, c.want)
		}
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
