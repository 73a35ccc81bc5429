package build

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// treeSize sums the sizes of the regular files under dir.
func treeSize(ctx context.Context, dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
		}
		return nil
	})
	if err != nil {
		return 0, treeErr(ctx, err)
	}
	return total, nil
}

// writeTree writes the directory tree dir as a layer tar to w: every
// entry below dir in lexical order, parents first, with its mode, owner
// and modification time; regular files linked more than once become
// hard links to their first name. Symlinks are stored, never followed.
// Device nodes and sockets are skipped (a layer cannot hold them).
// progress receives the bytes of file content written so far.
func writeTree(ctx context.Context, w io.Writer, dir string, progress func(done int64, final bool)) error {
	tw := tar.NewWriter(w)
	links := make(map[[2]uint64]string)
	var done int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == dir {
			return nil // the layer root
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		st, err := lstatHost(p)
		if err != nil {
			return err
		}
		hdr := &tar.Header{
			Name:    rel,
			Mode:    int64(st.perm),
			Uid:     st.uid,
			Gid:     st.gid,
			ModTime: st.mtime,
			Format:  tar.FormatPAX,
		}
		switch st.typ {
		case typDir:
			hdr.Typeflag, hdr.Name = tar.TypeDir, rel+"/"
			return tw.WriteHeader(hdr)
		case typLnk:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
			return tw.WriteHeader(hdr)
		case typFifo:
			hdr.Typeflag = tar.TypeFifo
			return tw.WriteHeader(hdr)
		case typReg:
		default:
			return nil // devices, sockets
		}
		if st.nlink > 1 {
			key := [2]uint64{st.dev, st.ino}
			if first, ok := links[key]; ok {
				hdr.Typeflag, hdr.Linkname = tar.TypeLink, first
				return tw.WriteHeader(hdr)
			}
			links[key] = rel
		}
		f, err := os.OpenFile(p, os.O_RDONLY|oNoFollow, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		hdr.Typeflag, hdr.Size = tar.TypeReg, st.size
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		n, err := io.CopyN(tw, f, st.size)
		done += n
		if err != nil {
			return fmt.Errorf("%s changed while being stored: %w", rel, errdefs.ErrFailedPrecondition)
		}
		if progress != nil {
			progress(done, false)
		}
		return nil
	})
	if err != nil {
		return treeErr(ctx, err)
	}
	if progress != nil {
		progress(done, true)
	}
	return tw.Close()
}

// treeErr classifies an error met while walking a tree, without host
// paths.
func treeErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctxErr(ctx, "storing the tree")
	}
	if errdefs.Class(err) != errdefs.ErrInternal {
		return err
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("reading the tree: %v: %w", pe.Err, errdefs.ErrInternal)
	}
	return fmt.Errorf("reading the tree: %w", errdefs.ErrInternal)
}
