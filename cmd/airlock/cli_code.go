package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // decodes JPEG results' sizes
	_ "image/png"  // decodes PNG results' sizes
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const codeUsage = `usage: airlock code [-l LANG] [-c CODE | -f FILE] [--context CID] [-e K=V]... [--timeout D] [--json] ID

Runs code in a stateful context of sandbox ID: variables, imports,
functions and the working directory persist from one call to the next.
Without --context, the default context of the language is used (shared by
every call that names no context).

The code comes from -c, from -f FILE (- for standard input), or from
standard input when it is not a terminal. On a terminal without -c or -f,
airlock code reads cells line by line (a read-eval-print loop): a line
that ends with ':', '\', '{', '(' or '[' opens a block that an empty line
ends; Ctrl-D leaves; Ctrl-C interrupts the running cell and leaves (the
context keeps its state).

Output streams as it comes; results (the value of the last expression,
figures, display() calls) are printed as text, images as a note. --json
prints the whole execution as JSON instead (images in base64).

Exit status: 0 when the cell ran without error; 1 when it raised one (for
bash, the cell's exit status); 124 when its timeout interrupted it; 130
when it was interrupted; 125 when it could not run.
`

// maxCodeBytes is the API's default cap on a cell's code.
const maxCodeBytes = 512 << 10

func (c *cli) codeCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("code", codeUsage)
	var lang, code, file, contextID string
	var asJSON bool
	var timeout durationFlag
	env := kvFlag{}
	fs.StringVar(&lang, "l", "", "the `language`: python (default), javascript or bash")
	fs.StringVar(&lang, "lang", "", "same as -l")
	fs.StringVar(&code, "c", "", "the `code` to run")
	fs.StringVar(&file, "f", "", "run the code in `file` (- for standard input)")
	fs.StringVar(&contextID, "context", "", "run in context `CID` instead of the language's default context")
	fs.Var(env, "e", "environment `K=V` for this cell (repeatable)")
	fs.Var(env, "env", "same as -e")
	fs.Var(&timeout, "timeout", "interrupt the cell after this long (e.g. 30s; the server's default, 5m, if unset)")
	fs.BoolVar(&asJSON, "json", false, "print the execution as JSON")
	rest, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(rest) != 1 {
		return 2, usagef("usage: airlock code [flags] ID (see airlock code -h)")
	}
	id := rest[0]
	if code != "" && file != "" {
		return 2, usagef("give either -c or -f, not both")
	}
	if lang == "" && contextID == "" {
		lang = client.LangPython
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	req := client.RunCodeRequest{Language: lang, ContextID: contextID, Env: env.orNil(), Timeout: time.Duration(timeout)}
	switch {
	case code != "":
		req.Code = code
	case file != "":
		b, err := c.readCode(file)
		if err != nil {
			return exitCannotRun, err
		}
		req.Code = string(b)
	case c.stdinIsTerminal():
		return c.codeREPL(ctx, cl, id, req)
	default:
		b, err := c.readCode("-")
		if err != nil {
			return exitCannotRun, err
		}
		req.Code = string(b)
	}
	if asJSON {
		return c.codeJSON(ctx, cl, id, req)
	}
	x, err := c.runCell(ctx, cl, id, req)
	if err != nil {
		if ctx.Err() != nil {
			return exitInterrupted, err
		}
		return exitCannotRun, err
	}
	return codeExit(x)
}

// stdinIsTerminal reports whether standard input is a terminal.
func (c *cli) stdinIsTerminal() bool {
	f, ok := c.stdin.(*os.File)
	return ok && isTerminal(f)
}

// readCode reads a cell from path ("-": standard input), within the API's
// cap.
func (c *cli) readCode(path string) ([]byte, error) {
	b, err := readInput(path, c.stdin, maxCodeBytes)
	switch {
	case errors.Is(err, errInputTooLarge):
		return nil, &cliError{msg: fmt.Sprintf("the code is larger than %d KiB, the API's limit; copy it in with airlock cp and run it from there", maxCodeBytes>>10)}
	case err != nil:
		return nil, &cliError{msg: fmt.Sprintf("read the code: %v", err), err: err}
	}
	return b, nil
}

// codeBound bounds a cell's request: its timeout (or the longest the
// server allows) and a margin.
func codeBound(req client.RunCodeRequest) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout + 3*time.Minute
	}
	return maxExecTimeout + 3*time.Minute
}

// runCell runs one cell, streaming output and printing results as they
// come, and returns how it ran.
func (c *cli) runCell(ctx context.Context, cl *client.Client, id string, req client.RunCodeRequest) (*client.CodeExecution, error) {
	rctx, cancel := context.WithTimeout(ctx, codeBound(req))
	defer cancel()
	var writeErr error
	x, err := cl.RunCodeStream(rctx, id, req, func(ev client.CodeEvent) error {
		var err error
		switch ev.Type {
		case "stdout":
			_, err = io.WriteString(c.stdout, ev.Data)
		case "stderr":
			_, err = io.WriteString(c.stderr, ev.Data)
		case "result":
			_, err = io.WriteString(c.stdout, resultText(ev.Result))
		case "error":
			_, err = io.WriteString(c.stderr, errorText(ev.Error))
		}
		if err != nil {
			writeErr = err
		}
		return err
	})
	switch {
	case err == nil:
		return x, nil
	case ctx.Err() != nil:
		return nil, &cliError{msg: "interrupted; the cell was interrupted", err: ctx.Err()}
	case writeErr != nil && errors.Is(err, writeErr):
		return nil, &cliError{msg: fmt.Sprintf("writing the output failed (%v); the cell was interrupted", writeErr), err: err}
	}
	return nil, friendly(err)
}

// codeJSON runs one cell and prints the execution as JSON.
func (c *cli) codeJSON(ctx context.Context, cl *client.Client, id string, req client.RunCodeRequest) (int, error) {
	rctx, cancel := context.WithTimeout(ctx, codeBound(req))
	defer cancel()
	x, err := cl.RunCode(rctx, id, req)
	if err != nil {
		if ctx.Err() != nil {
			return exitInterrupted, &cliError{msg: "interrupted; the cell was interrupted", err: ctx.Err()}
		}
		return exitCannotRun, friendly(err)
	}
	out := struct {
		ContextID        string              `json:"context_id"`
		Language         string              `json:"language"`
		ExecutionCount   int                 `json:"execution_count"`
		Status           string              `json:"status"`
		ExitCode         int                 `json:"exit_code"`
		Results          []client.CodeResult `json:"results"`
		Stdout           string              `json:"stdout"`
		Stderr           string              `json:"stderr"`
		Error            *client.CodeError   `json:"error"`
		OutputTruncated  bool                `json:"output_truncated"`
		ResultsTruncated bool                `json:"results_truncated"`
		DurationMS       int64               `json:"duration_ms"`
	}{x.ContextID, x.Language, x.ExecutionCount, x.Status, x.ExitCode, x.Results, x.Stdout, x.Stderr, x.Error,
		x.OutputTruncated, x.ResultsTruncated, x.Duration.Milliseconds()}
	if out.Results == nil {
		out.Results = []client.CodeResult{}
	}
	if err := c.printJSON(out); err != nil {
		return exitCannotRun, err
	}
	code, _ := codeExit(x)
	return code, nil
}

// resultText is how a result prints: its text, and a note for an image.
func resultText(r *client.CodeResult) string {
	var b strings.Builder
	if r.Text != "" {
		b.WriteString(r.Text)
		b.WriteByte('\n')
	}
	for _, img := range []struct {
		kind string
		data []byte
	}{{"png", r.PNG}, {"jpeg", r.JPEG}} {
		if len(img.data) == 0 {
			continue
		}
		size := ""
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(img.data)); err == nil {
			size = fmt.Sprintf("%dx%d, ", cfg.Width, cfg.Height)
		}
		fmt.Fprintf(&b, "[image/%s, %s%d bytes; --json has the image]\n", img.kind, size, len(img.data))
	}
	if r.Text == "" && r.HTML != "" && len(r.PNG) == 0 {
		b.WriteString("[text/html; --json has it]\n")
	}
	if r.Omitted != "" {
		fmt.Fprintf(&b, "[omitted: %s]\n", r.Omitted)
	}
	return b.String()
}

// errorText is how a cell's error prints: its traceback, else its name
// and value.
func errorText(e *client.CodeError) string {
	if t := strings.TrimRight(e.Traceback, "\n"); t != "" {
		return t + "\n"
	}
	return e.String() + "\n"
}

// codeExit maps how a cell ended to this process's exit code.
func codeExit(x *client.CodeExecution) (int, error) {
	switch x.Status {
	case client.CodeStatusOK:
		return 0, nil
	case client.CodeStatusTimeout:
		return exitTimeout, &cliError{msg: fmt.Sprintf("the cell timed out after %s and was interrupted", x.Duration.Round(time.Millisecond))}
	case client.CodeStatusInterrupted:
		return exitInterrupted, &cliError{msg: "the cell was interrupted"}
	case client.CodeStatusDied:
		return 1, &cliError{msg: "the context died; its state is lost"}
	}
	if x.Language == client.LangBash && x.ExitCode > 0 && x.ExitCode < 256 {
		return x.ExitCode, nil
	}
	return 1, nil
}

// codeREPL reads cells from the terminal until end of input.
func (c *cli) codeREPL(ctx context.Context, cl *client.Client, id string, req client.RunCodeRequest) (int, error) {
	prompt, more := ">>> ", "... "
	switch strings.ToLower(req.Language) {
	case "javascript", "js", "node", "nodejs":
		prompt, more = "> ", "... "
	case "bash", "sh", "shell":
		prompt, more = "$ ", "> "
	}
	fmt.Fprintf(c.stderr, "airlock code: sandbox %s; Ctrl-D leaves\n", id)
	sc := bufio.NewScanner(c.stdin)
	sc.Buffer(make([]byte, 64<<10), maxCodeBytes)
	var cell []string
	fmt.Fprint(c.stderr, prompt)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case len(cell) == 0 && strings.TrimSpace(line) == "":
			fmt.Fprint(c.stderr, prompt)
			continue
		case len(cell) > 0 && strings.TrimSpace(line) != "":
			cell = append(cell, line)
			fmt.Fprint(c.stderr, more)
			continue
		case len(cell) == 0 && opensBlock(line):
			cell = append(cell, line)
			fmt.Fprint(c.stderr, more)
			continue
		case len(cell) == 0:
			cell = []string{line}
		}
		req.Code = strings.Join(cell, "\n")
		cell = nil
		x, err := c.runCell(ctx, cl, id, req)
		if ctx.Err() != nil {
			return exitInterrupted, err
		}
		if err != nil {
			fmt.Fprintln(c.stderr, "airlock:", err)
		} else if req.ContextID == "" {
			// Stay in the same context even if the default one changes.
			req.ContextID = x.ContextID
		}
		fmt.Fprint(c.stderr, prompt)
	}
	fmt.Fprintln(c.stderr)
	if err := sc.Err(); err != nil {
		return 1, &cliError{msg: fmt.Sprintf("read standard input: %v", err), err: err}
	}
	return 0, nil
}

// opensBlock reports whether a REPL line starts a multi-line cell.
func opensBlock(line string) bool {
	t := strings.TrimRight(line, " \t")
	return strings.HasSuffix(t, ":") || strings.HasSuffix(t, "\\") || strings.HasSuffix(t, "{") ||
		strings.HasSuffix(t, "(") || strings.HasSuffix(t, "[")
}
