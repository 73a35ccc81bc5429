package layers

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Limits cap what one layer may hold. Zero fields take the value from
// DefaultLimits.
type Limits struct {
	// MaxBytes caps the uncompressed tar stream (file contents plus tar
	// headers). A decompression bomb stops here.
	MaxBytes int64
	// MaxFiles caps the number of tar entries (files, directories,
	// links, whiteouts).
	MaxFiles int64
	// MaxPathLen caps the length of one entry name in bytes.
	MaxPathLen int
}

// DefaultLimits are the limits used for zero Limits fields.
var DefaultLimits = Limits{
	MaxBytes:   16 << 30,
	MaxFiles:   1_000_000,
	MaxPathLen: 4096,
}

// withDefaults fills zero fields from DefaultLimits.
func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultLimits.MaxBytes
	}
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultLimits.MaxFiles
	}
	if l.MaxPathLen <= 0 {
		l.MaxPathLen = DefaultLimits.MaxPathLen
	}
	return l
}

// ExtractOptions control how one layer is unpacked.
type ExtractOptions struct {
	// DiffID is the expected digest of the uncompressed tar stream
	// ("sha256:<hex>"). When set, a layer already in the store is reused
	// without reading the stream, and a stream with another digest is
	// rejected. When empty, the layer is stored under the digest it has.
	DiffID string
	// Limits cap the layer's size; zero fields take DefaultLimits.
	Limits Limits
	// AllowSetuid keeps set-user-ID and set-group-ID bits on files.
	// Without it (and without StripSetuid) a layer with such a file is
	// rejected. Set-group-ID on directories is always kept: it only makes
	// new entries inherit the directory's group.
	AllowSetuid bool
	// StripSetuid clears set-user-ID and set-group-ID bits on files
	// instead of rejecting the layer. Sandboxes mount their root with
	// nosuid, so the bits have no effect there anyway.
	StripSetuid bool
}

// Magic numbers of the compressed formats a layer may use.
var (
	gzipMagic = []byte{0x1f, 0x8b}
	zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}
)

// maxZstdWindow caps the memory a zstd layer may make the decoder use.
const maxZstdWindow = 128 << 20

// unpackStats counts what unpack wrote.
type unpackStats struct {
	files int64 // tar entries
	bytes int64 // bytes of regular file content
}

// extractTo unpacks the layer tar stream r (plain, gzip or zstd) into the
// empty directory dir and returns the digest of the uncompressed stream.
// The stream is read to its end so that the digest covers all of it.
func extractTo(ctx context.Context, dir string, r io.Reader, opts ExtractOptions) (string, unpackStats, error) {
	lim := opts.Limits.withDefaults()
	br := bufio.NewReaderSize(r, 64<<10)
	dr, closeDecompressor, err := decompress(br)
	if err != nil {
		return "", unpackStats{}, err
	}
	defer closeDecompressor()

	g := &guard{ctxErr: ctx.Err, r: dr, limit: lim.MaxBytes}
	h := sha256.New()
	hr := io.TeeReader(g, h)
	st, err := unpack(ctx, dir, tar.NewReader(hr), opts, lim, nil)
	if err != nil {
		return "", st, g.cause(err)
	}
	// Read what follows the end-of-archive marker (padding, usually) so
	// the digest covers the whole stream; the guard still caps it.
	if _, err := io.Copy(io.Discard, hr); err != nil {
		return "", st, g.cause(fmt.Errorf("read layer: %w", err))
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), st, nil
}

// decompress returns a reader of the uncompressed stream, detecting gzip
// and zstd by their magic numbers; anything else is read as a plain tar.
func decompress(br *bufio.Reader) (io.Reader, func(), error) {
	head, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, nil, fmt.Errorf("read layer: %w", err)
	}
	switch {
	case bytes.HasPrefix(head, gzipMagic):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, nil, fmt.Errorf("layer is not valid gzip: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		return zr, func() { zr.Close() }, nil
	case bytes.HasPrefix(head, zstdMagic):
		zr, err := zstd.NewReader(br,
			zstd.WithDecoderConcurrency(1),
			zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(maxZstdWindow),
			zstd.WithDecoderMaxMemory(1<<30))
		if err != nil {
			return nil, nil, fmt.Errorf("layer is not valid zstd: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		return zr, zr.Close, nil
	}
	return br, func() {}, nil
}

// guard caps the uncompressed stream at limit bytes and stops it when
// the import's context ends (ctxErr is its Err method). Its error is kept
// so that it wins over whatever the tar or decompression layers make of
// it. what names the stream in messages ("layer" when empty); over, if
// set, makes the error of a stream over limit.
type guard struct {
	ctxErr func() error
	r      io.Reader
	n      int64
	limit  int64
	what   string
	over   func(limit int64) error
	err    error
}

func (g *guard) Read(p []byte) (int, error) {
	if g.err != nil {
		return 0, g.err
	}
	if err := g.ctxErr(); err != nil {
		g.err = ctxError(err)
		return 0, g.err
	}
	// Read at most one byte past the limit: enough to tell that the
	// stream is over it.
	if rest := g.limit - g.n + 1; int64(len(p)) > rest {
		p = p[:rest]
	}
	n, err := g.r.Read(p)
	g.n += int64(n)
	if g.n > g.limit {
		g.err = &LimitError{Msg: fmt.Sprintf("layer is larger than the %d-byte limit (uncompressed)", g.limit)}
		if g.over != nil {
			g.err = g.over(g.limit)
		}
		return 0, g.err
	}
	if err != nil && !errors.Is(err, io.EOF) {
		if errors.Is(err, zstd.ErrWindowSizeExceeded) || errors.Is(err, zstd.ErrDecoderSizeExceeded) {
			g.err = fmt.Errorf("zstd layer needs too much memory to decompress: %w", errdefs.ErrResourceExhausted)
		} else {
			what := g.what
			if what == "" {
				what = "layer"
			}
			g.err = fmt.Errorf("read %s: %v: %w", what, err, errdefs.Class(err))
			if errdefs.Class(err) == errdefs.ErrInternal {
				// Corrupt compressed data, mostly.
				g.err = fmt.Errorf("read %s: %v: %w", what, err, errdefs.ErrInvalidArgument)
			}
		}
		return n, g.err
	}
	return n, err
}

// cause returns the guard's error when it has one (limit, cancellation,
// read failure), else err.
func (g *guard) cause(err error) error {
	if g.err != nil {
		return g.err
	}
	return err
}

// ctxError maps a context error to its class.
func ctxError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("layer extraction timed out: %w", errdefs.ErrTimeout)
	}
	return fmt.Errorf("layer extraction canceled: %w", errdefs.ErrCanceled)
}
