package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// maxPolicyFileBytes caps the file of policy set: the daemon's cap on a
// tenant's policy text (maxPolicyFileBytes).
const maxPolicyFileBytes = 256 << 10

const policyUsage = `usage:
  airlock policy set -f FILE [--json]
      Set your tenant's Cedar policy for tool calls (tools:write) from
      FILE (- reads standard input), replacing any. Each call a sandbox
      makes is a request with principal Airlock::Sandbox::"<id>" {tenant,
      key}, action Airlock::Action::"call", resource Airlock::Tool::"<name>"
      {read_only, destructive} and context {args, calls}; it is denied
      unless a policy permits it, and a forbid that applies wins. The
      daemon refuses a text that does not parse, naming the position.
  airlock policy show [--json]          print the policy text (tools:read)
  airlock policy rm                     remove it: policy permits every call
`

func (c *cli) policyCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("policy needs a subcommand: set, show or rm (see airlock policy -h)")
	}
	switch args[0] {
	case "set", "put":
		return c.policySet(ctx, args[1:])
	case "show", "get":
		return c.policyShow(ctx, args[1:])
	case "rm", "delete":
		return c.policyRemove(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, policyUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown policy subcommand %q; want set, show or rm", args[0])
}

func (c *cli) policySet(ctx context.Context, args []string) (int, error) {
	fs := c.flags("policy set", policyUsage)
	file := fs.String("f", "", "read the Cedar policy text from `FILE` (- for standard input)")
	asJSON := fs.Bool("json", false, "print the stored policy as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 || *file == "" {
		return 2, usagef("usage: airlock policy set -f FILE")
	}
	b, err := readInput(*file, c.stdin, maxPolicyFileBytes)
	switch {
	case errors.Is(err, errInputTooLarge):
		return 2, usagef("%s is larger than %d bytes", *file, maxPolicyFileBytes)
	case err != nil:
		return 2, usagef("reading the policy: %v", err)
	case strings.TrimSpace(string(b)) == "":
		return 2, usagef("%s is empty; airlock policy rm removes the policy", *file)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	p, err := cl.PutPolicy(ctx, string(b))
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(p))
	}
	_, err = fmt.Fprintf(c.stdout, "Set the tool-call policy (%d bytes)\n", len(p.Cedar))
	return fail(err)
}

func (c *cli) policyShow(ctx context.Context, args []string) (int, error) {
	fs := c.flags("policy show", policyUsage)
	asJSON := fs.Bool("json", false, "print JSON (the text and its update time)")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("policy show takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	p, err := cl.GetPolicy(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(p))
	}
	text := p.Cedar
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	_, err = fmt.Fprint(c.stdout, text)
	return fail(err)
}

func (c *cli) policyRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("policy rm", policyUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("policy rm takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	if err := cl.DeletePolicy(ctx); err != nil {
		return fail(err)
	}
	_, err = fmt.Fprintln(c.stdout, "Removed the tool-call policy")
	return fail(err)
}
