package api

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// TemplateImporter imports a template from an image archive the API has
// received and checked (see ImportRequest). It stores the layers the store
// lacks and the template's manifest, and returns the manifest. events, if
// not nil, receives progress lines (step 1 of 1), never after Import
// returns.
type TemplateImporter interface {
	Import(ctx context.Context, req ImportRequest, events func(BuildEvent)) (layers.Manifest, error)
}

// ImportFormat is the kind of image archive an import holds.
type ImportFormat string

// The image archive formats.
const (
	// ImportDockerArchive is a `docker save` archive: a tar with
	// manifest.json at its root. ImportRequest.Path is the tar file.
	ImportDockerArchive ImportFormat = "docker-archive"
	// ImportOCILayout is an OCI image layout (oci-layout, index.json,
	// blobs/); ImportRequest.Path is the unpacked directory.
	ImportOCILayout ImportFormat = "oci-layout"
)

// ImportRequest is a template import as the API hands it to the
// importer.
type ImportRequest struct {
	// Name, Owner, Shared and Replace are as in BuildRequest.
	Name    string
	Owner   string
	Shared  bool
	Replace bool
	// Format says what Path is.
	Format ImportFormat
	// Path is the archive (a tar file) or the layout (a directory), in a
	// private directory the API removes after the import.
	Path string
	// Tag picks an image of an archive that holds several: "repo:tag" in
	// a docker archive, a reference name (org.opencontainers.image.ref.name)
	// in a layout. Empty means the only one.
	Tag string
	// AllowSetuid keeps set-user-ID and set-group-ID bits (stripped
	// otherwise).
	AllowSetuid bool
}

// Caps of an import upload (the tar stream's size is
// Templates.MaxImportBytes).
const (
	// defaultMaxImportBytes caps an uploaded image archive.
	defaultMaxImportBytes = 8 << 30
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
	// maxImportTag caps the tag query parameter.
	maxImportTag = 256
	// importArchiveName is the uploaded tar in an import's directory;
	// importLayoutDir the layout unpacked from it.
	importArchiveName = "image.tar"
	importLayoutDir   = "layout"
)

// tagRe is what a tag may hold: a reference name, no blanks or controls.
var tagRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@+-]*$`)

// importsNotServed is the answer of the import route without an importer.
func importsNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not import image archives"}
}

// importFromQuery parses the query of POST /v1/templates/{name}/import:
// shared, replace and allow_setuid (booleans) and tag.
func importFromQuery(raw string) (ImportRequest, error) {
	var out ImportRequest
	q, err := parseQuery(raw, "shared", "replace", "allow_setuid", "tag")
	if err != nil {
		return out, err
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"shared", &out.Shared}, {"replace", &out.Replace}, {"allow_setuid", &out.AllowSetuid}} {
		if s := q.Get(b.key); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return out, invalidf("%s must be true or false", b.key)
			}
			*b.dst = v
		}
	}
	out.Tag = q.Get("tag")
	if out.Tag != "" && (len(out.Tag) > maxImportTag || !tagRe.MatchString(out.Tag)) {
		return out, invalidf("tag must be an image name or tag (at most %d characters: letters, digits and ._/:@+-)", maxImportTag)
	}
	return out, nil
}

// importTemplate serves POST /v1/templates/{name}/import: the body is a
// `docker save` archive or an OCI image layout as a tar stream. The
// upload is written to a private directory (capped in size and entries),
// checked (a layout is unpacked through an os.Root: files and
// directories only; the JSON documents that are read whole are capped),
// imported as the caller's tenant's template (or, with shared, the
// operator's shared one) and removed. Answered like a build: streamed
// progress with Accept: application/x-ndjson, else the template.
func (h *Handler) importTemplate(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	if ts.cfg.Importer == nil || ts.cfg.ContextDir == "" {
		return importsNotServed()
	}
	name, err := templateName(c)
	if err != nil {
		return err
	}
	c.ev.Target = name
	if mt, _, err := mime.ParseMediaType(c.r.Header.Get("Content-Type")); err != nil || mt != tarType {
		return &apiError{status: http.StatusUnsupportedMediaType, code: CodeUnsupportedMediaType,
			msg: "request body must be " + tarType + ": a docker save archive or an OCI image layout as a tar"}
	}
	ireq, err := importFromQuery(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	ireq.Name = name
	limit := ts.cfg.MaxImportBytes
	if c.r.ContentLength > limit {
		return importTooLarge(limit)
	}
	breq := BuildRequest{Name: name, Shared: ireq.Shared, Replace: ireq.Replace}
	if err := setNamespace(c.p, &breq); err != nil {
		return err
	}
	ireq.Owner = breq.Owner
	release, err := ts.reserve(breq)
	if err != nil {
		return err
	}
	defer release()
	dir, err := os.MkdirTemp(ts.cfg.ContextDir, "import-")
	if err != nil {
		return fmt.Errorf("import directory: %w", err)
	}
	var once sync.Once
	finish := func() {
		once.Do(func() {
			if err := os.RemoveAll(dir); err != nil {
				h.log.Warn("removing an image import", "err", err)
			}
			release()
		})
	}
	defer finish()
	archive := filepath.Join(dir, importArchiveName)
	body := c.idleBody(http.MaxBytesReader(c.w, c.r.Body, limit))
	size, err := spool(archive, body)
	body.done()
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return importTooLarge(limit)
		}
		return err
	}
	scan, err := scanArchive(archive)
	if err != nil {
		return err
	}
	ireq.Format, ireq.Path = scan.format, archive
	if scan.format == ImportOCILayout {
		layout := filepath.Join(dir, importLayoutDir)
		if err := unpackLayout(c.r.Context(), archive, layout); err != nil {
			return err
		}
		if err := os.Remove(archive); err != nil {
			return fmt.Errorf("import: %w", err)
		}
		if err := checkLayout(layout); err != nil {
			return err
		}
		ireq.Path = layout
	} else if err := checkDockerArchive(archive, scan); err != nil {
		return err
	}
	c.ev.Details = map[string]any{"source": string(ireq.Format), "upload_bytes": size, "allow_setuid": ireq.AllowSetuid}
	if ireq.Tag != "" {
		c.ev.Details["tag"] = ireq.Tag
	}
	if ireq.Replace {
		c.ev.Details["replace"] = true
	}
	if ireq.Shared {
		c.ev.Details["shared"] = true
	}
	instruction := "IMPORT " + string(ireq.Format)
	if ireq.Tag != "" {
		instruction += " " + ireq.Tag
	}
	job := templateJob{owner: ireq.Owner, name: name, shared: ireq.Shared, release: finish,
		run: func(ctx context.Context, events func(BuildEvent)) (layers.Manifest, error) {
			if events != nil {
				events(BuildEvent{Type: "step", Step: 1, Steps: 1, Instruction: instruction})
			}
			return ts.cfg.Importer.Import(ctx, ireq, events)
		}}
	return h.runTemplateJob(c, ts, job)
}

// importTooLarge is the error of an import upload over limit bytes.
func importTooLarge(limit int64) error {
	return &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
		msg: fmt.Sprintf("the image archive is larger than the limit of %d bytes", limit)}
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
		return n, bodyErr(err)
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
			return st, &apiError{status: http.StatusRequestEntityTooLarge, code: CodeRequestTooLarge,
				msg: fmt.Sprintf("the image archive has more than %d entries", maxImportEntries)}
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := contextPath(hdr.Name)
		if err != nil {
			return st, invalidf("image archive entry %q: names must be relative, without ..", entryName(hdr.Name))
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
			return invalidf("image archive: the config %q that manifest.json names is not a file of the archive", entryName(e.Config))
		case size > maxConfigBytes:
			return invalidf("image archive: the config %q is larger than %d bytes", entryName(e.Config), maxConfigBytes)
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

// unpackLayout unpacks the OCI layout in the tar at p into the new
// directory dir, through an os.Root: directories and regular files only
// (a layout has no links; one could make the daemon read a host file as
// a blob), permission bits 0600/0700, owners not kept.
func unpackLayout(ctx context.Context, p, dir string) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("import: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer root.Close()
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("import: %w", err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return invalidf("the image archive is not a valid tar stream")
		}
		name, err := contextPath(hdr.Name)
		if err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeXGlobalHeader:
		case tar.TypeDir:
			if name != "." {
				if err := root.MkdirAll(name, 0o700); err != nil {
					return layoutEntryError(name, err)
				}
			}
		case tar.TypeReg:
			if name == "." {
				return invalidf("image layout: a file cannot be the root")
			}
			if d := path.Dir(name); d != "." {
				if err := root.MkdirAll(d, 0o700); err != nil {
					return layoutEntryError(name, err)
				}
			}
			out, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return layoutEntryError(name, err)
			}
			_, err = io.Copy(out, io.LimitReader(tr, hdr.Size))
			if cerr := out.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return layoutEntryError(name, err)
			}
		default:
			return invalidf("image layout entry %q: only files and directories are allowed (type %q)", entryName(hdr.Name), string(hdr.Typeflag))
		}
	}
}

// layoutEntryError describes a failure to unpack a layout entry.
func layoutEntryError(name string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("no space left for the image layout: %w", errdefs.ErrResourceExhausted)
	}
	if errors.Is(err, os.ErrExist) {
		return invalidf("image layout entry %q appears twice or under a file", entryName(name))
	}
	return entryError(name, err)
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
			return nil, invalidf("image layout: %s is missing", entryName(name))
		}
		defer f.Close()
		b, err := io.ReadAll(io.LimitReader(f, max+1))
		if err != nil {
			return nil, fmt.Errorf("import: %w", err)
		}
		if int64(len(b)) > max {
			return nil, invalidf("image layout: %s is larger than %d bytes", entryName(name), max)
		}
		return b, nil
	}
	blob := func(d ociDescriptor, max int64) (string, error) {
		algo, hexPart, ok := strings.Cut(d.Digest, ":")
		if !ok || algo != "sha256" || len(hexPart) != 64 || strings.Trim(hexPart, "0123456789abcdef") != "" {
			return "", invalidf("image layout: bad digest %q", entryName(d.Digest))
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
