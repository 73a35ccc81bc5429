// Package oci imports OCI and Docker images into a layers.Store as
// templates, with github.com/google/go-containerregistry.
//
// Three sources are supported: a registry reference (anonymous, with a
// username and password, or with a bearer token; an index or manifest
// list is resolved to one platform), a `docker save` archive, and an OCI
// image layout directory. Every layer the store already holds (same diff
// ID) is skipped without being downloaded or read; the others are
// streamed into the store, which verifies their digests and enforces the
// extraction rules of layers.Lease.Extract. The template manifest keeps
// the image's Env, WorkingDir, User, Cmd and Entrypoint.
//
// Plain-HTTP registries are refused unless Options.Insecure is set, even
// for loopback and private addresses that go-containerregistry would
// otherwise reach over HTTP.
package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	goruntime "runtime"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// Defaults of Options.
const (
	// DefaultMaxImageBytes caps the uncompressed size of the new layers
	// of one import.
	DefaultMaxImageBytes = 32 << 30
	// DefaultStallTimeout aborts a download that receives nothing for
	// this long.
	DefaultStallTimeout = 2 * time.Minute
	// maxConfigBytes caps an image configuration blob.
	maxConfigBytes = 8 << 20
)

// Options control an import. The zero value pulls anonymously over HTTPS
// for linux/<GOARCH> and rejects set-id files.
type Options struct {
	// Platform selects the image of an index, as "os/arch[/variant]";
	// default "linux/" + GOARCH.
	Platform string
	// Username and Password authenticate to the registry (basic auth,
	// or the token flow the registry asks for).
	Username, Password string
	// Token is a registry bearer token, sent as is. It excludes
	// Username and Password.
	Token string
	// Insecure allows plain-HTTP registries. Credentials then travel in
	// clear text.
	Insecure bool
	// Replace overwrites an existing template of the same name.
	Replace bool
	// Limits cap each layer; zero fields take layers.DefaultLimits.
	Limits layers.Limits
	// MaxImageBytes caps the uncompressed size of all new layers;
	// default DefaultMaxImageBytes.
	MaxImageBytes int64
	// AllowSetuid and StripSetuid set the set-id policy (see
	// layers.ExtractOptions). Most distribution images hold set-id
	// programs (su, passwd, mount), so registry pulls usually want
	// StripSetuid.
	AllowSetuid, StripSetuid bool
	// Progress, when set, is called from the importing goroutine as
	// layers start, advance and finish.
	Progress func(Progress)
	// StallTimeout aborts a layer download that receives no data for
	// this long; default DefaultStallTimeout.
	StallTimeout time.Duration
	// Transport is the HTTP transport to registries; default a clone of
	// http.DefaultTransport with connect and header timeouts.
	Transport http.RoundTripper
	// UserAgent is sent to registries.
	UserAgent string
}

// Progress reports the state of one layer of an import.
type Progress struct {
	Layer   int    // 1-based index of the layer
	Layers  int    // number of layers in the image
	DiffID  string // the layer's diff ID
	Done    int64  // bytes of the layer read so far
	Total   int64  // the layer's size in the source (compressed), 0 if unknown
	Skipped bool   // already in the store: nothing to do
	Final   bool   // last report for this layer
}

// Result describes a finished import.
type Result struct {
	// Manifest is the saved template.
	Manifest layers.Manifest
	// Digest is the image manifest digest (the image ID, i.e. the
	// config digest, for docker archives).
	Digest string
	// Layers is the number of layers; Reused of them were already
	// stored and cost nothing.
	Layers, Reused int
	// Bytes were read from the source for the new layers.
	Bytes int64
}

// Pull imports the image ref (for example "docker.io/library/alpine:3.20"
// or "127.0.0.1:5000/img@sha256:...") from its registry as the template
// name.
func Pull(ctx context.Context, store *layers.Store, name, ref string, opts Options) (Result, error) {
	if err := checkName(store, name, opts.Replace); err != nil {
		return Result{}, err
	}
	img, src, err := remoteImage(ctx, ref, opts)
	if err != nil {
		return Result{}, err
	}
	res, err := importImage(ctx, store, name, img, src, opts)
	if err != nil {
		return Result{}, registryError(ctx, src.ref, err)
	}
	return res, nil
}

// PullInto is Pull without a template: it stores the layers of the image
// ref that the store lacks, pins every layer of the image with lease, and
// returns the manifest a template of the image would have (Name empty,
// not saved). Template builders use it for their base image.
func PullInto(ctx context.Context, lease *layers.Lease, ref string, opts Options) (Result, error) {
	if lease == nil {
		return Result{}, fmt.Errorf("import: nil lease: %w", errdefs.ErrInvalidArgument)
	}
	img, src, err := remoteImage(ctx, ref, opts)
	if err != nil {
		return Result{}, err
	}
	m, res, err := fetchImage(ctx, lease, img, src, opts)
	if err != nil {
		return Result{}, registryError(ctx, src.ref, err)
	}
	res.Manifest = m
	return res, nil
}

// remoteImage resolves ref in its registry to one image (an index to the
// platform's image).
func remoteImage(ctx context.Context, ref string, opts Options) (v1.Image, imageSource, error) {
	r, err := parseRef(ref, opts.Insecure)
	if err != nil {
		return nil, imageSource{}, err
	}
	plat, err := platform(opts.Platform)
	if err != nil {
		return nil, imageSource{}, err
	}
	ropts, err := remoteOptions(ctx, r, plat, opts)
	if err != nil {
		return nil, imageSource{}, err
	}
	desc, err := remote.Get(r, ropts...)
	if err != nil {
		return nil, imageSource{}, registryError(ctx, r.String(), err)
	}
	var img v1.Image
	if desc.MediaType.IsIndex() {
		idx, ierr := desc.ImageIndex()
		if ierr != nil {
			return nil, imageSource{}, registryError(ctx, r.String(), ierr)
		}
		img, err = selectFromIndex(idx, "", plat, 0)
	} else {
		img, err = desc.Image()
	}
	if err != nil {
		return nil, imageSource{}, registryError(ctx, r.String(), err)
	}
	digest, err := img.Digest()
	if err != nil {
		return nil, imageSource{}, registryError(ctx, r.String(), err)
	}
	source := r.Name()
	if !strings.Contains(source, "@") {
		source += "@" + digest.String()
	}
	return img, imageSource{desc: source, digest: digest.String(), platform: plat, compressed: true, ref: r.String()}, nil
}

// ImportArchive imports an image from a `docker save` archive at path as
// the template name. tag picks the image in an archive that holds
// several ("repo:tag"); empty means the only one.
func ImportArchive(ctx context.Context, store *layers.Store, name, path, tag string, opts Options) (Result, error) {
	if err := checkName(store, name, opts.Replace); err != nil {
		return Result{}, err
	}
	plat, err := platform(opts.Platform)
	if err != nil {
		return Result{}, err
	}
	var img v1.Image
	if tag == "" {
		img, err = tarball.ImageFromPath(path, nil)
	} else {
		t, terr := parseTag(tag)
		if terr != nil {
			return Result{}, terr
		}
		img, err = tarball.ImageFromPath(path, &t)
	}
	if err != nil {
		return Result{}, archiveError("docker archive", path, err)
	}
	// The config digest is the image ID; the manifest digest of an
	// archive with uncompressed layers would need every layer
	// compressed first.
	id, err := img.ConfigName()
	if err != nil {
		return Result{}, archiveError("docker archive", path, err)
	}
	desc := "docker-archive"
	if tag != "" {
		desc += ":" + tag
	}
	return importImage(ctx, store, name, img, imageSource{desc: desc + " (id " + id.String() + ")", digest: id.String(), platform: plat}, opts)
}

// ImportLayout imports an image from the OCI image layout directory dir
// as the template name. ref picks a manifest by its
// org.opencontainers.image.ref.name annotation (a tag or full name);
// empty means the only image, or the one for the platform.
func ImportLayout(ctx context.Context, store *layers.Store, name, dir, ref string, opts Options) (Result, error) {
	if err := checkName(store, name, opts.Replace); err != nil {
		return Result{}, err
	}
	plat, err := platform(opts.Platform)
	if err != nil {
		return Result{}, err
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return Result{}, archiveError("OCI layout", dir, err)
	}
	img, err := selectFromIndex(idx, ref, plat, 0)
	if err != nil {
		return Result{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return Result{}, archiveError("OCI layout", dir, err)
	}
	desc := "oci-layout"
	if ref != "" {
		desc += ":" + ref
	}
	return importImage(ctx, store, name, img, imageSource{desc: desc + "@" + digest.String(), digest: digest.String(), platform: plat, compressed: true}, opts)
}

// checkName validates name and, unless replace, fails early (before any
// download) when the template exists; Store.Put checks again.
func checkName(store *layers.Store, name string, replace bool) error {
	if store == nil {
		return fmt.Errorf("import: nil store: %w", errdefs.ErrInvalidArgument)
	}
	if err := layers.ValidateName(name); err != nil {
		return err
	}
	if _, err := store.Get(name); err == nil && !replace {
		return fmt.Errorf("template %q: %w", name, errdefs.ErrAlreadyExists)
	}
	return nil
}

// imageSource says how to read an image's layers.
type imageSource struct {
	desc     string      // Manifest.Source
	digest   string      // Result.Digest
	platform v1.Platform // wanted platform, checked against the config
	// compressed: read layers as stored (registry, layout). Otherwise
	// read them uncompressed (docker archives keep plain tars, which
	// go-containerregistry would otherwise compress first).
	compressed bool
	// ref is the registry reference, for error messages (pulls only).
	ref string
}

// importImage stores every layer of img that the store lacks and saves
// the template manifest.
func importImage(ctx context.Context, store *layers.Store, name string, img v1.Image, src imageSource, opts Options) (Result, error) {
	lease := store.NewLease()
	defer lease.Release()
	m, res, err := fetchImage(ctx, lease, img, src, opts)
	if err != nil {
		return Result{}, err
	}
	m.Name = name
	saved, err := store.Put(ctx, m, layers.PutOptions{Replace: opts.Replace})
	if err != nil {
		return Result{}, err
	}
	res.Manifest = saved
	return res, nil
}

// fetchImage stores every layer of img that the store lacks, pins all of
// them with lease and returns the template manifest (without a name).
func fetchImage(ctx context.Context, lease *layers.Lease, img v1.Image, src imageSource, opts Options) (layers.Manifest, Result, error) {
	if err := checkConfigSize(img, src); err != nil {
		return layers.Manifest{}, Result{}, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return layers.Manifest{}, Result{}, fmt.Errorf("read image config: %w", sourceError(err))
	}
	if cfg == nil {
		return layers.Manifest{}, Result{}, fmt.Errorf("image has no config: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkPlatform(cfg, src.platform); err != nil {
		return layers.Manifest{}, Result{}, err
	}
	imgLayers, err := img.Layers()
	if err != nil {
		return layers.Manifest{}, Result{}, fmt.Errorf("list image layers: %w", sourceError(err))
	}
	diffIDs := cfg.RootFS.DiffIDs
	switch {
	case len(imgLayers) == 0:
		return layers.Manifest{}, Result{}, fmt.Errorf("image has no layers: %w", errdefs.ErrInvalidArgument)
	case len(imgLayers) > layers.MaxLayers:
		return layers.Manifest{}, Result{}, fmt.Errorf("image has %d layers, at most %d are supported: %w", len(imgLayers), layers.MaxLayers, errdefs.ErrInvalidArgument)
	case len(diffIDs) != len(imgLayers):
		return layers.Manifest{}, Result{}, fmt.Errorf("image config lists %d layers but the manifest %d: %w", len(diffIDs), len(imgLayers), errdefs.ErrInvalidArgument)
	}

	res := Result{Digest: src.digest, Layers: len(imgLayers)}
	budget := opts.MaxImageBytes
	if budget <= 0 {
		budget = DefaultMaxImageBytes
	}
	m := layers.Manifest{Source: src.desc, Config: imageConfig(cfg)}
	for i, l := range imgLayers {
		diffID := diffIDs[i].String()
		if _, err := layers.ParseDiffID(diffID); err != nil {
			return layers.Manifest{}, Result{}, fmt.Errorf("layer %d: %w", i+1, err)
		}
		m.Layers = append(m.Layers, diffID)
		p := Progress{Layer: i + 1, Layers: len(imgLayers), DiffID: diffID}
		have, err := lease.Has(diffID)
		if err != nil {
			return layers.Manifest{}, Result{}, err
		}
		if have {
			res.Reused++
			p.Skipped, p.Final = true, true
			report(opts.Progress, p)
			continue
		}
		info, n, err := importLayer(ctx, lease, l, p, src, opts, budget)
		res.Bytes += n
		if err != nil {
			return layers.Manifest{}, Result{}, fmt.Errorf("layer %d of %d: %w", i+1, len(imgLayers), err)
		}
		budget -= info.Size
	}
	return m, res, nil
}

// importLayer streams one layer into the store.
func importLayer(ctx context.Context, lease *layers.Lease, l v1.Layer, p Progress, src imageSource, opts Options, budget int64) (layers.LayerInfo, int64, error) {
	if budget <= 0 {
		return layers.LayerInfo{}, 0, fmt.Errorf("image is larger than the %d-byte limit: %w", opts.maxImageBytes(), errdefs.ErrResourceExhausted)
	}
	var rc io.ReadCloser
	var err error
	if src.compressed {
		mt, err := l.MediaType()
		if err != nil {
			return layers.LayerInfo{}, 0, sourceError(err)
		}
		if err := checkLayerType(mt); err != nil {
			return layers.LayerInfo{}, 0, err
		}
		if p.Total, err = l.Size(); err != nil {
			return layers.LayerInfo{}, 0, sourceError(err)
		}
		rc, err = l.Compressed()
		if err != nil {
			return layers.LayerInfo{}, 0, fmt.Errorf("open: %w", sourceError(err))
		}
	} else if rc, err = l.Uncompressed(); err != nil {
		return layers.LayerInfo{}, 0, fmt.Errorf("open: %w", sourceError(err))
	}
	defer rc.Close()

	stall := opts.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	pr := newProgressReader(ctx, rc, p, opts.Progress, stall, cancel)
	defer pr.stop()
	report(opts.Progress, p)

	lim := opts.Limits
	if lim.MaxBytes <= 0 {
		lim.MaxBytes = layers.DefaultLimits.MaxBytes
	}
	lim.MaxBytes = min(lim.MaxBytes, budget)
	info, err := lease.Extract(ctx, pr, layers.ExtractOptions{
		DiffID: p.DiffID, Limits: lim, AllowSetuid: opts.AllowSetuid, StripSetuid: opts.StripSetuid,
	})
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errStalled) {
			return info, pr.n, fmt.Errorf("download stalled for %v: %w", stall, errdefs.ErrTimeout)
		}
		return info, pr.n, err
	}
	pr.final()
	return info, pr.n, nil
}

func (o Options) maxImageBytes() int64 {
	if o.MaxImageBytes > 0 {
		return o.MaxImageBytes
	}
	return DefaultMaxImageBytes
}

func report(f func(Progress), p Progress) {
	if f != nil {
		f(p)
	}
}

// checkConfigSize refuses an oversized config blob before
// go-containerregistry reads it into memory.
func checkConfigSize(img v1.Image, src imageSource) error {
	if !src.compressed {
		return nil // docker archive: a local file, read through tar
	}
	mf, err := img.Manifest()
	if err != nil {
		return fmt.Errorf("read image manifest: %w", sourceError(err))
	}
	if mf.Config.Size > maxConfigBytes {
		return fmt.Errorf("image config is %d bytes, more than the %d allowed: %w", mf.Config.Size, maxConfigBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// checkLayerType accepts the tar layer media types, plain, gzip or zstd.
// Foreign and non-distributable layers (fetched from URLs the manifest
// names) are refused.
func checkLayerType(mt types.MediaType) error {
	switch mt {
	case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCILayerZStd, types.OCIUncompressedLayer:
		return nil
	}
	return fmt.Errorf("unsupported layer media type %q: %w", truncate(string(mt), 100), errdefs.ErrNotSupported)
}

// imageConfig keeps the parts of the image config a sandbox uses.
func imageConfig(cfg *v1.ConfigFile) layers.Config {
	c := cfg.Config
	wd := c.WorkingDir
	if wd != "" {
		wd = path.Clean("/" + wd) // Docker resolves a relative WORKDIR from /
	}
	return layers.Config{Env: c.Env, Workdir: wd, User: c.User, Cmd: c.Cmd, Entrypoint: c.Entrypoint}
}

// platform parses "os/arch[/variant]", defaulting to linux/GOARCH.
func platform(s string) (v1.Platform, error) {
	if s == "" {
		return v1.Platform{OS: "linux", Architecture: goruntime.GOARCH}, nil
	}
	p, err := v1.ParsePlatform(s)
	if err != nil || p.OS == "" || p.Architecture == "" || len(s) > 100 {
		return v1.Platform{}, fmt.Errorf("platform %q: want os/arch[/variant]: %w", truncate(s, 100), errdefs.ErrInvalidArgument)
	}
	if p.OS != "linux" {
		return v1.Platform{}, fmt.Errorf("platform %q: sandboxes run Linux images only: %w", truncate(s, 100), errdefs.ErrInvalidArgument)
	}
	return *p, nil
}

// checkPlatform refuses an image built for another platform (an image
// without platform fields in its config is accepted).
func checkPlatform(cfg *v1.ConfigFile, want v1.Platform) error {
	if cfg.OS == "" && cfg.Architecture == "" {
		return nil
	}
	have := v1.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
	if !have.Satisfies(v1.Platform{OS: want.OS, Architecture: want.Architecture, Variant: want.Variant}) {
		return fmt.Errorf("image is for %s, not %s: %w", have.String(), want.String(), errdefs.ErrNotFound)
	}
	return nil
}

// truncate shortens s for messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
