package main

import (
	"context"
	"fmt"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

const approvalsUsage = `usage:
  airlock approvals ls [--pending] [--json]
      Your tenant's tool calls that wait for a decision, and those decided
      (or expired) in the last hour, the newest first (approvals scope).
  airlock approvals show ID             the approval as JSON, its arguments included
  airlock approvals approve ID [--reason R] [--json]
  airlock approvals deny ID [--reason R] [--json]
      Decide a pending approval: approve lets the call go on, deny refuses
      it (the program gets the reason). Your key is recorded as the approver.
`

func (c *cli) approvalsCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("approvals needs a subcommand: ls, show, approve or deny (see airlock approvals -h)")
	}
	switch args[0] {
	case "ls", "list":
		return c.approvalsList(ctx, args[1:])
	case "show", "inspect", "get":
		return c.approvalsShow(ctx, args[1:])
	case "approve":
		return c.approvalsDecide(ctx, args[1:], true)
	case "deny":
		return c.approvalsDecide(ctx, args[1:], false)
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, approvalsUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown approvals subcommand %q; want ls, show, approve or deny", args[0])
}

func (c *cli) approvalsList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("approvals ls", approvalsUsage)
	pending := fs.Bool("pending", false, "only the pending ones")
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("approvals ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	state := ""
	if *pending {
		state = client.ApprovalPending
	}
	as, err := cl.ListApprovals(ctx, state)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(wire.ApprovalList{Approvals: as}))
	}
	rows := make([][]string, 0, len(as))
	for _, a := range as {
		rows = append(rows, []string{a.ID, a.State, a.Tool, a.Sandbox, formatTime(a.CreatedAt), dash(a.Approver), dash(shorten(a.Reason, 40))})
	}
	return fail(c.table([]string{"ID", "STATE", "TOOL", "SANDBOX", "CREATED", "APPROVER", "REASON"}, rows))
}

func (c *cli) approvalsShow(ctx context.Context, args []string) (int, error) {
	fs := c.flags("approvals show", approvalsUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock approvals show ID")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	a, err := cl.GetApproval(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	return fail(c.printJSON(a))
}

func (c *cli) approvalsDecide(ctx context.Context, args []string, approve bool) (int, error) {
	verb := "deny"
	if approve {
		verb = "approve"
	}
	fs := c.flags("approvals "+verb, approvalsUsage)
	reason := fs.String("reason", "", "why, recorded with the decision (at most 1024 bytes)")
	asJSON := fs.Bool("json", false, "print the approval as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock approvals %s ID [--reason R]", verb)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	a, err := cl.DecideApproval(ctx, pos[0], approve, *reason)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(a))
	}
	_, err = fmt.Fprintf(c.stdout, "%s call of tool %s by sandbox %s (%s)\n", map[bool]string{true: "Approved", false: "Denied"}[approve], a.Tool, a.Sandbox, a.ID)
	return fail(err)
}
