package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/store"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/build"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/oci"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
)

// Template directories under <data-dir>/templates (the host template's
// cache is <data-dir>/templates/host).
const (
	templateStoreDir    = "store"    // the layer store: layers, manifests, step cache
	templateWorkDir     = "work"     // the builder's scratch space
	templateContextsDir = "contexts" // uploaded build contexts, one directory per build
)

// templateStore is the daemon's layer store with its in-use hook, which
// asks the sandbox manager once there is one.
type templateStore struct {
	store *layers.Store
	mgr   atomic.Pointer[sandbox.Manager]
}

// openTemplateStore opens the store under <data-dir>/templates/store and
// deletes the layers no template uses (leftovers of interrupted builds).
// Until the manager is set, every template counts as in use.
func openTemplateStore(ctx context.Context, dataDir string, log *slog.Logger) (*templateStore, error) {
	ts := &templateStore{}
	store, err := layers.Open(filepath.Join(dataDir, templatesDir, templateStoreDir), layers.Options{
		// Called under the store's lock; TemplateInUse takes only the
		// manager's lock, and the manager never calls the store while
		// holding it.
		InUse: func(name string) bool {
			m := ts.mgr.Load()
			return m == nil || m.TemplateInUse(name)
		},
		Logger: log,
	})
	if err != nil {
		return nil, fmt.Errorf("template store: %w", err)
	}
	ts.store = store
	freed, err := store.Prune(ctx)
	if err != nil {
		return nil, fmt.Errorf("template store: prune: %w", err)
	}
	if freed.Layers > 0 {
		log.Info("template store: deleted unused layers", "layers", freed.Layers, "bytes", freed.Bytes)
	}
	return ts, nil
}

// registerStored adds the stored templates to reg; a stored template whose
// name a built-in one has is left out with a warning.
func registerStored(reg *template.Registry, store *layers.Store, log *slog.Logger) error {
	for _, src := range template.StoredSources(store) {
		err := reg.Add(src)
		if errors.Is(err, errdefs.ErrAlreadyExists) {
			log.Warn("a stored template has the name of a built-in one and is not offered", "template", src.Name())
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// tenants is what the template service asks of the tenant store.
type tenants interface {
	// GetTenant returns a tenant, a deleted one included (DeletedAt set).
	GetTenant(ctx context.Context, id string) (store.Tenant, error)
}

// templateService builds the template service the API calls: the builder
// (RUN steps run on rt), the importer, an emptied directory for uploads,
// and the tenant check that keeps a deleted tenant's builds from
// registering.
func templateService(dataDir string, ts *templateStore, rt runtime.Runtime, reg *template.Registry, tn tenants, log *slog.Logger) (*registry.Service, error) {
	b, err := build.New(build.Config{
		Store:     ts.store,
		Runtime:   rt,
		Templates: reg,
		WorkDir:   filepath.Join(dataDir, templatesDir, templateWorkDir),
		Logger:    log.With("component", "build"),
	})
	if err != nil {
		return nil, err
	}
	contexts := filepath.Join(dataDir, templatesDir, templateContextsDir)
	if err := os.RemoveAll(contexts); err != nil {
		return nil, fmt.Errorf("build contexts: %w", err)
	}
	if err := os.MkdirAll(contexts, 0o700); err != nil {
		return nil, fmt.Errorf("build contexts: %w", err)
	}
	return registry.New(registry.Config{
		Registry:   reg,
		Store:      ts.store,
		Builder:    builder{b},
		Importer:   importer{ts.store},
		ContextDir: contexts,
		Source:     func(name string) (template.Source, error) { return template.NewStored(ts.store, name) },
		OwnerGone:  tenantGone(tn),
		Log:        log.With("component", "templates"),
	})
}

// tenantGone reports whether a template owner, a tenant, was deleted (or
// never was).
func tenantGone(tn tenants) func(ctx context.Context, owner string) (bool, error) {
	return func(ctx context.Context, owner string) (bool, error) {
		t, err := tn.GetTenant(ctx, owner)
		if errors.Is(err, errdefs.ErrNotFound) {
			return true, nil
		}
		return err == nil && !t.DeletedAt.IsZero(), err
	}
}

// builder adapts *build.Builder to registry.Builder.
type builder struct{ b *build.Builder }

var _ registry.Builder = builder{}

// Build runs req; set-id bits are stripped unless allowed.
func (b builder) Build(ctx context.Context, req registry.BuildRequest, events func(registry.Event)) (layers.Manifest, error) {
	breq := build.Request{
		Name:          req.Name,
		Owner:         req.Owner,
		Airfile:       req.Airfile,
		ContextDir:    req.ContextDir,
		NoCache:       req.NoCache,
		Limits:        req.Limits,
		Network:       req.Network,
		Toolsets:      req.Toolsets,
		CommandPolicy: req.CommandPolicy,
		AllowSetuid:   req.AllowSetuid,
		StripSetuid:   !req.AllowSetuid,
		Pull: oci.Options{
			Username: req.Registry.Username,
			Password: req.Registry.Password,
			Token:    req.Registry.Token,
			Insecure: req.Insecure,
		},
	}
	var f func(build.Event)
	if events != nil {
		f = func(ev build.Event) {
			events(registry.Event{
				Type: ev.Type, Step: ev.Step, Steps: ev.Steps, Instruction: ev.Instruction, Text: ev.Text,
				Layer: ev.Layer, Layers: ev.Layers, Done: ev.Done, Total: ev.Total,
			})
		}
	}
	return b.b.Build(ctx, breq, f)
}

// importer adapts oci's archive and layout import to registry.Importer.
type importer struct{ store *layers.Store }

var _ registry.Importer = importer{}

// Import imports req's archive or layout into the store under the
// template's store name; set-id bits are stripped unless allowed.
func (i importer) Import(ctx context.Context, req registry.ImportRequest, events func(registry.Event)) (layers.Manifest, error) {
	opts := oci.Options{Replace: req.Replace, AllowSetuid: req.AllowSetuid, StripSetuid: !req.AllowSetuid}
	if events != nil {
		opts.Progress = func(p oci.Progress) {
			if !p.Skipped {
				events(registry.Event{Type: "progress", Step: 1, Steps: 1, Layer: p.Layer, Layers: p.Layers, Done: p.Done, Total: p.Total})
			}
		}
	}
	name := template.StoreName(req.Owner, req.Name)
	var res oci.Result
	var err error
	switch req.Format {
	case registry.ImportDockerArchive:
		res, err = oci.ImportArchive(ctx, i.store, name, req.Path, req.Tag, opts)
	case registry.ImportOCILayout:
		res, err = oci.ImportLayout(ctx, i.store, name, req.Path, req.Tag, opts)
	default:
		err = fmt.Errorf("image archive format %q: %w", req.Format, errdefs.ErrInvalidArgument)
	}
	return res.Manifest, err
}
