package anthropic

import (
	"context"
	"math"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/client"
)

// The API judges an exec's command line by the sandbox's command
// policy, and a shell's line once, when it starts; what is typed into a
// shell later is not judged (as for a PTY), and a shell reading its
// commands from its input is itself judged with the policy's strictest
// action. So in a sandbox with a command policy the bash tool keeps no
// shell: each command is an exec of its own through the API
// (/bin/bash -c COMMAND), which judges it, asks the approval queue when
// the policy says ask, and audits it with its text. The price is the
// session's state: the directory and variables do not carry over from
// one command to the next, and the result says so.

// statelessNote ends the result of a command run without the session.
const statelessNote = "[this sandbox has a command policy: each command runs on its own, so changes to the directory or variables do not persist]"

// policedCommand runs command as an exec of its own.
func (x *run) policedCommand(ctx context.Context, command string) (string, error) {
	res, err := x.k.c.Exec(ctx, x.sb.ID, client.ExecRequest{
		Cmd: []string{"/bin/bash", "-c", command}, Cwd: x.o.cwd, Env: x.o.env, User: x.o.user, Timeout: x.o.bashTimeout,
	})
	if err != nil {
		return "", err
	}
	out := &capped{max: x.o.maxOutput}
	out.tail = append(append(out.tail, res.Stdout...), res.Stderr...)
	out.trim(0)
	text := out.text()
	if res.StdoutTruncated || res.StderrTruncated {
		text = joinNote(text, "[the sandbox cut the output at its limit]")
	}
	switch res.Status {
	case client.StatusSuccess:
	case client.StatusTimeout:
		s := strconv.FormatFloat(math.Ceil(x.o.bashTimeout.Seconds()), 'f', -1, 64)
		return "", toolErrorf("The command did not finish within %s s and was killed.%s", s, prefixed("\nOutput before the timeout:\n", text))
	case client.StatusError:
		if res.Error != "" {
			text = joinNote(text, "[the command could not run: "+res.Error+"]")
		} else {
			text = joinNote(text, "[exit status "+strconv.Itoa(res.ExitCode)+"]")
		}
	default:
		text = joinNote(text, "[the command ended: "+res.Status+", exit code "+strconv.Itoa(res.ExitCode)+"]")
	}
	return joinNote(text, statelessNote), nil
}

// joinNote adds a note on a line of its own.
func joinNote(text, note string) string {
	if text != "" && !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	return text + note
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}
