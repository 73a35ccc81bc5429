package api

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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
func toTemplateJSON(t registry.Template) wire.Template {
	out := wire.Template{Name: t.Name, Source: t.Source, Builtin: t.Builtin, Shared: t.Shared,
		Layers: t.Layers, Size: t.Size, SharedBytes: t.SharedBytes}
	if !t.Builtin || !t.Created.IsZero() {
		created := t.Created
		out.Created = &created
	}
	return out
}

// toDetailJSON is the wire form of d.
func toDetailJSON(d registry.Detail) wire.TemplateDetail {
	out := wire.TemplateDetail{Template: toTemplateJSON(d.Template), LayerList: make([]wire.TemplateLayer, 0, len(d.LayerList))}
	for _, l := range d.LayerList {
		out.LayerList = append(out.LayerList, wire.TemplateLayer{Digest: l.Digest, Size: l.Size, Files: l.Files, Shared: l.Shared})
	}
	cfg := d.Config
	out.Config = wire.TemplateConfig{
		Env: orEmpty(cfg.Env), Workdir: cfg.Workdir, User: cfg.User,
		Cmd: orEmpty(cfg.Cmd), Entrypoint: orEmpty(cfg.Entrypoint),
	}
	if l := cfg.Limits; l != (runtime.Limits{}) {
		lj := limitsToJSON(l)
		out.Config.Limits = &lj
	}
	if n := cfg.Network; n != nil {
		out.Config.Network = networkView(sandbox.NetworkOfTemplate(*n))
	}
	out.Config.Toolsets = slices.Clone(cfg.Toolsets)
	out.Config.CommandPolicy = commandPolicyJSON(cfg.CommandPolicy)
	return out
}

// toUsageJSON is the wire form of u.
func toUsageJSON(u registry.Usage) wire.TemplateUsage {
	return wire.TemplateUsage{Layers: u.Layers, Bytes: u.Bytes, SharedLayers: u.SharedLayers, SharedBytes: u.SharedBytes,
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
	out := wire.TemplateList{Templates: make([]wire.Template, 0, len(list)), Usage: toUsageJSON(usage)}
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
	return c.json(http.StatusOK, wire.TemplateDeleted{Name: name, FreedLayers: freed.Layers, FreedBytes: freed.Bytes})
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
