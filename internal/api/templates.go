package api

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
)

// The audit actions of templates.
const (
	ActionTemplateBuild  = "template.build"
	ActionTemplateImport = "template.import"
	ActionTemplateDelete = "template.delete"
)

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

// templateDisplayName is the name a caller knows a template by: its store
// name less the owner.
func templateDisplayName(storeName string) string {
	_, name := template.SplitStoreName(storeName)
	return name
}

// templateOwner is the namespace a principal's templates live in.
func templateOwner(p auth.Principal) (string, error) {
	if err := template.ValidateOwner(p.TenantID); err != nil {
		return "", fmt.Errorf("tenant %q cannot own templates: %w", clean(truncate(p.TenantID, 64)), errdefs.ErrInternal)
	}
	return p.TenantID, nil
}

// toTemplateJSON is the wire form of t.
func toTemplateJSON(t registry.Template) templateJSON {
	out := templateJSON{Name: t.Name, Source: t.Source, Builtin: t.Builtin, Shared: t.Shared,
		Layers: t.Layers, Size: t.Size, SharedBytes: t.SharedBytes}
	if !t.Builtin || !t.Created.IsZero() {
		created := t.Created
		out.Created = &created
	}
	return out
}

// toDetailJSON is the wire form of d.
func toDetailJSON(d registry.Detail) templateDetailJSON {
	out := templateDetailJSON{templateJSON: toTemplateJSON(d.Template), LayerList: make([]layerJSON, 0, len(d.LayerList))}
	for _, l := range d.LayerList {
		out.LayerList = append(out.LayerList, layerJSON{Digest: l.Digest, Size: l.Size, Files: l.Files, Shared: l.Shared})
	}
	cfg := d.Config
	out.Config = templateConfigJSON{
		Env: orEmpty(cfg.Env), Workdir: cfg.Workdir, User: cfg.User,
		Cmd: orEmpty(cfg.Cmd), Entrypoint: orEmpty(cfg.Entrypoint),
	}
	if l := cfg.Limits; l != (runtime.Limits{}) {
		lj := limitsToJSON(l)
		out.Config.Limits = &lj
	}
	return out
}

// toUsageJSON is the wire form of u.
func toUsageJSON(u registry.Usage) usageJSON {
	return usageJSON{Layers: u.Layers, Bytes: u.Bytes, SharedLayers: u.SharedLayers, SharedBytes: u.SharedBytes,
		UnusedLayers: u.UnusedLayers, UnusedBytes: u.UnusedBytes}
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
	list, usage := ts.List(owner)
	if c.p.IsOperator() {
		usage = ts.StoreUsage()
	}
	out := templateListJSON{Templates: make([]templateJSON, 0, len(list)), Usage: toUsageJSON(usage)}
	for _, t := range list {
		out.Templates = append(out.Templates, toTemplateJSON(t))
	}
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
	d, err := ts.Get(owner, name, sharedOnly)
	if err != nil {
		return err
	}
	return c.json(http.StatusOK, toDetailJSON(d))
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
	freed, err := ts.Delete(c.r.Context(), owner, name, sharedOnly, func(r registry.Removal) error {
		if r.Shared && !c.p.IsOperator() {
			return &apiError{status: http.StatusForbidden, code: CodePermissionDenied,
				msg: fmt.Sprintf("template %s is shared by every tenant; only the operator removes shared templates", name)}
		}
		c.ev.Details = map[string]any{"source": r.Source, "layers": r.Layers, "shared": r.Shared}
		return c.begin()
	})
	if err != nil {
		return err
	}
	c.ev.Details["freed_layers"] = freed.Layers
	c.ev.Details["freed_bytes"] = freed.Bytes
	if err := c.commit(); err != nil {
		return err
	}
	return c.json(http.StatusOK, templateDeleteJSON{Name: name, FreedLayers: freed.Layers, FreedBytes: freed.Bytes})
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
