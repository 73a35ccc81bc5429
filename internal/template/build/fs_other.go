//go:build !linux

package build

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Building templates needs Linux (openat2 lookups in layers, sandboxes);
// elsewhere every file system helper fails.

var errNotLinux = fmt.Errorf("building templates: %w", errdefs.ErrNotSupported)

func statInLayer(root, rel string) (fileStat, error)     { return fileStat{}, errNotLinux }
func opaqueInLayer(root, rel string) bool                { return false }
func readlinkInLayer(root, rel string) (string, error)   { return "", errNotLinux }
func openFileInLayer(root, rel string) (*os.File, error) { return nil, errNotLinux }
func lstatHost(p string) (fileStat, error)               { return fileStat{}, errNotLinux }

// oNoFollow is unused off Linux.
const oNoFollow = 0
