package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
)

const secretsUsage = `usage:
  airlock secrets set NAME [--from-file PATH] [-d DESCRIPTION] [--json]
      Store a secret in your tenant (admin), or replace its value. The value
      is read from standard input, or from PATH with --from-file, never from
      an argument (which others could see in ps). On a terminal the typed
      line is not echoed; from a pipe one trailing newline is dropped (as
      echo adds one); --from-file takes the file byte for byte. 1 B-64 KiB.
      Without -d a replaced secret keeps its description (-d "" clears it).
      No command shows a value again: only the daemon adds it to requests.
  airlock secrets ls [--json]           names, versions and descriptions
  airlock secrets rm NAME...
`

func (c *cli) secretsCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("secrets needs a subcommand: set, ls or rm (see airlock secrets -h)")
	}
	switch args[0] {
	case "set", "put":
		return c.secretsSet(ctx, args[1:])
	case "ls", "list":
		return c.secretsList(ctx, args[1:])
	case "rm", "delete":
		return c.secretsRemove(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, secretsUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown secrets subcommand %q; want set, ls or rm", args[0])
}

func (c *cli) secretsSet(ctx context.Context, args []string) (int, error) {
	fs := c.flags("secrets set", secretsUsage)
	from := fs.String("from-file", "", "read the value from the file at `PATH` (byte for byte)")
	desc := fs.String("d", "", "what the secret is for (`DESCRIPTION`)")
	fs.StringVar(desc, "description", "", "the same as -d")
	asJSON := fs.Bool("json", false, "print the secret's metadata as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock secrets set NAME [--from-file PATH] (the value comes from stdin or the file, never an argument)")
	}
	name := pos[0]
	value, err := c.secretValue(name, *from)
	if err != nil {
		return 2, err
	}
	defer clear(value)
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	descSet := false
	fs.Visit(func(f *flag.Flag) { descSet = descSet || f.Name == "d" || f.Name == "description" })
	if !descSet {
		// A put replaces the description too: keep the current one.
		old, err := cl.GetSecret(ctx, name)
		switch {
		case err == nil:
			*desc = old.Description
		case !errors.Is(err, client.ErrNotFound):
			return fail(err)
		}
	}
	s, err := cl.PutSecret(ctx, name, client.PutSecretRequest{Value: value, Description: *desc})
	clear(value)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(s))
	}
	verb := "Updated"
	if s.Version == 1 {
		verb = "Created"
	}
	_, err = fmt.Fprintf(c.stdout, "%s secret %s (version %d)\n", verb, s.Name, s.Version)
	return fail(err)
}

// secretValue reads the value of secret name: the file at from, else
// standard input (a hidden line on a terminal, else all of it less one
// trailing newline). The caller clears it.
func (c *cli) secretValue(name, from string) ([]byte, error) {
	var v []byte
	var err error
	switch f, _ := c.stdin.(*os.File); {
	case from != "":
		v, err = readInput(from, nil, client.MaxSecretBytes)
	case f != nil && isTerminal(f):
		fmt.Fprintf(c.stderr, "Value of %s (not echoed; Enter ends it): ", name)
		v, err = readHiddenLine(f)
		fmt.Fprintln(c.stderr)
	default:
		v, err = readInput("-", c.stdin, client.MaxSecretBytes+2) // +2: a trailing \r\n
		if err == nil {
			v = trimNewline(v)
		}
	}
	switch {
	case errors.Is(err, errInputTooLarge) || err == nil && len(v) > client.MaxSecretBytes:
		clear(v)
		return nil, usagef("the value is larger than %d bytes", client.MaxSecretBytes)
	case errors.Is(err, errCanceled):
		return nil, usagef("canceled; nothing was stored")
	case err != nil:
		return nil, usagef("reading the value: %v", err)
	case len(v) == 0:
		return nil, usagef("the value is empty: give it on standard input or with --from-file (never as an argument)")
	}
	return v, nil
}

// trimNewline drops one trailing "\n" or "\r\n".
func trimNewline(b []byte) []byte {
	b = bytes.TrimSuffix(b, []byte("\n"))
	return bytes.TrimSuffix(b, []byte("\r"))
}

// errCanceled is readSecretLine's error for Ctrl-C.
var errCanceled = errors.New("canceled")

// readHiddenLine reads one line from the terminal f without echoing it.
func readHiddenLine(f *os.File) ([]byte, error) {
	restore, err := makeRaw(f)
	if err != nil {
		return nil, err
	}
	defer restore()
	return readSecretLine(f, client.MaxSecretBytes)
}

// readSecretLine reads a line typed on a terminal in raw mode: Enter (CR
// or LF) or Ctrl-D ends it, Ctrl-C cancels (errCanceled), Backspace
// removes the last character, Ctrl-U the whole line. Past max bytes it
// is errInputTooLarge. What it read is cleared on an error.
func readSecretLine(r io.Reader, max int) ([]byte, error) {
	line := make([]byte, 0, 256)
	var c [1]byte
	for {
		if _, err := io.ReadFull(r, c[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return line, nil
			}
			clear(line[:cap(line)])
			return nil, err
		}
		switch b := c[0]; b {
		case '\r', '\n', 0x04:
			return line, nil
		case 0x03:
			clear(line[:cap(line)])
			return nil, errCanceled
		case 0x7f, 0x08:
			// Drop the last UTF-8 character: its continuation bytes
			// and its first byte.
			for len(line) > 0 {
				last := line[len(line)-1]
				line = line[:len(line)-1]
				if last&0xc0 != 0x80 {
					break
				}
			}
		case 0x15:
			line = line[:0]
		default:
			if len(line) == max {
				clear(line[:cap(line)])
				return nil, errInputTooLarge
			}
			if len(line) == cap(line) {
				nl := make([]byte, len(line), 2*cap(line))
				copy(nl, line)
				clear(line)
				line = nl
			}
			line = append(line, b)
		}
	}
}

func (c *cli) secretsList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("secrets ls", secretsUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 0 {
		return 2, usagef("secrets ls takes no arguments, got %q", pos[0])
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	ss, err := cl.ListSecrets(ctx)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(wire.SecretList{Secrets: ss}))
	}
	rows := make([][]string, 0, len(ss))
	for _, s := range ss {
		rows = append(rows, []string{s.Name, fmt.Sprint(s.Version), formatTime(s.UpdatedAt), dash(shorten(s.Description, 60))})
	}
	return fail(c.table([]string{"NAME", "VERSION", "UPDATED", "DESCRIPTION"}, rows))
}

func (c *cli) secretsRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("secrets rm", secretsUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) == 0 {
		return 2, usagef("usage: airlock secrets rm NAME...")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	return c.forEachID(ctx, pos, "secrets were not removed", cl.DeleteSecret)
}
