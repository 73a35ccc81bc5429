// Package fsutil holds the file writes the daemon's state relies on
// across crashes: a new file (a key, a signing key, a CA) appears whole or
// not at all, and never replaces one that exists.
package fsutil

import (
	"os"
	"path/filepath"
)

// WriteNew creates path with data and mode perm, without replacing an
// existing file: data is written to a temporary file beside it, synced,
// and hard-linked into place (os.ErrExist if path exists, whoever won the
// race), then the directory is synced. A crash leaves either no file or a
// whole one. The returned error wraps the os error.
func WriteNew(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, path)
	}
	if err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
