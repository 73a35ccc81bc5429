//go:build !linux

package layers

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// renameNoReplace renames oldpath to newpath unless newpath exists (not
// atomic off Linux).
func renameNoReplace(oldpath, newpath string) error {
	if _, err := os.Lstat(newpath); err == nil {
		return fmt.Errorf("rename: %w", errdefs.ErrAlreadyExists)
	}
	return os.Rename(oldpath, newpath)
}

// syncFS is a no-op off Linux.
func syncFS(string) error { return nil }
