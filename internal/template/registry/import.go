package registry

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// Caps of an import upload (the tar stream's size is
// Config.MaxImportBytes).
const (
	// maxImportEntries caps the entries of an uploaded archive; an
	// image has a few files per layer.
	maxImportEntries = 10_000
	// maxIndexBytes caps manifest.json, index.json and every manifest or
	// index blob of a layout, which go-containerregistry reads whole.
	maxIndexBytes = 4 << 20
	// maxConfigBytes caps an image config, also read whole.
	maxConfigBytes = 8 << 20
	// maxImportDocs caps the manifests and indexes a layout may list.
	maxImportDocs = 1024
	// maxArchivePath caps an entry name of an archive.
	maxArchivePath = 4096
	// importArchiveName is the uploaded tar in an import's directory;
	// importLayoutDir the layout unpacked from it.
	importArchiveName = "image.tar"
	importLayoutDir   = "layout"
)

// Image is a received image archive.
type Image struct {
	Format ImportFormat
	// Size is the upload's size in bytes.
	Size int64
}

// ReceiveImage takes the job's upload r, a `docker save` archive or an
// OCI image layout as a tar stream: it is written to the job's directory
// (the caller caps its size at MaxImportBytes; at most maxImportEntries
// entries) and checked: a layout is unpacked by the layer extractor's
// files-only tree policy (see extractLayout), and the JSON documents
// go-containerregistry reads whole are capped. Refused without an
// importer (ErrNotSupported).
func (j *Job) ReceiveImage(ctx context.Context, r io.Reader) (Image, error) {
	limit, err := j.s.MaxImportBytes()
	if err != nil {
		return Image{}, err
	}
	dir, err := j.mkdir("import")
	if err != nil {
		return Image{}, err
	}
	archive := filepath.Join(dir, importArchiveName)
	size, err := spool(archive, r)
	if err != nil {
		return Image{}, err
	}
	scan, err := scanArchive(archive)
	if err != nil {
		return Image{}, err
	}
	j.image.Format, j.image.Path = scan.format, archive
	if scan.format == ImportOCILayout {
		layout := filepath.Join(dir, importLayoutDir)
		if err := extractLayout(ctx, archive, layout, limit); err != nil {
			return Image{}, err
		}
		if err := os.Remove(archive); err != nil {
			return Image{}, fmt.Errorf("import: %w", err)
		}
		if err := checkLayout(layout); err != nil {
			return Image{}, err
		}
		j.image.Path = layout
	} else if err := checkDockerArchive(archive, scan); err != nil {
		return Image{}, err
	}
	return Image{Format: scan.format, Size: size}, nil
}

// Import imports the received image as the job's template (req's Name,
// Owner, Format and Path are the job's) within Config.BuildTimeout,
// registers it, closes the job and returns the template as its owner sees
// it. events, if not nil, first gets the import's one step ("IMPORT
// FORMAT [TAG]").
func (j *Job) Import(ctx context.Context, req ImportRequest, events func(Event)) (Detail, error) {
	if j.image.Path == "" {
		j.Close()
		return Detail{}, fmt.Errorf("template job %s has no image to import: %w", j.name, errdefs.ErrFailedPrecondition)
	}
	req.Name, req.Owner, req.Format, req.Path = j.name, j.owner, j.image.Format, j.image.Path
	instruction := "IMPORT " + string(req.Format)
	if req.Tag != "" {
		instruction += " " + req.Tag
	}
	return j.run(ctx, func(ctx context.Context) (layers.Manifest, error) {
		if events != nil {
			events(Event{Type: "step", Step: 1, Steps: 1, Instruction: instruction})
		}
		return j.s.cfg.Importer.Import(ctx, req, events)
	})
}

// quote is an archive entry's name as error messages quote it.
func quote(name string) string {
	if len(name) > 200 {
		name = name[:200]
	}
	return strings.ToValidUTF8(name, "\uFFFD")
}

// archivePath returns an archive entry's name cleaned and relative ("."
// for the root), or false for an empty, overlong, absolute or NUL-holding
// name, or one with a ".." component.
func archivePath(name string) (string, bool) {
	if name == "" || len(name) > maxArchivePath || strings.IndexByte(name, 0) >= 0 || strings.HasPrefix(name, "/") {
		return "", false
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", false
		}
	}
	return path.Clean(name), true
}

// spool writes the upload r to a new file at p and returns its size.
func spool(p string, r io.Reader) (int64, error) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, fmt.Errorf("import: %w", err)
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil && cerr != nil {
		return n, fmt.Errorf("import: %w", cerr)
	}
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			if errors.Is(err, syscall.ENOSPC) {
				return n, fmt.Errorf("no space left for the image archive: %w", errdefs.ErrResourceExhausted)
			}
			return n, fmt.Errorf("import: %w", err)
		}
		return n, invalidf("could not read the image archive: %v", err)
	}
	return n, nil
}

// archiveScan is what scanArchive found in an upload.
type archiveScan struct {
	format ImportFormat
	// files are the regular files by cleaned name, with their sizes.
	files map[string]int64
}

// scanArchive reads the headers of the tar at p: at most
// maxImportEntries entries, names relative and without "..", and tells a
// layout (oci-layout and index.json at the root; preferred, as Docker's
// newer archives are both) from a docker archive (manifest.json).
func scanArchive(p string) (archiveScan, error) {
	st := archiveScan{files: map[string]int64{}}
	f, err := os.Open(p)
	if err != nil {
		return st, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return st, invalidf("the image archive is not a valid tar stream: %s", strings.TrimPrefix(err.Error(), "archive/tar: "))
		}
		if n++; n > maxImportEntries {
			return st, &LimitError{Msg: fmt.Sprintf("the image archive has more than %d entries", maxImportEntries)}
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, ok := archivePath(hdr.Name)
		if !ok {
			return st, invalidf("image archive entry %q: names must be relative, without ..", quote(hdr.Name))
		}
		if hdr.Typeflag == tar.TypeReg {
			st.files[name] = hdr.Size
		}
	}
	_, layout := st.files["oci-layout"]
	_, index := st.files["index.json"]
	_, manifest := st.files["manifest.json"]
	switch {
	case layout && index:
		st.format = ImportOCILayout
	case manifest:
		st.format = ImportDockerArchive
	default:
		return st, invalidf("the upload is neither a docker save archive (manifest.json) nor an OCI image layout (oci-layout and index.json) as a tar")
	}
	return st, nil
}

// checkDockerArchive caps what go-containerregistry reads whole from a
// docker archive: manifest.json and the configs it names, which must be
// regular files. (Its layers are streamed; symbolic links between
// entries are resolved inside the tar, never on disk.)
func checkDockerArchive(p string, st archiveScan) error {
	if st.files["manifest.json"] > maxIndexBytes {
		return invalidf("image archive: manifest.json is larger than %d bytes", maxIndexBytes)
	}
	raw, err := readTarEntry(p, "manifest.json", maxIndexBytes)
	if err != nil {
		return err
	}
	var entries []struct {
		Config string `json:"Config"`
	}
	if err := json.Unmarshal(raw, &entries); err != nil {
		return invalidf("image archive: manifest.json is not a docker save manifest")
	}
	if len(entries) == 0 || len(entries) > maxImportDocs {
		return invalidf("image archive: manifest.json lists %d images; want 1 to %d", len(entries), maxImportDocs)
	}
	for _, e := range entries {
		size, ok := st.files[path.Clean(e.Config)]
		switch {
		case e.Config == "" || !ok:
			return invalidf("image archive: the config %q that manifest.json names is not a file of the archive", quote(e.Config))
		case size > maxConfigBytes:
			return invalidf("image archive: the config %q is larger than %d bytes", quote(e.Config), maxConfigBytes)
		}
	}
	return nil
}

// readTarEntry reads the regular file name (at most max bytes) from the
// tar at p.
func readTarEntry(p, name string, max int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil, invalidf("image archive: no %s", name)
		}
		if err != nil {
			return nil, invalidf("the image archive is not a valid tar stream")
		}
		if path.Clean(hdr.Name) == name && hdr.Typeflag == tar.TypeReg {
			return io.ReadAll(io.LimitReader(tr, max))
		}
	}
}

// extractLayout unpacks the OCI layout in the tar at p into the new
// directory dir through the layer extractor's files-only tree policy
// (layers.ExtractTree with FilesOnly): directories and regular files only
// (a layout has no links; one could make the daemon read a host file as
// a blob), each entry once, modes 0600/0700, owners not kept, nothing
// written through a link or outside dir, at most maxImportEntries entries
// and max bytes of files (a sparse entry counts at its full size).
func extractLayout(ctx context.Context, p, dir string, max int64) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	_, err = layers.ExtractTree(ctx, dir, f, layers.TreeOptions{
		Name: "image layout", MaxEntries: maxImportEntries, MaxBytes: max, FilesOnly: true,
	})
	return err
}

// ociDescriptor is the part of an OCI descriptor checkLayout reads.
type ociDescriptor struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Size      int64  `json:"size"`
}

// ociDocument is the part of an index or a manifest checkLayout reads.
type ociDocument struct {
	Manifests []ociDescriptor `json:"manifests"`
	Config    *ociDescriptor  `json:"config"`
}

// checkLayout caps, in the unpacked layout dir, the documents that
// go-containerregistry reads whole: index.json, each index and manifest
// it reaches (at most maxImportDocs, maxIndexBytes each, as large as
// their descriptors say) and each image config (maxConfigBytes). Blobs
// the layout lacks are skipped: the import fails on one it needs.
func checkLayout(dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer root.Close()
	read := func(name string, max int64) ([]byte, error) {
		f, err := root.Open(name)
		if err != nil {
			return nil, invalidf("image layout: %s is missing", quote(name))
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, max+1))
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		if int64(len(b)) > max {
			return nil, invalidf("image layout: %s is larger than %d bytes", quote(name), max)
		}
		return b, nil
	}
	blob := func(d ociDescriptor, max int64) (string, error) {
		algo, hexPart, ok := strings.Cut(d.Digest, ":")
		if !ok || algo != "sha256" || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" {
			return "", invalidf("image layout: bad digest %q", quote(d.Digest))
		}
		if d.Size < 0 || d.Size > max {
			return "", invalidf("image layout: %s is %d bytes; at most %d are allowed", d.Digest, d.Size, max)
		}
		p := "blobs/sha256/" + hexPart
		fi, err := root.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			// Docker's archives list every platform of an index but hold
			// one: a missing blob is only an error if the import needs it.
			return "", nil
		}
		if err != nil || !fi.Mode().IsRegular() {
			return "", invalidf("image layout: blob %s is not a file", d.Digest)
		}
		if fi.Size() != d.Size {
			return "", invalidf("image layout: blob %s is %d bytes, its descriptor says %d", d.Digest, fi.Size(), d.Size)
		}
		return p, nil
	}
	raw, err := read("index.json", maxIndexBytes)
	if err != nil {
		return err
	}
	docs := 0
	var walk func(raw []byte, depth int) error
	walk = func(raw []byte, depth int) error {
		var doc ociDocument
		if err := json.Unmarshal(raw, &doc); err != nil {
			return invalidf("image layout: an index or manifest is not valid JSON")
		}
		if doc.Config != nil {
			_, err := blob(*doc.Config, maxConfigBytes)
			return err
		}
		if depth > 4 {
			return invalidf("image layout: indexes nested too deeply")
		}
		for _, d := range doc.Manifests {
			if docs++; docs > maxImportDocs {
				return invalidf("image layout: more than %d manifests", maxImportDocs)
			}
			if !strings.Contains(d.MediaType, "manifest") && !strings.Contains(d.MediaType, "index") {
				continue // not something an import reads
			}
			p, err := blob(d, maxIndexBytes)
			if err != nil || p == "" {
				return err
			}
			b, err := read(p, maxIndexBytes)
			if err != nil {
				return err
			}
			if err := walk(b, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	return walk(raw, 0)
}
