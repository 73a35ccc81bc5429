package registry

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// Template describes a template as one caller sees it.
type Template struct {
	// Name is the name the caller knows it by: its store name less the
	// owner.
	Name string
	// Source says where a stored template came from; "built-in" for
	// the daemon's own templates, "built-in: WHAT" for one that says
	// what it is made of (the host template).
	Source  string
	Builtin bool
	// Shared is true for a template every tenant sees (built-in ones and
	// the operator's), false for one of the caller's tenant.
	Shared bool
	// Layers counts the distinct layers; Size is their total size and
	// SharedBytes the part of it in layers other templates the caller
	// sees use too.
	Layers      int
	Size        int64
	SharedBytes int64
	// Created is when the template was stored, or for a built-in one
	// when it was built (zero: unknown).
	Created time.Time
}

// Detail is one template with its layers and configuration.
type Detail struct {
	Template
	// LayerList are the layers, lowest first.
	LayerList []Layer
	// Config holds the defaults of the template's sandboxes (zero for a
	// built-in template).
	Config layers.Config
}

// Layer is one layer of a template.
type Layer struct {
	Digest string
	Size   int64
	Files  int64
	// Shared is true when another template the caller sees uses the
	// layer too.
	Shared bool
}

// Usage is the disk use of layers.
type Usage struct {
	Layers       int
	Bytes        int64
	SharedLayers int
	SharedBytes  int64
	UnusedLayers int
	UnusedBytes  int64
}

// List returns the templates owner sees: the built-in ones, the shared
// stored ones and owner's own, by name (an own template before the shared
// one it hides), with the disk use of their layers.
func (s *Service) List(owner string) ([]Template, Usage) {
	v := s.view(owner)
	var out []Template
	for _, name := range s.builtins() {
		out = append(out, s.builtin(name))
	}
	for _, m := range v.manifests {
		out = append(out, v.entry(m))
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return !a.Shared && b.Shared
	})
	return out, v.usage()
}

// StoreUsage is the disk use of the whole store, every namespace's
// templates and the layers no template uses.
func (s *Service) StoreUsage() Usage {
	u := s.cfg.Store.Usage()
	return Usage{Layers: u.Layers, Bytes: u.Bytes, SharedLayers: u.SharedLayers, SharedBytes: u.SharedBytes,
		UnusedLayers: u.UnusedLayers, UnusedBytes: u.UnusedBytes}
}

// Get returns owner's template name, else the built-in or shared one of
// that name (only those with sharedOnly). Anything else, another tenant's
// template included, is ErrNotFound with the same message.
func (s *Service) Get(owner, name string, sharedOnly bool) (Detail, error) {
	r, err := s.resolve(owner, name, sharedOnly)
	if err != nil {
		return Detail{}, err
	}
	if r.builtin {
		return Detail{Template: s.builtin(name), LayerList: []Layer{}}, nil
	}
	return s.view(owner).detail(r.manifest), nil
}

// storedSource is what a Registry source backed by the store offers
// (*template.Stored).
type storedSource interface {
	Manifest() (layers.Manifest, error)
}

func templateNotFound(name string) error {
	return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
}

// displayName is the name a caller knows a template by: its store name
// less the owner.
func displayName(storeName string) string {
	_, name := template.SplitStoreName(storeName)
	return name
}

// visibleTo reports whether the template with this store name is one
// owner sees: a shared one or its own.
func visibleTo(owner, storeName string) bool {
	o, _ := template.SplitStoreName(storeName)
	return o == "" || o == owner
}

// view is the part of the store one caller sees: the shared templates and
// its tenant's, with their layers' reference counts among them.
type view struct {
	s         *Service
	manifests []layers.Manifest
	refs      map[string]int // diff ID -> templates of the view that use it
}

// view returns owner's view of the store (built-in names excluded, as the
// registry does not offer a stored template that has one).
func (s *Service) view(owner string) *view {
	builtin := make(map[string]bool)
	for _, name := range s.builtins() {
		builtin[name] = true
	}
	v := &view{s: s, refs: make(map[string]int)}
	for _, m := range s.cfg.Store.List() {
		if !visibleTo(owner, m.Name) || builtin[m.Name] {
			continue
		}
		v.manifests = append(v.manifests, m)
		seen := make(map[string]bool)
		for _, d := range m.Layers {
			if !seen[d] {
				seen[d] = true
				v.refs[d]++
			}
		}
	}
	return v
}

// layerSize is the size of a stored layer, 0 if it is gone.
func (v *view) layerSize(d string) int64 {
	info, err := v.s.cfg.Store.Layer(d)
	if err != nil {
		return 0
	}
	return info.Size
}

// entry is the list entry of m: its distinct layers, and the bytes of
// those another template of the view uses too.
func (v *view) entry(m layers.Manifest) Template {
	owner, name := template.SplitStoreName(m.Name)
	out := Template{Name: name, Source: m.Source, Shared: owner == "", Size: m.Size, Created: m.Created.UTC()}
	seen := make(map[string]bool)
	for _, d := range m.Layers {
		if seen[d] {
			continue
		}
		seen[d] = true
		out.Layers++
		if v.refs[d] > 1 {
			out.SharedBytes += v.layerSize(d)
		}
	}
	return out
}

// usage is the disk use of the view's layers (nothing is unused in it).
func (v *view) usage() Usage {
	var u Usage
	for d, n := range v.refs {
		size := v.layerSize(d)
		u.Layers++
		u.Bytes += size
		if n > 1 {
			u.SharedLayers++
			u.SharedBytes += size
		}
	}
	return u
}

// detail describes m, a template of the view.
func (v *view) detail(m layers.Manifest) Detail {
	out := Detail{Template: v.entry(m), Config: m.Config}
	out.LayerList = make([]Layer, 0, len(m.Layers))
	for _, d := range m.Layers {
		l := Layer{Digest: d, Shared: v.refs[d] > 1}
		if info, err := v.s.cfg.Store.Layer(d); err == nil {
			l.Size, l.Files = info.Size, info.Files
		}
		out.LayerList = append(out.LayerList, l)
	}
	return out
}

// builtin describes a built-in template; one that says what it is made of
// and when it was built (the host template) says so in Source and
// Created.
func (s *Service) builtin(name string) Template {
	out := Template{Name: name, Source: "built-in", Builtin: true, Shared: true}
	if src, err := s.cfg.Registry.Get(name); err == nil {
		if p, ok := src.(interface {
			Provenance() (string, time.Time)
		}); ok {
			what, built := p.Provenance()
			out.Source = "built-in: " + what
			out.Created = built
		}
	}
	return out
}

// builtins returns the names of the registry's templates that are not in
// the store (host, dir sources).
func (s *Service) builtins() []string {
	var out []string
	for _, src := range s.cfg.Registry.List() {
		if _, ok := src.(storedSource); !ok {
			out = append(out, src.Name())
		}
	}
	return out
}

// isBuiltin reports whether name is a built-in template's.
func (s *Service) isBuiltin(name string) bool {
	src, err := s.cfg.Registry.Get(name)
	if err != nil {
		return false
	}
	_, stored := src.(storedSource)
	return !stored
}

// resolved is a template a request names, as found for its caller.
type resolved struct {
	storeName string
	builtin   bool
	manifest  layers.Manifest // of a stored template
}

// resolve finds name for owner: its own stored template (unless
// sharedOnly), else a built-in one, else a shared stored one. Anything
// else, another tenant's template included, is ErrNotFound with the same
// message.
func (s *Service) resolve(owner, name string, sharedOnly bool) (resolved, error) {
	if !sharedOnly {
		own := template.StoreName(owner, name)
		if m, err := s.cfg.Store.Get(own); err == nil {
			return resolved{storeName: own, manifest: m}, nil
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return resolved{}, err
		}
	}
	if s.isBuiltin(name) {
		return resolved{storeName: name, builtin: true}, nil
	}
	m, err := s.cfg.Store.Get(name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return resolved{}, templateNotFound(name)
		}
		return resolved{}, err
	}
	return resolved{storeName: name, manifest: m}, nil
}
