// Package fsutil holds the file writes the daemon's state relies on
// across crashes: a new file (a key, a signing key, a CA) appears whole or
// not at all, and never replaces one that exists (WriteNew); a file that
// is replaced (the in-sandbox libraries) is seen whole, old or new
// (Replace).
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
	return write(path, data, perm, os.Link)
}

// Replace puts data at path with mode perm, replacing what is there
// atomically: data is written to a temporary file beside it, synced and
// renamed into place, then the directory is synced. A reader sees the
// old file or the new one whole, never a mix. The returned error wraps
// the os error.
func Replace(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, os.Rename)
}

// write writes data to a synced temporary file beside path, puts it in
// place with place (os.Link or os.Rename) and syncs the directory.
func write(path string, data []byte, perm os.FileMode, place func(tmp, path string) error) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
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
		err = place(tmp, path)
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
