package layers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Lease pins layers while the template that will use them is assembled:
// a pinned layer is not deleted by Remove, Put or Prune even if no
// template references it yet. Release it once the manifest is saved
// (or the work abandoned). A Lease is safe for concurrent use.
type Lease struct {
	s        *Store
	held     map[string]bool // guarded by s.mu
	released bool            // guarded by s.mu
}

// NewLease returns an empty lease.
func (s *Store) NewLease() *Lease {
	return &Lease{s: s, held: make(map[string]bool)}
}

// pinLocked pins diffID; s.mu must be held.
func (l *Lease) pinLocked(diffID string) {
	if !l.held[diffID] {
		l.held[diffID] = true
		l.s.pins[diffID]++
	}
}

// Has reports whether the store holds the layer diffID, and pins it when
// it does.
func (l *Lease) Has(diffID string) (bool, error) {
	if _, err := ParseDiffID(diffID); err != nil {
		return false, err
	}
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.released {
		return false, fmt.Errorf("lease already released: %w", errdefs.ErrFailedPrecondition)
	}
	if _, ok := s.layers[diffID]; !ok {
		return false, nil
	}
	l.pinLocked(diffID)
	return true, nil
}

// Release unpins the lease's layers. Layers that no template references
// stay on disk (a retried import reuses them) until Prune. Release is
// idempotent.
func (l *Lease) Release() {
	s := l.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if l.released {
		return
	}
	l.released = true
	for d := range l.held {
		if s.pins[d]--; s.pins[d] <= 0 {
			delete(s.pins, d)
		}
	}
}

// Extract unpacks the layer tar stream r (plain, gzip or zstd) into the
// store and pins it. With opts.DiffID set and the layer already stored
// (or being extracted by another call), r is not read at all.
//
// The layer is written to a temporary directory and moved into place
// only after its digest is verified; on any error the temporary
// directory is removed and nothing else has changed. Rules, each
// violation failing the extraction with a clear error:
//   - entry names are relative, without "..", and under Limits.MaxPathLen;
//   - no entry is written through a symlink (every parent is resolved
//     inside the layer with openat2 and RESOLVE_NO_SYMLINKS), so symlink
//     escapes and races are impossible; symlinks themselves are stored
//     as they are and resolve inside the sandbox root at run time;
//   - hard links point to entries extracted earlier from the same layer;
//   - no device nodes; fifos are allowed;
//   - no set-user-ID or set-group-ID files unless opts allow them;
//   - owners within 0..65535;
//   - at most Limits.MaxBytes uncompressed bytes and Limits.MaxFiles
//     entries (ErrResourceExhausted).
//
// OCI whiteouts become overlayfs whiteouts: ".wh.NAME" a character device
// 0:0 named NAME, ".wh..wh..opq" the xattr user.overlay.opaque=y on its
// directory. Modes, owners, times and user.* xattrs (except
// user.overlay.*) are kept.
func (l *Lease) Extract(ctx context.Context, r io.Reader, opts ExtractOptions) (LayerInfo, error) {
	s := l.s
	if want := opts.DiffID; want != "" {
		if _, err := ParseDiffID(want); err != nil {
			return LayerInfo{}, err
		}
		for {
			s.mu.Lock()
			if l.released {
				s.mu.Unlock()
				return LayerInfo{}, fmt.Errorf("lease already released: %w", errdefs.ErrFailedPrecondition)
			}
			if info, ok := s.layers[want]; ok {
				l.pinLocked(want)
				s.mu.Unlock()
				return info, nil
			}
			ch, busy := s.inflight[want]
			if !busy {
				s.inflight[want] = make(chan struct{})
				s.mu.Unlock()
				break
			}
			s.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return LayerInfo{}, ctxError(ctx.Err())
			}
		}
		defer func() {
			s.mu.Lock()
			close(s.inflight[want])
			delete(s.inflight, want)
			s.mu.Unlock()
		}()
	}

	tmp, err := os.MkdirTemp(filepath.Join(s.root, tmpDir), "layer-")
	if err != nil {
		return LayerInfo{}, fmt.Errorf("layer: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			os.RemoveAll(tmp)
		}
	}()
	fsDir := filepath.Join(tmp, layerFS)
	if err := os.Mkdir(fsDir, 0o755); err != nil {
		return LayerInfo{}, fmt.Errorf("layer: %w", err)
	}
	if err := os.Chmod(fsDir, 0o755); err != nil {
		return LayerInfo{}, fmt.Errorf("layer: %w", err)
	}
	digest, st, err := extractTo(ctx, fsDir, r, opts)
	if err != nil {
		return LayerInfo{}, fmt.Errorf("layer %s: %w", shortDigest(opts.DiffID), err)
	}
	if opts.DiffID != "" && digest != opts.DiffID {
		return LayerInfo{}, fmt.Errorf("layer %s: content digest is %s, not the expected one: %w",
			shortDigest(opts.DiffID), shortDigest(digest), errdefs.ErrInvalidArgument)
	}
	info := LayerInfo{DiffID: digest, Size: st.bytes, Files: st.files, Created: time.Now().UTC()}
	meta, err := json.Marshal(info)
	if err != nil {
		return LayerInfo{}, fmt.Errorf("layer: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, layerMeta), meta, 0o644); err != nil {
		return LayerInfo{}, fmt.Errorf("layer: %w", err)
	}
	if err := os.Chmod(tmp, 0o711); err != nil {
		return LayerInfo{}, fmt.Errorf("layer: %w", err)
	}
	if err := syncFS(tmp); err != nil {
		return LayerInfo{}, fmt.Errorf("layer: sync: %w", err)
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if l.released {
		return LayerInfo{}, fmt.Errorf("lease already released: %w", errdefs.ErrFailedPrecondition)
	}
	if existing, ok := s.layers[digest]; ok {
		l.pinLocked(digest) // stored meanwhile by a call without DiffID
		return existing, nil
	}
	if err := renameNoReplace(tmp, s.layerDir(digest)); err != nil {
		return LayerInfo{}, fmt.Errorf("layer %s: store: %w", shortDigest(digest), err)
	}
	committed = true
	if err := syncDir(filepath.Join(s.root, layersDir)); err != nil {
		s.log.Warn("template store: sync layers directory", "err", err)
	}
	s.layers[digest] = info
	l.pinLocked(digest)
	return info, nil
}

// shortDigest abbreviates a digest for messages.
func shortDigest(d string) string {
	if d == "" {
		return "(unverified)"
	}
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
