package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
)

const shellUsage = `usage: airlock shell [-u USER] [--ws-url] ID [-- CMD [ARG...]]

Opens an interactive login shell in sandbox ID, or runs CMD on a terminal
(airlock shell ID -- python3 starts an interactive Python; airlock exec is
for commands that need no terminal). When standard input is a
terminal it is put in raw mode (restored on exit) and window size changes
are passed on. Otherwise the input is sent as typed text, then Ctrl-D
(end of file) until the session ends. The exit status is the shell's,
mapped like exec's.

With --ws-url it opens nothing: it prints a WebSocket URL (ws:// or wss://)
that opens the same session once, within 30 seconds, without the API key:
for a terminal in a web page (xterm.js and the like), whose WebSocket
cannot send the Authorization header. The URL holds a single-use token; it
is a credential until it is used or expires.
`

func (c *cli) shellCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("shell", shellUsage)
	var user string
	fs.StringVar(&user, "u", "", "run as `user`: user (default) or root")
	fs.StringVar(&user, "user", "", "same as -u")
	var printURL bool
	fs.BoolVar(&printURL, "ws-url", false, "print a single-use WebSocket URL for a browser instead of opening the shell")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock shell [-u USER] [--ws-url] ID [-- CMD [ARG...]]")
	}
	command := shellJoin(pos[1:])
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	if printURL {
		dctx, cancel := context.WithTimeout(ctx, controlTimeout)
		tok, err := cl.PTYToken(dctx, pos[0])
		cancel()
		if err != nil {
			return exitCannotRun, friendly(err)
		}
		fmt.Fprintln(c.stdout, cl.PTYURL(pos[0], tok.Token, client.PTYOptions{User: user, Command: command}))
		return 0, nil
	}
	inFile, _ := c.stdin.(*os.File)
	inTTY := inFile != nil && isTerminal(inFile)
	opts := client.PTYOptions{User: user, Command: command}
	if inTTY {
		if cols, rows, err := termSize(inFile); err == nil && cols > 0 && rows > 0 {
			opts.Cols, opts.Rows = cols, rows
		}
	}
	dctx, cancel := context.WithTimeout(ctx, controlTimeout)
	p, err := cl.PTY(dctx, pos[0], opts)
	cancel()
	if err != nil {
		return exitCannotRun, friendly(err)
	}
	defer p.Close()
	// An interrupt (without raw mode, Ctrl-C reaches this process) ends
	// the session.
	stopOnCancel := context.AfterFunc(ctx, func() { _ = p.Close() })
	defer stopOnCancel()

	if inTTY {
		restore, err := makeRaw(inFile)
		if err != nil {
			return exitCannotRun, &cliError{msg: fmt.Sprintf("cannot put the terminal in raw mode: %v", err), err: err}
		}
		defer func() { _ = restore() }()
		winch := make(chan os.Signal, 1)
		stop := notifyResize(winch)
		go func() {
			for range winch {
				if cols, rows, err := termSize(inFile); err == nil && cols > 0 && rows > 0 {
					_ = p.Resize(ctx, cols, rows)
				}
			}
		}()
		defer func() {
			stop() // no more signals before the channel closes
			close(winch)
		}()
	}

	// Keyboard input. The goroutine may stay blocked in a read of the
	// terminal after the session ends; the process exits then anyway.
	done := make(chan struct{})
	if c.stdin != nil {
		go c.shellInput(p, inTTY, done)
	}
	_, copyErr := io.Copy(c.stdout, p)
	close(done)
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer wcancel()
	exit, err := p.Wait(wctx)
	switch {
	case ctx.Err() != nil:
		return exitInterrupted, &cliError{msg: "interrupted; the shell was killed", err: ctx.Err()}
	case err != nil:
		return exitCannotRun, friendly(err)
	case copyErr != nil:
		return exitCannotRun, &cliError{msg: fmt.Sprintf("writing the output failed: %v", copyErr), err: copyErr}
	}
	return exitStatus(&client.ExecResult{Status: exit.Status, ExitCode: exit.ExitCode, Signal: exit.Signal, Error: exit.Error}, "shell")
}

// eofInterval is how often a shell whose piped input has ended is sent
// Ctrl-D: a terminal can drop one that arrives before the shell reads
// (while the line discipline is switched to raw mode), and one that
// reaches a command the shell runs ends only that command.
const eofInterval = 250 * time.Millisecond

// shellInput sends the keyboard input to p until it ends. Piped input is
// followed by Ctrl-D until the session is done.
func (c *cli) shellInput(p *client.PTY, inTTY bool, done <-chan struct{}) {
	buf := make([]byte, 32<<10)
	for {
		n, err := c.stdin.Read(buf)
		if n > 0 {
			if _, werr := p.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	if inTTY {
		return
	}
	t := time.NewTicker(eofInterval)
	defer t.Stop()
	for {
		if _, err := p.Write([]byte{4}); err != nil {
			return
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// shellJoin joins args into a shell command line that runs them as they
// are (each quoted where needed); "" for none.
func shellJoin(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = shellQuote(a)
	}
	return strings.Join(out, " ")
}

// shellQuote quotes s for /bin/sh unless it is made of characters that
// need no quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
