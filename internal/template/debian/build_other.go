//go:build !linux

package debian

import (
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Build creates the Debian root filesystem o describes at o.Target. It is
// only supported on Linux.
func Build(ctx context.Context, o Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	return fmt.Errorf("debian: building root filesystems: %w", errdefs.ErrNotSupported)
}
