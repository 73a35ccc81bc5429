package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/airlock-sandbox/airlock/client"
)

const cpUsage = `usage: airlock cp [-u USER] SRC DST

One of SRC and DST is a sandbox path ID:PATH (a relative PATH is relative
to the user's home in the sandbox; ID: alone is the home); the other is a
host path, or - for standard input or output (write a host path that looks
like ID:PATH as ./ID:PATH).

  airlock cp ./file ID:/dst      upload a file; into /dst if it is a directory
                                 (or ends with /)
  airlock cp ./dir ID:/dst       upload a directory tree (its regular files
                                 and its directories, empty ones included)
  airlock cp - ID:/dst           upload standard input
  airlock cp ID:/src ./dst       download a file, or a directory tree;
                                 into ./dst if it is a directory
  airlock cp ID:/src -           download a file to standard output

The copy acts as the sandbox's user (-u root to act as root): it reads and
writes only what that user may, and what it creates belongs to that user.

Limits: permissions, owners and times are not copied (downloaded files get
mode 0644, directories 0755). Symbolic links and special files are skipped
and reported. A download of a directory lists at most 32 levels, and fails
rather than copy part of a listing the server truncated. A download
replaces a file only once it has arrived whole.
`

// remoteRef matches ID:PATH.
var remoteRef = regexp.MustCompile(`^(sb-[a-z0-9]+):(.*)$`)

// splitRemote splits ID:PATH; ok is false for a host path.
func splitRemote(s string) (id, p string, ok bool) {
	m := remoteRef.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	if m[2] == "" {
		m[2] = "."
	}
	return m[1], m[2], true
}

func (c *cli) cpCmd(ctx context.Context, args []string) (int, error) {
	fs := c.flags("cp", cpUsage)
	user := userFlag(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return c.parseFailed(err)
	}
	if len(pos) != 2 {
		return 2, usagef("usage: airlock cp [-u USER] SRC DST (one side is ID:PATH)")
	}
	as, err := asUser(*user)
	if err != nil {
		return 2, err
	}
	srcID, srcPath, srcRemote := splitRemote(pos[0])
	dstID, dstPath, dstRemote := splitRemote(pos[1])
	switch {
	case srcRemote && dstRemote:
		return 2, usagef("cp copies between the host and a sandbox; copying between two sandbox paths is not supported")
	case !srcRemote && !dstRemote:
		return 2, usagef("one side of cp must be a sandbox path ID:PATH")
	case srcRemote && pos[1] == "":
		return 2, usagef("the destination is empty")
	case dstRemote && pos[0] == "":
		return 2, usagef("the source is empty")
	}
	cl, err := c.client()
	if err != nil {
		return 2, err
	}
	if dstRemote {
		return fail(c.upload(ctx, cl, pos[0], dstID, dstPath, as))
	}
	return fail(c.download(ctx, cl, srcID, srcPath, pos[1], as))
}

// asUser checks a -u flag and returns the file options it asks for.
func asUser(user string) ([]client.FileOption, error) {
	switch user {
	case "":
		return nil, nil
	case "user", "root":
		return []client.FileOption{client.AsUser(user)}, nil
	}
	return nil, usagef("-u must be user or root, not %q", user)
}

// remoteIsDir reports whether p is a directory in sandbox id (a path
// ending in / is taken as one).
func remoteIsDir(ctx context.Context, cl *client.Client, id, p string, as []client.FileOption) bool {
	if strings.HasSuffix(p, "/") || p == "." || p == "~" {
		return true
	}
	_, _, err := cl.ListDir(ctx, id, p, 1, as...)
	return err == nil
}

// upload copies the host file or tree src (or stdin for "-") to dst in
// sandbox id.
func (c *cli) upload(ctx context.Context, cl *client.Client, src, id, dst string, as []client.FileOption) error {
	if src == "-" {
		if strings.HasSuffix(dst, "/") {
			return usagef("standard input needs a file name in the sandbox, not a directory")
		}
		_, err := cl.WriteFile(ctx, id, dst, c.stdin, as...)
		return err
	}
	fi, err := os.Stat(src)
	if err != nil {
		return &cliError{msg: fmt.Sprintf("cannot read %s: %v", src, errors.Unwrap(err)), err: err}
	}
	target := dst
	if remoteIsDir(ctx, cl, id, dst, as) {
		target = path.Join(dst, filepath.Base(filepath.Clean(src)))
	}
	if fi.IsDir() {
		return c.uploadTree(ctx, cl, src, id, target, as)
	}
	if !fi.Mode().IsRegular() {
		return &cliError{msg: fmt.Sprintf("%s is not a regular file", src)}
	}
	return uploadFile(ctx, cl, src, id, target, as)
}

func uploadFile(ctx context.Context, cl *client.Client, src, id, dst string, as []client.FileOption) error {
	f, err := os.Open(src)
	if err != nil {
		return &cliError{msg: fmt.Sprintf("cannot read %s: %v", src, errors.Unwrap(err)), err: err}
	}
	defer f.Close()
	if _, err := cl.WriteFile(ctx, id, dst, f, as...); err != nil {
		return fmt.Errorf("%s: %w", dst, err)
	}
	return nil
}

// uploadTree copies the host directory src to the sandbox directory dst:
// its regular files and its directories, without following symbolic
// links. A file's upload creates its parent directories; directories
// without a file anywhere below them are made with mkdir.
func (c *cli) uploadTree(ctx context.Context, cl *client.Client, src, id, dst string, as []client.FileOption) error {
	filled := map[string]bool{} // directories (relative) that got a file
	var dirs []string           // every directory, parents first
	files, skipped := 0, 0
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			dirs = append(dirs, rel)
			return nil
		case !d.Type().IsRegular():
			skipped++
			fmt.Fprintf(c.stderr, "airlock: skipped %s (not a regular file)\n", p)
			return nil
		}
		if err := uploadFile(ctx, cl, p, id, path.Join(dst, filepath.ToSlash(rel)), as); err != nil {
			return err
		}
		files++
		for d := filepath.Dir(rel); ; d = filepath.Dir(d) {
			filled[d] = true
			if d == "." {
				break
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Make the deepest of the directories no file created: mkdir makes
	// their parents.
	made := 0
	for _, d := range emptyLeaves(dirs, filled) {
		target := dst
		if d != "." {
			target = path.Join(dst, filepath.ToSlash(d))
		}
		if _, err := cl.MakeDir(ctx, id, target, as...); err != nil {
			return fmt.Errorf("%s: %w", target, err)
		}
		made++
	}
	fmt.Fprintf(c.stderr, "airlock: copied %d files to %s:%s", files, id, dst)
	if made > 0 {
		fmt.Fprintf(c.stderr, " (and made %d empty directories)", made)
	}
	fmt.Fprintln(c.stderr)
	return nil
}

// emptyLeaves returns the directories of dirs (relative paths, "." the
// root, parents before children) that are not filled and have no
// unfilled subdirectory: making them makes every unfilled directory.
func emptyLeaves(dirs []string, filled map[string]bool) []string {
	hasEmptyChild := map[string]bool{}
	for _, d := range dirs {
		if !filled[d] && d != "." {
			hasEmptyChild[filepath.Dir(d)] = true
		}
	}
	var out []string
	for _, d := range dirs {
		if !filled[d] && !hasEmptyChild[d] {
			out = append(out, d)
		}
	}
	return out
}

// download copies src from sandbox id to the host path dst ("-": stdout).
func (c *cli) download(ctx context.Context, cl *client.Client, id, src, dst string, as []client.FileOption) error {
	if dst == "-" {
		return c.readInto(ctx, cl, id, src, c.stdout, as)
	}
	target := dst
	if fi, err := os.Stat(dst); (err == nil && fi.IsDir()) || strings.HasSuffix(dst, "/") {
		target = filepath.Join(dst, path.Base(path.Clean(src)))
	}
	entries, truncated, err := cl.ListDir(ctx, id, src, 32, as...)
	if err != nil {
		// Not a directory (or not there): copy it as a file.
		dir, name := filepath.Split(target)
		if dir == "" {
			dir = "."
		}
		root, err := os.OpenRoot(dir)
		if err != nil {
			return &cliError{msg: fmt.Sprintf("cannot write to %s: %v", dir, errors.Unwrap(err)), err: err}
		}
		defer root.Close()
		return c.downloadFile(ctx, cl, id, src, root, name, as)
	}
	if truncated {
		return &cliError{msg: fmt.Sprintf("%s has more entries than the server lists at once; copy its subdirectories one by one", src)}
	}
	return c.downloadTree(ctx, cl, id, entries, target, as)
}

// readInto streams the file src of sandbox id into w.
func (c *cli) readInto(ctx context.Context, cl *client.Client, id, src string, w io.Writer, as []client.FileOption) error {
	rc, err := cl.ReadFile(ctx, id, src, as...)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("%s: %w", src, err)
	}
	return nil
}

// downloadFile copies src of sandbox id to name under root: into a
// temporary file first, renamed into place once complete.
func (c *cli) downloadFile(ctx context.Context, cl *client.Client, id, src string, root *os.Root, name string, as []client.FileOption) error {
	tmp := path.Join(path.Dir(filepath.ToSlash(name)), ".airlock-cp-"+path.Base(filepath.ToSlash(name))+".tmp")
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return &cliError{msg: fmt.Sprintf("cannot write %s: %v", name, errors.Unwrap(err)), err: err}
	}
	err = c.readInto(ctx, cl, id, src, f, as)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err == nil {
		err = root.Rename(tmp, name)
	}
	if err != nil {
		_ = root.Remove(tmp)
		return err
	}
	return nil
}

// downloadTree recreates a listing (depth first, parents before
// children) under the host directory dst. Entry paths are checked to stay
// inside dst, and every write goes through an os.Root, so a hostile
// listing or a symbolic link in dst cannot lead outside it.
func (c *cli) downloadTree(ctx context.Context, cl *client.Client, id string, entries []client.FileInfo, dst string, as []client.FileOption) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return &cliError{msg: fmt.Sprintf("cannot create %s: %v", dst, errors.Unwrap(err)), err: err}
	}
	if len(entries) == 0 {
		return nil
	}
	base := path.Dir(entries[0].Path) // the listed directory, absolute
	prefix := strings.TrimSuffix(base, "/") + "/"
	rels := make([]string, len(entries))
	for i, e := range entries {
		rel := strings.TrimPrefix(e.Path, prefix)
		if rel == e.Path || !filepath.IsLocal(rel) {
			return &cliError{msg: fmt.Sprintf("the server listed %q outside %s", e.Path, base)}
		}
		rels[i] = rel
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		return &cliError{msg: fmt.Sprintf("cannot open %s: %v", dst, errors.Unwrap(err)), err: err}
	}
	defer root.Close()
	files := 0
	for i, e := range entries {
		rel := rels[i]
		switch e.Type {
		case "dir":
			if err := root.MkdirAll(rel, 0o755); err != nil {
				return &cliError{msg: fmt.Sprintf("cannot create %s: %v", filepath.Join(dst, rel), errors.Unwrap(err)), err: err}
			}
		case "file":
			if err := root.MkdirAll(path.Dir(rel), 0o755); err != nil {
				return &cliError{msg: fmt.Sprintf("cannot create %s: %v", filepath.Join(dst, path.Dir(rel)), errors.Unwrap(err)), err: err}
			}
			if err := c.downloadFile(ctx, cl, id, e.Path, root, rel, as); err != nil {
				return err
			}
			files++
		default:
			fmt.Fprintf(c.stderr, "airlock: skipped %s (%s)\n", e.Path, e.Type)
		}
	}
	fmt.Fprintf(c.stderr, "airlock: copied %d files to %s\n", files, dst)
	return nil
}
