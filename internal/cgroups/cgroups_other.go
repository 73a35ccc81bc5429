//go:build !linux

package cgroups

import (
	"fmt"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Detect reports that cgroups exist only on Linux.
func Detect() (Version, error) {
	return 0, fmt.Errorf("cgroups: %s: %w", runtime.GOOS, errdefs.ErrNotSupported)
}
