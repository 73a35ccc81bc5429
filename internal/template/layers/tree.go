package layers

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxTreePath caps an entry name or link target of a tree.
const maxTreePath = 4096

// TreeOptions control ExtractTree.
type TreeOptions struct {
	// Name is what error messages call the tree, e.g. "build context".
	Name string
	// MaxEntries caps the tar entries (global headers included).
	MaxEntries int64
	// MaxBytes caps the stream and, apart, the regular files' logical
	// size (a sparse entry, whose holes cost no input, counts at its
	// full size).
	MaxBytes int64
	// FilesOnly is the policy of a tree that the daemon reads as data,
	// such as an OCI image layout, where a link could make it read a
	// host file: only directories and regular files (no links), no
	// entry that appears twice (a directory may be declared again), and
	// every file 0600 and every directory 0700 whatever its header says.
	FilesOnly bool
}

// TreeStats counts what ExtractTree read and wrote.
type TreeStats struct {
	Entries int64 // tar entries
	Bytes   int64 // bytes of file content written
}

// LimitError is the error of a stream over one of the caps its
// extraction was given (Limits, TreeOptions): its size, its entries or
// its files' size. Its class is errdefs.ErrResourceExhausted; a caller
// that took the stream from a client may answer it as a request that is
// too large. Msg is free of host paths.
type LimitError struct {
	Msg string
}

func (e *LimitError) Error() string { return e.Msg + ": " + errdefs.ErrResourceExhausted.Error() }

// Unwrap returns the class.
func (e *LimitError) Unwrap() error { return errdefs.ErrResourceExhausted }

// ExtractTree unpacks the plain (uncompressed) tar stream r into the
// empty directory dir as a tree of plain files, such as a build context.
// It is the layer extractor (every lookup through openat2 without
// following a symlink, entries created with O_EXCL, the caps) with a
// stricter policy, checked on each header before anything is written:
// names relative and without ".."; only directories, regular files,
// symbolic links (relative, and inside the tree when resolved from their
// directory) and hard links (to an earlier entry); no whiteouts (a ".wh."
// name is a plain name), no writing through a symbolic link, no file
// replacing a directory; a later entry replaces an earlier file or link.
// Owners, times and extended attributes are not kept; modes keep their
// permission bits only, with owner access added (files 0600, directories
// 0700). TreeOptions.FilesOnly makes the policy stricter still: no links,
// no entry replaced, fixed modes. Errors wrap errdefs classes: invalid
// argument for a bad entry or stream, a *LimitError for a cap, resource
// exhausted for a full disk, the reader's own failure's class for a
// failed read (a caller that needs the failure keeps it from its reader).
// Linux only (openat2).
func ExtractTree(ctx context.Context, dir string, r io.Reader, opts TreeOptions) (TreeStats, error) {
	if opts.MaxEntries <= 0 || opts.MaxBytes <= 0 {
		return TreeStats{}, fmt.Errorf("tree extraction needs positive caps: %w", errdefs.ErrInvalidArgument)
	}
	if opts.Name == "" {
		opts.Name = "tree"
	}
	pol := &treePolicy{opts: opts}
	g := &guard{ctxErr: ctx.Err, r: r, limit: opts.MaxBytes, what: opts.Name, over: func(limit int64) error {
		return &LimitError{Msg: fmt.Sprintf("the %s is larger than the limit of %d bytes", opts.Name, limit)}
	}}
	lim := Limits{MaxBytes: opts.MaxBytes, MaxFiles: opts.MaxEntries, MaxPathLen: maxTreePath}
	st, err := unpack(ctx, dir, tar.NewReader(g), ExtractOptions{Limits: lim, StripSetuid: true}, lim, pol)
	out := TreeStats{Entries: pol.entries, Bytes: st.bytes}
	if err != nil {
		return out, g.cause(err)
	}
	// Read what follows the end-of-archive marker, so that the whole
	// stream is taken (and an oversized one refused).
	if _, err := io.Copy(io.Discard, g); err != nil {
		return out, g.cause(err)
	}
	return out, nil
}

// treePolicy is ExtractTree's policy: the header checks it adds to the
// layer extractor's, and how the unpacker words and treats the rest.
type treePolicy struct {
	opts    TreeOptions
	entries int64
}

// invalid is an invalid-argument error about the tree.
func (p *treePolicy) invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// badTar is the error of a malformed or truncated stream.
func (p *treePolicy) badTar(err error) error {
	return p.invalid("the %s is not a valid tar stream: %s", p.opts.Name, strings.TrimPrefix(err.Error(), "archive/tar: "))
}

// check counts hdr and checks it (written: the logical bytes of the
// files so far) before anything of it is written.
func (p *treePolicy) check(hdr *tar.Header, written int64) error {
	p.entries++
	if p.entries > p.opts.MaxEntries {
		return &LimitError{Msg: fmt.Sprintf("the %s has more than %d entries", p.opts.Name, p.opts.MaxEntries)}
	}
	if hdr.Size > p.opts.MaxBytes-written {
		return &LimitError{Msg: fmt.Sprintf("the files of the %s are larger than the limit of %d bytes", p.opts.Name, p.opts.MaxBytes)}
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	name, err := p.path(hdr.Name)
	if err != nil {
		return err
	}
	if p.opts.FilesOnly && hdr.Typeflag != tar.TypeDir && hdr.Typeflag != tar.TypeReg {
		return p.invalid("%s entry %q: only files and directories are allowed (type %q)",
			p.opts.Name, quoteName(hdr.Name), string(hdr.Typeflag))
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return nil
	case tar.TypeReg: // tar.Reader reports the old TypeRegA as TypeReg
		if name == "." {
			return p.invalid("%s entry %q: a file cannot be the %s's root", p.opts.Name, quoteName(hdr.Name), p.opts.Name)
		}
		return nil
	case tar.TypeSymlink:
		if err := p.linkTarget(name, hdr.Linkname); err != nil {
			return err
		}
		if name == "." {
			return p.invalid("%s entry %q: a link cannot be the %s's root", p.opts.Name, quoteName(hdr.Name), p.opts.Name)
		}
		return nil
	case tar.TypeLink:
		old, err := p.path(hdr.Linkname)
		if err != nil {
			return err
		}
		if name == "." || old == "." {
			return p.invalid("%s entry %q: bad hard link", p.opts.Name, quoteName(hdr.Name))
		}
		return nil
	}
	return p.invalid("%s entry %q: only files, directories and links are allowed (type %q)",
		p.opts.Name, quoteName(hdr.Name), string(hdr.Typeflag))
}

// path checks an entry name (or a hard link's target) and returns it
// cleaned and relative ("." for the root). Absolute names and names with
// a ".." component are refused, whatever they resolve to.
func (p *treePolicy) path(name string) (string, error) {
	switch {
	case name == "":
		return "", p.invalid("%s entry with an empty name", p.opts.Name)
	case len(name) > maxTreePath:
		return "", p.invalid("%s entry name longer than %d bytes", p.opts.Name, maxTreePath)
	case strings.IndexByte(name, 0) >= 0:
		return "", p.invalid("%s entry name with a NUL byte", p.opts.Name)
	case strings.HasPrefix(name, "/"):
		return "", p.invalid("%s entry %q: absolute names are not allowed", p.opts.Name, quoteName(name))
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", p.invalid("%s entry %q: names with .. are not allowed", p.opts.Name, quoteName(name))
		}
	}
	return path.Clean(name), nil
}

// linkTarget checks the target of a symbolic link at name: relative, and
// inside the tree when resolved from name's directory.
func (p *treePolicy) linkTarget(name, target string) error {
	switch {
	case target == "" || len(target) > maxTreePath || strings.IndexByte(target, 0) >= 0:
		return p.invalid("%s entry %q: bad link target", p.opts.Name, quoteName(name))
	case strings.HasPrefix(target, "/"):
		return p.invalid("%s entry %q: absolute link targets are not allowed", p.opts.Name, quoteName(name))
	}
	if r := path.Join(path.Dir(name), target); r == ".." || strings.HasPrefix(r, "../") {
		return p.invalid("%s entry %q: the link points outside the %s", p.opts.Name, quoteName(name), p.opts.Name)
	}
	return nil
}

// mode is the mode of a tree entry: its permission bits, with owner
// access added; 0700 or 0600 alone for a FilesOnly tree.
func (p *treePolicy) mode(hdr *tar.Header) uint32 {
	m := uint32(hdr.Mode) & 0o777
	if p.opts.FilesOnly {
		m = 0
	}
	if hdr.Typeflag == tar.TypeDir {
		return m | 0o700
	}
	return m | 0o600
}

// parentMode is the mode of a directory the tree does not list but an
// entry's path needs.
func (p *treePolicy) parentMode() uint32 {
	if p.opts.FilesOnly {
		return 0o700
	}
	return 0o755
}

// replace is the error of an entry whose name exists already (a
// directory if isDir), or nil when the entry may replace what exists. A
// directory is replaced by nothing but a directory (which keeps it); in
// a FilesOnly tree nothing is replaced.
func (p *treePolicy) replace(name string, isDir bool) error {
	switch {
	case p.opts.FilesOnly:
		return p.invalid("%s entry %q appears twice", p.opts.Name, quoteName(name))
	case isDir:
		return p.invalid("%s entry %q could not be unpacked: a directory of that name exists", p.opts.Name, quoteName(name))
	}
	return nil
}
