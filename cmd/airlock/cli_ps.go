package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const psUsage = `usage: airlock ps [--json] ID

Lists every process of sandbox ID but its agent, whoever started it:
commands, their children, daemons, orphans. TREE is the pid of the
command whose process tree holds the process; AGENT marks the processes
the agent started itself (their output can be followed through the API).
`

const killUsage = `usage:
  airlock kill [-s SIGNAL] ID PID...
      Send SIGNAL (a name such as TERM or KILL, or a number; default TERM)
      to processes of sandbox ID. KILL to a command the agent started kills
      its whole process tree.
  airlock kill --all [--timeout D] [--json] ID
      Kill every process of sandbox ID but its agent and wait until all are
      gone (at most --timeout, default 10s, up to 1m): a sandbox whose
      processes took every pid (a fork bomb) runs commands again.
`

func (c *cli) psCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("ps", psUsage)
	asJSON := fs.Bool("json", false, "print the list as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock ps [--json] ID (see airlock ps -h)")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	l, err := cl.ListProcesses(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(l)) // the API's wire form
	}
	rows := make([][]string, 0, len(l.Processes))
	for _, p := range l.Processes {
		user := p.User
		if user == "" {
			user = strconv.Itoa(p.UID)
		}
		agent := "-"
		if p.StartedByAgent {
			agent = "yes"
			if p.Background {
				agent = "background"
			}
			if p.Tag != "" {
				agent += " (" + p.Tag + ")"
			}
		}
		rows = append(rows, []string{strconv.Itoa(p.PID), strconv.Itoa(p.PPID), strconv.Itoa(p.Session), user,
			p.State, formatTime(p.StartedAt), agent, shorten(commandLine(p), 80)})
	}
	if err := c.table([]string{"PID", "PPID", "TREE", "USER", "STATE", "STARTED", "AGENT", "COMMAND"}, rows); err != nil {
		return fail(err)
	}
	if l.Truncated {
		fmt.Fprintf(c.stderr, "Showing %d of %d processes (the server lists at most %d).\n", len(l.Processes), l.Total, len(l.Processes))
	}
	return 0, nil
}

// commandLine is a process's command for people: its arguments, or its
// name in brackets when it has none (a zombie).
func commandLine(p client.Process) string {
	if len(p.Cmd) == 0 {
		return "[" + p.Name + "]"
	}
	s := strings.Join(p.Cmd, " ")
	if p.CmdTruncated {
		s += " ..."
	}
	return s
}

func (c *cli) killCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("kill", killUsage)
	signal := fs.String("s", "TERM", "the `signal` to send: a name (TERM, KILL, INT, ...) or a number")
	fs.StringVar(signal, "signal", "TERM", "same as -s")
	all := fs.Bool("all", false, "kill every process of the sandbox but its agent")
	var timeout durationFlag
	fs.Var(&timeout, "timeout", "with --all: how long the server waits for the last process (default 10s, at most 1m)")
	asJSON := fs.Bool("json", false, "with --all: print the result as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if *all {
		if len(pos) != 1 {
			return 2, usagef("usage: airlock kill --all [--timeout D] ID (see airlock kill -h)")
		}
		if time.Duration(timeout) > time.Minute {
			return 2, usagef("--timeout is at most 1m")
		}
		return c.killAll(ctx, pos[0], time.Duration(timeout), *asJSON)
	}
	if len(pos) < 2 {
		return 2, usagef("usage: airlock kill [-s SIGNAL] ID PID... (see airlock kill -h)")
	}
	var pids []int
	for _, s := range pos[1:] {
		pid, err := strconv.Atoi(s)
		if err != nil || pid < 1 {
			return 2, usagef("%q is not a process id", s)
		}
		pids = append(pids, pid)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	n := 0
	for _, pid := range pids {
		if err := cl.SignalProcess(ctx, pos[0], pid, *signal); err != nil {
			n++
			fmt.Fprintf(c.stderr, "airlock: process %d: %v\n", pid, friendly(err))
		}
	}
	if n > 0 {
		return 1, &cliError{msg: fmt.Sprintf("%d of %d processes were not signalled", n, len(pids))}
	}
	return 0, nil
}

func (c *cli) killAll(ctx context.Context, id string, wait time.Duration, asJSON bool) (int, error) {
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	n, err := cl.KillAllProcesses(ctx, id, wait)
	if err != nil {
		return fail(err)
	}
	if asJSON {
		return fail(c.printJSON(map[string]int{"killed": n}))
	}
	_, err = fmt.Fprintf(c.stdout, "Killed %d processes; only the agent is left.\n", n)
	return fail(err)
}
