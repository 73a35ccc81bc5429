package anthropic

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/client"
)

// Bash session settings.
const (
	// maxCommandBytes caps one command.
	maxCommandBytes = 1 << 20
	// startWait bounds the wait for a shell to start.
	startWait = 30 * time.Second
	// killWait bounds the wait for a killed shell to be gone.
	killWait = 10 * time.Second
	// shellCmd is the session's shell: the inner bash reads the commands
	// from stdin, and 2>&1 merges stderr into stdout so that the output
	// keeps its order.
	shellCmd = "exec /bin/bash --noprofile --norc 2>&1"
)

// bashSession is one persistent bash: a streamed exec (not background,
// so that the end of its stream kills it) with its stdin kept open.
// Commands go in through the stdin route; each is followed by a marker
// that carries its exit status, so that its output is known to end.
type bashSession struct {
	sandbox  string
	pid      int
	c        *client.Client // the starter's (the conversation's key)
	cancel   context.CancelFunc
	exited   chan struct{} // closed when the stream has ended
	maxChars int
	timedOut atomic.Bool

	mu      sync.Mutex
	pending []byte // output not yet taken
	running bool
	result  *client.ExecResult
	err     error
	wake    chan struct{}

	// leftover is output after the last command's marker (a background
	// job's), the start of the next command's; only the conversation's
	// lock holder touches it.
	leftover []byte
}

// startBash starts a shell in sandbox sb for the conversation named
// name; its stream lives in s's context, not the request's.
func startBash(ctx context.Context, s *sessions, c *client.Client, sb, name string, o options) (*bashSession, error) {
	sctx, cancel := context.WithCancel(s.ctx)
	b := &bashSession{sandbox: sb, c: c, cancel: cancel, exited: make(chan struct{}), maxChars: o.maxOutput, wake: make(chan struct{}, 1)}
	started := make(chan int, 1)
	tag := "anthropic-bash-" + name
	if len(tag) > 64 {
		tag = tag[:64]
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		res, err := c.ExecStream(sctx, sb, client.ExecRequest{
			Cmd: []string{"/bin/bash", "-c", shellCmd}, KeepStdin: true, Tag: tag,
			Timeout: o.sessionTimeout, User: o.user, Cwd: o.cwd, Env: o.env,
			OnStart: func(pid int) { started <- pid },
		}, b.onOutput)
		b.mu.Lock()
		b.result, b.err = res, err
		b.mu.Unlock()
		close(b.exited)
		b.signal()
	}()
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case b.pid = <-started:
		return b, nil
	case <-b.exited:
		b.mu.Lock()
		err := b.err
		b.mu.Unlock()
		if err == nil {
			err = errors.New("the bash session ended as it started")
		}
		return nil, err
	case <-ctx.Done():
		cancel()
		return nil, ctx.Err()
	case <-t.C:
		cancel()
		return nil, errors.New("the bash session did not start in time")
	}
}

func (b *bashSession) signal() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// onOutput takes a chunk of the shell's output.
func (b *bashSession) onOutput(_ client.Stream, data []byte) error {
	b.mu.Lock()
	b.pending = append(b.pending, data...)
	// Between commands nobody takes the output (a background job's):
	// only its end is kept.
	if !b.running && len(b.pending) > 2*b.maxChars {
		b.pending = append([]byte(nil), b.pending[len(b.pending)-b.maxChars:]...)
	}
	b.mu.Unlock()
	b.signal()
	return nil
}

// done reports whether the shell's stream has ended.
func (b *bashSession) done() bool {
	select {
	case <-b.exited:
		return true
	default:
		return false
	}
}

// endedHow says how the stream ended.
func (b *bashSession) endedHow() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.err != nil:
		return "failed: " + apiMessage(b.err)
	case b.result != nil:
		return fmt.Sprintf("ended (%s, exit code %d)", b.result.Status, b.result.ExitCode)
	}
	return "ended"
}

// shutdown ends the stream, which kills the shell and what it runs, and
// waits until the sandbox no longer lists the shell (bounded).
func (b *bashSession) shutdown() {
	b.cancel()
	t := time.NewTimer(killWait)
	defer t.Stop()
	select {
	case <-b.exited:
	case <-t.C:
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), killWait)
	defer cancel()
	for ctx.Err() == nil {
		list, err := b.c.ListProcesses(ctx, b.sandbox)
		if err != nil {
			return
		}
		alive := false
		for _, p := range list.Processes {
			alive = alive || p.PID == b.pid
		}
		if !alive {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// outcome is how a command ended: its status, or why it has none.
type outcome struct {
	output string
	status int
	why    string // "", "timeout" or "ended"
}

// exec runs command in the session and returns its output and exit
// status. A command that does not finish within timeout has the session
// killed (it must be restarted); if the request's ctx ends first, the
// session is killed too (its output would otherwise belong to nobody).
func (b *bashSession) exec(ctx context.Context, c *client.Client, command string, timeout time.Duration) (outcome, error) {
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	n := hex.EncodeToString(nonce)
	script, marker := sessionScript(command, n)
	out := &capped{max: b.maxChars}
	b.mu.Lock()
	b.pending = append(b.leftover, b.pending...)
	b.leftover = nil
	b.running = true
	b.mu.Unlock()
	defer func() {
		b.mu.Lock()
		b.running = false
		b.mu.Unlock()
	}()
	if err := c.SendProcessInput(ctx, b.sandbox, b.pid, []byte(script), false); err != nil {
		if b.waitDone(time.Second) {
			return outcome{why: "ended"}, nil
		}
		return outcome{}, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	scan := &markerScan{marker: marker}
	for {
		b.mu.Lock()
		out.tail = append(out.tail, b.pending...)
		b.pending = b.pending[:0]
		b.mu.Unlock()
		if i := scan.find(out.tail); i >= 0 {
			rest := out.tail[i+len(marker):]
			if nl := bytes.IndexByte(rest, '\n'); nl >= 0 {
				status, err := strconv.Atoi(string(rest[:nl]))
				if err != nil {
					status = -1
				}
				b.leftover = append([]byte(nil), rest[nl+1:]...)
				out.tail = out.tail[:i]
				out.trim(0)
				return outcome{output: out.text(), status: status}, nil
			}
		}
		kept := len(out.tail)
		out.trim(len(marker) + 16)
		scan.dropped(kept - len(out.tail))
		if b.done() {
			// What came before the end was all taken above.
			out.trim(0)
			return outcome{output: out.text(), why: "ended"}, nil
		}
		select {
		case <-b.wake:
		case <-b.exited:
		case <-deadline.C:
			b.timedOut.Store(true)
			out.trim(0)
			text := out.text()
			b.shutdown()
			return outcome{output: text, why: "timeout"}, nil
		case <-ctx.Done():
			b.shutdown()
			return outcome{}, ctx.Err()
		}
	}
}

// markerScan finds a command's end marker in its output as it arrives,
// searching each byte once (and the marker's length of overlap): a
// command that trickles its output a byte at a time would otherwise have
// the whole tail kept (up to half of max_output_chars) searched again
// for each byte, a CPU of the daemon's per session.
type markerScan struct {
	marker  []byte
	seen    int   // tail[:seen] holds no start of the marker
	scanned int64 // bytes searched (tests read it)
}

// find returns the marker's index in tail, or -1.
func (m *markerScan) find(tail []byte) int {
	from := min(m.seen, len(tail))
	m.scanned += int64(len(tail) - from)
	if i := bytes.Index(tail[from:], m.marker); i >= 0 {
		m.seen = from + i // found: its status line may be yet to come
		return from + i
	}
	m.seen = max(from, len(tail)-len(m.marker)+1)
	return -1
}

// dropped tells m that n bytes left the front of the tail.
func (m *markerScan) dropped(n int) { m.seen = max(0, m.seen-n) }

// sessionScript is what the session's shell is sent to run command, and
// the marker that ends its output, with nonce n.
//
// The command is evaluated by the shell itself (that is what keeps the
// directory and variables), with stdin from /dev/null; bash keeps its
// own input open meanwhile on a descriptor of its own, which the
// command's builtins can read. So the script is one line (the command's
// newlines are escapes in its $'...' word), which bash reads whole
// before it runs any of it: while the command runs, the shell's input
// holds nothing more, neither the printf that carries the nonce nor
// (the next script is sent after this one's marker) a later command.
// (Not a { ...; } group over lines: after a syntax error in eval, bash
// no longer takes the next group's "{" for a reserved word.) What the command itself does as the shell
// (a DEBUG trap sees the printf; a job it leaves reading that
// descriptor takes later commands) is the sandbox's code acting in its
// own sandbox: see docs/SECURITY.md. The marker is printed from two
// arguments so that a trace (set -x) of the printf never shows it
// whole.
func sessionScript(command, n string) (script string, marker []byte) {
	script = "__airlock_cmd=" + ansiC(command) + "; " +
		"eval \"$__airlock_cmd\" </dev/null; " +
		"printf '\\n%s%s:%s\\n' __AIRLOCK_ " + n + "__ \"$?\"\n"
	return script, []byte("\n__AIRLOCK_" + n + "__:")
}

// waitDone waits up to d for the stream's end.
func (b *bashSession) waitDone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-b.exited:
		return true
	case <-t.C:
		return false
	}
}

// ansiC is s as a bash $'...' string: every byte of it survives, control
// characters included.
func ansiC(s string) string {
	var sb strings.Builder
	sb.WriteString("$'")
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			sb.WriteString(`\\`)
		case c == '\'':
			sb.WriteString(`\'`)
		case c < 0x20 || c == 0x7f:
			fmt.Fprintf(&sb, `\x%02x`, c)
		default:
			sb.WriteByte(c)
		}
	}
	sb.WriteByte('\'')
	return sb.String()
}

// capped is a command's output: its head, and its tail once it passed
// the cap; cut counts the characters dropped between them.
type capped struct {
	max        int
	head, tail []byte
	cut        int
}

// trim moves what passed the cap out of the middle; keep bytes at the
// end stay (a marker may be arriving there).
func (o *capped) trim(keep int) {
	half := o.max / 2
	if len(o.head)+len(o.tail) <= o.max+keep {
		return
	}
	if len(o.head) < half {
		n := min(half-len(o.head), len(o.tail))
		for n > 0 && n < len(o.tail) && !utf8.RuneStart(o.tail[n]) {
			n--
		}
		o.head = append(o.head, o.tail[:n]...)
		o.tail = o.tail[n:]
	}
	if tailMax := o.max - half + keep; len(o.tail) > tailMax {
		drop := len(o.tail) - tailMax
		for drop < len(o.tail) && !utf8.RuneStart(o.tail[drop]) {
			drop++
		}
		o.cut += utf8.RuneCount(o.tail[:drop])
		o.tail = append([]byte(nil), o.tail[drop:]...)
	}
}

// text is the output kept, with a note where it was cut.
func (o *capped) text() string {
	if o.cut == 0 {
		return string(o.head) + string(o.tail)
	}
	return fmt.Sprintf("%s\n[... %d characters of output cut ...]\n%s", o.head, o.cut, o.tail)
}

// bash runs the bash tool.
func (x *run) bash(ctx context.Context, input map[string]any) (string, error) {
	conv := x.conv
	if input["restart"] == true {
		if x.sb.CommandPolicy != nil {
			return "The bash session has been restarted (" + statelessNote[1:len(statelessNote)-1] + ").", nil
		}
		if conv.bash != nil {
			conv.bash.shutdown()
			conv.bash = nil
		}
		b, err := startBash(ctx, x.h.sessions, x.k.c, x.sb.ID, conv.key.name, x.o)
		if err != nil {
			return "", err
		}
		conv.bash = b
		return "The bash session has been restarted.", nil
	}
	command, _ := input["command"].(string)
	if strings.TrimSpace(command) == "" {
		return "", toolError("Parameter `command` is required unless `restart` is true.")
	}
	if len(command) > maxCommandBytes {
		return "", toolErrorf("The command is longer than %d bytes.", maxCommandBytes)
	}
	if strings.IndexByte(command, 0) >= 0 {
		return "", toolError("The command contains a NUL character.")
	}
	if x.sb.CommandPolicy != nil {
		return x.policedCommand(ctx, command)
	}
	if conv.bash != nil && conv.bash.timedOut.Load() {
		return "", toolError(`The bash session timed out and must be restarted: call the tool with {"restart": true}.`)
	}
	if conv.bash == nil || conv.bash.done() {
		b, err := startBash(ctx, x.h.sessions, x.k.c, x.sb.ID, conv.key.name, x.o)
		if err != nil {
			return "", err
		}
		conv.bash = b
	}
	b := conv.bash
	r, err := b.exec(ctx, x.k.c, command, x.o.bashTimeout)
	if err != nil {
		if b.done() {
			conv.bash = nil
		}
		return "", err
	}
	switch r.why {
	case "timeout":
		s := strconv.FormatFloat(math.Round(float64(x.o.bashTimeout.Milliseconds())/100)/10, 'f', -1, 64)
		so := ""
		if r.output != "" {
			so = "\nOutput before the timeout:\n" + r.output
		}
		return "", toolErrorf(`The command did not finish within %s s and was killed with the bash session. Restart the session with {"restart": true} before the next command.%s`, s, so)
	case "ended":
		how := b.endedHow()
		conv.bash = nil
		so := ""
		if r.output != "" {
			so = r.output + "\n"
		}
		return "", toolErrorf("%sThe bash session %s; the next command starts a new one.", so, how)
	}
	text := r.output
	if r.status != 0 {
		note := fmt.Sprintf("[exit status %d]", r.status)
		if text != "" {
			text += "\n" + note
		} else {
			text = note
		}
	}
	if text == "" {
		text = "(no output)"
	}
	return text, nil
}
