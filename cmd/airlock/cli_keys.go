package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
)

// keysUsage is the help of keys; its scope list is scopeHelp's, in the
// order of api.CheckedScopes.
var keysUsage = `usage:
  airlock keys create --name N --scope S... [--expires D] [--json]
      Create an API key in your tenant (admin) and print it: it is shown
      only once. A key cannot grant a scope it lacks (only an operator key
      grants operator). --expires takes a duration (e.g. 720h). The scopes:
` + scopeList() + `  airlock keys ls [--json]
  airlock keys revoke ID...
`

// scopeHelp says what each scope a route checks allows. A test keeps its
// keys equal to api.CheckedScopes(), which is derived from the route
// table, so the help lists exactly the scopes that grant something.
var scopeHelp = map[auth.Scope]string{
	auth.ScopeSandboxesRead:  "list and inspect sandboxes",
	auth.ScopeSandboxesWrite: "create, delete and extend sandboxes",
	auth.ScopeExec:           "run commands, code, terminals and process control in sandboxes",
	auth.ScopeFiles:          "read, write, list and delete files in sandboxes",
	auth.ScopeAuditRead:      "read your tenant's audit records",
	auth.ScopeTemplatesRead:  "list and inspect templates",
	auth.ScopeTemplatesWrite: "build, import and remove your tenant's templates",
	auth.ScopeToolsRead:      "list and inspect your tenant's tools and toolsets",
	auth.ScopeToolsWrite:     "register, replace and remove your tenant's tools and toolsets",
	auth.ScopeToolsCall:      "run one-shot programs with your tenant's tools (airlock program) and answer their caller-executed calls",
	auth.ScopeApprovals:      "list and decide your tenant's tool calls that wait for approval",
	auth.ScopeAdmin:          "all of the above, API keys, secrets, the host report and audit verification",
	auth.ScopeOperator:       "admin, and across tenants: tenants, shared templates, registry pulls",
}

// scopeList is the help's list of scopes, one per line.
func scopeList() string {
	var b strings.Builder
	for _, s := range api.CheckedScopes() {
		fmt.Fprintf(&b, "        %-16s %s\n", s, scopeHelp[s])
	}
	return b.String()
}

// toKeyJSON is the --json form of a key: the API's wire format.
func toKeyJSON(k client.Key) wire.Key {
	return wire.Key{ID: k.ID, Name: k.Name, Scopes: k.Scopes, CreatedAt: k.CreatedAt.UTC(),
		ExpiresAt: optTime(k.ExpiresAt), LastUsedAt: optTime(k.LastUsedAt), RevokedAt: optTime(k.RevokedAt)}
}

// toCreatedKeyJSON is the --json form of a new key, with its secret: the
// API's wire format.
func toCreatedKeyJSON(k client.CreatedKey) wire.CreatedKey {
	j := toKeyJSON(k.Key)
	return wire.CreatedKey{ID: j.ID, Key: k.Secret, Name: j.Name, Scopes: j.Scopes, CreatedAt: j.CreatedAt,
		ExpiresAt: j.ExpiresAt, LastUsedAt: j.LastUsedAt, RevokedAt: j.RevokedAt}
}

func (c *cli) keysCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("keys needs a subcommand: create, ls or revoke (see airlock keys -h)")
	}
	switch args[0] {
	case "create", "new":
		return c.keysCreate(ctx, args[1:])
	case "ls", "list":
		return c.keysList(ctx, args[1:])
	case "revoke", "rm":
		return c.keysRevoke(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, keysUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown keys subcommand %q; want create, ls or revoke", args[0])
}

func (c *cli) keysCreate(ctx context.Context, args []string) (int, error) {
	fs := c.flags("keys create", keysUsage)
	var scopes listFlag
	name := fs.String("name", "", "what the key is for (required)")
	fs.Var(&scopes, "scope", "a `scope` the key grants (repeatable, or comma-separated)")
	var expires durationFlag
	fs.Var(&expires, "expires", "expire the key after this `duration` (default: never)")
	asJSON := fs.Bool("json", false, "print the key as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	switch {
	case len(pos) != 0:
		return 2, usagef("keys create takes no arguments, got %q", pos[0])
	case strings.TrimSpace(*name) == "":
		return 2, usagef("--name is required")
	case len(scopes) == 0:
		return 2, usagef("at least one --scope is required (e.g. --scope sandboxes:read --scope exec)")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	k, err := cl.CreateKey(ctx, client.CreateKeyRequest{Name: *name, Scopes: scopes, ExpiresIn: time.Duration(expires)})
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(toCreatedKeyJSON(*k)))
	}
	// The key alone on stdout, for KEY=$(airlock keys create ...).
	fmt.Fprintf(c.stderr, "Created key %s (%s) with scopes %s. It is shown only once:\n",
		k.ID, k.Name, strings.Join(k.Scopes, ", "))
	_, err = fmt.Fprintln(c.stdout, k.Secret)
	return fail(err)
}

func (c *cli) keysList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("keys ls", keysUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("keys ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	keys, err := cl.ListKeys(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		out := make([]wire.Key, 0, len(keys))
		for _, k := range keys {
			out = append(out, toKeyJSON(k))
		}
		return fail(c.printJSON(out))
	}
	now := time.Now()
	rows := make([][]string, 0, len(keys))
	for _, k := range keys {
		status := "active"
		switch {
		case !k.RevokedAt.IsZero():
			status = "revoked"
		case !k.ExpiresAt.IsZero() && !now.Before(k.ExpiresAt):
			status = "expired"
		}
		rows = append(rows, []string{k.ID, dash(k.Name), strings.Join(k.Scopes, ","), status,
			formatTime(k.CreatedAt), formatTime(k.ExpiresAt), formatTime(k.LastUsedAt)})
	}
	return fail(c.table([]string{"ID", "NAME", "SCOPES", "STATUS", "CREATED", "EXPIRES", "LAST USED"}, rows))
}

func (c *cli) keysRevoke(ctx context.Context, args []string) (int, error) {
	fs := c.flags("keys revoke", keysUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock keys revoke ID...")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	return c.forEachID(ctx, pos, "keys were not revoked", cl.RevokeKey)
}
