package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

const toolsUsage = `usage:
  airlock tools create -f FILE [--replace] [--json]
      Register a tool of your tenant (tools:write) from FILE, a JSON object
      with name, description, input_schema, output_schema, upstream and
      governance (the body of POST /v1/tools; - reads standard input).
      With --replace, replace the registered tool of that name instead.
      The daemon checks everything and names the field at fault. Put
      credentials in secrets (airlock secrets set) and refer to them in a
      header as {secret.NAME}: the sandbox never sees them.
  airlock tools ls [--json]             names, upstreams and descriptions
  airlock tools show NAME               the tool as JSON
  airlock tools rm NAME...
`

const toolsetsUsage = `usage:
  airlock toolsets create NAME [TOOL...] [--replace] [--json]
      Register a toolset of your tenant (tools:write): a name for a group
      of its registered tools, granted to sandboxes together. With
      --replace, replace the tools of the toolset of that name instead.
  airlock toolsets ls [--json]
  airlock toolsets show NAME [--json]
  airlock toolsets rm NAME...
`

// maxToolFileBytes caps the file of tools create: a tool's two schemas
// of up to 64 KiB each and the rest.
const maxToolFileBytes = 1 << 20

func (c *cli) toolsCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("tools needs a subcommand: create, ls, show or rm (see airlock tools -h)")
	}
	switch args[0] {
	case "create":
		return c.toolsCreate(ctx, args[1:])
	case "ls", "list":
		return c.toolsList(ctx, args[1:])
	case "show", "inspect", "get":
		return c.toolsShow(ctx, args[1:])
	case "rm", "delete":
		return c.toolsRemove(ctx, args[1:], "tools", toolsUsage, "tools were not removed", func(cl *client.Client) func(context.Context, string) error {
			return cl.DeleteTool
		})
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, toolsUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown tools subcommand %q; want create, ls, show or rm", args[0])
}

func (c *cli) toolsetsCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("toolsets needs a subcommand: create, ls, show or rm (see airlock toolsets -h)")
	}
	switch args[0] {
	case "create":
		return c.toolsetsCreate(ctx, args[1:])
	case "ls", "list":
		return c.toolsetsList(ctx, args[1:])
	case "show", "inspect", "get":
		return c.toolsetsShow(ctx, args[1:])
	case "rm", "delete":
		return c.toolsRemove(ctx, args[1:], "toolsets", toolsetsUsage, "toolsets were not removed", func(cl *client.Client) func(context.Context, string) error {
			return cl.DeleteToolset
		})
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, toolsetsUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown toolsets subcommand %q; want create, ls, show or rm", args[0])
}

func (c *cli) toolsCreate(ctx context.Context, args []string) (int, error) {
	fs := c.flags("tools create", toolsUsage)
	file := fs.String("f", "", "read the tool from `FILE` (JSON; - for standard input)")
	replace := fs.Bool("replace", false, "replace the registered tool of the file's name")
	asJSON := fs.Bool("json", false, "print the tool as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 || *file == "" {
		return 2, usagef("usage: airlock tools create -f FILE [--replace]")
	}
	req, err := c.readToolFile(*file)
	if err != nil {
		return 2, err
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	var t *client.Tool
	verb := "Registered"
	if *replace {
		t, err = cl.ReplaceTool(ctx, req.Name, req)
		verb = "Replaced"
	} else {
		t, err = cl.CreateTool(ctx, req)
	}
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(t))
	}
	_, err = fmt.Fprintf(c.stdout, "%s tool %s\n", verb, t.Name)
	return fail(err)
}

// readToolFile reads the tool of tools create from path (- for stdin):
// one JSON object of the request's fields, none unknown.
func (c *cli) readToolFile(path string) (client.PutToolRequest, error) {
	b, err := readInput(path, c.stdin, maxToolFileBytes)
	switch {
	case errors.Is(err, errInputTooLarge):
		return client.PutToolRequest{}, usagef("%s is larger than %d bytes", path, maxToolFileBytes)
	case err != nil:
		return client.PutToolRequest{}, usagef("reading the tool: %v", err)
	}
	var req client.PutToolRequest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return client.PutToolRequest{}, usagef("%s is not a tool: %v", path, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return client.PutToolRequest{}, usagef("%s is not a tool: data after the JSON object", path)
	}
	if req.Name == "" {
		return client.PutToolRequest{}, usagef("%s has no name", path)
	}
	return req, nil
}

func (c *cli) toolsList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("tools ls", toolsUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("tools ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	ts, err := cl.ListTools(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(wire.ToolList{Tools: ts}))
	}
	rows := make([][]string, 0, len(ts))
	for _, t := range ts {
		rows = append(rows, []string{t.Name, upstreamText(t.Upstream), formatTime(t.UpdatedAt), dash(shorten(t.Description, 50))})
	}
	return fail(c.table([]string{"NAME", "UPSTREAM", "UPDATED", "DESCRIPTION"}, rows))
}

// upstreamText is a tool's upstream in a table: caller, or the method
// and URL template.
func upstreamText(u wire.ToolUpstream) string {
	if u.HTTP == nil {
		return u.Kind
	}
	return u.HTTP.Method + " " + shorten(u.HTTP.URL, 60)
}

func (c *cli) toolsShow(ctx context.Context, args []string) (int, error) {
	fs := c.flags("tools show", toolsUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock tools show NAME")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	t, err := cl.GetTool(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	return fail(c.printJSON(t))
}

// toolsRemove serves tools rm and toolsets rm (verb, with its usage):
// it removes each name with the delete op gives.
func (c *cli) toolsRemove(ctx context.Context, args []string, verb, usage, failed string, op func(*client.Client) func(context.Context, string) error) (int, error) {
	fs := c.flags(verb+" rm", usage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock %s rm NAME...", verb)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	return c.forEachID(ctx, pos, failed, op(cl))
}

func (c *cli) toolsetsCreate(ctx context.Context, args []string) (int, error) {
	fs := c.flags("toolsets create", toolsetsUsage)
	replace := fs.Bool("replace", false, "replace the tools of the toolset of that name")
	asJSON := fs.Bool("json", false, "print the toolset as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock toolsets create NAME [TOOL...] [--replace]")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	req := client.PutToolsetRequest{Name: pos[0], Tools: pos[1:]}
	var s *client.Toolset
	verb := "Registered"
	if *replace {
		s, err = cl.ReplaceToolset(ctx, req.Name, req)
		verb = "Replaced"
	} else {
		s, err = cl.CreateToolset(ctx, req)
	}
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(s))
	}
	_, err = fmt.Fprintf(c.stdout, "%s toolset %s (%d tools)\n", verb, s.Name, len(s.Tools))
	return fail(err)
}

func (c *cli) toolsetsList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("toolsets ls", toolsetsUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("toolsets ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	ss, err := cl.ListToolsets(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(wire.ToolsetList{Toolsets: ss}))
	}
	rows := make([][]string, 0, len(ss))
	for _, s := range ss {
		rows = append(rows, []string{s.Name, formatTime(s.UpdatedAt), dash(shorten(strings.Join(s.Tools, " "), 80))})
	}
	return fail(c.table([]string{"NAME", "UPDATED", "TOOLS"}, rows))
}

func (c *cli) toolsetsShow(ctx context.Context, args []string) (int, error) {
	fs := c.flags("toolsets show", toolsetsUsage)
	asJSON := fs.Bool("json", false, "print the toolset as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock toolsets show NAME")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	s, err := cl.GetToolset(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(s))
	}
	for _, t := range s.Tools {
		if _, err := fmt.Fprintln(c.stdout, t); err != nil {
			return fail(err)
		}
	}
	return 0, nil
}
