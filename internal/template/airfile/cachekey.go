package airfile

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Caps on what the COPY and ADD steps of one file may read from the build
// context; above them CacheKeys fails with errdefs.ErrResourceExhausted.
const (
	MaxContextFiles = 100_000
	MaxContextBytes = 4 << 30
)

// The caps in force; variables so tests can lower them.
var (
	maxContextFiles       = MaxContextFiles
	maxContextBytes int64 = MaxContextBytes
)

// cacheKeyVersion changes whenever the key derivation does, so keys from
// older builds never match.
const cacheKeyVersion = "airlock-airfile-cache-v1"

// SourceFile is one entry a COPY or ADD step reads from the build
// context.
type SourceFile struct {
	// Arg is the index of the source argument (in Step.Sources) that
	// matched it.
	Arg int
	// Path is the entry's slash-separated path relative to the context.
	Path string
	// Rel is its path relative to the matched source: "." for a matched
	// file or directory itself, "sub/file" for entries inside a matched
	// directory.
	Rel string
	// Mode is the type and permission bits. A matched source that is a
	// symlink is followed (it must stay inside the context); symlinks
	// inside a matched directory are entries of their own (Link) and are
	// never followed.
	Mode fs.FileMode
	// Size is the size of a regular file.
	Size int64
	// Link is a symlink's target.
	Link string
}

// ResolveSources lists what the sources of a COPY or ADD step name inside
// the build context root: each source is a path relative to the context
// (a leading / is ignored), or a wildcard pattern (path.Match syntax)
// matched against it; a source that names a directory contributes the
// directory and everything under it. Nothing outside root is reached:
// paths are resolved with os.Root, which refuses to leave the directory,
// also through symlinks. Sources that match nothing, special files and
// contexts above MaxContextFiles entries are errors.
func ResolveSources(ctx context.Context, root *os.Root, sources []string) ([]SourceFile, error) {
	var out []SourceFile
	fsys := root.FS()
	for i, src := range sources {
		rel := path.Clean("/" + src)[1:]
		if rel == "" {
			rel = "."
		}
		if c := path.Clean(src); c == ".." || strings.HasPrefix(c, "../") {
			return nil, fmt.Errorf("source %q is outside the build context: %w", clip(src), errdefs.ErrInvalidArgument)
		}
		matches := []string{rel}
		if hasGlob(rel) {
			m, err := fs.Glob(fsys, rel)
			if err != nil {
				return nil, fmt.Errorf("source %q: %w", clip(src), errdefs.ErrInvalidArgument)
			}
			matches = m
		}
		if len(matches) == 0 {
			return nil, fmt.Errorf("source %q matches no file in the build context: %w", clip(src), errdefs.ErrNotFound)
		}
		for _, m := range matches {
			err := fs.WalkDir(fsys, m, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				if err := ctx.Err(); err != nil {
					return err
				}
				if len(out) >= maxContextFiles {
					return fmt.Errorf("sources name more than %d files: %w", maxContextFiles, errdefs.ErrResourceExhausted)
				}
				var fi fs.FileInfo
				if p == m {
					fi, err = fs.Stat(fsys, p) // the matched source itself is followed
				} else {
					fi, err = d.Info()
				}
				if err != nil {
					return err
				}
				e := SourceFile{Arg: i, Path: p, Rel: ".", Mode: fi.Mode()}
				if p != m {
					e.Rel = strings.TrimPrefix(p, strings.TrimSuffix(m, "/")+"/")
					if m == "." {
						e.Rel = p
					}
				}
				switch mode := fi.Mode(); {
				case mode.IsRegular():
					e.Size = fi.Size()
				case mode.IsDir():
				case mode&fs.ModeSymlink != 0:
					link, err := root.Readlink(p)
					if err != nil {
						return err
					}
					e.Link = link
				default:
					return fmt.Errorf("%q is a special file (%s): %w", clip(p), mode.Type(), errdefs.ErrInvalidArgument)
				}
				out = append(out, e)
				return nil
			})
			if err != nil {
				return nil, sourceErr(src, err)
			}
		}
	}
	return out, nil
}

// sourceErr classifies an error met while resolving src, without host
// paths.
func sourceErr(src string, err error) error {
	if c := errdefs.Class(err); c != errdefs.ErrInternal {
		return fmt.Errorf("source %q: %w", clip(src), err)
	}
	switch {
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("source %q: %w", clip(src), errdefs.ErrCanceled)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("source %q: %w", clip(src), errdefs.ErrTimeout)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("source %q: no such file in the build context: %w", clip(src), errdefs.ErrNotFound)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("source %q: %w", clip(src), errdefs.ErrPermissionDenied)
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		// os.Root reports escapes as "path escapes from parent".
		return fmt.Errorf("source %q: %s: %v: %w", clip(src), clip(pe.Path), pe.Err, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("source %q: %w", clip(src), errdefs.ErrInternal)
}

// CacheKeys returns one key per step (hex SHA-256), in order:
//
//	key(-1) = sha256(version, baseID)
//	key(n)  = sha256(key(n-1), canonical text of step n, content(n))
//
// where the canonical text is Step.String() and content(n), for COPY and
// ADD, is the SHA-256 over every SourceFile the step reads (its source
// index, relative path, type and permission bits, size, and the content
// of regular files or the target of symlinks); it is empty for other
// steps. Modification times and owners in the context do not count.
//
// baseID identifies the resolved base and should change when it does: an
// image's manifest digest (a tag can move), the Debian cache key, or a
// template's content id. contextDir is the build context; it may be empty
// when no step reads from it.
func (f *File) CacheKeys(ctx context.Context, contextDir, baseID string) ([]string, error) {
	var root *os.Root
	for _, s := range f.Steps {
		if s.Kind != KindCopy && s.Kind != KindAdd {
			continue
		}
		if contextDir == "" {
			return nil, errorf(s.Line, "%s needs a build context", s.Kind)
		}
		r, err := os.OpenRoot(contextDir)
		if err != nil {
			return nil, fmt.Errorf("airfile: opening the build context: %w", classify(err))
		}
		defer r.Close()
		root = r
		break
	}
	h := sha256.New()
	field(h, cacheKeyVersion)
	field(h, baseID)
	prev := h.Sum(nil)
	budget := maxContextBytes
	files := 0
	keys := make([]string, 0, len(f.Steps))
	for _, s := range f.Steps {
		content := ""
		if s.Kind == KindCopy || s.Kind == KindAdd {
			entries, err := ResolveSources(ctx, root, s.Sources())
			if err != nil {
				return nil, fmt.Errorf("airfile line %d: %s: %w", s.Line, s.Kind, err)
			}
			files += len(entries)
			if files > maxContextFiles {
				return nil, fmt.Errorf("airfile line %d: the sources name more than %d files: %w", s.Line, maxContextFiles, errdefs.ErrResourceExhausted)
			}
			sum, err := hashSources(ctx, root, entries, &budget)
			if err != nil {
				return nil, fmt.Errorf("airfile line %d: %s: %w", s.Line, s.Kind, err)
			}
			content = hex.EncodeToString(sum)
		}
		h := sha256.New()
		h.Write(prev)
		field(h, s.String())
		field(h, content)
		prev = h.Sum(nil)
		keys = append(keys, hex.EncodeToString(prev))
	}
	return keys, nil
}

// field writes s to h with its length in front, so that no two field
// sequences hash alike.
func field(h hash.Hash, s string) {
	fmt.Fprintf(h, "%d:%s\n", len(s), s)
}

// hashSources hashes entries as CacheKeys describes, charging the bytes
// of regular files to budget.
func hashSources(ctx context.Context, root *os.Root, entries []SourceFile, budget *int64) ([]byte, error) {
	h := sha256.New()
	field(h, fmt.Sprint(len(entries)))
	for _, e := range entries {
		field(h, fmt.Sprint(e.Arg))
		field(h, e.Rel)
		field(h, fmt.Sprintf("%o", uint32(e.Mode)))
		switch {
		case e.Mode.IsRegular():
			sum, n, err := hashFile(ctx, root, e.Path, budget)
			if err != nil {
				return nil, err
			}
			field(h, fmt.Sprint(n))
			field(h, hex.EncodeToString(sum))
		case e.Mode&fs.ModeSymlink != 0:
			field(h, e.Link)
		}
	}
	return h.Sum(nil), nil
}

// hashFile returns the SHA-256 and size of the regular file name inside
// root. It opens without blocking (a file swapped for a FIFO cannot hang
// it) and checks that what it opened is still a regular file.
func hashFile(ctx context.Context, root *os.Root, name string, budget *int64) ([]byte, int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, classify(err)
	}
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("%q: %w", clip(name), classify(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("%q: %w", clip(name), classify(err))
	}
	if !fi.Mode().IsRegular() {
		return nil, 0, fmt.Errorf("%q changed while reading: %w", clip(name), errdefs.ErrFailedPrecondition)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(ctxReader{ctx, f}, *budget+1))
	if err != nil {
		return nil, 0, fmt.Errorf("%q: %w", clip(name), classify(err))
	}
	if n > *budget {
		return nil, 0, fmt.Errorf("the sources hold more than %d bytes: %w", maxContextBytes, errdefs.ErrResourceExhausted)
	}
	*budget -= n
	return h.Sum(nil), n, nil
}

// ctxReader stops a long read when ctx ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}

// classify maps an os or context error onto an error class without host
// paths.
func classify(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return errdefs.ErrCanceled
	case errors.Is(err, context.DeadlineExceeded):
		return errdefs.ErrTimeout
	case errors.Is(err, fs.ErrNotExist):
		return errdefs.ErrNotFound
	case errors.Is(err, fs.ErrPermission):
		return errdefs.ErrPermissionDenied
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%v: %w", pe.Err, errdefs.ErrInternal)
	}
	return fmt.Errorf("%v: %w", err, errdefs.ErrInternal)
}
