//go:build !linux

package layers

import (
	"archive/tar"
	"context"
	"fmt"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// OpaqueXattr marks a directory as opaque for overlayfs mounted with the
// userxattr option.
const OpaqueXattr = "user.overlay.opaque"

// unpack needs openat2 and overlayfs: Linux only.
func unpack(ctx context.Context, dir string, tr *tar.Reader, opts ExtractOptions, lim Limits, tree *treePolicy) (unpackStats, error) {
	return unpackStats{}, fmt.Errorf("layer extraction: %w", errdefs.ErrNotSupported)
}
