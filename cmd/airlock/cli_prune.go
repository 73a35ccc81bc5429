package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/client"
)

const pruneUsage = `usage: airlock prune [-m K=V]...

Removes your tenant's failed sandboxes: a sandbox whose agent died, or that
a restarted daemon could not bring back, runs nothing and may still hold
its resources until it is removed. Running sandboxes are left alone (to
remove them: airlock sandbox rm --all --force). Ended sandboxes need no
pruning: they leave the list by themselves (after an hour by default).
Other tenants' sandboxes are never seen, so never touched. Prints the IDs
removed.
`

// removeAll removes every live sandbox of the caller's tenant (with
// metadata meta, if set); without force it lists them and removes
// nothing. Only the caller's tenant's sandboxes are listed by the API, so
// no other tenant's can be touched.
func (c *cli) removeAll(ctx context.Context, cl *client.Client, meta map[string]string, force bool) (int, error) {
	ids, err := c.liveIDs(ctx, cl, meta, nil)
	if err != nil {
		return fail(err)
	}
	if len(ids) == 0 {
		fmt.Fprintln(c.stderr, "no live sandboxes to remove")
		return 0, nil
	}
	if !force {
		what := fmt.Sprintf("%d sandboxes", len(ids))
		if len(ids) == 1 {
			what = "1 sandbox"
		}
		return 2, usagef("--all would remove %s: %s; add --force (-f) to remove them", what, strings.Join(ids, " "))
	}
	return c.forEachID(ctx, ids, "sandboxes were not removed", cl.DeleteSandbox)
}

// liveIDs lists the IDs of the caller's sandboxes that have not ended
// (StoppedAt unset), with metadata meta, in states (all if empty).
func (c *cli) liveIDs(ctx context.Context, cl *client.Client, meta map[string]string, states []client.State) ([]string, error) {
	lctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	sbs, err := cl.ListSandboxes(lctx, client.ListOptions{Metadata: meta, States: states})
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, sb := range sbs {
		if sb.StoppedAt.IsZero() && sb.State != client.StateStopped {
			ids = append(ids, sb.ID)
		}
	}
	return ids, nil
}

func (c *cli) pruneCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("prune", pruneUsage)
	meta := kvFlag{}
	fs.Var(meta, "m", "only sandboxes with metadata `K=V` (repeatable)")
	fs.Var(meta, "metadata", "same as -m")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("prune takes no arguments, got %q (see airlock prune -h)", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ids, err := c.liveIDs(ctx, cl, meta.orNil(), []client.State{client.StateFailed})
	if err != nil {
		return fail(err)
	}
	if len(ids) == 0 {
		fmt.Fprintln(c.stderr, "no failed sandboxes to remove")
		return 0, nil
	}
	return c.forEachID(ctx, ids, "sandboxes were not removed", cl.DeleteSandbox)
}
