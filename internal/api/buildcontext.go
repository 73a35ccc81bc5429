package api

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
)

// airfileName is the recipe's name at the root of a build context.
const airfileName = "Airfile"

// maxContextPath caps an entry name or link target of a build context.
const maxContextPath = 4096

// contextStats counts what extractContext wrote.
type contextStats struct {
	Entries int64 // tar entries
	Bytes   int64 // bytes of file content
}

// uploadReader keeps the first error of the reader below, to tell a failed
// or oversized upload from a malformed tar stream.
type uploadReader struct {
	r   io.Reader
	err error
}

func (e *uploadReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// contextPath checks the name of a build context entry and returns it
// cleaned and relative ("." for the context's root). Absolute names and
// names with a ".." component are refused, whatever they resolve to.
func contextPath(name string) (string, error) {
	switch {
	case name == "":
		return "", invalidf("build context entry with an empty name")
	case len(name) > maxContextPath:
		return "", invalidf("build context entry name longer than %d bytes", maxContextPath)
	case strings.IndexByte(name, 0) >= 0:
		return "", invalidf("build context entry name with a NUL byte")
	case strings.HasPrefix(name, "/"):
		return "", invalidf("build context entry %q: absolute names are not allowed", entryName(name))
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", invalidf("build context entry %q: names with .. are not allowed", entryName(name))
		}
	}
	return path.Clean(name), nil
}

// entryName is a build context entry's name as error messages quote it.
func entryName(name string) string { return clean(truncate(name, 200)) }

// badTar is the error of a malformed or truncated build context stream.
func badTar(err error) error {
	return invalidf("the build context is not a valid tar stream: %s", strings.TrimPrefix(err.Error(), "archive/tar: "))
}

// contextLinkTarget checks the target of a symbolic link at p: relative,
// and inside the context when resolved from p's directory.
func contextLinkTarget(p, target string) error {
	switch {
	case target == "" || len(target) > maxContextPath || strings.IndexByte(target, 0) >= 0:
		return invalidf("build context entry %q: bad link target", entryName(p))
	case strings.HasPrefix(target, "/"):
		return invalidf("build context entry %q: absolute link targets are not allowed", entryName(p))
	}
	if r := path.Join(path.Dir(p), target); r == ".." || strings.HasPrefix(r, "../") {
		return invalidf("build context entry %q: the link points outside the build context", entryName(p))
	}
	return nil
}

// extractContext unpacks the tar stream r (a build context) into the
// empty directory dir. Only directories, regular files, symbolic links
// (relative, inside the context) and hard links (to an earlier entry) are
// allowed; names are relative and without "..", and every operation goes
// through an os.Root on dir, so nothing is written outside it even
// through links. File modes keep their permission bits only (no set-id
// or sticky bits); owners are not kept. At most maxEntries entries and
// maxBytes bytes of file content (sparse entries, whose holes cost no
// input, count at their full size); the caller caps the stream's size.
// Errors are API errors: 400 for a bad entry or stream, 413 for too many
// entries or bytes, the body's own error for a failed upload.
func extractContext(ctx context.Context, dir string, r io.Reader, maxEntries, maxBytes int64) (contextStats, error) {
	var st contextStats
	root, err := os.OpenRoot(dir)
	if err != nil {
		return st, fmt.Errorf("open build context directory: %w", err)
	}
	defer root.Close()
	er := &uploadReader{r: r}
	tr := tar.NewReader(er)
	for {
		if err := ctx.Err(); err != nil {
			return st, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if er.err != nil {
				return st, bodyErr(er.err)
			}
			return st, badTar(err)
		}
		st.Entries++
		if st.Entries > maxEntries {
			return st, &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
				msg: fmt.Sprintf("the build context has more than %d entries", maxEntries)}
		}
		if hdr.Size > maxBytes-st.Bytes {
			return st, &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
				msg: fmt.Sprintf("the files of the build context are larger than the limit of %d bytes", maxBytes)}
		}
		n, err := extractEntry(root, hdr, tr)
		st.Bytes += n
		if err != nil {
			if er.err != nil {
				return st, bodyErr(er.err)
			}
			return st, err
		}
	}
	// Read what follows the end-of-archive marker, so that the whole
	// upload is taken (and an oversized one refused).
	if _, err := io.Copy(io.Discard, er); err != nil {
		return st, bodyErr(err)
	}
	return st, nil
}

// extractEntry writes one entry; it returns the bytes of file content
// written.
func extractEntry(root *os.Root, hdr *tar.Header, r io.Reader) (int64, error) {
	if hdr.Typeflag == tar.TypeXGlobalHeader {
		return 0, nil
	}
	p, err := contextPath(hdr.Name)
	if err != nil {
		return 0, err
	}
	fail := func(err error) error { return entryError(p, err) }
	perm := fs.FileMode(hdr.Mode) & fs.ModePerm
	switch hdr.Typeflag {
	case tar.TypeDir:
		if p == "." {
			return 0, nil
		}
		if err := clearNonDir(root, p); err != nil {
			return 0, fail(err)
		}
		if err := root.MkdirAll(p, 0o755); err != nil {
			return 0, fail(err)
		}
		return 0, fail(root.Chmod(p, perm|0o700))
	case tar.TypeReg: // tar.Reader reports the old TypeRegA as TypeReg
		if p == "." {
			return 0, invalidf("build context entry %q: a file cannot be the context's root", entryName(hdr.Name))
		}
		if err := prepare(root, p); err != nil {
			return 0, fail(err)
		}
		f, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return 0, fail(err)
		}
		n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
		if err == nil {
			err = f.Chmod(perm | 0o600)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) || errors.Is(err, syscall.ENOSPC) {
				return n, fail(err)
			}
			// A read error: the caller reports a failed upload; this
			// is for a truncated stream.
			return n, badTar(err)
		}
		return n, nil
	case tar.TypeSymlink:
		if err := contextLinkTarget(p, hdr.Linkname); err != nil {
			return 0, err
		}
		if p == "." {
			return 0, invalidf("build context entry %q: a link cannot be the context's root", entryName(hdr.Name))
		}
		if err := prepare(root, p); err != nil {
			return 0, fail(err)
		}
		return 0, fail(root.Symlink(hdr.Linkname, p))
	case tar.TypeLink:
		old, err := contextPath(hdr.Linkname)
		if err != nil {
			return 0, err
		}
		if p == "." || old == "." {
			return 0, invalidf("build context entry %q: bad hard link", entryName(hdr.Name))
		}
		if err := prepare(root, p); err != nil {
			return 0, fail(err)
		}
		return 0, fail(root.Link(old, p))
	}
	return 0, invalidf("build context entry %q: only files, directories and links are allowed (type %q)",
		entryName(hdr.Name), string(hdr.Typeflag))
}

// prepare makes p's parent directories and removes what p holds unless it
// is a directory (a later entry replaces an earlier one, as tar does).
func prepare(root *os.Root, p string) error {
	if dir := path.Dir(p); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	fi, err := root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return errDirExists
	}
	return root.Remove(p)
}

// errDirExists is a file entry whose name a directory has.
var errDirExists = errors.New("a directory of that name exists")

// clearNonDir removes a non-directory at p, so that a directory can take
// its place.
func clearNonDir(root *os.Root, p string) error {
	fi, err := root.Lstat(p)
	if err != nil || fi.IsDir() {
		return nil
	}
	return root.Remove(p)
}

// entryError describes a failure to write entry p without host paths (an
// os.Root error names the relative path only; its cause is enough).
func entryError(p string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
		return fmt.Errorf("no space left for the build context: %w", errdefs.ErrResourceExhausted)
	}
	cause := err
	var pe *fs.PathError
	if errors.As(err, &pe) {
		cause = pe.Err
	}
	var le *os.LinkError
	if errors.As(err, &le) {
		cause = le.Err
	}
	return invalidf("build context entry %q could not be unpacked: %s", entryName(p), clean(cause.Error()))
}

// readContextAirfile reads the Airfile at the root of the unpacked
// context dir.
func readContextAirfile(dir string) ([]byte, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open build context directory: %w", err)
	}
	defer root.Close()
	fi, err := root.Lstat(airfileName)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, invalidf("the build context has no %s at its root", airfileName)
	case err != nil:
		return nil, entryError(airfileName, err)
	case !fi.Mode().IsRegular():
		return nil, invalidf("the build context's %s is not a regular file", airfileName)
	case fi.Size() > airfile.MaxFileBytes:
		return nil, invalidf("the %s is larger than %d bytes", airfileName, airfile.MaxFileBytes)
	}
	f, err := root.Open(airfileName)
	if err != nil {
		return nil, entryError(airfileName, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, airfile.MaxFileBytes+1))
	if err != nil {
		return nil, entryError(airfileName, err)
	}
	return b, nil
}
