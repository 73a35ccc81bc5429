package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// TemplateStore is the store of imported and built templates: the shared
// ones and every tenant's, each under its store name (template.StoreName;
// Manifest.Name is that store name). *layers.Store satisfies it.
type TemplateStore interface {
	// List returns every stored template, sorted by store name.
	List() []layers.Manifest
	// Get returns the template whose store name is name, or ErrNotFound.
	Get(name string) (layers.Manifest, error)
	// Layer returns one stored layer, or ErrNotFound.
	Layer(diffID string) (layers.LayerInfo, error)
	// Usage reports the store's disk use.
	Usage() layers.Usage
	// Remove deletes a template (by store name) and the layers nothing
	// else uses; a template in use by a sandbox is ErrFailedPrecondition.
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
	// Name is the template's name (valid, and not taken in its namespace
	// when the build starts unless Replace).
	Name string
	// Owner is the namespace: "" for a shared template (the operator's),
	// else the tenant whose template it is. The template is stored as
	// template.StoreName(Owner, Name), and a FROM template:NAME base
	// resolves as a sandbox's template does: the owner's own, else the
	// shared one.
	Owner string
	// Shared asks for a shared template (Owner ""); only the operator
	// may. It is the request's field, not the builder's.
	Shared bool
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
//
// Templates have namespaces: a tenant sees and uses its own templates and
// the shared ones (the built-in host, and those the operator builds), never
// another tenant's, which it is told about exactly as about a missing one.
// A name resolves to the tenant's own template first, then the shared one.
// A tenant key with templates:write builds and removes its tenant's
// templates; only the operator (auth.ScopeOperator) builds or removes
// shared ones and pulls images from registries (FROM IMAGE), which makes
// the daemon, as root, contact a host the Airfile names. Tenants build
// FROM template:NAME or DEBIAN (the operator's configured mirror).
type Templates struct {
	// Registry is the set of templates sandboxes are created from; a
	// built template is added to it, a removed one taken out.
	Registry *template.Registry
	// Store holds the imported and built templates.
	Store TemplateStore
	// Builder builds and imports templates.
	Builder TemplateBuilder
	// Source returns the Registry source of the stored template whose
	// store name is name (template.NewStored).
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
	// MaxBuilds caps the builds (imports included) that run at once;
	// more are refused with 429 resource_exhausted. Default 2.
	MaxBuilds int
	// Importer imports `docker save` archives and OCI layouts uploaded to
	// POST /v1/templates/{name}/import (into ContextDir); nil means
	// imports are refused (501 not_supported).
	Importer TemplateImporter
	// MaxImportBytes caps an uploaded image archive. Default 8 GiB.
	MaxImportBytes int64
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
	ActionTemplateImport = "template.import"
	ActionTemplateDelete = "template.delete"
)

// templateService serves the template routes.
type templateService struct {
	cfg Templates
	// ownerGone, if set, reports whether a template owner (a tenant) was
	// deleted, so that a build that finishes after its tenant's deletion
	// does not leave a template nobody can see.
	ownerGone func(ctx context.Context, owner string) (bool, error)
	// mu orders registry changes with store removals, so that the
	// registry and the store agree after a build races a delete.
	mu sync.Mutex
	// bmu guards building.
	bmu      sync.Mutex
	building map[string]bool // store names being built
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
	if c.MaxImportBytes <= 0 {
		c.MaxImportBytes = defaultMaxImportBytes
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
	// Shared is true for a template every tenant sees (built-in ones and
	// the operator's), false for one of the caller's tenant.
	Shared bool `json:"shared"`
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
	// Shared is true when another template the caller sees uses the
	// layer too.
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

// sharedParam parses the shared query parameter of GET and DELETE
// /v1/templates/{name}: true skips the caller's own template of that name.
func sharedParam(raw string) (bool, error) {
	q, err := parseQuery(raw, "shared")
	if err != nil {
		return false, err
	}
	if v := q.Get("shared"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return false, invalidf("shared must be true or false")
		}
		return b, nil
	}
	return false, nil
}

func templateNotFound(name string) error {
	return fmt.Errorf("template %s: %w", name, errdefs.ErrNotFound)
}

// templateDisplayName is the name a caller knows a template by: its store
// name less the owner.
func templateDisplayName(storeName string) string {
	_, name := template.SplitStoreName(storeName)
	return name
}

// visibleTo reports whether the template with this store name is one
// owner sees: a shared one or its own.
func visibleTo(owner, storeName string) bool {
	o, _ := template.SplitStoreName(storeName)
	return o == "" || o == owner
}

// templateOwner is the namespace a principal's templates live in.
func templateOwner(p auth.Principal) (string, error) {
	if err := template.ValidateOwner(p.TenantID); err != nil {
		return "", fmt.Errorf("tenant %q cannot own templates: %w", clean(truncate(p.TenantID, 64)), errdefs.ErrInternal)
	}
	return p.TenantID, nil
}

// view is the part of the store one caller sees: the shared templates and
// its tenant's, with their layers' reference counts among them.
type view struct {
	ts        *templateService
	manifests []layers.Manifest
	refs      map[string]int // diff ID -> templates of the view that use it
}

// view returns owner's view of the store (built-in names excluded, as the
// registry does not offer a stored template that has one).
func (ts *templateService) view(owner string) *view {
	builtin := make(map[string]bool)
	for _, name := range ts.builtins() {
		builtin[name] = true
	}
	v := &view{ts: ts, refs: make(map[string]int)}
	for _, m := range ts.cfg.Store.List() {
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
	info, err := v.ts.cfg.Store.Layer(d)
	if err != nil {
		return 0
	}
	return info.Size
}

// entry is the list entry of m: its distinct layers, and the bytes of
// those another template of the view uses too.
func (v *view) entry(m layers.Manifest) templateJSON {
	created := m.Created.UTC()
	owner, name := template.SplitStoreName(m.Name)
	out := templateJSON{Name: name, Source: m.Source, Shared: owner == "", Size: m.Size, Created: &created}
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
func (v *view) usage() usageJSON {
	var u usageJSON
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

// detail is the wire form of m, a template of the view.
func (v *view) detail(m layers.Manifest) templateDetailJSON {
	out := templateDetailJSON{templateJSON: v.entry(m)}
	out.LayerList = make([]layerJSON, 0, len(m.Layers))
	for _, d := range m.Layers {
		l := layerJSON{Digest: d, Shared: v.refs[d] > 1}
		if info, err := v.ts.cfg.Store.Layer(d); err == nil {
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

func toUsageJSON(u layers.Usage) usageJSON {
	return usageJSON{Layers: u.Layers, Bytes: u.Bytes, SharedLayers: u.SharedLayers, SharedBytes: u.SharedBytes,
		UnusedLayers: u.UnusedLayers, UnusedBytes: u.UnusedBytes}
}

// builtinJSON describes a built-in template; one that says what it is made
// of and when it was built (the host template) says so in Source and
// Created.
func (ts *templateService) builtinJSON(name string) templateJSON {
	out := templateJSON{Name: name, Source: "built-in", Builtin: true, Shared: true}
	if src, err := ts.cfg.Registry.Get(name); err == nil {
		if p, ok := src.(interface {
			Provenance() (string, time.Time)
		}); ok {
			what, built := p.Provenance()
			out.Source = "built-in: " + what
			if !built.IsZero() {
				out.Created = &built
			}
		}
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

// isBuiltin reports whether name is a built-in template's.
func (ts *templateService) isBuiltin(name string) bool {
	src, err := ts.cfg.Registry.Get(name)
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
func (ts *templateService) resolve(owner, name string, sharedOnly bool) (resolved, error) {
	if !sharedOnly {
		own := template.StoreName(owner, name)
		if m, err := ts.cfg.Store.Get(own); err == nil {
			return resolved{storeName: own, manifest: m}, nil
		} else if !errors.Is(err, errdefs.ErrNotFound) {
			return resolved{}, err
		}
	}
	if ts.isBuiltin(name) {
		return resolved{storeName: name, builtin: true}, nil
	}
	m, err := ts.cfg.Store.Get(name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return resolved{}, templateNotFound(name)
		}
		return resolved{}, err
	}
	return resolved{storeName: name, manifest: m}, nil
}

// listTemplates serves GET /v1/templates: the built-in templates, the
// shared stored ones and the caller's tenant's, and the disk use: of the
// layers of those templates, or, for the operator, of the whole store.
func (h *Handler) listTemplates(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	if _, err := parseQuery(c.r.URL.RawQuery); err != nil {
		return err
	}
	owner, err := templateOwner(c.p)
	if err != nil {
		return err
	}
	v := ts.view(owner)
	out := templateListJSON{Templates: []templateJSON{}, Usage: v.usage()}
	if c.p.IsOperator() {
		out.Usage = toUsageJSON(ts.cfg.Store.Usage())
	}
	for _, name := range ts.builtins() {
		out.Templates = append(out.Templates, ts.builtinJSON(name))
	}
	for _, m := range v.manifests {
		out.Templates = append(out.Templates, v.entry(m))
	}
	// By name; a tenant's own template before the shared one it hides.
	sort.Slice(out.Templates, func(i, j int) bool {
		a, b := out.Templates[i], out.Templates[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		return !a.Shared && b.Shared
	})
	return c.json(http.StatusOK, out)
}

// getTemplate serves GET /v1/templates/{name}: the caller's tenant's
// template of that name, else the shared one (only the shared one with
// shared=true).
func (h *Handler) getTemplate(c *call) error {
	ts := h.tpl
	if ts == nil {
		return templatesNotServed()
	}
	name, err := templateName(c)
	if err != nil {
		return err
	}
	sharedOnly, err := sharedParam(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	owner, err := templateOwner(c.p)
	if err != nil {
		return err
	}
	r, err := ts.resolve(owner, name, sharedOnly)
	if err != nil {
		return err
	}
	if r.builtin {
		out := templateDetailJSON{templateJSON: ts.builtinJSON(name), LayerList: []layerJSON{},
			Config: templateConfigJSON{Env: []string{}, Cmd: []string{}, Entrypoint: []string{}}}
		return c.json(http.StatusOK, out)
	}
	return c.json(http.StatusOK, ts.view(owner).detail(r.manifest))
}

// deleteTemplate serves DELETE /v1/templates/{name}: the caller's tenant's
// template of that name (with shared=true, or when the tenant has none,
// the shared one, which only the operator may remove) leaves the store
// and the registry, and the layers no other template uses are deleted. A
// template that a sandbox uses, and a built-in one, stay.
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
	sharedOnly, err := sharedParam(c.r.URL.RawQuery)
	if err != nil {
		return err
	}
	owner, err := templateOwner(c.p)
	if err != nil {
		return err
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	r, err := ts.resolve(owner, name, sharedOnly)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			// A stored source whose manifest is gone: drop it.
			for _, sn := range []string{template.StoreName(owner, name), name} {
				if src, rerr := ts.cfg.Registry.Get(sn); rerr == nil {
					if _, ok := src.(storedSource); ok {
						_ = ts.cfg.Registry.Remove(sn)
					}
				}
			}
		}
		return err
	}
	if r.builtin {
		return fmt.Errorf("template %s is built in and cannot be removed: %w", name, errdefs.ErrFailedPrecondition)
	}
	shared := r.storeName == name
	if shared && !c.p.IsOperator() {
		return &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
			msg: fmt.Sprintf("template %s is shared by every tenant; only the operator removes shared templates", name)}
	}
	c.ev.Details = map[string]any{"source": r.manifest.Source, "layers": r.manifest.Layers, "shared": shared}
	if err := c.begin(); err != nil {
		return err
	}
	freed, err := ts.cfg.Store.Remove(context.WithoutCancel(c.r.Context()), r.storeName)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return templateNotFound(name)
		}
		return err
	}
	if err := ts.cfg.Registry.Remove(r.storeName); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	c.ev.Details["freed_layers"] = freed.Layers
	c.ev.Details["freed_bytes"] = freed.Bytes
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, templateDeleteJSON{Name: name, FreedLayers: freed.Layers, FreedBytes: freed.Bytes})
}

// removeOwner removes every template of owner (a deleted tenant) from the
// store and the registry, and reports how many and what was freed. It
// stops at the first failure (a template in use).
func (ts *templateService) removeOwner(ctx context.Context, owner string) (int, layers.Freed, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	var total layers.Freed
	n := 0
	for _, m := range ts.cfg.Store.List() {
		if o, _ := template.SplitStoreName(m.Name); o != owner {
			continue
		}
		freed, err := ts.cfg.Store.Remove(ctx, m.Name)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return n, total, fmt.Errorf("remove template %s: %w", templateDisplayName(m.Name), err)
		}
		if err := ts.cfg.Registry.Remove(m.Name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return n, total, err
		}
		n++
		total.Layers += freed.Layers
		total.Bytes += freed.Bytes
	}
	return n, total, nil
}

// hasOwner reports whether owner has a stored template.
func (ts *templateService) hasOwner(owner string) bool {
	for _, m := range ts.cfg.Store.List() {
		if o, _ := template.SplitStoreName(m.Name); o == owner {
			return true
		}
	}
	return false
}

// register adds the freshly stored template (by store name) to the
// registry. A template whose owner was deleted during the build is
// removed instead.
func (ts *templateService) register(ctx context.Context, name string) error {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if _, err := ts.cfg.Store.Get(name); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return fmt.Errorf("template %s was removed while it was being built: %w", templateDisplayName(name), errdefs.ErrFailedPrecondition)
		}
		return err
	}
	if owner, _ := template.SplitStoreName(name); owner != "" && ts.ownerGone != nil {
		gone, err := ts.ownerGone(ctx, owner)
		if err != nil {
			return err
		}
		if gone {
			_, rerr := ts.cfg.Store.Remove(context.WithoutCancel(ctx), name)
			_ = ts.cfg.Registry.Remove(name)
			if rerr != nil && !errors.Is(rerr, errdefs.ErrNotFound) {
				return fmt.Errorf("the tenant was deleted during the build; removing its template: %w", rerr)
			}
			return fmt.Errorf("the tenant was deleted during the build: %w", errdefs.ErrNotFound)
		}
	}
	src, err := ts.cfg.Source(name)
	if err != nil {
		return fmt.Errorf("register template %s: %w", templateDisplayName(name), err)
	}
	err = ts.cfg.Registry.Add(src)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		// Registered already (by the builder, or a retried
		// registration): fine if that source is the stored one.
		if old, gerr := ts.cfg.Registry.Get(name); gerr == nil {
			if _, ok := old.(storedSource); ok {
				return nil
			}
		}
	}
	if err != nil {
		return fmt.Errorf("register template %s: %w", templateDisplayName(name), err)
	}
	return nil
}

// reserve marks req's template as being built, after checking that its
// name is free in its namespace (or, with replace, stored there) and not a
// built-in one's, and that a build slot is. release may be called more
// than once.
func (ts *templateService) reserve(req BuildRequest) (release func(), err error) {
	name := template.StoreName(req.Owner, req.Name)
	if ts.isBuiltin(req.Name) {
		return nil, fmt.Errorf("template %s is built in and cannot be replaced or hidden: %w", req.Name, errdefs.ErrAlreadyExists)
	}
	if _, err := ts.cfg.Store.Get(name); err == nil && !req.Replace {
		return nil, fmt.Errorf("template %s already exists; remove it first or replace it: %w", req.Name, errdefs.ErrAlreadyExists)
	}
	ts.bmu.Lock()
	defer ts.bmu.Unlock()
	if ts.building[name] {
		return nil, fmt.Errorf("template %s is being built by another request: %w", req.Name, errdefs.ErrAlreadyExists)
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

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
