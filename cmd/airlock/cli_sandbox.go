package main

import (
	"context"
	"flag"
	"fmt"
	"sort"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

const sandboxUsage = `usage:
  airlock sandbox create [-t TEMPLATE] [--timeout D] [--idle-timeout D] [--memory MB] [--cpus N]
                         [--pids N] [--disk MB] [-e K=V]... [-m K=V]... [--allow ENTRY]... [--json]
      Create a sandbox and print its ID (or the sandbox as JSON).
      --allow gives it network mode allowlist: only those destinations,
      through its egress proxy (see airlock net -h).
      --idle-timeout ends it after that long without a request.
  airlock sandbox ls [--state S]... [-m K=V]... [-q | --json]
      List your sandboxes (stopped ones stay listed for a short while);
      -q prints their IDs only.
  airlock sandbox get ID [--json]
  airlock sandbox rm ID...
  airlock sandbox rm --all [-m K=V]... --force
      Remove every live sandbox of your tenant (with -m, those with that
      metadata). Without --force (-f, -y) it lists them and removes nothing.
  airlock sandbox extend ID DURATION [--json]
      Make the sandbox expire DURATION (e.g. 30m) from now.
`

// toSandboxJSON is the --json form of a sandbox: the API's wire format.
func toSandboxJSON(sb *client.Sandbox) wire.Sandbox {
	md := sb.Metadata
	if md == nil {
		md = map[string]string{}
	}
	return wire.Sandbox{
		ID:             sb.ID,
		State:          sb.State,
		Template:       sb.Template,
		Limits:         sb.Limits,
		Metadata:       md,
		CreatedAt:      sb.CreatedAt.UTC(),
		ExpiresAt:      sb.ExpiresAt.UTC(),
		MaxExpiresAt:   sb.MaxExpiresAt.UTC(),
		IdleTimeoutS:   int64(sb.IdleTimeout / time.Second),
		LastActivityAt: sb.LastActivityAt.UTC(),
		StoppedAt:      optTime(sb.StoppedAt),
		EndReason:      sb.EndReason,
		Error:          sb.Error,
	}
}

// sandboxCmd runs `airlock sandbox SUBCOMMAND`.
func (c *cli) sandboxCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("sandbox needs a subcommand: create, ls, get, rm or extend (see airlock sandbox -h)")
	}
	switch args[0] {
	case "create", "new":
		return c.sandboxCreate(ctx, args[1:])
	case "ls", "list":
		return c.sandboxList(ctx, args[1:])
	case "get", "inspect":
		return c.sandboxGet(ctx, args[1:])
	case "rm", "delete":
		return c.sandboxRemove(ctx, args[1:])
	case "extend", "timeout":
		return c.sandboxExtend(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, sandboxUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown sandbox subcommand %q; want create, ls, get, rm or extend", args[0])
}

// limitFlags are --memory, --cpus, --pids and --disk.
type limitFlags struct {
	memoryMB int64
	cpus     float64
	pids     int64
	diskMB   int64
}

// register adds the flags to fs.
func (f *limitFlags) register(fs *flag.FlagSet) {
	fs.Int64Var(&f.memoryMB, "memory", 0, "memory limit in `MB`")
	fs.Float64Var(&f.cpus, "cpus", 0, "CPU limit (`N` cores, may be fractional)")
	fs.Int64Var(&f.pids, "pids", 0, "process limit")
	fs.Int64Var(&f.diskMB, "disk", 0, "disk limit in `MB`")
}

// limits returns the limits given, nil when none is.
func (f *limitFlags) limits() (*client.Limits, error) {
	if f.memoryMB < 0 || f.cpus < 0 || f.pids < 0 || f.diskMB < 0 {
		return nil, usagef("limits must not be negative")
	}
	if f.memoryMB == 0 && f.cpus == 0 && f.pids == 0 && f.diskMB == 0 {
		return nil, nil
	}
	return &client.Limits{CPUs: f.cpus, MemoryMB: f.memoryMB, Pids: f.pids, DiskMB: f.diskMB}, nil
}

// createFlags are the flags that shape a new sandbox (create and run).
type createFlags struct {
	template    string
	timeout     durationFlag
	idleTimeout durationFlag
	limitFlags
	env   kvFlag
	meta  kvFlag
	allow allowFlag
}

// register adds the flags to fs; withEnv adds -e (run has its own).
func (f *createFlags) register(fs *flag.FlagSet, withEnv bool) {
	f.env, f.meta = kvFlag{}, kvFlag{}
	fs.StringVar(&f.template, "t", "", "`template` (the server's default if empty)")
	fs.StringVar(&f.template, "template", "", "same as -t")
	f.limitFlags.register(fs)
	fs.Var(f.meta, "m", "metadata `K=V` (repeatable)")
	fs.Var(f.meta, "metadata", "same as -m")
	fs.Var(&f.allow, "allow", "network mode allowlist: a destination `ENTRY` the sandbox may reach (repeatable)")
	if withEnv {
		fs.Var(&f.timeout, "timeout", "how long the sandbox lives (e.g. 10m; the server's default if unset)")
		fs.Var(&f.idleTimeout, "idle-timeout", "end the sandbox after this long without a request (e.g. 5m; never if unset)")
		fs.Var(f.env, "e", "environment `K=V` for every command (repeatable)")
		fs.Var(f.env, "env", "same as -e")
	}
}

// request is the create request the flags describe.
func (f *createFlags) request() (client.CreateSandboxRequest, error) {
	limits, err := f.limits()
	if err != nil {
		return client.CreateSandboxRequest{}, err
	}
	return client.CreateSandboxRequest{
		Template:    f.template,
		Timeout:     time.Duration(f.timeout),
		IdleTimeout: time.Duration(f.idleTimeout),
		Limits:      limits,
		Env:         f.env.orNil(),
		Metadata:    f.meta.orNil(),
		Network:     f.allow.network(),
	}, nil
}

func (c *cli) sandboxCreate(ctx context.Context, args []string) (int, error) {
	fs := c.flags("sandbox create", sandboxUsage)
	var cf createFlags
	cf.register(fs, true)
	asJSON := fs.Bool("json", false, "print the sandbox as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("sandbox create takes no arguments, got %q", pos[0])
	}
	req, err := cf.request()
	if err != nil {
		return 2, err
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	sb, err := cl.CreateSandbox(ctx, req)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(toSandboxJSON(sb)))
	}
	_, err = fmt.Fprintln(c.stdout, sb.ID)
	return fail(err)
}

func (c *cli) sandboxList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("sandbox ls", sandboxUsage)
	var states listFlag
	meta := kvFlag{}
	fs.Var(&states, "state", "keep sandboxes in this `state` (repeatable: running, stopped, failed, ...)")
	fs.Var(meta, "m", "keep sandboxes with metadata `K=V` (repeatable)")
	fs.Var(meta, "metadata", "same as -m")
	asJSON := fs.Bool("json", false, "print JSON")
	quiet := fs.Bool("q", false, "print the IDs only, one per line")
	fs.BoolVar(quiet, "quiet", false, "same as -q")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("sandbox ls takes no arguments, got %q", pos[0])
	}
	if *quiet && *asJSON {
		return 2, usagef("give -q or --json, not both")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	opts := client.ListOptions{Metadata: meta.orNil()}
	for _, s := range states {
		opts.States = append(opts.States, client.State(s))
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	sbs, err := cl.ListSandboxes(ctx, opts)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		out := make([]wire.Sandbox, 0, len(sbs))
		for i := range sbs {
			out = append(out, toSandboxJSON(&sbs[i]))
		}
		return fail(c.printJSON(out))
	}
	if *quiet {
		for _, sb := range sbs {
			if _, err := fmt.Fprintln(c.stdout, sb.ID); err != nil {
				return fail(err)
			}
		}
		return 0, nil
	}
	rows := make([][]string, 0, len(sbs))
	for _, sb := range sbs {
		rows = append(rows, []string{sb.ID, stateWithReason(sb), sb.Template, formatTime(sb.CreatedAt),
			expiresIn(sb), formatMeta(sb.Metadata)})
	}
	return fail(c.table([]string{"ID", "STATE", "TEMPLATE", "CREATED", "EXPIRES", "METADATA"}, rows))
}

// stateWithReason is a sandbox's state, with why it ended once it has
// ("failed (agent_died)").
func stateWithReason(sb client.Sandbox) string {
	if sb.EndReason == "" {
		return string(sb.State)
	}
	return string(sb.State) + " (" + sb.EndReason + ")"
}

// expiresIn says when a sandbox expires, relative to now.
func expiresIn(sb client.Sandbox) string {
	if sb.State == client.StateStopped || !sb.StoppedAt.IsZero() {
		return "-"
	}
	d := time.Until(sb.ExpiresAt).Round(time.Second)
	if d <= 0 {
		return "now"
	}
	return "in " + d.String()
}

// formatMeta shows metadata as k=v pairs, sorted.
func formatMeta(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	return kvFlag(m).String()
}

func (c *cli) sandboxGet(ctx context.Context, args []string) (int, error) {
	fs := c.flags("sandbox get", sandboxUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock sandbox get ID [--json]")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	sb, err := cl.GetSandbox(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(toSandboxJSON(sb)))
	}
	return fail(c.describe(sb))
}

// describe prints one sandbox as "field: value" lines.
func (c *cli) describe(sb *client.Sandbox) error {
	lim := sb.Limits
	lines := [][2]string{
		{"ID", sb.ID},
		{"State", string(sb.State)},
		{"Template", sb.Template},
		{"Limits", fmt.Sprintf("cpus=%g memory=%dMB pids=%d disk=%dMB", lim.CPUs, lim.MemoryMB, lim.Pids, lim.DiskMB)},
		{"Created", formatTime(sb.CreatedAt)},
		{"Expires", formatTime(sb.ExpiresAt) + " (" + expiresIn(*sb) + ")"},
		{"Max expiry", formatTime(sb.MaxExpiresAt)},
		{"Last activity", formatTime(sb.LastActivityAt)},
	}
	if sb.IdleTimeout > 0 {
		lines = append(lines, [2]string{"Idle timeout", sb.IdleTimeout.String()})
	}
	if !sb.StoppedAt.IsZero() {
		lines = append(lines, [2]string{"Ended", formatTime(sb.StoppedAt)})
	}
	if sb.EndReason != "" {
		lines = append(lines, [2]string{"End reason", sb.EndReason})
	}
	if sb.Error != "" {
		lines = append(lines, [2]string{"Error", sb.Error})
	}
	keys := make([]string, 0, len(sb.Metadata))
	for k := range sb.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		lines = append(lines, [2]string{"Metadata " + k, sb.Metadata[k]})
	}
	var b strings.Builder
	for _, l := range lines {
		fmt.Fprintf(&b, "%-14s %s\n", l[0]+":", l[1])
	}
	_, err := fmt.Fprint(c.stdout, b.String())
	return err
}

func (c *cli) sandboxRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("sandbox rm", sandboxUsage)
	all := fs.Bool("all", false, "remove every live sandbox of your tenant (needs --force)")
	force := fs.Bool("force", false, "with --all: remove them (without it they are only listed)")
	fs.BoolVar(force, "f", false, "same as --force")
	fs.BoolVar(force, "y", false, "same as --force")
	meta := kvFlag{}
	fs.Var(meta, "m", "with --all: only sandboxes with metadata `K=V` (repeatable)")
	fs.Var(meta, "metadata", "same as -m")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	switch {
	case *all && len(pos) > 0:
		return 2, usagef("give IDs or --all, not both")
	case !*all && len(meta) > 0:
		return 2, usagef("-m goes with --all")
	case len(pos) == 0 && !*all:
		return 2, usagef("usage: airlock sandbox rm ID... | --all --force")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	if *all {
		return c.removeAll(ctx, cl, meta.orNil(), *force)
	}
	return c.forEachID(ctx, pos, "sandboxes were not removed", cl.DeleteSandbox)
}

// forEachID applies op to every id within one control timeout, printing
// each id done and each failure; failed says what a failure means
// ("sandboxes were not removed").
func (c *cli) forEachID(ctx context.Context, ids []string, failed string, op func(context.Context, string) error) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	n := 0
	for _, id := range ids {
		if err := op(ctx, id); err != nil {
			n++
			fmt.Fprintf(c.stderr, "airlock: %s: %v\n", id, friendly(err))
			continue
		}
		fmt.Fprintln(c.stdout, id)
	}
	if n > 0 {
		return 1, &cliError{msg: fmt.Sprintf("%d of %d %s", n, len(ids), failed)}
	}
	return 0, nil
}

func (c *cli) sandboxExtend(ctx context.Context, args []string) (int, error) {
	fs := c.flags("sandbox extend", sandboxUsage)
	asJSON := fs.Bool("json", false, "print the sandbox as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("usage: airlock sandbox extend ID DURATION (e.g. 30m)")
	}
	d, err := parseDuration(pos[1])
	if err != nil || d <= 0 {
		return 2, usagef("bad duration %q: want e.g. 90s, 30m or 2h", pos[1])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	sb, err := cl.SetTimeout(ctx, pos[0], d)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(toSandboxJSON(sb)))
	}
	_, err = fmt.Fprintf(c.stdout, "%s expires at %s\n", sb.ID, formatTime(sb.ExpiresAt))
	return fail(err)
}
