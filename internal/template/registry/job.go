package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// airfileName is the recipe's name at the root of a build context.
const airfileName = "Airfile"

// Job is one build or import, from the reservation of its name and build
// slot (Reserve) until its template is registered or it fails. It may
// receive one upload (ReceiveContext or ReceiveImage) into a private
// directory, then runs once (Build or Import). Close gives the name and
// the slot back and removes the directory; Build and Import close the job
// before they return, so that a client told the outcome can retry at once
// and find everything cleaned up. A Job is used by one goroutine.
type Job struct {
	s           *Service
	owner, name string
	dir         string // the private directory, once made
	contextDir  string // the unpacked build context, if received
	image       ImportRequest
	closeOnce   sync.Once
}

// Reserve reserves name in owner's namespace ("" for the shared one) for
// a build or an import, after checking that it is free there (or, with
// replace, stored there), that it is not a built-in template's, and that
// a build slot is free: ErrAlreadyExists or ErrResourceExhausted
// otherwise. The caller must Close the job.
func (s *Service) Reserve(owner, name string, replace bool) (*Job, error) {
	storeName := template.StoreName(owner, name)
	if s.isBuiltin(name) {
		return nil, fmt.Errorf("template %s is built in and cannot be replaced or hidden: %w", name, errdefs.ErrAlreadyExists)
	}
	if _, err := s.cfg.Store.Get(storeName); err == nil && !replace {
		return nil, fmt.Errorf("template %s already exists; remove it first or replace it: %w", name, errdefs.ErrAlreadyExists)
	}
	s.bmu.Lock()
	defer s.bmu.Unlock()
	if s.building[storeName] {
		return nil, fmt.Errorf("template %s is being built by another request: %w", name, errdefs.ErrAlreadyExists)
	}
	if len(s.building) >= s.cfg.MaxBuilds {
		return nil, fmt.Errorf("%d template builds are running, the most this server runs at once; try again later: %w",
			len(s.building), errdefs.ErrResourceExhausted)
	}
	s.building[storeName] = true
	return &Job{s: s, owner: owner, name: name}, nil
}

// Close gives the job's name and build slot back and removes its
// directory. It may be called more than once.
func (j *Job) Close() {
	j.closeOnce.Do(func() {
		if j.dir != "" {
			if err := os.RemoveAll(j.dir); err != nil {
				j.s.log.Warn("removing a template job's directory", "template", j.name, "err", err)
			}
		}
		j.s.bmu.Lock()
		delete(j.s.building, template.StoreName(j.owner, j.name))
		j.s.bmu.Unlock()
	})
}

// mkdir makes the job's private directory under Config.ContextDir, for
// an upload of kind ("context", "import").
func (j *Job) mkdir(kind string) (string, error) {
	if j.dir != "" {
		return "", fmt.Errorf("template job %s received a second upload: %w", j.name, errdefs.ErrFailedPrecondition)
	}
	dir, err := os.MkdirTemp(j.s.cfg.ContextDir, kind+"-")
	if err != nil {
		return "", fmt.Errorf("%s directory: %w", kind, err)
	}
	j.dir = dir
	return dir, nil
}

// Context is a received build context.
type Context struct {
	// Airfile is the recipe at the context's root.
	Airfile []byte
	// Entries and Bytes count the tar entries and the bytes of file
	// content unpacked.
	Entries, Bytes int64
}

// ReceiveContext unpacks the build context r (a plain tar stream with the
// Airfile at its root) into the job's directory through the layer
// extractor's tree policy (layers.ExtractTree), capped at
// Config.MaxContextBytes and MaxContextFiles, and returns its Airfile. The
// directory is what Build hands the builder. Refused without
// Config.ContextDir (ErrNotSupported).
func (j *Job) ReceiveContext(ctx context.Context, r io.Reader) (Context, error) {
	if _, err := j.s.MaxContextBytes(); err != nil {
		return Context{}, err
	}
	dir, err := j.mkdir("context")
	if err != nil {
		return Context{}, err
	}
	st, err := layers.ExtractTree(ctx, dir, r, layers.TreeOptions{
		Name: "build context", MaxEntries: j.s.cfg.MaxContextFiles, MaxBytes: j.s.cfg.MaxContextBytes,
	})
	if err != nil {
		return Context{}, err
	}
	text, err := readContextAirfile(dir)
	if err != nil {
		return Context{}, err
	}
	j.contextDir = dir
	return Context{Airfile: text, Entries: st.Entries, Bytes: st.Bytes}, nil
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
		return nil, airfileError(err)
	case !fi.Mode().IsRegular():
		return nil, invalidf("the build context's %s is not a regular file", airfileName)
	case fi.Size() > airfile.MaxFileBytes:
		return nil, invalidf("the %s is larger than %d bytes", airfileName, airfile.MaxFileBytes)
	}
	f, err := root.Open(airfileName)
	if err != nil {
		return nil, airfileError(err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, airfile.MaxFileBytes+1))
	if err != nil {
		return nil, airfileError(err)
	}
	return b, nil
}

// airfileError describes a failure to read the context's Airfile without
// host paths (an os.Root error names the relative path only; its cause is
// enough).
func airfileError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return invalidf("build context entry %q could not be unpacked: %s", airfileName, err)
}

// invalidf is an invalid-argument error.
func invalidf(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), errdefs.ErrInvalidArgument)
}

// Build runs req as the job's build (its Name and Owner are the job's, its
// ContextDir the received context, if any) within Config.BuildTimeout,
// registers the template, closes the job and returns the template as its
// owner sees it. events is as in Builder.
func (j *Job) Build(ctx context.Context, req BuildRequest, events func(Event)) (Detail, error) {
	req.Name, req.Owner, req.ContextDir = j.name, j.owner, j.contextDir
	return j.run(ctx, func(ctx context.Context) (layers.Manifest, error) {
		return j.s.cfg.Builder.Build(ctx, req, events)
	})
}

// run runs produce within the build timeout, registers what it stored,
// closes the job and describes the template.
func (j *Job) run(ctx context.Context, produce func(ctx context.Context) (layers.Manifest, error)) (Detail, error) {
	defer j.Close()
	bctx, cancel := context.WithTimeout(ctx, j.s.cfg.BuildTimeout)
	defer cancel()
	m, err := produce(bctx)
	if err == nil {
		err = j.s.register(ctx, template.StoreName(j.owner, j.name))
	}
	j.Close()
	if err != nil {
		return Detail{}, err
	}
	return j.s.view(j.owner).detail(m), nil
}

// register adds the freshly stored template (by store name) to the
// registry. A template whose owner was deleted during the build is
// removed instead.
func (s *Service) register(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, err := s.cfg.Store.Get(name); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("template %s was removed while it was being built: %w", displayName(name), errdefs.ErrFailedPrecondition)
		}
		return err
	}
	if owner, _ := template.SplitStoreName(name); owner != "" && s.cfg.OwnerGone != nil {
		gone, err := s.cfg.OwnerGone(ctx, owner)
		if err != nil {
			return err
		}
		if gone {
			_, rerr := s.cfg.Store.Remove(context.WithoutCancel(ctx), name)
			_ = s.cfg.Registry.Remove(name)
			if rerr != nil && !errors.Is(rerr, errdefs.ErrNotFound) {
				return fmt.Errorf("the tenant was deleted during the build; removing its template: %w", rerr)
			}
			return fmt.Errorf("the tenant was deleted during the build: %w", errdefs.ErrNotFound)
		}
	}
	src, err := s.cfg.Source(name)
	if err != nil {
		return fmt.Errorf("register template %s: %w", displayName(name), err)
	}
	err = s.cfg.Registry.Add(src)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		// Registered already (by the builder, or a retried
		// registration): fine if that source is the stored one.
		if old, gerr := s.cfg.Registry.Get(name); gerr == nil {
			if _, ok := old.(storedSource); ok {
				return nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("register template %s: %w", displayName(name), err)
	}
	return nil
}

// Removal is a template Delete is about to remove.
type Removal struct {
	// Shared is true for a shared template, false for the caller's own.
	Shared bool
	// Source and Layers are its manifest's.
	Source string
	Layers []string
}

// Delete removes owner's template name (with sharedOnly, or when owner
// has none of that name, the shared one) from the store and the registry,
// and deletes the layers no other template uses. approve is called with
// the template once it is found, before anything is removed; its error
// stops the removal (the caller's authorization and audit record). A
// template that a sandbox uses (ErrFailedPrecondition) and a built-in
// one stay. A registered template whose manifest is gone is dropped from
// the registry, and reported ErrNotFound.
func (s *Service) Delete(ctx context.Context, owner, name string, sharedOnly bool, approve func(Removal) error) (layers.Freed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, err := s.resolve(owner, name, sharedOnly)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			// A stored source whose manifest is gone: drop it.
			for _, sn := range []string{template.StoreName(owner, name), name} {
				if src, rerr := s.cfg.Registry.Get(sn); rerr == nil {
					if _, ok := src.(storedSource); ok {
						_ = s.cfg.Registry.Remove(sn)
					}
				}
			}
		}
		return layers.Freed{}, err
	}
	if r.builtin {
		return layers.Freed{}, fmt.Errorf("template %s is built in and cannot be removed: %w", name, errdefs.ErrFailedPrecondition)
	}
	if err := approve(Removal{Shared: r.storeName == name, Source: r.manifest.Source, Layers: r.manifest.Layers}); err != nil {
		return layers.Freed{}, err
	}
	freed, err := s.cfg.Store.Remove(context.WithoutCancel(ctx), r.storeName)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return layers.Freed{}, templateNotFound(name)
		}
		return layers.Freed{}, err
	}
	if err := s.cfg.Registry.Remove(r.storeName); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return freed, err
	}
	return freed, nil
}

// RemoveOwner removes every template of owner (a deleted tenant) from the
// store and the registry, and reports how many and what was freed. It
// stops at the first failure (a template in use).
func (s *Service) RemoveOwner(ctx context.Context, owner string) (int, layers.Freed, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var total layers.Freed
	n := 0
	for _, m := range s.cfg.Store.List() {
		if o, _ := template.SplitStoreName(m.Name); o != owner {
			continue
		}
		freed, err := s.cfg.Store.Remove(ctx, m.Name)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return n, total, fmt.Errorf("remove template %s: %w", displayName(m.Name), err)
		}
		if err := s.cfg.Registry.Remove(m.Name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return n, total, err
		}
		n++
		total.Layers += freed.Layers
		total.Bytes += freed.Bytes
	}
	return n, total, nil
}

// HasOwner reports whether owner has a stored template.
func (s *Service) HasOwner(owner string) bool {
	for _, m := range s.cfg.Store.List() {
		if o, _ := template.SplitStoreName(m.Name); o == owner {
			return true
		}
	}
	return false
}
