package layers

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// renameNoReplace renames oldpath to newpath, failing with an error that
// wraps ErrAlreadyExists when newpath exists.
func renameNoReplace(oldpath, newpath string) error {
	err := unix.Renameat2(unix.AT_FDCWD, oldpath, unix.AT_FDCWD, newpath, unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EEXIST) || errors.Is(err, unix.ENOTEMPTY) {
		return fmt.Errorf("rename: %w", errdefs.ErrAlreadyExists)
	}
	return err
}

// syncFS flushes the file system holding dir to disk: one call for the
// thousands of files a layer may have.
func syncFS(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}
