package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/client"
)

const netUsage = `usage:
  airlock net show ID [--json]
      Show the sandbox's network mode, allowlist and egress counters.
  airlock net set ID none
  airlock net set ID allowlist [--allow ENTRY]... [--json]
      Change a running sandbox's network: none (loopback only) or
      allowlist (only the --allow destinations, through its egress proxy:
      host names, *.example.com, addresses and CIDRs, each with optional
      :PORTS such as example.com:443 or 10.0.0.0/8:80,443). The list
      replaces the old one and applies at once to new connections; the
      proxy variables reach commands started afterwards.
  airlock net log ID [--after SEQ] [--limit N] [--json]
      The sandbox's egress decisions, oldest first (audit:read scope).
`

// allowFlag is a repeatable --allow; an entry may hold commas (ports).
type allowFlag []string

func (f *allowFlag) String() string { return strings.Join(*f, " ") }

func (f *allowFlag) Set(s string) error {
	if s = strings.TrimSpace(s); s == "" {
		return fmt.Errorf("an empty --allow entry")
	}
	*f = append(*f, s)
	return nil
}

// network is the network of a create request with --allow entries.
func (f allowFlag) network() *client.Network {
	if len(f) == 0 {
		return nil
	}
	return &client.Network{Mode: client.NetworkAllowlist, Allow: f}
}

// netCmd runs `airlock net SUBCOMMAND`.
func (c *cli) netCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("net needs a subcommand: show, set or log (see airlock net -h)")
	}
	switch args[0] {
	case "show", "get":
		return c.netShow(ctx, args[1:])
	case "set":
		return c.netSet(ctx, args[1:])
	case "log":
		return c.netLog(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, netUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown net subcommand %q; want show, set or log", args[0])
}

// printNetwork prints v as text or JSON.
func (c *cli) printNetwork(v *client.NetworkView, asJSON bool) error {
	if asJSON {
		return c.printJSON(v)
	}
	fmt.Fprintf(c.stdout, "mode: %s\n", v.Mode)
	for _, a := range v.Allow {
		fmt.Fprintf(c.stdout, "allow: %s\n", a)
	}
	if s := v.Stats; s != nil {
		_, err := fmt.Fprintf(c.stdout, "connections: %d (%d open), allowed %d, refused %d, bytes up %d, down %d\n",
			s.Conns, s.Active, s.Allowed, s.Refused, s.BytesUp, s.BytesDown)
		return err
	}
	return nil
}

func (c *cli) netShow(ctx context.Context, args []string) (int, error) {
	fs := c.flags("net show", netUsage)
	asJSON := fs.Bool("json", false, "print the network as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("net show takes one sandbox ID")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	v, err := cl.Network(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	return fail(c.printNetwork(v, *asJSON))
}

func (c *cli) netSet(ctx context.Context, args []string) (int, error) {
	fs := c.flags("net set", netUsage)
	var allow allowFlag
	fs.Var(&allow, "allow", "a destination `ENTRY` the sandbox may reach (repeatable)")
	asJSON := fs.Bool("json", false, "print the network as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("net set takes a sandbox ID and a mode (none or allowlist)")
	}
	n := client.Network{Mode: pos[1], Allow: allow}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	v, err := cl.SetNetwork(ctx, pos[0], n)
	if err != nil {
		return fail(err)
	}
	return fail(c.printNetwork(v, *asJSON))
}

func (c *cli) netLog(ctx context.Context, args []string) (int, error) {
	fs := c.flags("net log", netUsage)
	after := fs.Uint64("after", 0, "records after this `SEQ`")
	limit := fs.Int("limit", 0, "at most `N` records (the server's default if 0)")
	asJSON := fs.Bool("json", false, "print the records as JSON lines")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("net log takes one sandbox ID")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	recs, _, err := cl.NetworkLog(ctx, pos[0], *after, *limit)
	if err != nil {
		return fail(err)
	}
	for _, r := range recs {
		if *asJSON {
			if err := c.printJSON(r); err != nil {
				return fail(err)
			}
			continue
		}
		if _, err := fmt.Fprintf(c.stdout, "%d %s %s %s\n", r.Seq, r.Time.UTC().Format("2006-01-02T15:04:05.000Z"), r.Outcome, r.Details); err != nil {
			return fail(err)
		}
	}
	return 0, nil
}
