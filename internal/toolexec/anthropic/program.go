package anthropic

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

// maxProgramBytes caps a program's code (the API's cap).
const maxProgramBytes = 100 << 10

// program runs the program tool: the code through the sandbox's run
// route (POST /v1/sandboxes/{id}/run), which gives it the sandbox's
// gateway tools; the result is its output, a note of how it ended when
// it failed, and a line per tool call it made.
func (x *run) program(ctx context.Context, input map[string]any) (string, error) {
	lang, _ := input["language"].(string)
	switch lang {
	case "python", "javascript", "bash":
	default:
		return "", toolError("Parameter `language` must be one of python, javascript, bash.")
	}
	code, ok := input["code"].(string)
	if !ok || strings.TrimSpace(code) == "" {
		return "", toolError("Parameter `code` is required.")
	}
	if len(code) > maxProgramBytes {
		return "", toolErrorf("The code is longer than %d bytes.", maxProgramBytes)
	}
	timeout := x.o.programTimeout
	if v, ok := input["timeout_s"]; ok && v != nil {
		n, ok := intArg(v)
		if !ok || n < 1 || n > maxProgramTimeoutS {
			return "", toolErrorf("Parameter `timeout_s` must be an integer from 1 to %d.", maxProgramTimeoutS)
		}
		timeout = time.Duration(n) * time.Second
	}
	res, err := x.k.c.Run(ctx, x.sb.ID, client.RunRequest{Language: lang, Code: code, Timeout: timeout}, nil)
	if err != nil {
		return "", err
	}
	return formatRun(res, x.o.maxOutput), nil
}

// formatRun is a run's result as the model reads it: stdout, then
// stderr under a heading, then how it ended unless it succeeded, then
// its tool calls; the output capped head and tail at maxChars.
func formatRun(res *client.RunResult, maxChars int) string {
	out := &capped{max: maxChars}
	out.tail = append(out.tail, res.Stdout...)
	if len(res.Stderr) > 0 {
		if len(out.tail) > 0 && out.tail[len(out.tail)-1] != '\n' {
			out.tail = append(out.tail, '\n')
		}
		out.tail = append(out.tail, "[stderr]\n"...)
		out.tail = append(out.tail, res.Stderr...)
	}
	out.trim(0)
	var notes []string
	if res.StdoutTruncated || res.StderrTruncated {
		notes = append(notes, "[the sandbox cut the output at its limit]")
	}
	switch res.Status {
	case client.StatusSuccess:
	case client.StatusError:
		if res.Error != "" {
			notes = append(notes, fmt.Sprintf("[the program could not run: %s]", res.Error))
		} else {
			notes = append(notes, fmt.Sprintf("[exit status %d]", res.ExitCode))
		}
	case client.StatusTimeout:
		notes = append(notes, "[the program was killed at its timeout]")
	default:
		notes = append(notes, fmt.Sprintf("[the program ended: %s, exit code %d]", res.Status, res.ExitCode))
	}
	for _, tc := range res.ToolCalls {
		line := fmt.Sprintf("[tool call %s: %s", tc.Tool, tc.Outcome)
		if tc.Reason != "" {
			line += " (" + trunc(tc.Reason, 200) + ")"
		}
		notes = append(notes, line+"]")
	}
	if res.ToolCallsDropped > 0 {
		notes = append(notes, fmt.Sprintf("[%d more tool calls]", res.ToolCallsDropped))
	}
	text := out.text()
	if len(notes) > 0 {
		if text != "" && !strings.HasSuffix(text, "\n") {
			text += "\n"
		}
		text += strings.Join(notes, "\n")
	}
	if text == "" {
		text = "(no output)"
	}
	return text
}
