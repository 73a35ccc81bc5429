package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const programUsage = `usage: airlock program [-l LANG] [-c CODE | -f FILE] [--sandbox ID | -t TEMPLATE --tool T... --toolset S...] [-e K=V]... [--timeout D] [--trace] [--json]

Runs a program that calls tools: its calls go through the tool gateway
(granted tools only, checked, with secrets added by the gateway and
every call audited), and only its output and the trace of its calls
come back. Inside, Python imports the tools module (from tools import
NAME), JavaScript requires it (require('tools'), CommonJS), bash runs
the tool command.

Without --sandbox, the program runs in a sandbox created for it (from
the warm pool when one is ready) and destroyed when it ends, granted the
tools and toolsets named (POST /v1/run; a key needs only the tools:call
scope). With --sandbox, it runs in that sandbox with the tools granted
to it.

The code comes from -c, from -f FILE (- for standard input; the
language follows the file's extension: .py, .js, .sh), or from standard
input. Output streams as it comes; --trace prints each tool call to
standard error as it ends, and a summary at the end. Calls of
caller-executed tools cannot be answered from here: they fail (use an
SDK's run with tool functions).

Exit status: the program's; 124 when it timed out; 125 when it could not
run.
`

// maxProgramBytes is the API's cap on a program.
const maxProgramBytes = 100 << 10

func (c *cli) programCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("program", programUsage)
	var lang, code, file, sandboxID, template string
	var trace, asJSON bool
	var timeout durationFlag
	var tools, toolsets listFlag
	env := kvFlag{}
	fs.StringVar(&lang, "l", "", "the `language`: python, javascript or bash (default: from the file's extension, else python)")
	fs.StringVar(&lang, "lang", "", "same as -l")
	fs.StringVar(&code, "c", "", "the program's `code`")
	fs.StringVar(&file, "f", "", "run the program in `file` (- for standard input)")
	fs.StringVar(&sandboxID, "sandbox", "", "run in sandbox `ID` instead of one created for the program")
	fs.StringVar(&template, "t", "", "the `template` of the sandbox created for the program")
	fs.StringVar(&template, "template", "", "same as -t")
	fs.Var(&tools, "tool", "grant `TOOL` to the sandbox created for the program (repeatable)")
	fs.Var(&toolsets, "toolset", "grant the tools of `TOOLSET` (repeatable)")
	fs.Var(env, "e", "environment `K=V` for the program (repeatable)")
	fs.Var(env, "env", "same as -e")
	fs.Var(&timeout, "timeout", "kill the program after this long (e.g. 30s; the server's default, 60s, if unset)")
	fs.BoolVar(&trace, "trace", false, "print each tool call to standard error as it ends")
	fs.BoolVar(&asJSON, "json", false, "print the result (output and trace) as JSON")
	rest, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	switch {
	case len(rest) != 0:
		return 2, usagef("airlock program takes no arguments; give the code with -c or -f (see airlock program -h)")
	case code != "" && file != "":
		return 2, usagef("give either -c or -f, not both")
	case sandboxID != "" && (template != "" || len(tools) > 0 || len(toolsets) > 0):
		return 2, usagef("-t, --tool and --toolset are for a sandbox created for the program; --sandbox uses the sandbox's own")
	}
	if lang == "" {
		lang = languageOf(file)
	}
	if code == "" {
		if file == "" {
			file = "-"
		}
		b, err := readInput(file, c.stdin, maxProgramBytes)
		switch {
		case errors.Is(err, errInputTooLarge):
			return exitCannotRun, &cliError{msg: fmt.Sprintf("the program is larger than %d KiB, the API's limit; copy it in with airlock cp and run it with airlock exec", maxProgramBytes>>10)}
		case err != nil:
			return exitCannotRun, &cliError{msg: fmt.Sprintf("read the program: %v", err), err: err}
		}
		code = string(b)
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	req := client.RunRequest{Language: lang, Code: code, Timeout: time.Duration(timeout), Env: env.orNil(),
		Template: template, Tools: tools, Toolsets: toolsets}
	var opts *client.RunOptions
	if !asJSON {
		opts = &client.RunOptions{OnOutput: func(s client.Stream, b []byte) error {
			w := c.stdout
			if s == client.Stderr {
				w = c.stderr
			}
			_, err := w.Write(b)
			return err
		}}
		if trace {
			opts.OnToolCall = func(t client.ToolCallTrace) { fmt.Fprintln(c.stderr, traceLine(t)) }
		}
	}
	bound := maxExecTimeout
	if timeout > 0 {
		bound = time.Duration(timeout)
	}
	rctx, cancel := context.WithTimeout(ctx, bound+3*time.Minute)
	defer cancel()
	var res *client.RunResult
	if sandboxID != "" {
		res, err = cl.Run(rctx, sandboxID, req, opts)
	} else {
		res, err = cl.RunOnce(rctx, req, opts)
	}
	switch {
	case err == nil:
	case ctx.Err() != nil:
		return exitInterrupted, &cliError{msg: "interrupted; the program was killed", err: ctx.Err()}
	default:
		return exitCannotRun, friendly(err)
	}
	if asJSON {
		if err := c.printJSON(toProgramJSON(res)); err != nil {
			return exitCannotRun, friendly(err)
		}
	} else if trace {
		fmt.Fprintln(c.stderr, traceSummary(res))
	}
	return exitStatus(&res.ExecResult, "the program")
}

// languageOf is the language of a program file by its extension;
// python when there is none it knows.
func languageOf(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".js", ".cjs":
		return client.LangJavaScript
	case ".sh", ".bash":
		return client.LangBash
	}
	return client.LangPython
}

// traceLine is one tool call as --trace prints it.
func traceLine(t client.ToolCallTrace) string {
	s := fmt.Sprintf("tool %s: %s in %.1f ms", t.Tool, t.Outcome, t.DurationMS)
	if t.Stage != "" {
		s += " at " + t.Stage
	}
	if t.Reason != "" {
		s += ": " + t.Reason
	}
	if t.DryRun {
		s += " (dry run)"
	}
	return s
}

// traceSummary counts a run's tool calls by outcome.
func traceSummary(res *client.RunResult) string {
	n := map[string]int{}
	for _, t := range res.ToolCalls {
		n[t.Outcome]++
	}
	total := len(res.ToolCalls) + res.ToolCallsDropped
	return fmt.Sprintf("%d tool calls: %d ok, %d denied, %d failed (sandbox %s)", total, n["ok"], n["denied"], n["error"], res.SandboxID)
}

// programJSON is what --json prints.
type programJSON struct {
	SandboxID        string                 `json:"sandbox_id"`
	Result           execJSON               `json:"result"`
	ToolCalls        []client.ToolCallTrace `json:"tool_calls"`
	ToolCallsDropped int                    `json:"tool_calls_dropped,omitempty"`
}

func toProgramJSON(res *client.RunResult) programJSON {
	calls := res.ToolCalls
	if calls == nil {
		calls = []client.ToolCallTrace{}
	}
	return programJSON{SandboxID: res.SandboxID, Result: toExecJSON(&res.ExecResult, res.SandboxID), ToolCalls: calls, ToolCallsDropped: res.ToolCallsDropped}
}
