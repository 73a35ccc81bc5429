package main

import (
	"context"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/client"
)

const execUsage = `usage: airlock exec [-e K=V]... [-w DIR] [-u USER] [--timeout D] [-n] [--json] ID -- CMD [ARG...]

Runs CMD in sandbox ID, streaming its output as it comes. Standard input,
when it is not a terminal, is read to its end first (at most 512 KiB, the
API's limit) and given to the command; -n gives it none. --json prints,
once the command has ended, one JSON object: status, exit_code, signal,
stdout and stderr (or stdout_b64 and stderr_b64 when not UTF-8; at most
1 MiB each, *_truncated saying so), duration_ms, cpu_time_ms,
peak_memory_bytes and error. For an interactive command use airlock shell
ID -- CMD.

Exit status: the command's own; 128+N when a signal N killed it; 124 when
it timed out; 125 when it could not run (the reason is printed); 130 when
interrupted.
`

const runUsage = `usage: airlock run [-t TEMPLATE] [--memory MB] [--cpus N] [--pids N] [--disk MB] [-m K=V]...
                  [-e K=V]... [-w DIR] [-u USER] [--timeout D] [-n] [--json] [--] CMD [ARG...]

Creates a sandbox, runs CMD in it like airlock exec, and destroys the
sandbox, also when the command fails or is interrupted. The exit status
is that of airlock exec; --json prints exec's JSON object with the
sandbox_id.
`

// Exit codes of exec and run.
const (
	exitTimeout     = 124
	exitCannotRun   = 125
	exitSignalBase  = 128
	exitInterrupted = 130
)

// maxStdinBytes is the API's default cap on an exec's stdin.
const maxStdinBytes = 512 << 10

// maxExecTimeout is the API's default cap on an exec's timeout; it bounds
// the wait for a command given no timeout.
const maxExecTimeout = time.Hour

// execFlags are the flags of exec and run that shape the command.
type execFlags struct {
	env     kvFlag
	cwd     string
	user    string
	timeout durationFlag
	noStdin bool
	asJSON  bool
	// sandboxID is set by run, for its JSON output.
	sandboxID string
}

func (f *execFlags) register(fs *flag.FlagSet) {
	f.env = kvFlag{}
	fs.Var(f.env, "e", "environment `K=V` for the command (repeatable)")
	fs.Var(f.env, "env", "same as -e")
	fs.StringVar(&f.cwd, "w", "", "working `directory` (relative to the user's home)")
	fs.StringVar(&f.cwd, "workdir", "", "same as -w")
	fs.StringVar(&f.user, "u", "", "run as `user`: user (default) or root")
	fs.StringVar(&f.user, "user", "", "same as -u")
	fs.Var(&f.timeout, "timeout", "kill the command after this long (e.g. 30s; the server's default, 60s, if unset)")
	fs.BoolVar(&f.noStdin, "n", false, "give the command no standard input")
	fs.BoolVar(&f.noStdin, "no-stdin", false, "same as -n")
	fs.BoolVar(&f.asJSON, "json", false, "print how the command ended and its output as one JSON object")
}

func (c *cli) execCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("exec", execUsage)
	var ef execFlags
	ef.register(fs)
	// Flags, the ID, more flags, then the command (after "--" or the
	// first argument that is not a flag).
	if err := fs.Parse(args); err != nil {
		return c.parseFailed(err)
	}
	rest := fs.Args()
	if len(rest) == 0 {
		return 2, usagef("usage: airlock exec [flags] ID -- CMD [ARG...]")
	}
	id := rest[0]
	if err := fs.Parse(rest[1:]); err != nil {
		return c.parseFailed(err)
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		return 2, usagef("a command is required: airlock exec [flags] ID -- CMD [ARG...]")
	}
	stdin, err := c.readStdin(ef.noStdin)
	if err != nil {
		return exitCannotRun, err
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	return c.exec(ctx, cl, id, &ef, cmd, stdin)
}

func (c *cli) runCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("run", runUsage)
	var cf createFlags
	cf.register(fs, false)
	var ef execFlags
	ef.register(fs)
	// Flags, then the command: flags after it belong to the command.
	if err := fs.Parse(args); err != nil {
		return c.parseFailed(err)
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		return 2, usagef("a command is required: airlock run [flags] -- CMD [ARG...]")
	}
	req, err := cf.request()
	if err != nil {
		return 2, err
	}
	// The sandbox outlives the command only briefly, so that it goes
	// away even if this process is killed before it can delete it.
	if ef.timeout > 0 {
		req.Timeout = time.Duration(ef.timeout) + 2*time.Minute
	}
	stdin, err := c.readStdin(ef.noStdin)
	if err != nil {
		return exitCannotRun, err
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	cctx, cancel := context.WithTimeout(ctx, controlTimeout)
	sb, err := cl.CreateSandbox(cctx, req)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return exitInterrupted, &cliError{msg: "interrupted", err: ctx.Err()}
		}
		return exitCannotRun, friendly(err)
	}
	ef.sandboxID = sb.ID
	code, err := c.exec(ctx, cl, sb.ID, &ef, cmd, stdin)
	// Destroy the sandbox whatever happened, even after an interrupt.
	dctx, dcancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer dcancel()
	if derr := cl.DeleteSandbox(dctx, sb.ID); derr != nil {
		fmt.Fprintf(c.stderr, "airlock: could not remove sandbox %s: %v\n", sb.ID, friendly(derr))
		if code == 0 {
			code = 1
		}
	}
	return code, err
}

// exec runs cmd in sandbox id, streaming its output, and returns the exit
// code to leave with.
func (c *cli) exec(ctx context.Context, cl *client.Client, id string, ef *execFlags, cmd []string, stdin []byte) (int, error) {
	req := client.ExecRequest{
		Cmd:     cmd,
		Cwd:     ef.cwd,
		Env:     ef.env.orNil(),
		User:    ef.user,
		Stdin:   stdin,
		Timeout: time.Duration(ef.timeout),
	}
	bound := maxExecTimeout
	if ef.timeout > 0 {
		bound = time.Duration(ef.timeout)
	}
	ectx, cancel := context.WithTimeout(ctx, bound+time.Minute)
	defer cancel()
	if ef.asJSON {
		res, err := cl.Exec(ectx, id, req)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return exitInterrupted, &cliError{msg: "interrupted; the command was killed", err: ctx.Err()}
		default:
			return exitCannotRun, friendly(err)
		}
		if err := c.printJSON(toExecJSON(res, ef.sandboxID)); err != nil {
			return exitCannotRun, friendly(err)
		}
		return exitStatus(res, cmd[0])
	}
	var writeErr error
	res, err := cl.ExecStream(ectx, id, req, func(s client.Stream, b []byte) error {
		w := c.stdout
		if s == client.Stderr {
			w = c.stderr
		}
		if _, err := w.Write(b); err != nil {
			writeErr = err
			return err
		}
		return nil
	})
	switch {
	case err == nil:
		return exitStatus(res, cmd[0])
	case ctx.Err() != nil:
		return exitInterrupted, &cliError{msg: "interrupted; the command was killed", err: ctx.Err()}
	case writeErr != nil && errors.Is(err, writeErr):
		return exitCannotRun, &cliError{msg: fmt.Sprintf("writing the output failed (%v); the command was killed", writeErr), err: err}
	default:
		return exitCannotRun, friendly(err)
	}
}

// exitStatus maps how the command name ended to this process's exit
// code.
func exitStatus(res *client.ExecResult, name string) (int, error) {
	switch res.Status {
	case client.StatusSuccess:
		return 0, nil
	case client.StatusTimeout:
		return exitTimeout, &cliError{msg: fmt.Sprintf("the command timed out after %s", res.Duration.Round(time.Millisecond))}
	case client.StatusResourceExceeded:
		msg := "the command exceeded a resource limit of the sandbox"
		if res.Error != "" {
			msg += ": " + res.Error
		}
		return exitCannotRun, &cliError{msg: msg}
	}
	switch {
	case res.Error != "":
		return exitCannotRun, &cliError{msg: name + ": " + res.Error}
	case res.Signal > 0:
		return exitSignalBase + res.Signal, nil
	case res.ExitCode > 0 && res.ExitCode < 256:
		return res.ExitCode, nil
	}
	return exitCannotRun, &cliError{msg: fmt.Sprintf("the command failed (status %s)", res.Status)}
}

// readStdin returns what the command gets on its standard input: nothing
// when skip is set or stdin is a terminal (exec is not interactive; use
// shell), otherwise all of stdin, at most maxStdinBytes.
func (c *cli) readStdin(skip bool) ([]byte, error) {
	if skip || c.stdin == nil {
		return nil, nil
	}
	if f, ok := c.stdin.(*os.File); ok && isTerminal(f) {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(c.stdin, maxStdinBytes+1))
	if err != nil {
		return nil, &cliError{msg: fmt.Sprintf("read standard input: %v", err), err: err}
	}
	if len(b) > maxStdinBytes {
		return nil, &cliError{msg: fmt.Sprintf("standard input is larger than %d KiB, the API's limit for exec; "+
			"copy it in with airlock cp and redirect it inside the sandbox, or pass -n", maxStdinBytes>>10)}
	}
	return b, nil
}

// execJSON is exec's --json output: the API's exec result.
type execJSON struct {
	SandboxID       string `json:"sandbox_id,omitempty"`
	Status          string `json:"status"`
	ExitCode        int    `json:"exit_code"`
	Signal          int    `json:"signal,omitempty"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutB64       string `json:"stdout_b64,omitempty"`
	StderrB64       string `json:"stderr_b64,omitempty"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
	CPUTimeMS       int64  `json:"cpu_time_ms"`
	PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
	Error           string `json:"error,omitempty"`
}

// toExecJSON is res as exec --json prints it: output that is not UTF-8
// is base64 in *_b64 (as in the API), the text field then empty.
func toExecJSON(res *client.ExecResult, sandboxID string) execJSON {
	out := execJSON{SandboxID: sandboxID, Status: res.Status, ExitCode: res.ExitCode, Signal: res.Signal,
		StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		DurationMS: res.Duration.Milliseconds(), CPUTimeMS: res.CPUTime.Milliseconds(), PeakMemoryBytes: res.PeakMemoryBytes, Error: res.Error}
	text := func(b []byte, txt, b64 *string) {
		if utf8.Valid(b) {
			*txt = string(b)
		} else {
			*b64 = base64.StdEncoding.EncodeToString(b)
		}
	}
	text(res.Stdout, &out.Stdout, &out.StdoutB64)
	text(res.Stderr, &out.Stderr, &out.StderrB64)
	return out
}
