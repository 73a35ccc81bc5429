package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"

	"github.com/airlock-sandbox/airlock/client"
)

const filesUsage = `usage:
  airlock files ls [-u USER] [-d DEPTH] [--json] ID [PATH]
      List the directory PATH of sandbox ID (default: the user's home) like
      ls -l: type and mode, owner, size, modification time, name (a link's
      target after ->). -d lists DEPTH levels down (at most 32); the server
      caps the entries of one listing and says when it cut it.
  airlock files mkdir [-u USER] ID PATH...
      Make directories, with their missing parents (mkdir -p).
  airlock files rm [-u USER] [-r] ID PATH...
      Remove files or symbolic links; -r also directories, with what they
      hold.
Each command acts as the sandbox's user, or as root with -u root: it sees
and changes only what that user may, and what it makes belongs to that
user. Relative paths are relative to that user's home. To copy files in
or out use airlock cp.
`

const contextsUsage = `usage:
  airlock contexts ls [--json] ID
      List the code contexts of sandbox ID (see airlock code): id, language,
      state (idle, busy, dead), cells run, working directory, created.
  airlock contexts rm ID CONTEXT...
      Kill contexts and forget them (their state is lost).
  airlock contexts restart [--json] ID CONTEXT
      Replace a context's process with a fresh one (its state is lost).
  airlock contexts interrupt ID CONTEXT
      Interrupt the cell running in a context (its state is kept).
`

// userFlag defines -u and --user: whom a file command acts as.
func userFlag(fs *flag.FlagSet) *string {
	user := fs.String("u", "", "act as `user` in the sandbox: user (default) or root")
	fs.StringVar(user, "user", "", "same as -u")
	return user
}

// maxListDepth is the server's cap on a listing's depth.
const maxListDepth = 32

func (c *cli) filesCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("files needs a subcommand: ls, mkdir or rm (see airlock files -h)")
	}
	switch args[0] {
	case "ls", "list":
		return c.filesList(ctx, args[1:])
	case "mkdir":
		return c.filesMkdir(ctx, args[1:])
	case "rm", "remove":
		return c.filesRemove(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, filesUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown files subcommand %q; want ls, mkdir or rm", args[0])
}

func (c *cli) filesList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("files ls", filesUsage)
	depth := fs.Int("d", 1, "list this many `levels` down (1: the directory's entries)")
	fs.IntVar(depth, "depth", 1, "same as -d")
	asJSON := fs.Bool("json", false, "print JSON: the entries and whether the listing was cut")
	user := userFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	switch {
	case len(pos) < 1 || len(pos) > 2:
		return 2, usagef("usage: airlock files ls [-u USER] [-d DEPTH] [--json] ID [PATH]")
	case *depth < 1 || *depth > maxListDepth:
		return 2, usagef("-d must be from 1 to %d", maxListDepth)
	}
	as, err := asUser(*user)
	if err != nil {
		return 2, err
	}
	path := ""
	if len(pos) == 2 {
		path = pos[1]
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	entries, truncated, err := cl.ListDir(ctx, pos[0], path, *depth, as...)
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		if entries == nil {
			entries = []client.FileInfo{}
		}
		return fail(c.printJSON(struct {
			Entries   []client.FileInfo `json:"entries"`
			Truncated bool              `json:"truncated"`
		}{entries, truncated}))
	}
	rows := make([][]string, 0, len(entries))
	for _, e := range entries {
		name := e.Name
		if *depth > 1 {
			name = e.Path
		}
		if e.Type == "symlink" && e.SymlinkTarget != "" {
			name += " -> " + e.SymlinkTarget
		}
		rows = append(rows, []string{fileMode(e), strconv.FormatUint(uint64(e.UID), 10) + ":" + strconv.FormatUint(uint64(e.GID), 10),
			strconv.FormatInt(e.Size, 10), formatTime(e.ModTime), printable(name)})
	}
	if err := c.table([]string{"MODE", "OWNER", "SIZE", "MODIFIED", "NAME"}, rows); err != nil {
		return fail(err)
	}
	if truncated {
		fmt.Fprintln(c.stderr, "airlock: the listing was cut at the server's cap on entries; list a subdirectory or use less depth")
	}
	return 0, nil
}

// fileMode is an entry's type and mode as ls -l shows them
// (drwxr-xr-x, -rwsr-xr-x, drwxrwxrwt).
func fileMode(e client.FileInfo) string {
	typ := map[string]byte{"dir": 'd', "symlink": 'l', "file": '-'}[e.Type]
	if typ == 0 {
		typ = '?'
	}
	b := []byte{typ}
	for i, rwx := range []string{"rwx", "rwx", "rwx"} {
		bits := e.Mode >> (6 - 3*i) & 7
		for j := range 3 {
			c := byte('-')
			if bits&(4>>j) != 0 {
				c = rwx[j]
			}
			b = append(b, c)
		}
	}
	special := []struct {
		bit      uint32
		at       int
		set, off byte
	}{{0o4000, 3, 's', 'S'}, {0o2000, 6, 's', 'S'}, {0o1000, 9, 't', 'T'}}
	for _, s := range special {
		if e.Mode&s.bit != 0 {
			if b[s.at] == 'x' {
				b[s.at] = s.set
			} else {
				b[s.at] = s.off
			}
		}
	}
	return string(b)
}

func (c *cli) filesMkdir(ctx context.Context, args []string) (int, error) {
	fs := c.flags("files mkdir", filesUsage)
	return c.filesEach(ctx, fs, args, "usage: airlock files mkdir [-u USER] ID PATH...", "directories were not made",
		func(ctx context.Context, cl *client.Client, id, p string, as []client.FileOption) error {
			_, err := cl.MakeDir(ctx, id, p, as...)
			return err
		})
}

func (c *cli) filesRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("files rm", filesUsage)
	recursive := fs.Bool("r", false, "also remove directories, with everything in them")
	fs.BoolVar(recursive, "recursive", false, "same as -r")
	return c.filesEach(ctx, fs, args, "usage: airlock files rm [-u USER] [-r] ID PATH...", "paths were not removed",
		func(ctx context.Context, cl *client.Client, id, p string, as []client.FileOption) error {
			return cl.RemoveFile(ctx, id, p, *recursive, as...)
		})
}

// filesEach parses `ID PATH...` (with -u USER) with fs and runs op on each
// path of sandbox ID, reporting failed ones as forEachID does.
func (c *cli) filesEach(ctx context.Context, fs *flag.FlagSet, args []string, usage, failed string,
	op func(ctx context.Context, cl *client.Client, id, p string, as []client.FileOption) error) (int, error) {
	user := userFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) < 2 {
		return 2, usagef("%s", usage)
	}
	as, err := asUser(*user)
	if err != nil {
		return 2, err
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	id := pos[0]
	return c.forEachID(ctx, pos[1:], failed, func(ctx context.Context, p string) error {
		return op(ctx, cl, id, p, as)
	})
}

func (c *cli) contextsCmd(ctx context.Context, args []string) (int, error) {
	if len(args) == 0 {
		return 2, usagef("contexts needs a subcommand: ls, rm, restart or interrupt (see airlock contexts -h)")
	}
	switch args[0] {
	case "ls", "list":
		return c.contextsList(ctx, args[1:])
	case "rm", "remove", "delete":
		return c.contextsRemove(ctx, args[1:])
	case "restart":
		return c.contextsRestart(ctx, args[1:])
	case "interrupt":
		return c.contextsInterrupt(ctx, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(c.stdout, contextsUsage)
		return 0, errHelp
	}
	return 2, usagef("unknown contexts subcommand %q; want ls, rm, restart or interrupt", args[0])
}

func (c *cli) contextsList(ctx context.Context, args []string) (int, error) {
	fs := c.flags("contexts ls", contextsUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 1 {
		return 2, usagef("usage: airlock contexts ls [--json] ID")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	list, err := cl.ListCodeContexts(ctx, pos[0])
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		if list == nil {
			list = []client.CodeContext{}
		}
		return fail(c.printJSON(list))
	}
	rows := make([][]string, 0, len(list))
	for _, x := range list {
		state := x.State
		if x.Error != "" {
			state += " (" + shorten(x.Error, 40) + ")"
		}
		id := x.ID
		if x.Default {
			id += " (default)"
		}
		rows = append(rows, []string{id, x.Language, state, strconv.Itoa(x.ExecutionCount), dash(x.Cwd), formatTime(x.CreatedAt)})
	}
	return fail(c.table([]string{"ID", "LANGUAGE", "STATE", "CELLS", "CWD", "CREATED"}, rows))
}

func (c *cli) contextsRemove(ctx context.Context, args []string) (int, error) {
	fs := c.flags("contexts rm", contextsUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) < 2 {
		return 2, usagef("usage: airlock contexts rm ID CONTEXT...")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	id := pos[0]
	return c.forEachID(ctx, pos[1:], "contexts were not removed", func(ctx context.Context, cid string) error {
		return cl.DeleteCodeContext(ctx, id, cid)
	})
}

func (c *cli) contextsRestart(ctx context.Context, args []string) (int, error) {
	fs := c.flags("contexts restart", contextsUsage)
	asJSON := fs.Bool("json", false, "print the restarted context as JSON")
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("usage: airlock contexts restart [--json] ID CONTEXT")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	x, err := cl.RestartCodeContext(ctx, pos[0], pos[1])
	if err != nil {
		return fail(err)
	}
	if *asJSON {
		return fail(c.printJSON(x))
	}
	_, err = fmt.Fprintf(c.stdout, "%s restarted (%s, %s)\n", x.ID, x.Language, x.State)
	return fail(err)
}

func (c *cli) contextsInterrupt(ctx context.Context, args []string) (int, error) {
	fs := c.flags("contexts interrupt", contextsUsage)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("usage: airlock contexts interrupt ID CONTEXT")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	ctx, cancel := context.WithTimeout(ctx, controlTimeout)
	defer cancel()
	running, err := cl.InterruptCodeContext(ctx, pos[0], pos[1])
	if err != nil {
		return fail(err)
	}
	msg := "interrupted the running cell"
	if !running {
		msg = "no cell was running"
	}
	_, err = fmt.Fprintf(c.stdout, "%s: %s\n", pos[1], msg)
	return fail(err)
}
