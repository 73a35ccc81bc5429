package agent

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
)

// exportChunk is the data size of one ExportChanges message.
const exportChunk = 256 << 10

// OCI layer conventions for deletions (image-spec, layer.md).
const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
)

// ExportChanges streams the writable layer as an OCI layer tar: files,
// directories, symlinks, hard links and FIFOs with their modes, owners
// (the sandbox's own ids) and times; overlayfs whiteouts (character
// devices 0:0, or files marked with the whiteout xattr) become ".wh."
// entries and opaque directories get ".wh..wh..opq". Other device nodes
// and sockets are skipped. Entries come in lexical order, parents first.
func (s *fileService) ExportChanges(ctx context.Context, _ *connect.Request[agentv1.ExportChangesRequest], stream *connect.ServerStream[agentv1.ExportChangesResponse]) error {
	if s.changes == nil {
		return connect.NewError(connect.CodeFailedPrecondition, errors.New("this sandbox has no writable layer to export"))
	}
	w := bufio.NewWriterSize(&exportWriter{ctx: ctx, stream: stream}, exportChunk)
	tw := tar.NewWriter(w)
	ex := &exporter{tw: tw, links: make(map[[2]uint64]string)}
	// Each export walks the layer from its own descriptor of the
	// directory, so that concurrent exports do not share an offset.
	dir := "/proc/self/fd/" + strconv.Itoa(int(s.changes.Fd()))
	if err := ex.walk(ctx, dir, ""); err != nil {
		return exportError(err)
	}
	if err := tw.Close(); err != nil {
		return exportError(err)
	}
	return exportError(w.Flush())
}

func exportError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return connect.NewError(connect.CodeCanceled, err)
	}
	return connect.NewError(connect.CodeInternal, fmt.Errorf("export changes: %w", err))
}

// exportWriter turns the tar stream into messages.
type exportWriter struct {
	ctx    context.Context
	stream *connect.ServerStream[agentv1.ExportChangesResponse]
}

func (e *exportWriter) Write(p []byte) (int, error) {
	if err := e.ctx.Err(); err != nil {
		return 0, err
	}
	if err := e.stream.Send(&agentv1.ExportChangesResponse{Data: p}); err != nil {
		return 0, err
	}
	return len(p), nil
}

type exporter struct {
	tw    *tar.Writer
	links map[[2]uint64]string // (dev, inode) of multiply linked files → first name
}

// walk writes the entries of the directory at host path dir, whose name
// in the layer is rel ("" for the root).
func (ex *exporter) walk(ctx context.Context, dir, rel string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	sort.Strings(names)
	for _, name := range names {
		p, r := dir+"/"+name, path.Join(rel, name)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		if err := ex.entry(ctx, p, r, &st); err != nil {
			return err
		}
	}
	return nil
}

func (ex *exporter) entry(ctx context.Context, p, rel string, st *unix.Stat_t) error {
	hdr := &tar.Header{
		Name:    rel,
		Mode:    int64(st.Mode & 0o7777),
		Uid:     int(st.Uid),
		Gid:     int(st.Gid),
		ModTime: unixTime(st.Mtim),
		Format:  tar.FormatPAX,
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFCHR:
		if st.Rdev != 0 {
			return nil // a device node: never part of a layer
		}
		return ex.whiteout(rel)
	case unix.S_IFREG:
		if isXattrWhiteout(p, st) {
			return ex.whiteout(rel)
		}
		key := [2]uint64{st.Dev, st.Ino}
		if st.Nlink > 1 {
			if first, ok := ex.links[key]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return ex.tw.WriteHeader(hdr)
			}
			ex.links[key] = rel
		}
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.Size
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := ex.tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err = io.CopyN(ex.tw, f, st.Size)
		return err
	case unix.S_IFDIR:
		hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
		if err := ex.tw.WriteHeader(hdr); err != nil {
			return err
		}
		if isOpaque(p) {
			if err := ex.tw.WriteHeader(&tar.Header{Name: path.Join(rel, whiteoutOpaque), Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX}); err != nil {
				return err
			}
		}
		return ex.walk(ctx, p, rel)
	case unix.S_IFLNK:
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return ex.tw.WriteHeader(hdr)
	case unix.S_IFIFO:
		hdr.Typeflag = tar.TypeFifo
		return ex.tw.WriteHeader(hdr)
	}
	return nil // sockets
}

func (ex *exporter) whiteout(rel string) error {
	dir, name := path.Split(rel)
	return ex.tw.WriteHeader(&tar.Header{Name: dir + whiteoutPrefix + name, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX})
}

// isOpaque reports whether overlayfs marked the directory opaque: its
// lower layers' entries are hidden.
func isOpaque(p string) bool {
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		buf := make([]byte, 4)
		if n, err := unix.Lgetxattr(p, attr, buf); err == nil && n == 1 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

// isXattrWhiteout reports whether an empty regular file is a whiteout in
// overlayfs's xattr form.
func isXattrWhiteout(p string, st *unix.Stat_t) bool {
	if st.Size != 0 {
		return false
	}
	for _, attr := range []string{"user.overlay.whiteout", "trusted.overlay.whiteout"} {
		if _, err := unix.Lgetxattr(p, attr, nil); err == nil {
			return true
		}
	}
	return false
}

func unixTime(ts unix.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }
