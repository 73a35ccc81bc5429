package debian

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// maxID is the highest uid or gid a file of the tree may have: sandboxes
// map 65536 ids.
const maxID = 65535

// etcFiles replace what the build copied from the host: no host name,
// no host resolver configuration (the runtime decides the network).
var etcFiles = []struct{ name, content string }{
	{"etc/hostname", "sandbox\n"},
	{"etc/hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"},
	{"etc/resolv.conf", ""},
}

// cacheDirs are emptied of files (directories inside them are emptied
// too, but kept): apt's package cache and package lists.
var cacheDirs = []string{"var/cache/apt/archives", "var/cache/apt", "var/lib/apt/lists"}

// treeStats counts a finished tree.
type treeStats struct {
	entries int
	bytes   int64
}

// finish turns a fresh mmdebstrap tree into an Airlock root filesystem:
// caches emptied, device nodes under dev/ removed, host files replaced,
// the sandbox account added, and every entry checked for ownership in
// 0..65535.
func finish(ctx context.Context, rootfs string) (treeStats, error) {
	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return treeStats{}, fmt.Errorf("debian: %w", stripPath(err))
	}
	defer root.Close()
	for _, d := range cacheDirs {
		if err := emptyDir(root, d); err != nil {
			return treeStats{}, fmt.Errorf("debian: cleaning %s: %w", d, stripPath(err))
		}
	}
	for _, f := range etcFiles {
		if err := replaceFile(root, f.name, []byte(f.content), 0o644); err != nil {
			return treeStats{}, fmt.Errorf("debian: writing %s: %w", f.name, stripPath(err))
		}
	}
	if err := addSandboxUser(root); err != nil {
		return treeStats{}, err
	}
	if err := os.Chmod(rootfs, 0o755); err != nil {
		return treeStats{}, fmt.Errorf("debian: %w", stripPath(err))
	}
	return checkTree(ctx, rootfs)
}

// emptyDir removes the files and symlinks in dir (relative to root) and
// in its subdirectories, keeping the directories and apt's lock files.
// A missing dir is fine.
func emptyDir(root *os.Root, dir string) error {
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, e := range ents {
		p := path.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if err := emptyDir(root, p); err != nil {
				return err
			}
		case e.Name() == "lock":
		default:
			if err := root.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
	}
	return nil
}

// replaceFile writes name (relative to root) afresh with content, whatever
// was there before (a symlink is replaced, not followed).
func replaceFile(root *os.Root, name string, content []byte, perm fs.FileMode) error {
	if err := root.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, err = f.Write(content)
	if err == nil {
		err = f.Chmod(perm)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readRegular reads name (relative to root) if it is a regular file; a
// missing file reads as (nil, false, nil).
func readRegular(root *os.Root, name string) ([]byte, fs.FileMode, bool, error) {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, err
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, false, fmt.Errorf("%s is not a regular file: %w", name, errdefs.ErrFailedPrecondition)
	}
	if fi.Size() > maxAccountFileBytes {
		return nil, 0, false, fmt.Errorf("%s is too large: %w", name, errdefs.ErrFailedPrecondition)
	}
	b, err := root.ReadFile(name)
	return b, fi.Mode().Perm(), true, err
}

// addSandboxUser makes sure the tree has the account `user` (uid 1000,
// gid 1000, home /home/user) and its home directory.
func addSandboxUser(root *os.Root) error {
	shell := "/bin/sh"
	if fi, err := root.Stat("bin/bash"); err == nil && fi.Mode().IsRegular() {
		shell = "/bin/bash"
	}
	files := []struct {
		name     string
		required bool
		edit     func(string, []byte) ([]byte, error)
	}{
		{"etc/passwd", true, func(n string, b []byte) ([]byte, error) {
			return ensureAccount(n, b, account.SandboxName, account.SandboxUID, passwdLine(shell))
		}},
		{"etc/group", true, func(n string, b []byte) ([]byte, error) {
			return ensureAccount(n, b, account.SandboxName, account.SandboxGID, groupLine())
		}},
		{"etc/shadow", false, func(n string, b []byte) ([]byte, error) {
			return ensureShadow(n, b, account.SandboxName, shadowLine())
		}},
		{"etc/gshadow", false, func(n string, b []byte) ([]byte, error) {
			return ensureShadow(n, b, account.SandboxName, gshadowLine())
		}},
	}
	for _, f := range files {
		old, perm, ok, err := readRegular(root, f.name)
		if err != nil {
			return fmt.Errorf("debian: %w", stripPath(err))
		}
		if !ok {
			if f.required {
				return fmt.Errorf("debian: the tree has no %s: %w", f.name, errdefs.ErrFailedPrecondition)
			}
			continue
		}
		updated, err := f.edit(f.name, old)
		if err != nil {
			return err
		}
		if len(updated) == len(old) {
			continue
		}
		// Keep the owner mmdebstrap gave (shadow is root:shadow).
		fi, err := root.Lstat(f.name)
		if err != nil {
			return fmt.Errorf("debian: %w", stripPath(err))
		}
		st := fi.Sys().(*syscall.Stat_t)
		if err := replaceFile(root, f.name, updated, perm); err != nil {
			return fmt.Errorf("debian: writing %s: %w", f.name, stripPath(err))
		}
		if err := root.Lchown(f.name, int(st.Uid), int(st.Gid)); err != nil {
			return fmt.Errorf("debian: %w", stripPath(err))
		}
	}
	home := strings.TrimPrefix(account.SandboxHome, "/")
	if err := root.MkdirAll(home, 0o755); err != nil {
		return fmt.Errorf("debian: creating %s: %w", account.SandboxHome, stripPath(err))
	}
	fi, err := root.Lstat(home)
	if err != nil {
		return fmt.Errorf("debian: %w", stripPath(err))
	}
	if !fi.IsDir() {
		return fmt.Errorf("debian: %s is not a directory: %w", account.SandboxHome, errdefs.ErrFailedPrecondition)
	}
	if err := root.Chmod(home, 0o755); err != nil {
		return fmt.Errorf("debian: %w", stripPath(err))
	}
	if err := root.Lchown(home, account.SandboxUID, account.SandboxGID); err != nil {
		return fmt.Errorf("debian: %w", stripPath(err))
	}
	return nil
}

// checkTree walks rootfs: device nodes, fifos and sockets under dev/ are
// removed (the runtime provides /dev), anywhere else they are an error, as
// is any entry owned by a uid or gid above 65535.
func checkTree(ctx context.Context, rootfs string) (treeStats, error) {
	var st treeStats
	err := filepath.WalkDir(rootfs, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(rootfs, p)
		rel = filepath.ToSlash(rel)
		if err != nil {
			return fmt.Errorf("debian: checking %s: %w", rel, stripPath(err))
		}
		if st.entries%1024 == 0 {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("debian: build canceled: %w", errdefs.ErrCanceled)
			}
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("debian: checking %s: %w", rel, stripPath(err))
		}
		sys, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return fmt.Errorf("debian: %s: no ownership information: %w", rel, errdefs.ErrInternal)
		}
		if sys.Uid > maxID || sys.Gid > maxID {
			return fmt.Errorf("debian: %s is owned by %d:%d, outside 0..%d: %w", rel, sys.Uid, sys.Gid, maxID, errdefs.ErrFailedPrecondition)
		}
		if info.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			if strings.HasPrefix(rel, "dev/") {
				if err := os.Remove(p); err != nil {
					return fmt.Errorf("debian: removing %s: %w", rel, stripPath(err))
				}
				return nil
			}
			return fmt.Errorf("debian: %s is a special file: %w", rel, errdefs.ErrFailedPrecondition)
		}
		st.entries++
		if info.Mode().IsRegular() {
			st.bytes += info.Size()
		}
		return nil
	})
	return st, err
}

// removeTree deletes a build directory. It first makes sure nothing is
// mounted below it (mmdebstrap's mounts live in its own mount namespace,
// so normally nothing is); a tree with a mount inside is left alone
// rather than deleting through the mount.
func removeTree(dir string) error {
	mounted, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mounted) > 0 {
		return fmt.Errorf("debian: build directory still has %d mounts; not removing it: %w", len(mounted), errdefs.ErrFailedPrecondition)
	}
	return os.RemoveAll(dir)
}

// mountsUnder lists the mount points at or below dir in this process's
// mount namespace.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// unescapeMountPath undoes mountinfo's octal escapes (\040 for space...).
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			v := 0
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + int(c-'0')
			}
			if ok {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// stripPath drops the host path from an os error, keeping its cause
// (messages reach users and must not name host paths).
func stripPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		return le.Err
	}
	return err
}
