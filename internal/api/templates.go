package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// TemplateStore is the store of imported and built templates, shared by
// every tenant. *layers.Store satisfies it.
type TemplateStore interface {
	// List returns every stored template, sorted by name.
	List() []layers.Manifest
	// Get returns the template called name, or ErrNotFound.
	Get(name string) (layers.Manifest, error)
	// Layer returns one stored layer, or ErrNotFound.
	Layer(diffID string) (layers.LayerInfo, error)
	// Usage reports the store's disk use.
	Usage() layers.Usage
	// Remove deletes a template and the layers nothing else uses; a
	// template in use by a sandbox is ErrFailedPrecondition.
	Remove(ctx context.Context, name string) (layers.Freed, error)
}

var _ TemplateStore = (*layers.Store)(nil)

// TemplateBuilder imports or builds one template into the TemplateStore:
// it pulls the base, runs the steps, saves the manifest and returns it.
// events, if not nil, is called with the build's progress (possibly from
// several goroutines, never after Build returns).
type TemplateBuilder interface {
	Build(ctx context.Context, req BuildRequest, events func(BuildEvent)) (layers.Manifest, error)
}

// BuildRequest is a template build as the API hands it to the builder.
type BuildRequest struct {
	// Name is the template's name (valid, and not taken when the build
	// starts unless Replace).
	Name string
	// Replace allows replacing a stored template of the same name (not
	// one in use by a sandbox, nor a built-in one).
	Replace bool
	// Airfile is the recipe (see package airfile), parsed once by the API.
	Airfile []byte
	// ContextDir holds the unpacked build context that COPY and ADD read
	// from; empty when the request had none (the Airfile then has no
	// COPY or ADD). It is removed once Build returns.
	ContextDir string
	// NoCache rebuilds every step instead of reusing cached layers.
	NoCache bool
	// AllowSetuid keeps set-user-ID and set-group-ID bits on files;
	// without it they are stripped (sandboxes mount their root nosuid,
	// so the bits would have no effect anyway).
	AllowSetuid bool
	// Registry holds the credentials for the base image's registry.
	Registry RegistryAuth
	// Insecure allows a plain-HTTP registry.
	Insecure bool
	// Limits are the template's default resource limits (zero fields
	// unset; a FROM template keeps its base's).
	Limits runtime.Limits
}

// RegistryAuth are credentials for an image registry: a username and
// password, or a bearer token, or nothing (anonymous).
type RegistryAuth struct {
	Username, Password, Token string
}

// BuildEvent is one progress report of a build.
type BuildEvent struct {
	// Type is "step" (a step starts), "cached" (a step's layer comes
	// from the cache), "log" (a line of a step's output), "progress"
	// (bytes of a layer being pulled or stored) or "done" (ignored: the
	// API sends its own once the template is registered).
	Type string
	// Step is the 1-based step of Steps that the event belongs to;
	// Instruction is its text.
	Step, Steps int
	Instruction string
	// Text is a line of output (log).
	Text string
	// Layer of Layers, Done and Total bytes (progress; Total 0 when
	// unknown).
	Layer, Layers int
	Done, Total   int64
}

// Templates configures the /v1/templates routes.
type Templates struct {
	// Registry is the set of templates sandboxes are created from; a
	// built template is added to it, a removed one taken out.
	Registry *template.Registry
	// Store holds the imported and built templates.
	Store TemplateStore
	// Builder builds and imports templates.
	Builder TemplateBuilder
	// Source returns the Registry source of the stored template name
	// (template.NewStored).
	Source func(name string) (template.Source, error)
	// ContextDir is where uploaded build contexts are unpacked, each in
	// a directory of its own that is removed after the build. Empty
	// means build contexts are refused (501 not_supported).
	ContextDir string
	// MaxContextBytes caps an uploaded build context (the tar stream).
	// Default 1 GiB.
	MaxContextBytes int64
	// MaxContextFiles caps the entries of a build context. Default
	// 100,000.
	MaxContextFiles int64
	// BuildTimeout bounds one build. Default 2 hours.
	BuildTimeout time.Duration
	// MaxBuilds caps the builds that run at once; more are refused with
	// 429 resource_exhausted. Default 2.
	MaxBuilds int
}

// Defaults of Templates.
const (
	defaultMaxContextBytes = 1 << 30
	defaultMaxContextFiles = 100_000
	defaultBuildTimeout    = 2 * time.Hour
	defaultMaxBuilds       = 2
)

// The audit actions of templates.
const (
	ActionTemplateBuild  = "template.build"
	ActionTemplateDelete = "template.delete"
)

// templateService serves the template routes.
type templateService struct {
	cfg Templates
	// mu orders registry changes with store removals, so that the
	// registry and the store agree after a build races a delete.
	mu sync.Mutex
	// bmu guards building.
	bmu      sync.Mutex
	building map[string]bool // names being built
}

// newTemplateService checks cfg; nil cfg means the routes are not served.
func newTemplateService(cfg *Templates) (*templateService, error) {
	if cfg == nil {
		return nil, nil
	}
	if cfg.Registry == nil || cfg.Store == nil || cfg.Builder == nil || cfg.Source == nil {
		return nil, fmt.Errorf("api: templates need a registry, a store, a builder and a source function: %w", errdefs.ErrInvalidArgument)
	}
	c := *cfg
	if c.MaxContextBytes <= 0 {
		c.MaxContextBytes = defaultMaxContextBytes
	}
	if c.MaxContextFiles <= 0 {
		c.MaxContextFiles = defaultMaxContextFiles
	}
	if c.BuildTimeout <= 0 {
		c.BuildTimeout = defaultBuildTimeout
	}
	if c.MaxBuilds <= 0 {
		c.MaxBuilds = defaultMaxBuilds
	}
	return &templateService{cfg: c, building: make(map[string]bool)}, nil
}

// templatesNotServed is the answer of the template routes without
// Config.Templates.
func templatesNotServed() error {
	return &apiError{status: http.StatusNotImplemented, code: CodeNotSupported, msg: "this server does not manage templates"}
}

// templateJSON is the wire form of a template in a list.
type templateJSON struct {
	Name string `json:"name"`
	// Source says where a stored template came from; "built-in" for the
	// daemon's own templates (host).
	Source  string `json:"source"`
	Builtin bool   `json:"builtin"`
	// Layers counts the distinct layers; Size is their total size and
	// SharedBytes the part of it in layers other templates use too.
	Layers      int        `json:"layers"`
	Size        int64      `json:"size"`
	SharedBytes int64      `json:"shared_bytes"`
	Created     *time.Time `json:"created"`
}

// templateDetailJSON is the wire form of one template.
type templateDetailJSON struct {
	templateJSON
	// LayerList are the layers, lowest first.
	LayerList []layerJSON `json:"layer_list"`
	// Config holds the defaults of the template's sandboxes.
	Config templateConfigJSON `json:"config"`
}

// layerJSON is one layer of a template.
type layerJSON struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
	Files  int64  `json:"files"`
	// Shared is true when another template uses the layer too.
	Shared bool `json:"shared"`
}

// templateConfigJSON is the image configuration a template keeps.
type templateConfigJSON struct {
	Env        []string `json:"env"`
	Workdir    string   `json:"workdir"`
	User       string   `json:"user"`
	Cmd        []string `json:"cmd"`
	Entrypoint []string `json:"entrypoint"`
	// Limits are the template's default limits, absent when it sets none.
	Limits *limitsJSON `json:"limits,omitempty"`
}

// usageJSON is the store's disk use.
type usageJSON struct {
	Layers       int   `json:"layers"`
	Bytes        int64 `json:"bytes"`
	SharedLayers int   `json:"shared_layers"`
	SharedBytes  int64 `json:"shared_bytes"`
	UnusedLayers int   `json:"unused_layers"`
	UnusedBytes  int64 `json:"unused_bytes"`
}

// templateListJSON is the body of GET /v1/templates.
type templateListJSON struct {
	Templates []templateJSON `json:"templates"`
	Usage     usageJSON      `json:"usage"`
}

// templateDeleteJSON is the body of DELETE /v1/templates/{name}.
type templateDeleteJSON struct {
	Name        string `json:"name"`
	FreedLayers int    `json:"freed_layers"`
	FreedBytes  int64  `json:"freed_bytes"`
}

// storedSource is what a Registry source backed by the store offers
// (*template.Stored).
type storedSource interface {
	Manifest() (layers.Manifest, error)
}

// templateName validates the {name} path value.
func templateName(c *call) (string, error) {
	name := c.r.PathValue("name")
	if err := template.ValidateName(name); err != nil {
		return "", invalidf("malformed template name; want %s", template.NamePattern)
	}
	return name, nil
}

func templateNotFound(name string) error {
	return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
}

func toUsageJSON(u layers.Usage) usageJSON {
	return usageJSON{Layers: u.Layers, Bytes: u.Bytes, SharedLayers: u.SharedLayers, SharedBytes: u.SharedBytes,
		UnusedLayers: u.UnusedLayers, UnusedBytes: u.UnusedBytes}
}

// storedJSON is the list entry of a stored template.
func storedJSON(m layers.Manifest, tu layers.TemplateUsage) templateJSON {
	created := m.Created.UTC()
	return templateJSON{Name: m.Name, Source: m.Source, Layers: tu.Layers, Size: m.Size, SharedBytes: tu.SharedBytes, Created: &created}
}

func builtinJSON(name string) templateJSON {
	return templateJSON{Name: name, Source: "built-in", Builtin: true}
}

// templateUsages indexes u's per-template shares by name.
func templateUsages(u layers.Usage) map[string]layers.TemplateUsage {
	out := make(map[string]layers.TemplateUsage, len(u.Templates))
	for _, tu := range u.Templates {
		out[tu.Name] = tu
	}
	return out
}

// builtins returns the names of the registry's templates that are not in
// the store (host, dir sources).
func (ts *templateService) builtins() []string {
	var out []string
	for _, src := range ts.cfg.Registry.List() {
		if _, ok := src.(storedSource); !ok {
			out = append(out, src.Name())
		}
	}
	return out
}

// detail is the wire form of the stored template m.
func (ts *templateService) detail(m layers.Manifest) templateDetailJSON {
	u := ts.cfg.Store.Usage()
	out := templateDetailJSON{templateJSON: storedJSON(m, templateUsages(u)[m.Name])}
	refs := make(map[string]int)
	for _, o := range ts.cfg.Store.List() {
		seen := make(map[string]bool)
		for _, d := range o.Layers {
			if !seen[d] {
				seen[d] = true
				refs[d]++
			}
		}
	}
	out.LayerList = make([]layerJSON, 0, len(m.Layers))
	for _, d := range m.Layers {
		l := layerJSON{Digest: d, Shared: refs[d] > 1}
		if info, err := ts.cfg.Store.Layer(d); err == nil {
			l.Size, l.Files = info.Size, info.Files
		}
		out.LayerList = append(out.LayerList, l)
	}
	out.Config = templateConfigJSON{
		Env: orEmpty(m.Config.Env), Workdir: m.Config.Workdir, User: m.Config.User,
		Cmd: orEmpty(m.Config.Cmd), Entrypoint: orEmpty(m.Config.Entrypoint),
	}
	if l := m.Config.Limits; l != (runtime.Limits{}) {
		lj := limitsToJSON(l)
		out.Config.Limits = &lj
	}
	return out
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// listTemplates serves GET /v1/templates: every template of the daemon
// (they are shared by all tenants) and the store's disk use.
func (h *Handler) listTemplates(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	if _, err := parseQuery(c.r.URL.RawQuery); err != nil {
		return err
	}
	u := ts.cfg.Store.Usage()
	shares := templateUsages(u)
	out := templateListJSON{Templates: []templateJSON{}, Usage: toUsageJSON(u)}
	builtin := make(map[string]bool)
	for _, name := range ts.builtins() {
		builtin[name] = true
		out.Templates = append(out.Templates, builtinJSON(name))
	}
	for _, m := range ts.cfg.Store.List() {
		if !builtin[m.Name] {
			out.Templates = append(out.Templates, storedJSON(m, shares[m.Name]))
		}
	}
	sort.Slice(out.Templates, func(i, j int) bool { return out.Templates[i].Name < out.Templates[j].Name })
	return c.json(http.StatusOK, out)
}

// getTemplate serves GET /v1/templates/{name}.
func (h *Handler) getTemplate(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	name, err := templateName(c)
	if err != nil {
		return err
	}
	if _, err := parseQuery(c.r.URL.RawQuery); err != nil {
		return err
	}
	if src, err := ts.cfg.Registry.Get(name); err == nil {
		if _, ok := src.(storedSource); !ok {
			out := templateDetailJSON{templateJSON: builtinJSON(name), LayerList: []layerJSON{},
				Config: templateConfigJSON{Env: []string{}, Cmd: []string{}, Entrypoint: []string{}}}
			return c.json(http.StatusOK, out)
		}
	}
	m, err := ts.cfg.Store.Get(name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return templateNotFound(name)
		}
		return err
	}
	return c.json(http.StatusOK, ts.detail(m))
}

// deleteTemplate serves DELETE /v1/templates/{name}: the template leaves
// the store and the registry, and the layers no other template uses are
// deleted. A template that a sandbox uses, and a built-in one, stay.
func (h *Handler) deleteTemplate(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	name, err := templateName(c)
	if err != nil {
		return err
	}
	c.ev.Target = name
	if _, err := parseQuery(c.r.URL.RawQuery); err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	m, err := ts.cfg.Store.Get(name)
	if err != nil {
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		if src, rerr := ts.cfg.Registry.Get(name); rerr == nil {
			if _, ok := src.(storedSource); !ok {
				return fmt.Errorf("template %s is built in and cannot be removed: %w", name, errdefs.ErrFailedPrecondition)
			}
			// A stored source whose manifest is gone: drop it.
			_ = ts.cfg.Registry.Remove(name)
		}
		return templateNotFound(name)
	}
	c.ev.Details = map[string]any{"source": m.Source, "layers": m.Layers}
	if err := c.begin(); err != nil {
		return err
	}
	freed, err := ts.cfg.Store.Remove(context.WithoutCancel(c.r.Context()), name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return templateNotFound(name)
		}
		return err
	}
	if err := ts.cfg.Registry.Remove(name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	c.ev.Details["freed_layers"] = freed.Layers
	c.ev.Details["freed_bytes"] = freed.Bytes
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, templateDeleteJSON{Name: name, FreedLayers: freed.Layers, FreedBytes: freed.Bytes})
}

// register adds the freshly stored template name to the registry.
func (ts *templateService) register(name string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, err := ts.cfg.Store.Get(name); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("template %s was removed while it was being built: %w", name, errdefs.ErrFailedPrecondition)
		}
		return err
	}
	src, err := ts.cfg.Source(name)
	if err != nil {
		return fmt.Errorf("register template %s: %w", name, err)
	}
	err = ts.cfg.Registry.Add(src)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		// Registered already (by a retried registration): fine if that
		// source is the stored one.
		if old, gerr := ts.cfg.Registry.Get(name); gerr == nil {
			if _, ok := old.(storedSource); ok {
				return nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("register template %s: %w", name, err)
	}
	return nil
}

// reserve marks name as being built, after checking that it is free (or,
// with replace, stored) and that a build slot is. release may be called
// more than once.
func (ts *templateService) reserve(name string, replace bool) (release func(), err error) {
	if src, err := ts.cfg.Registry.Get(name); err == nil {
		if _, ok := src.(storedSource); !ok {
			return nil, fmt.Errorf("template %s is built in and cannot be replaced: %w", name, errdefs.ErrAlreadyExists)
		}
	}
	if _, err := ts.cfg.Store.Get(name); err == nil && !replace {
		return nil, fmt.Errorf("template %s already exists; remove it first or replace it: %w", name, errdefs.ErrAlreadyExists)
	}
	ts.bmu.Lock()
	defer ts.bmu.Unlock()
	if ts.building[name] {
		return nil, fmt.Errorf("template %s is being built by another request: %w", name, errdefs.ErrAlreadyExists)
	}
	if len(ts.building) >= ts.cfg.MaxBuilds {
		return nil, fmt.Errorf("%d template builds are running, the most this server runs at once; try again later: %w",
			len(ts.building), errdefs.ErrResourceExhausted)
	}
	ts.building[name] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			ts.bmu.Lock()
			delete(ts.building, name)
			ts.bmu.Unlock()
		})
	}, nil
}
