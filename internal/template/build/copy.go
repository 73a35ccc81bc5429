package build

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
)

// layerDirs returns the directories of the layers so far.
func (j *job) layerDirs() ([]string, error) {
	dirs := make([]string, 0, len(j.layers))
	for _, d := range j.layers {
		dir, err := j.b.cfg.Store.LayerDir(d)
		if err != nil {
			return nil, err
		}
		dirs = append(dirs, dir)
	}
	return dirs, nil
}

// copyStep runs COPY or ADD: the sources, read from the build context,
// become a layer. ADD is COPY: local files only, archives are not
// unpacked.
func (j *job) copyStep(ctx context.Context, s airfile.Step) (string, error) {
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("airfile line %d: %s: %w", s.Line, s.Kind, err)
	}
	if j.req.ContextDir == "" {
		return fail(fmt.Errorf("no build context was given: %w", errdefs.ErrInvalidArgument))
	}
	root, err := os.OpenRoot(j.req.ContextDir)
	if err != nil {
		return fail(fmt.Errorf("opening the build context: %w", errdefs.ErrInvalidArgument))
	}
	defer root.Close()
	entries, err := airfile.ResolveSources(ctx, root, s.Sources())
	if err != nil {
		return fail(err)
	}
	dest, err := airfile.Expand(s.Dest(), j.lookupEnv(j.cfg.Env))
	if err != nil || dest == "" || strings.IndexByte(dest, 0) >= 0 {
		return fail(fmt.Errorf("bad destination %q: %w", clip(s.Dest(), 100), errdefs.ErrInvalidArgument))
	}
	dirs, err := j.layerDirs()
	if err != nil {
		return fail(err)
	}
	st := newStack(dirs)
	uid, gid, err := chownIDs(st, s.Chown)
	if err != nil {
		return fail(fmt.Errorf("--chown: %w", err))
	}
	destAbs := dest
	if !path.IsAbs(dest) {
		destAbs = path.Join(j.workdir(), dest)
	}
	c := &copier{st: st, uid: uid, gid: gid, now: time.Now()}
	p, err := c.plan(destAbs, isDirDest(dest, s.Sources()), entries)
	if err != nil {
		return fail(err)
	}
	layer, err := j.extractStream(ctx, j.extractOptions(), func(ctx context.Context, w io.Writer) error {
		c.tw = tar.NewWriter(w)
		if err := c.copy(ctx, root, p, entries); err != nil {
			return err
		}
		return c.tw.Close()
	})
	if err != nil {
		return fail(err)
	}
	return layer, nil
}

// isDirDest reports whether the destination names a directory by its
// syntax: a trailing slash, "." or several (or wildcard) sources.
func isDirDest(dest string, sources []string) bool {
	if strings.HasSuffix(dest, "/") || dest == "." || strings.HasSuffix(dest, "/.") || len(sources) > 1 {
		return true
	}
	return strings.ContainsAny(sources[0], "*?[")
}

// chownIDs resolves a --chown value (user[:group], names or ids) against
// the image's /etc/passwd and /etc/group. A user without a group uses
// the user's id as group id (as Docker does); no value is root.
func chownIDs(st *stack, chown string) (int, int, error) {
	if chown == "" {
		return 0, 0, nil
	}
	db, err := st.accountDB()
	if err != nil {
		return 0, 0, err
	}
	uid, gid, err := account.Chown(chown, db)
	return int(uid), int(gid), err
}

// copier writes the tar of a COPY (or of a WORKDIR's directories).
// Paths are image paths relative to the root, resolved through the
// image's symlinks so that nothing replaces a symlink to a directory
// (such as Debian's /bin -> usr/bin) with a directory.
type copier struct {
	st       *stack
	tw       *tar.Writer
	uid, gid int       // owner of what the step creates
	now      time.Time // time of directories the step creates

	emitted map[string]bool   // directories written to the tar
	dirs    map[string]string // destination directory as named -> resolved
}

// copyPlan is where a COPY writes.
type copyPlan struct {
	dir      string // resolved destination directory ("" for /), or
	file     string // the resolved destination file (one file source)
	dirFound bool   // dir exists in the image
}

// plan decides the destination: a directory when the syntax says so,
// when a source is a directory, or when the destination is an existing
// directory; otherwise the one file source is written as the destination.
func (c *copier) plan(destAbs string, dirSyntax bool, entries []airfile.SourceFile) (copyPlan, error) {
	rel, h, found, err := c.st.resolve(destAbs, true)
	if err != nil {
		return copyPlan{}, err
	}
	asDir := dirSyntax || (found && h.st.isDir())
	for _, e := range entries {
		if e.Rel == "." && e.Mode.IsDir() {
			asDir = true
		}
	}
	if asDir {
		if found && !h.st.isDir() {
			return copyPlan{}, fmt.Errorf("destination %q exists and is not a directory: %w", clip(destAbs, 200), errdefs.ErrInvalidArgument)
		}
		return copyPlan{dir: rel, dirFound: found}, nil
	}
	parent, err := c.resolveDir(path.Dir(destAbs))
	if err != nil {
		return copyPlan{}, err
	}
	return copyPlan{file: joinRel(parent, path.Base(destAbs))}, nil
}

// resolveDir resolves the image directory p (as named); it may be
// missing, then it is created by ensureDir.
func (c *copier) resolveDir(p string) (string, error) {
	key := strings.TrimPrefix(path.Clean("/"+p), "/")
	if r, ok := c.dirs[key]; ok {
		return r, nil
	}
	rel, h, found, err := c.st.resolve(p, true)
	if err != nil {
		return "", err
	}
	if found && !h.st.isDir() {
		return "", errNotDir("/" + rel)
	}
	if c.dirs == nil {
		c.dirs = make(map[string]string)
	}
	c.dirs[key] = rel
	return rel, nil
}

// ensureDir writes a directory entry for rel (resolved) and each of its
// parents not written yet: an existing directory with its own mode,
// owner and time (the entry hides the one below, so it must not change
// them), a missing one with mode 0755 and the step's owner.
func (c *copier) ensureDir(rel string) error {
	if rel == "" || c.emitted[rel] {
		return nil
	}
	parent, _ := splitLast(rel)
	if err := c.ensureDir(parent); err != nil {
		return err
	}
	h, found, err := c.st.lookup(rel)
	if err != nil {
		return err
	}
	hdr := &tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755, Uid: c.uid, Gid: c.gid, ModTime: c.now, Format: tar.FormatPAX}
	switch {
	case found && h.pending && h.st.isDir():
		return nil // written by this step already
	case found && h.st.isDir():
		hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime = int64(h.st.perm), h.st.uid, h.st.gid, h.st.mtime
	case found:
		return errNotDir("/" + rel)
	}
	return c.writeDir(hdr)
}

// writeDir writes a directory entry and records it.
func (c *copier) writeDir(hdr *tar.Header) error {
	rel := strings.TrimSuffix(hdr.Name, "/")
	if err := c.tw.WriteHeader(hdr); err != nil {
		return err
	}
	if c.emitted == nil {
		c.emitted = make(map[string]bool)
	}
	c.emitted[rel] = true
	c.st.pending[rel] = true
	return nil
}

// splitLast splits a relative path into its parent and last component.
func splitLast(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return "", rel
	}
	return rel[:i], rel[i+1:]
}

// modeBits converts a Go file mode to the permission bits of a tar
// header, set-id and sticky bits included.
func modeBits(m fs.FileMode) int64 {
	b := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		b |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		b |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		b |= 0o1000
	}
	return b
}

// copy writes the entries into the tar as p says.
func (c *copier) copy(ctx context.Context, root *os.Root, p copyPlan, entries []airfile.SourceFile) error {
	if p.file == "" {
		// The destination directory itself: created with the mode of a
		// directory source (0755 otherwise), kept as it is if it exists.
		if p.dirFound {
			if err := c.ensureDir(p.dir); err != nil {
				return err
			}
		} else if p.dir != "" {
			parent, _ := splitLast(p.dir)
			if err := c.ensureDir(parent); err != nil {
				return err
			}
			mode := int64(0o755)
			for _, e := range entries {
				if e.Rel == "." && e.Mode.IsDir() {
					mode = modeBits(e.Mode)
					break
				}
			}
			if err := c.writeDir(&tar.Header{Typeflag: tar.TypeDir, Name: p.dir + "/", Mode: mode, Uid: c.uid, Gid: c.gid, ModTime: c.now, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return ctxErr(ctx, "copying")
		}
		// Where the entry goes, as named (not yet resolved).
		var named string
		switch {
		case e.Rel == "." && e.Mode.IsDir():
			continue // its content goes into the destination directory
		case e.Rel == "." && p.file != "":
			named = p.file
		case e.Rel == ".":
			named = joinRel(p.dir, path.Base(e.Path))
		default:
			named = joinRel(p.dir, e.Rel)
		}
		parentNamed, name := splitLast(named)
		parent, err := c.resolveDir("/" + parentNamed)
		if err != nil {
			return err
		}
		if err := c.ensureDir(parent); err != nil {
			return err
		}
		final := joinRel(parent, name)
		if err := c.entry(root, e, named, final); err != nil {
			return err
		}
	}
	return nil
}

// entry writes one source entry at final (its resolved path; named is
// the path as named, for directories whose children follow).
func (c *copier) entry(root *os.Root, e airfile.SourceFile, named, final string) error {
	hdr := &tar.Header{Name: final, Mode: modeBits(e.Mode), Uid: c.uid, Gid: c.gid, ModTime: c.now, Format: tar.FormatPAX}
	switch {
	case e.Mode.IsDir():
		// An existing symlink to a directory is followed, as a copy
		// into the sandbox would.
		if h, found, err := c.st.lookup(final); err == nil && found && h.st.isSymlink() && !h.pending {
			if r, rh, ok, err := c.st.resolve("/"+final, true); err == nil && ok && rh.st.isDir() {
				final = r
				parent, _ := splitLast(final)
				if err := c.ensureDir(parent); err != nil {
					return err
				}
			}
		}
		if c.dirs == nil {
			c.dirs = make(map[string]string)
		}
		c.dirs[named] = final
		hdr.Typeflag, hdr.Name = tar.TypeDir, final+"/"
		return c.writeDir(hdr)
	case e.Mode&fs.ModeSymlink != 0:
		hdr.Typeflag, hdr.Linkname, hdr.Mode = tar.TypeSymlink, e.Link, 0o777
		c.st.pending[final] = false
		return c.tw.WriteHeader(hdr)
	case e.Mode.IsRegular():
		f, err := root.OpenFile(e.Path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return fmt.Errorf("%q: %w", clip(e.Path, 100), errdefs.ErrNotFound)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil || !fi.Mode().IsRegular() || fi.Size() != e.Size {
			return fmt.Errorf("%q changed while the build read it: %w", clip(e.Path, 100), errdefs.ErrFailedPrecondition)
		}
		hdr.Typeflag, hdr.Size, hdr.ModTime = tar.TypeReg, e.Size, fi.ModTime()
		if err := c.tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(c.tw, f, e.Size); err != nil {
			if errdefs.Class(err) != errdefs.ErrInternal {
				return err // the extraction stopped
			}
			return fmt.Errorf("%q changed while the build read it: %w", clip(e.Path, 100), errdefs.ErrFailedPrecondition)
		}
		c.st.pending[final] = false
		return nil
	}
	return fmt.Errorf("%q is a special file: %w", clip(e.Path, 100), errdefs.ErrInvalidArgument)
}

// workdirStep creates the WORKDIR directory, owned by the current USER,
// when the image lacks it; it returns no layer when it exists.
func (j *job) workdirStep(ctx context.Context, s airfile.Step) (string, error) {
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("airfile line %d: WORKDIR: %w", s.Line, err)
	}
	dirs, err := j.layerDirs()
	if err != nil {
		return fail(err)
	}
	st := newStack(dirs)
	rel, h, found, err := st.resolve(j.cfg.Workdir, true)
	if err != nil {
		return fail(err)
	}
	if found {
		if !h.st.isDir() {
			return fail(fmt.Errorf("%q exists and is not a directory: %w", clip(j.cfg.Workdir, 200), errdefs.ErrInvalidArgument))
		}
		return "", nil
	}
	uid, gid, err := userIDs(st, j.cfg.User)
	if err != nil {
		return fail(err)
	}
	c := &copier{st: st, uid: uid, gid: gid, now: time.Now()}
	layer, err := j.extractStream(ctx, j.extractOptions(), func(ctx context.Context, w io.Writer) error {
		c.tw = tar.NewWriter(w)
		if err := c.ensureDir(rel); err != nil {
			return err
		}
		return c.tw.Close()
	})
	if err != nil {
		return fail(err)
	}
	return layer, nil
}
