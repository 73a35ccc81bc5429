package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const netUsage = `usage:
  airlock net show ID [--json]
      Show the sandbox's network mode, allowlist, credentials (secret
      names, never values), its proxy's limits in force and its counters.
  airlock net set ID none
  airlock net set ID allowlist [--allow ENTRY]... [--credential SPEC]...
                  [--max-conns N] [--bandwidth BYTES_PER_S] [--conn-idle-timeout D] [--json]
      Change a running sandbox's network: none (loopback only) or
      allowlist (only the --allow destinations, through its egress proxy:
      host names, *.example.com, addresses and CIDRs, each with optional
      :PORTS such as example.com:443 or 10.0.0.0/8:80,443). The list
      replaces the old one and applies at once to new connections; the
      proxy variables reach commands started afterwards.
      --credential HOST[:PORT]:HEADER=SECRET[:FORMAT] has the proxy add
      the header HEADER, set to the stored secret SECRET (airlock secrets
      set) or to FORMAT with {secret} where it goes, to the requests to
      HOST, e.g. 'api.example.com:Authorization=API_KEY:Bearer {secret}'.
      --max-conns, --bandwidth and --conn-idle-timeout bound the proxy
      below the server's own limits (unset: the server's); the connection
      and bandwidth caps apply at once, a changed idle timeout restarts
      the proxy (cutting its open connections). Like the list, the
      credentials and limits replace the old ones.
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

// credentialFlag is a repeatable --credential
// HOST[:PORT]:HEADER=SECRET[:FORMAT]. Neither a host name nor a header
// holds "=" or ":" and a secret's name holds no ":", so the first "="
// and the colons around it split it; FORMAT may hold anything.
type credentialFlag []client.NetworkCredential

func (f *credentialFlag) String() string {
	var out []string
	for _, c := range *f {
		out = append(out, c.Host+":"+c.Header+"="+c.Secret)
	}
	return strings.Join(out, " ")
}

func (f *credentialFlag) Set(s string) error {
	bad := fmt.Errorf("--credential %q: want HOST[:PORT]:HEADER=SECRET[:FORMAT]", s)
	left, right, ok := strings.Cut(s, "=")
	if !ok {
		return bad
	}
	i := strings.LastIndexByte(left, ':')
	if i <= 0 || i == len(left)-1 {
		return bad
	}
	c := client.NetworkCredential{Host: left[:i], Header: left[i+1:]}
	if host, port, ok := strings.Cut(c.Host, ":"); ok {
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil || p == 0 || host == "" {
			return fmt.Errorf("--credential %q: the port must be 1-65535", s)
		}
		c.Host, c.Port = host, uint16(p)
	}
	c.Secret, c.Format, _ = strings.Cut(right, ":")
	if c.Secret == "" {
		return bad
	}
	*f = append(*f, c)
	return nil
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
	for _, cr := range v.Credentials {
		host := cr.Host
		if cr.Port != 0 {
			host += ":" + strconv.Itoa(int(cr.Port))
		}
		value := "secret " + cr.Secret
		if cr.Format != "" {
			value = fmt.Sprintf("%q with secret %s", cr.Format, cr.Secret)
		}
		fmt.Fprintf(c.stdout, "credential: %s %s: %s\n", host, cr.Header, value)
	}
	if l := v.Limits; l != nil {
		bw := "no cap"
		if l.BandwidthBytesPerS > 0 {
			bw = strconv.FormatInt(l.BandwidthBytesPerS, 10) + " bytes/s each way"
		}
		fmt.Fprintf(c.stdout, "limits: %d connections, bandwidth %s, idle timeout %v\n",
			l.MaxConnections, bw, time.Duration(l.IdleTimeoutS)*time.Second)
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
	var creds credentialFlag
	fs.Var(&creds, "credential", "a header the proxy adds: `HOST[:PORT]:HEADER=SECRET[:FORMAT]` (repeatable)")
	maxConns := fs.Int("max-conns", 0, "at most `N` connections open through the proxy (the server's limit if 0)")
	bandwidth := fs.Int64("bandwidth", 0, "cap the proxy's throughput each way at `BYTES_PER_S` (the server's if 0)")
	var idle durationFlag
	fs.Var(&idle, "conn-idle-timeout", "close a proxied connection idle this long (whole seconds; the server's if unset)")
	asJSON := fs.Bool("json", false, "print the network as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("net set takes a sandbox ID and a mode (none or allowlist)")
	}
	n := client.Network{Mode: pos[1], Allow: allow, Credentials: creds}
	switch d := time.Duration(idle); {
	case *maxConns < 0 || *bandwidth < 0:
		return 2, usagef("--max-conns and --bandwidth must not be negative")
	case d%time.Second != 0:
		return 2, usagef("--conn-idle-timeout must be whole seconds")
	case *maxConns > 0 || *bandwidth > 0 || d > 0:
		n.Limits = &client.NetworkLimits{MaxConnections: *maxConns, BandwidthBytesPerS: *bandwidth, IdleTimeoutS: int64(d / time.Second)}
	}
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
