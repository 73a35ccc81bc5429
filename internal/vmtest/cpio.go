//go:build linux

package vmtest

import (
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// cpioWriter writes a cpio archive in the "newc" format, the one the kernel
// unpacks as an initramfs. Entries are owned by root; every directory is
// written before the entries under it (the kernel does not create parents).
type cpioWriter struct {
	w    io.Writer
	ino  uint32
	seen map[string]bool
	err  error
}

func newCpioWriter(w io.Writer) *cpioWriter {
	return &cpioWriter{w: w, ino: 300000, seen: map[string]bool{}}
}

// Mode bits of a newc header (those of stat(2)).
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioChar    = 0o020000
)

// cpioName turns an absolute guest path into the archive's relative name.
func cpioName(p string) (string, error) {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("vmtest: guest path %q must be absolute and clean: %w", p, errdefs.ErrInvalidArgument)
	}
	return strings.TrimPrefix(p, "/"), nil
}

func (c *cpioWriter) header(name string, mode uint32, size int64, rdevMajor, rdevMinor uint32) error {
	if c.err != nil {
		return c.err
	}
	if size > 0xffffffff {
		c.err = fmt.Errorf("vmtest: %s: %d bytes is too large for an initramfs entry: %w", name, size, errdefs.ErrInvalidArgument)
		return c.err
	}
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	h := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	buf := make([]byte, 0, len(h)+len(name)+4)
	buf = append(buf, h...)
	buf = append(buf, name...)
	buf = append(buf, 0)
	buf = append(buf, make([]byte, pad4(len(buf)))...)
	_, c.err = c.w.Write(buf)
	return c.err
}

func pad4(n int) int { return (4 - n%4) % 4 }

// parents writes the directories above name that are not written yet.
func (c *cpioWriter) parents(name string) error {
	dir := path.Dir(name)
	if dir == "." || c.seen[dir] {
		return c.err
	}
	return c.Dir(dir, 0o755)
}

// Dir writes a directory (name relative, as cpioName gives).
func (c *cpioWriter) Dir(name string, perm fs.FileMode) error {
	if c.seen[name] {
		return c.err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	c.seen[name] = true
	return c.header(name, cpioDir|uint32(perm.Perm()), 0, 0, 0)
}

// Symlink writes a symbolic link to target.
func (c *cpioWriter) Symlink(name, target string) error {
	if err := c.claim(name); err != nil {
		return err
	}
	if err := c.header(name, cpioSymlink|0o777, int64(len(target)), 0, 0); err != nil {
		return err
	}
	return c.data(strings.NewReader(target), int64(len(target)))
}

// CharDev writes a character device node.
func (c *cpioWriter) CharDev(name string, perm fs.FileMode, major, minor uint32) error {
	if err := c.claim(name); err != nil {
		return err
	}
	return c.header(name, cpioChar|uint32(perm.Perm()), 0, major, minor)
}

// File writes a regular file of size bytes read from r. perm keeps the
// setuid, setgid and sticky bits.
func (c *cpioWriter) File(name string, perm fs.FileMode, size int64, r io.Reader) error {
	if err := c.claim(name); err != nil {
		return err
	}
	mode := uint32(perm.Perm())
	if perm&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if perm&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if perm&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	if err := c.header(name, cpioFile|mode, size, 0, 0); err != nil {
		return err
	}
	return c.data(r, size)
}

// claim refuses a second entry of one name: the kernel would let the later
// one win, which hides a mistake.
func (c *cpioWriter) claim(name string) error {
	if c.err != nil {
		return c.err
	}
	if c.seen[name] {
		c.err = fmt.Errorf("vmtest: /%s is in the initramfs twice: %w", name, errdefs.ErrAlreadyExists)
		return c.err
	}
	if err := c.parents(name); err != nil {
		return err
	}
	c.seen[name] = true
	return nil
}

func (c *cpioWriter) data(r io.Reader, size int64) error {
	n, err := io.Copy(c.w, io.LimitReader(r, size))
	if err == nil && n != size {
		err = fmt.Errorf("vmtest: short entry: %d of %d bytes: %w", n, size, errdefs.ErrUnavailable)
	}
	if err != nil {
		c.err = err
		return err
	}
	_, c.err = c.w.Write(make([]byte, pad4(int(size%4))))
	return c.err
}

// Close writes the trailer; it does not close the underlying writer.
func (c *cpioWriter) Close() error {
	if err := c.header("TRAILER!!!", 0, 0, 0, 0); err != nil {
		return err
	}
	return nil
}
