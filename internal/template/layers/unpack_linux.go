package layers

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// OCI whiteout names (image-spec layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutMeta   = ".wh..wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// OpaqueXattr marks a directory as opaque for overlayfs mounted with the
// userxattr option, which the runtime uses inside the sandbox's user
// namespace (trusted.* attributes are not honoured there).
const OpaqueXattr = "user.overlay.opaque"

// Largest uid and gid a layer may use: the runtime maps 0..65535 into each
// sandbox's id range.
const maxID = 65535

// Extended attribute limits per entry.
const (
	maxXattrs     = 64
	maxXattrValue = 64 << 10
	maxLinkTarget = 4095
)

// Resolution flags for every lookup inside the layer: never follow a
// symlink (so nothing can point a write outside the layer, and no race
// can swap one in), never leave the layer's mount, and treat the layer
// root as "/".
const (
	resolveInLayer = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
	resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
)

// unpacker writes the entries of one layer tar below root. Every path is
// resolved from root's descriptor with openat2 and no symlink is ever
// followed; entries are created with O_EXCL/mknodat/symlinkat, which do
// not follow a symlink in the last component either.
type unpacker struct {
	root int // O_PATH descriptor of the layer root
	// tree, if set, unpacks a plain tree (ExtractTree) instead of a
	// layer: its checks come first, and owners, times, extended
	// attributes and whiteouts are not kept.
	tree *treePolicy
	opts ExtractOptions
	lim  Limits
	st   unpackStats
	buf  []byte
	// written is the logical size of every regular file so far: a sparse
	// entry's holes cost nothing in the stream but are written out in
	// full, so the stream's cap alone would not bound the disk.
	written int64

	dirs     map[string]dirMeta // metadata applied once all entries exist
	dirOrder []string

	cacheDir string // parent directory of the last entry
	cacheFD  int    // its O_PATH descriptor, or -1
}

// dirMeta is the metadata of a directory entry, applied at the end so
// that creating its children does not change its mtime.
type dirMeta struct {
	mode         uint32
	uid, gid     int
	atime, mtime time.Time
	xattrs       map[string]string
}

// unpack writes the entries of tr below dir, which must be an empty
// directory that nothing else writes to; tree, if set, makes it a plain
// tree's extraction (ExtractTree).
func unpack(ctx context.Context, dir string, tr *tar.Reader, opts ExtractOptions, lim Limits, tree *treePolicy) (unpackStats, error) {
	root, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return unpackStats{}, fmt.Errorf("open layer directory: %w", err)
	}
	u := &unpacker{
		root: root, tree: tree, opts: opts, lim: lim,
		buf:     make([]byte, 1<<20),
		dirs:    make(map[string]dirMeta),
		cacheFD: -1,
	}
	defer u.close()
	for {
		if err := ctx.Err(); err != nil {
			return u.st, ctxError(err)
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if u.tree != nil {
				return u.st, u.tree.badTar(err)
			}
			return u.st, fmt.Errorf("layer is not a valid tar archive: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if err := u.entry(hdr, tr); err != nil {
			return u.st, err
		}
	}
	return u.st, u.finish()
}

func (u *unpacker) close() {
	u.dropCache()
	unix.Close(u.root)
}

// entry writes one tar entry.
func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	if u.tree != nil {
		if err := u.tree.check(hdr, u.written); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return nil
	}
	u.st.files++
	if u.st.files > u.lim.MaxFiles {
		return &LimitError{Msg: fmt.Sprintf("layer has more than %d entries", u.lim.MaxFiles)}
	}
	p, err := cleanEntryPath(hdr.Name, u.lim.MaxPathLen)
	if err != nil {
		return err
	}
	if p == "" {
		if hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("entry %q: the layer root must be a directory: %w", quoteName(hdr.Name), errdefs.ErrInvalidArgument)
		}
	}
	dir, base := splitPath(p)
	var mode uint32
	var xattrs map[string]string
	if u.tree != nil {
		// Owners and extended attributes are not kept; a ".wh." name is
		// a plain name.
		mode = u.tree.mode(hdr)
	} else {
		if strings.HasPrefix(base, whiteoutPrefix) {
			return u.whiteout(p, dir, base)
		}
		if hdr.Uid < 0 || hdr.Uid > maxID || hdr.Gid < 0 || hdr.Gid > maxID {
			return fmt.Errorf("entry %q: owner %d:%d is outside 0..%d: %w", quoteName(p), hdr.Uid, hdr.Gid, maxID, errdefs.ErrInvalidArgument)
		}
		if mode, err = u.mode(p, hdr); err != nil {
			return err
		}
		if xattrs, err = userXattrs(p, hdr); err != nil {
			return err
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		return u.dir(p, dir, base, hdr, mode, xattrs)
	}
	pfd, err := u.parent(p, dir)
	if err != nil {
		return err
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return u.regular(pfd, p, base, hdr, r, mode, xattrs)
	case tar.TypeSymlink:
		return u.symlink(pfd, p, base, hdr)
	case tar.TypeLink:
		return u.hardlink(pfd, p, base, hdr)
	case tar.TypeFifo:
		return u.fifo(pfd, p, base, hdr, mode)
	case tar.TypeChar, tar.TypeBlock:
		return fmt.Errorf("entry %q: device nodes are not allowed in layers: %w", quoteName(p), errdefs.ErrPermissionDenied)
	default:
		return fmt.Errorf("entry %q: unsupported tar entry type %q: %w", quoteName(p), hdr.Typeflag, errdefs.ErrInvalidArgument)
	}
}

// mode returns the permission bits for an entry, enforcing the set-id
// policy.
func (u *unpacker) mode(p string, hdr *tar.Header) (uint32, error) {
	m := uint32(hdr.Mode) & 0o7777
	if hdr.Typeflag == tar.TypeDir {
		return m &^ unix.S_ISUID, nil
	}
	if setid := m & (unix.S_ISUID | unix.S_ISGID); setid != 0 && !u.opts.AllowSetuid {
		if !u.opts.StripSetuid {
			return 0, fmt.Errorf("entry %q: set-user-ID and set-group-ID files are not allowed: %w", quoteName(p), errdefs.ErrPermissionDenied)
		}
		m &^= setid
	}
	return m, nil
}

// userXattrs returns the entry's extended attributes of the user
// namespace, except user.overlay.*, which overlayfs would interpret.
// Other namespaces (security.capability, trusted.*) are dropped.
func userXattrs(p string, hdr *tar.Header) (map[string]string, error) {
	var out map[string]string
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !strings.HasPrefix(name, "user.") || strings.HasPrefix(name, "user.overlay.") {
			continue
		}
		if len(out) >= maxXattrs || len(v) > maxXattrValue || len(name) > maxNameLen || strings.IndexByte(name, 0) >= 0 {
			return nil, fmt.Errorf("entry %q: extended attributes over the limits: %w", quoteName(p), errdefs.ErrInvalidArgument)
		}
		if out == nil {
			out = make(map[string]string)
		}
		out[name] = v
	}
	return out, nil
}

// whiteout turns an OCI whiteout entry into its overlayfs form.
func (u *unpacker) whiteout(p, dir, base string) error {
	if base == whiteoutOpaque {
		fd, err := u.openDir(p, dir, true)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		err = unix.Fsetxattr(fd, OpaqueXattr, []byte("y"), 0)
		if errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("entry %q: the template store's file system has no user extended attributes, needed for opaque directories: %w", quoteName(p), errdefs.ErrNotSupported)
		}
		if err != nil {
			return fmt.Errorf("entry %q: mark directory opaque: %v: %w", quoteName(p), err, errdefs.ErrInternal)
		}
		return nil
	}
	if strings.HasPrefix(base, whiteoutMeta) {
		return nil // other AUFS metadata (.wh..wh.plnk, ...): ignored
	}
	name := base[len(whiteoutPrefix):]
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("entry %q: invalid whiteout: %w", quoteName(p), errdefs.ErrInvalidArgument)
	}
	pfd, err := u.parent(p, dir)
	if err != nil {
		return err
	}
	// An overlayfs whiteout is a character device 0:0 owned by root.
	return u.create(pfd, p, name, func() error {
		return unix.Mknodat(pfd, name, unix.S_IFCHR, 0)
	})
}

// dir creates (or keeps) a directory and records its metadata.
func (u *unpacker) dir(p, dir, base string, hdr *tar.Header, mode uint32, xattrs map[string]string) error {
	if p != "" {
		pfd, err := u.parent(p, dir)
		if err != nil {
			return err
		}
		err = unix.Mkdirat(pfd, base, 0o700)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if err = unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
				err = u.create(pfd, p, base, func() error { return unix.Mkdirat(pfd, base, 0o700) })
			}
		}
		if err != nil {
			return fmt.Errorf("entry %q: %w", quoteName(p), u.pathError(err))
		}
	}
	if _, ok := u.dirs[p]; !ok {
		u.dirOrder = append(u.dirOrder, p)
	}
	u.dirs[p] = dirMeta{mode: mode, uid: hdr.Uid, gid: hdr.Gid, atime: hdr.AccessTime, mtime: hdr.ModTime, xattrs: xattrs}
	return nil
}

// regular writes a regular file.
func (u *unpacker) regular(pfd int, p, base string, hdr *tar.Header, r io.Reader, mode uint32, xattrs map[string]string) error {
	if hdr.Size < 0 || hdr.Size > u.lim.MaxBytes-u.written {
		return &LimitError{Msg: fmt.Sprintf("layer files are larger than the %d-byte limit", u.lim.MaxBytes)}
	}
	u.written += hdr.Size
	var fd int
	err := u.create(pfd, p, base, func() error {
		var err error
		fd, err = unix.Openat(pfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		return err
	})
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), base)
	defer f.Close()
	w := &fileWriter{f: f}
	n, err := io.CopyBuffer(w, r, u.buf)
	u.st.bytes += n
	switch {
	case w.err != nil:
		return fmt.Errorf("entry %q: write: %w", quoteName(p), u.pathError(w.err))
	case err != nil && u.tree != nil && errdefs.Class(err) == errdefs.ErrInternal:
		return u.tree.badTar(err) // a short archive
	case err != nil && errdefs.Class(err) == errdefs.ErrInternal:
		// A short or corrupt archive.
		return fmt.Errorf("entry %q: %v: %w", quoteName(p), err, errdefs.ErrInvalidArgument)
	case err != nil:
		return fmt.Errorf("entry %q: %w", quoteName(p), err)
	}
	if u.tree == nil {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return fmt.Errorf("entry %q: chown: %w", quoteName(p), err)
		}
	}
	// After chown, which clears set-id bits.
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("entry %q: chmod: %w", quoteName(p), err)
	}
	if err := setXattrs(fd, p, xattrs); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("entry %q: %w", quoteName(p), err)
	}
	if u.tree != nil {
		return nil
	}
	return u.times(pfd, p, base, hdr.AccessTime, hdr.ModTime)
}

// symlink creates a symbolic link. Its target is stored as is and never
// followed here; inside the sandbox it resolves within the sandbox root.
func (u *unpacker) symlink(pfd int, p, base string, hdr *tar.Header) error {
	t := hdr.Linkname
	if t == "" || len(t) > maxLinkTarget || strings.IndexByte(t, 0) >= 0 {
		return fmt.Errorf("entry %q: invalid symlink target: %w", quoteName(p), errdefs.ErrInvalidArgument)
	}
	if err := u.create(pfd, p, base, func() error { return unix.Symlinkat(t, pfd, base) }); err != nil {
		return err
	}
	if u.tree != nil {
		return nil
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("entry %q: chown: %w", quoteName(p), err)
	}
	return u.times(pfd, p, base, hdr.AccessTime, hdr.ModTime)
}

// hardlink links to an entry extracted earlier from the same layer.
func (u *unpacker) hardlink(pfd int, p, base string, hdr *tar.Header) error {
	target, err := cleanEntryPath(hdr.Linkname, u.lim.MaxPathLen)
	if err != nil || target == "" {
		return fmt.Errorf("entry %q: hard link target %q is outside the layer: %w", quoteName(p), quoteName(hdr.Linkname), errdefs.ErrInvalidArgument)
	}
	if target == p {
		return fmt.Errorf("entry %q: hard link to itself: %w", quoteName(p), errdefs.ErrInvalidArgument)
	}
	tdir, tbase := splitPath(target)
	tfd := u.root
	if tdir != "" {
		tfd, err = u.resolve(tdir, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("entry %q: hard link target %q is not in %s: %w", quoteName(p), quoteName(target), u.where(), errdefs.ErrInvalidArgument)
		}
		defer unix.Close(tfd)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("entry %q: hard link target %q is not in %s: %w", quoteName(p), quoteName(target), u.where(), errdefs.ErrInvalidArgument)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR, unix.S_IFCHR, unix.S_IFBLK:
		return fmt.Errorf("entry %q: hard link target %q is not a file: %w", quoteName(p), quoteName(target), errdefs.ErrInvalidArgument)
	}
	var cur unix.Stat_t
	if unix.Fstatat(pfd, base, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil && cur.Dev == st.Dev && cur.Ino == st.Ino {
		return nil // already this link
	}
	return u.create(pfd, p, base, func() error { return unix.Linkat(tfd, tbase, pfd, base, 0) })
}

// fifo creates a named pipe.
func (u *unpacker) fifo(pfd int, p, base string, hdr *tar.Header, mode uint32) error {
	if err := u.create(pfd, p, base, func() error { return unix.Mknodat(pfd, base, unix.S_IFIFO|0o600, 0) }); err != nil {
		return err
	}
	if err := unix.Fchownat(pfd, base, hdr.Uid, hdr.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("entry %q: chown: %w", quoteName(p), err)
	}
	// base is the fifo just made and nothing else writes here, so
	// following it (fchmodat has no working no-follow flag) is safe.
	if err := unix.Fchmodat(pfd, base, mode, 0); err != nil {
		return fmt.Errorf("entry %q: chmod: %w", quoteName(p), err)
	}
	return u.times(pfd, p, base, hdr.AccessTime, hdr.ModTime)
}

// where names what is unpacked, for messages: "this layer", or the tree.
func (u *unpacker) where() string {
	if u.tree != nil {
		return "the " + u.tree.opts.Name
	}
	return "this layer"
}

// create runs mk, which makes base in pfd; if base exists, the existing
// entry is removed first (a later tar entry replaces an earlier one),
// unless a tree's policy refuses that (treePolicy.replace).
func (u *unpacker) create(pfd int, p, base string, mk func() error) error {
	err := mk()
	if errors.Is(err, unix.EEXIST) {
		if u.tree != nil {
			var st unix.Stat_t
			isDir := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR
			if err := u.tree.replace(p, isDir); err != nil {
				return err
			}
		}
		if err = u.removeAt(pfd, p, base); err == nil {
			err = mk()
		}
	}
	if err != nil {
		return fmt.Errorf("entry %q: %w", quoteName(p), u.pathError(err))
	}
	return nil
}

// removeAt removes the entry p, which is name in dfd, and for a directory
// everything below it, without following symlinks.
func (u *unpacker) removeAt(dfd int, p, name string) error {
	if u.cacheDir == p || strings.HasPrefix(u.cacheDir, p+"/") {
		u.dropCache() // dfd is p's parent, so never the cached descriptor
	}
	return removeAt(dfd, name)
}

func removeAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	fd, err := unix.Openat2(dfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: resolveBeneath,
	})
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	names, err := d.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil {
				break
			}
		}
	}
	d.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
}

// parent returns a descriptor of the directory dir (relative to the layer
// root), creating missing directories with mode 0755. The descriptor is
// cached and must not be closed by the caller.
func (u *unpacker) parent(p, dir string) (int, error) {
	if dir == "" {
		return u.root, nil
	}
	if u.cacheFD >= 0 && u.cacheDir == dir {
		return u.cacheFD, nil
	}
	fd, err := u.resolve(dir, unix.O_PATH|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) {
		fd, err = u.mkdirAll(dir)
	}
	if err != nil {
		return -1, fmt.Errorf("entry %q: %w", quoteName(p), u.pathError(err))
	}
	u.dropCache()
	u.cacheDir, u.cacheFD = dir, fd
	return fd, nil
}

// openDir opens the directory p for reading (to set attributes), creating
// it and its parents if create is set.
func (u *unpacker) openDir(p, dir string, create bool) (int, error) {
	if dir == "" {
		fd, err := unix.Openat(u.root, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("entry %q: %w", quoteName(p), err)
		}
		return fd, nil
	}
	fd, err := u.resolve(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if errors.Is(err, unix.ENOENT) && create {
		var pfd int
		if pfd, err = u.mkdirAll(dir); err == nil {
			unix.Close(pfd)
			fd, err = u.resolve(dir, unix.O_RDONLY|unix.O_DIRECTORY)
		}
	}
	if err != nil {
		return -1, fmt.Errorf("entry %q: %w", quoteName(p), u.pathError(err))
	}
	return fd, nil
}

// resolve opens p inside the layer without following any symlink.
func (u *unpacker) resolve(p string, flags int) (int, error) {
	return unix.Openat2(u.root, p, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_NOFOLLOW | unix.O_CLOEXEC),
		Resolve: resolveInLayer,
	})
}

// mkdirAll creates dir and its missing parents one component at a time
// (mode 0755, or as a tree's policy says) and returns an O_PATH
// descriptor of it.
func (u *unpacker) mkdirAll(dir string) (int, error) {
	mode := uint32(0o755)
	if u.tree != nil {
		mode = u.tree.parentMode()
	}
	cur := u.root
	for _, part := range strings.Split(dir, "/") {
		how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolveBeneath}
		fd, err := unix.Openat2(cur, part, how)
		if errors.Is(err, unix.ENOENT) {
			if err = unix.Mkdirat(cur, part, mode); err == nil {
				// Exact mode, whatever the umask. part is the directory
				// just made, and nothing else writes here.
				err = unix.Fchmodat(cur, part, mode, 0)
			}
			if err == nil {
				fd, err = unix.Openat2(cur, part, how)
			}
		}
		if cur != u.root {
			unix.Close(cur)
		}
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

func (u *unpacker) dropCache() {
	if u.cacheFD >= 0 {
		unix.Close(u.cacheFD)
	}
	u.cacheFD, u.cacheDir = -1, ""
}

// times sets access and modification times of base without following a
// symlink. A zero access time takes the modification time.
func (u *unpacker) times(pfd int, p, base string, atime, mtime time.Time) error {
	if mtime.IsZero() {
		return nil
	}
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	if err := unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("entry %q: set times: %w", quoteName(p), err)
	}
	return nil
}

// finish applies the recorded directory metadata. A directory that a
// later entry replaced is skipped.
func (u *unpacker) finish() error {
	u.dropCache()
	for _, p := range u.dirOrder {
		m := u.dirs[p]
		dir, base := splitPath(p)
		pfd := u.root
		if p == "" {
			base = "."
		} else if dir != "" {
			fd, err := u.resolve(dir, unix.O_PATH|unix.O_DIRECTORY)
			if err != nil {
				continue
			}
			pfd = fd
		}
		err := u.applyDir(pfd, p, base, m)
		if pfd != u.root {
			unix.Close(pfd)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (u *unpacker) applyDir(pfd int, p, base string, m dirMeta) error {
	fd, err := unix.Openat2(pfd, base, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: resolveBeneath,
	})
	if err != nil {
		return nil // replaced by a later entry
	}
	defer unix.Close(fd)
	if u.tree != nil {
		if err := unix.Fchmod(fd, m.mode); err != nil {
			return fmt.Errorf("entry %q: chmod: %w", quoteName(p), u.pathError(err))
		}
		return nil
	}
	if err := unix.Fchown(fd, m.uid, m.gid); err != nil {
		return fmt.Errorf("entry %q: chown: %w", quoteName(p), err)
	}
	if err := unix.Fchmod(fd, m.mode); err != nil {
		return fmt.Errorf("entry %q: chmod: %w", quoteName(p), err)
	}
	if err := setXattrs(fd, p, m.xattrs); err != nil {
		return err
	}
	return u.times(pfd, p, base, m.atime, m.mtime)
}

// setXattrs sets extended attributes on fd. A file system without user
// attributes drops them silently.
func setXattrs(fd int, p string, xattrs map[string]string) error {
	for k, v := range xattrs {
		err := unix.Fsetxattr(fd, k, []byte(v), 0)
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("entry %q: set attribute: %v: %w", quoteName(p), err, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// pathError classifies errors of lookups and writes inside the layer. A
// tree's failures are the stream's fault (invalid argument) unless the
// disk is full.
func (u *unpacker) pathError(err error) error {
	if u.tree == nil {
		return pathError(err)
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return fmt.Errorf("no space left for the %s: %w", u.tree.opts.Name, errdefs.ErrResourceExhausted)
	}
	if pe := pathError(err); errdefs.Class(pe) != errdefs.ErrInternal {
		return pe
	}
	return u.tree.invalid("could not be unpacked: %v", err)
}

// pathError classifies errors of lookups inside the layer.
func pathError(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("a parent is a symlink or not a directory (writing through symlinks is not allowed): %w", errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.EXDEV):
		return fmt.Errorf("path leaves the layer: %w", errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.ENAMETOOLONG):
		return fmt.Errorf("name too long: %w", errdefs.ErrInvalidArgument)
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return fmt.Errorf("no space left for the layer: %w", errdefs.ErrResourceExhausted)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("openat2 is not available (Linux 5.6 or later is required): %w", errdefs.ErrNotSupported)
	}
	return fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
}

// fileWriter writes to f and keeps the write error apart from read
// errors. It also hides os.File's ReadFrom so io.CopyBuffer uses its
// buffer.
type fileWriter struct {
	f   *os.File
	err error
}

func (w *fileWriter) Write(p []byte) (int, error) {
	n, err := w.f.Write(p)
	if err != nil {
		w.err = err
	}
	return n, err
}
