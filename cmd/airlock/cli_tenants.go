package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

const tenantsUsage = `usage:
  airlock tenants create [--id ID] [--max-sandboxes N] [--json] NAME
      Create a tenant and its first API key (admin scope), printed once.
      The operator's command (a key with the operator scope, such as the
      daemon's admin.key). --id picks the ID (default: generated; the IDs
      of deleted tenants are never reused); --max-sandboxes caps its
      sandboxes at once (default 0: no cap).
  airlock tenants ls [--json]
  airlock tenants rm ID...
      Delete tenants: their keys stop working at once and their templates
      are removed; their audit records stay. Refused while a tenant has
      sandboxes that are not stopped.
`

// toTenantJSON is the --json form of a tenant: the API's wire format.
func toTenantJSON(t client.Tenant) wire.Tenant {
	t.CreatedAt = t.CreatedAt.UTC()
	return t
}

func (c *cli) tenantsCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("tenants needs a subcommand: create, ls or rm (see airlock tenants -h)")
	}
	switch args[0] {
	case "create", "new":
		return c.tenantsCreate(ctx, args[1:])
	case "ls", "list":
		return c.tenantsList(ctx, args[1:])
	case "rm", "remove", "delete":
		return c.tenantsRemove(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, tenantsUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown tenants subcommand %q; want create, ls or rm", args[0])
}

func (c *cli) tenantsCreate(ctx context.Context, args []string) (int, error) {
	fs := c.flags("tenants create", tenantsUsage)
	id := fs.String("id", "", "the tenant's `ID` (default: generated)")
	quota := fs.Int("max-sandboxes", 0, "the most sandboxes the tenant may have at once (0: no cap)")
	asJSON := fs.Bool("json", false, "print the tenant and its key as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	switch {
	case len(pos) != 1:
		return 2, usagef("usage: airlock tenants create [--id ID] [--max-sandboxes N] NAME")
	case strings.TrimSpace(pos[0]) == "":
		return 2, usagef("the tenant's NAME must not be empty")
	case *quota < 0:
		return 2, usagef("--max-sandboxes must not be negative")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	t, err := cl.CreateTenant(ctx, client.CreateTenantRequest{ID: *id, Name: pos[0], MaxSandboxes: *quota})
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(wire.CreatedTenant{Tenant: toTenantJSON(t.Tenant), AdminKey: toCreatedKeyJSON(t.AdminKey)}))
	}
	// The key alone on stdout, for KEY=$(airlock tenants create ...).
	fmt.Fprintf(c.stderr, "Created tenant %s (%s) and its admin key %s. The key is shown only once:\n",
		t.ID, t.Name, t.AdminKey.ID)
	_, err = fmt.Fprintln(c.stdout, t.AdminKey.Secret)
	return fail(err)
}

func (c *cli) tenantsList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("tenants ls", tenantsUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("tenants ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	tenants, err := cl.ListTenants(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		out := make([]wire.Tenant, 0, len(tenants))
		for _, t := range tenants {
			out = append(out, toTenantJSON(t))
		}
		return fail(c.printJSON(out))
	}
	rows := make([][]string, 0, len(tenants))
	for _, t := range tenants {
		quota := "-"
		if t.MaxSandboxes > 0 {
			quota = strconv.Itoa(t.MaxSandboxes)
		}
		rows = append(rows, []string{t.ID, dash(t.Name), quota, formatTime(t.CreatedAt)})
	}
	return fail(c.table([]string{"ID", "NAME", "MAX SANDBOXES", "CREATED"}, rows))
}

func (c *cli) tenantsRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("tenants rm", tenantsUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock tenants rm ID...")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	return c.forEachID(ctx, pos, "tenants were not deleted", cl.DeleteTenant)
}
