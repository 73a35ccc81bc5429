// Package layers is Airlock's content-addressed store of template layers
// and template manifests.
//
// A layer is the unpacked contents of one OCI layer tar, kept as a
// directory named after its diff ID (the SHA-256 of the uncompressed tar)
// and used read-only as an overlayfs lower directory by every sandbox of
// every template that lists it. A template manifest names its layers,
// lowest first, and carries the image defaults (env, workdir, user, cmd).
//
// On-disk layout under the store root (the daemon passes
// <data-dir>/templates):
//
//	layers/sha256/<hex>/fs          the unpacked layer (overlay lower dir)
//	layers/sha256/<hex>/layer.json  LayerInfo
//	templates/<name>.json           Manifest
//	tmp/                            extractions in progress and layers
//	                                being deleted; emptied by Open
//
// A layer is unpacked into tmp/ and renamed into place only once its
// digest is verified, so a crash leaves nothing but tmp/ debris. Layers
// are reference counted by the manifests that list them: removing a
// template deletes the layers no other template uses. A Lease pins the
// layers of a template being assembled until its manifest is saved.
//
// Unpacking never writes outside the layer directory: see Lease.Extract
// for the rules a layer tar must follow.
package layers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Directory and file names under the store root.
const (
	layersDir    = "layers/sha256"
	templatesDir = "templates"
	tmpDir       = "tmp"
	layerFS      = "fs"
	layerMeta    = "layer.json"
	maxMetaBytes = 4 << 20
)

// Options configure a Store.
type Options struct {
	// InUse reports whether a running sandbox uses the named template;
	// such a template cannot be removed or replaced. It is called with
	// the store's lock held and must not call back into the Store. nil
	// means no template is ever in use.
	InUse func(name string) bool
	// Logger receives warnings about damaged store entries; nil
	// discards them.
	Logger *slog.Logger
}

// LayerInfo describes one stored layer.
type LayerInfo struct {
	DiffID  string    `json:"diff_id"` // sha256:<hex> of the uncompressed tar
	Size    int64     `json:"size"`    // bytes of regular file content written (entries a later one replaced included)
	Files   int64     `json:"files"`   // tar entries
	Created time.Time `json:"created"`
}

// Freed reports what a removal deleted from disk.
type Freed struct {
	Layers int   `json:"layers"`
	Bytes  int64 `json:"bytes"`
}

// PutOptions control Store.Put.
type PutOptions struct {
	// Replace allows overwriting an existing template of the same name
	// (unless it is in use). Its layers that nothing else uses are freed.
	Replace bool
}

// Store is a content-addressed layer and template store on one directory.
// It is safe for concurrent use by one process; two processes must not
// open the same root.
type Store struct {
	root  string
	log   *slog.Logger
	inUse func(string) bool

	mu        sync.Mutex
	templates map[string]Manifest
	layers    map[string]LayerInfo     // by diff ID
	pins      map[string]int           // diff ID -> number of leases holding it
	inflight  map[string]chan struct{} // diff IDs being extracted
}

// Open opens (creating if needed) the store at root, which must be an
// absolute clean path without ':', ',' or a backslash (overlayfs options
// cannot hold them). It empties tmp/ (debris of a crash), drops layer
// directories that are incomplete or damaged, and loads every template
// manifest; an unreadable manifest is an error. Layers that no template
// references stay until Prune.
func Open(root string, opts Options) (*Store, error) {
	if root == "" || !filepath.IsAbs(root) || filepath.Clean(root) != root {
		return nil, fmt.Errorf("template store path must be absolute and clean: %w", errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(root, ":,\\") {
		return nil, fmt.Errorf("template store path must not contain ':', ',' or '\\' (overlayfs options cannot hold them): %w", errdefs.ErrInvalidArgument)
	}
	s := &Store{
		root:      root,
		log:       opts.Logger,
		inUse:     opts.InUse,
		templates: make(map[string]Manifest),
		layers:    make(map[string]LayerInfo),
		pins:      make(map[string]int),
		inflight:  make(map[string]chan struct{}),
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	// Layer directories must be searchable by the sandboxes' user
	// namespaces, which mount them; nothing else needs to be.
	for _, d := range []struct {
		path string
		mode fs.FileMode
	}{
		{root, 0o711}, {filepath.Join(root, "layers"), 0o711}, {filepath.Join(root, layersDir), 0o711},
		{filepath.Join(root, templatesDir), 0o700}, {filepath.Join(root, tmpDir), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("template store: %w", err)
		}
	}
	if err := s.cleanTmp(); err != nil {
		return nil, err
	}
	if err := s.loadLayers(); err != nil {
		return nil, err
	}
	if err := s.loadTemplates(); err != nil {
		return nil, err
	}
	return s, nil
}

// Root is the store's directory.
func (s *Store) Root() string { return s.root }

func (s *Store) cleanTmp() error {
	dir := filepath.Join(s.root, tmpDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("template store: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("template store: clean up: %w", err)
		}
	}
	return nil
}

func (s *Store) loadLayers() error {
	dir := filepath.Join(s.root, layersDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("template store: %w", err)
	}
	for _, e := range ents {
		info, err := readLayerInfo(filepath.Join(dir, e.Name()))
		if err == nil && info.DiffID != "sha256:"+e.Name() {
			err = errors.New("layer.json names another digest")
		}
		if err != nil {
			s.log.Warn("template store: dropping damaged layer", "layer", e.Name(), "err", err)
			if _, err := s.trash(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
			continue
		}
		s.layers[info.DiffID] = info
	}
	return s.cleanTmp()
}

func readLayerInfo(dir string) (LayerInfo, error) {
	var info LayerInfo
	if _, err := ParseDiffID("sha256:" + filepath.Base(dir)); err != nil {
		return info, err
	}
	if fi, err := os.Lstat(filepath.Join(dir, layerFS)); err != nil || !fi.IsDir() {
		return info, errors.New("no fs directory")
	}
	if err := readJSON(filepath.Join(dir, layerMeta), &info); err != nil {
		return info, err
	}
	_, err := ParseDiffID(info.DiffID)
	return info, err
}

func (s *Store) loadTemplates() error {
	dir := filepath.Join(s.root, templatesDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("template store: %w", err)
	}
	for _, e := range ents {
		name, ok := strings.CutSuffix(e.Name(), ".json")
		if strings.HasPrefix(e.Name(), ".") {
			// An interrupted atomic write.
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("template store: %w", err)
			}
			continue
		}
		if !ok || !e.Type().IsRegular() {
			continue
		}
		var m Manifest
		if err := readJSON(filepath.Join(dir, e.Name()), &m); err != nil {
			return fmt.Errorf("template store: manifest %s: %w", e.Name(), err)
		}
		if err := m.Validate(); err != nil {
			return fmt.Errorf("template store: manifest %s: %w", e.Name(), err)
		}
		if m.Name != name {
			return fmt.Errorf("template store: manifest %s names template %q: %w", e.Name(), m.Name, errdefs.ErrInvalidArgument)
		}
		s.templates[name] = m
	}
	return nil
}

// readJSON decodes the small JSON file at path into v, refusing unknown
// fields.
func readJSON(path string, v any) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxMetaBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

// writeFileAtomic replaces dir/name with data: written to a temporary
// file, synced, renamed, and the directory synced.
func writeFileAtomic(dir, name string, data []byte) error {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func (s *Store) layerDir(diffID string) string {
	return filepath.Join(s.root, layersDir, strings.TrimPrefix(diffID, "sha256:"))
}

// trash moves path into tmp/ with one rename, so it leaves the store at
// once, and returns its new path for deletion (which the caller does
// without holding the lock; Open deletes leftovers).
func (s *Store) trash(path string) (string, error) {
	f, err := os.MkdirTemp(filepath.Join(s.root, tmpDir), "trash-")
	if err != nil {
		return "", fmt.Errorf("template store: %w", err)
	}
	if err := os.Rename(path, filepath.Join(f, "x")); err != nil {
		os.Remove(f)
		return "", fmt.Errorf("template store: %w", err)
	}
	return f, nil
}

// deleteAll removes the trashed directories.
func deleteAll(paths []string) error {
	var errs []error
	for _, p := range paths {
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, fmt.Errorf("template store: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Layer returns the stored layer diffID, or an error wrapping ErrNotFound.
func (s *Store) Layer(diffID string) (LayerInfo, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info, ok := s.layers[diffID]
	if !ok {
		return LayerInfo{}, fmt.Errorf("layer %s: %w", shortDigest(diffID), errdefs.ErrNotFound)
	}
	return info, nil
}

// LayerDir returns the directory holding the unpacked layer diffID (an
// overlayfs lower directory).
func (s *Store) LayerDir(diffID string) (string, error) {
	if _, err := s.Layer(diffID); err != nil {
		return "", err
	}
	return filepath.Join(s.layerDir(diffID), layerFS), nil
}

// Put saves the template manifest m after checking it and that every
// layer it lists is stored. Created defaults to now; Size is computed.
// A template of the same name is an error wrapping ErrAlreadyExists
// unless opts.Replace, and an in-use one cannot be replaced
// (ErrFailedPrecondition). It returns the saved manifest.
func (s *Store) Put(ctx context.Context, m Manifest, opts PutOptions) (Manifest, error) {
	if err := ctx.Err(); err != nil {
		return Manifest{}, ctxError(err)
	}
	m.Layers = slices.Clone(m.Layers)
	if m.Created.IsZero() {
		m.Created = time.Now().UTC()
	}
	if err := m.Validate(); err != nil {
		return Manifest{}, err
	}
	s.mu.Lock()
	m.Size = 0
	seen := make(map[string]bool)
	for _, d := range m.Layers {
		info, ok := s.layers[d]
		if !ok {
			s.mu.Unlock()
			return Manifest{}, fmt.Errorf("template %q: layer %s is not in the store: %w", m.Name, shortDigest(d), errdefs.ErrNotFound)
		}
		if !seen[d] {
			seen[d] = true
			m.Size += info.Size
		}
	}
	old, exists := s.templates[m.Name]
	if exists && !opts.Replace {
		s.mu.Unlock()
		return Manifest{}, fmt.Errorf("template %q: %w", m.Name, errdefs.ErrAlreadyExists)
	}
	if exists && s.inUse != nil && s.inUse(m.Name) {
		s.mu.Unlock()
		return Manifest{}, fmt.Errorf("template %q is in use by a running sandbox: %w", m.Name, errdefs.ErrFailedPrecondition)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err == nil {
		err = writeFileAtomic(filepath.Join(s.root, templatesDir), m.Name+".json", append(data, '\n'))
	}
	if err != nil {
		s.mu.Unlock()
		return Manifest{}, fmt.Errorf("template %q: save: %w", m.Name, err)
	}
	s.templates[m.Name] = m
	var (
		freed Freed
		trash []string
	)
	if exists {
		freed, trash, err = s.collectLocked(old.Layers)
	}
	s.mu.Unlock()
	err = errors.Join(err, deleteAll(trash))
	if err != nil {
		return m, fmt.Errorf("template %q saved, but freeing old layers failed: %w", m.Name, err)
	}
	if freed.Layers > 0 {
		s.log.Debug("template store: freed replaced layers", "template", m.Name, "layers", freed.Layers, "bytes", freed.Bytes)
	}
	return cloneManifest(m), nil
}

// Get returns the template called name, or an error wrapping ErrNotFound.
func (s *Store) Get(name string) (Manifest, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return Manifest{}, fmt.Errorf("template %q: %w", quoteName(name), errdefs.ErrNotFound)
	}
	return cloneManifest(m), nil
}

// List returns every stored template, sorted by name.
func (s *Store) List() []Manifest {
	s.mu.Lock()
	out := make([]Manifest, 0, len(s.templates))
	for _, m := range s.templates {
		out = append(out, cloneManifest(m))
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func cloneManifest(m Manifest) Manifest {
	m.Layers = slices.Clone(m.Layers)
	m.Config.Env = slices.Clone(m.Config.Env)
	m.Config.Cmd = slices.Clone(m.Config.Cmd)
	m.Config.Entrypoint = slices.Clone(m.Config.Entrypoint)
	if n := m.Config.Network; n != nil {
		c := *n
		c.Allow = slices.Clone(n.Allow)
		m.Config.Network = &c
	}
	m.Config.Toolsets = slices.Clone(m.Config.Toolsets)
	m.Config.CommandPolicy = ClonePolicy(m.Config.CommandPolicy)
	return m
}

// Remove deletes the template called name and the layers that no other
// template uses and no lease pins. It fails with ErrNotFound for an
// unknown template and ErrFailedPrecondition for one in use.
func (s *Store) Remove(ctx context.Context, name string) (Freed, error) {
	if err := ctx.Err(); err != nil {
		return Freed{}, ctxError(err)
	}
	freed, trash, err := s.remove(name)
	if err == nil {
		err = deleteAll(trash)
	}
	return freed, err
}

func (s *Store) remove(name string) (Freed, []string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return Freed{}, nil, fmt.Errorf("template %q: %w", quoteName(name), errdefs.ErrNotFound)
	}
	if s.inUse != nil && s.inUse(name) {
		return Freed{}, nil, fmt.Errorf("template %q is in use by a running sandbox: %w", name, errdefs.ErrFailedPrecondition)
	}
	dir := filepath.Join(s.root, templatesDir)
	if err := os.Remove(filepath.Join(dir, name+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Freed{}, nil, fmt.Errorf("template %q: remove: %w", name, err)
	}
	delete(s.templates, name)
	if err := syncDir(dir); err != nil {
		s.log.Warn("template store: sync templates directory", "err", err)
	}
	freed, trash, err := s.collectLocked(m.Layers)
	if err != nil {
		return freed, trash, fmt.Errorf("template %q removed, but freeing its layers failed: %w", name, err)
	}
	return freed, trash, nil
}

// Prune deletes every layer that no template references and no lease
// pins: leftovers of failed or interrupted imports.
func (s *Store) Prune(ctx context.Context) (Freed, error) {
	if err := ctx.Err(); err != nil {
		return Freed{}, ctxError(err)
	}
	s.mu.Lock()
	all := make([]string, 0, len(s.layers))
	for d := range s.layers {
		all = append(all, d)
	}
	freed, trash, err := s.collectLocked(all)
	s.mu.Unlock()
	return freed, errors.Join(err, deleteAll(trash))
}

// refsLocked counts the templates that reference each layer.
func (s *Store) refsLocked() map[string]int {
	refs := make(map[string]int)
	for _, m := range s.templates {
		seen := make(map[string]bool, len(m.Layers))
		for _, d := range m.Layers {
			if !seen[d] {
				seen[d] = true
				refs[d]++
			}
		}
	}
	return refs
}

// collectLocked takes out of the store those of candidates that are
// stored, referenced by no template and pinned by no lease, each with one
// rename into tmp/. s.mu must be held. It returns the trashed paths for
// the caller to delete once the lock is released.
func (s *Store) collectLocked(candidates []string) (Freed, []string, error) {
	refs := s.refsLocked()
	var (
		freed Freed
		trash []string
		errs  []error
	)
	for _, d := range candidates {
		info, ok := s.layers[d]
		if !ok || refs[d] > 0 || s.pins[d] > 0 {
			continue
		}
		t, err := s.trash(s.layerDir(d))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		trash = append(trash, t)
		delete(s.layers, d)
		freed.Layers++
		freed.Bytes += info.Size
	}
	return freed, trash, errors.Join(errs...)
}

// Rootfs returns the layer directories of the template called name,
// lowest first, ready to be stacked by overlayfs, and its manifest. A
// layer listed twice is kept only at its highest position (the lower copy
// can show nothing the upper one does not). It fails with ErrNotFound for
// an unknown template and ErrFailedPrecondition when a layer has gone
// missing from disk.
func (s *Store) Rootfs(ctx context.Context, name string) ([]string, Manifest, error) {
	if err := ctx.Err(); err != nil {
		return nil, Manifest{}, ctxError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.templates[name]
	if !ok {
		return nil, Manifest{}, fmt.Errorf("template %q: %w", quoteName(name), errdefs.ErrNotFound)
	}
	var dirs []string
	seen := make(map[string]bool)
	for i := len(m.Layers) - 1; i >= 0; i-- {
		d := m.Layers[i]
		if seen[d] {
			continue
		}
		seen[d] = true
		dir := filepath.Join(s.layerDir(d), layerFS)
		if _, ok := s.layers[d]; !ok {
			return nil, Manifest{}, fmt.Errorf("template %q: layer %s is missing; import the template again: %w", name, shortDigest(d), errdefs.ErrFailedPrecondition)
		}
		if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
			return nil, Manifest{}, fmt.Errorf("template %q: layer %s is missing on disk; import the template again: %w", name, shortDigest(d), errdefs.ErrFailedPrecondition)
		}
		dirs = append(dirs, dir)
	}
	slices.Reverse(dirs)
	return dirs, cloneManifest(m), nil
}
