package template

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// Stored is a template kept in a layers.Store: an imported OCI image or a
// built template. Its layers are the store's layer directories, stacked
// lowest first; the store keeps them while the template exists, and the
// store's InUse hook keeps a template from being removed while sandboxes
// use it.
type Stored struct {
	store *layers.Store
	name  string
}

var _ Source = (*Stored)(nil)

// NewStored returns the stored template whose store name (see StoreName)
// is name. It fails with ErrNotFound when the store has no such template.
func NewStored(store *layers.Store, name string) (*Stored, error) {
	if store == nil {
		return nil, fmt.Errorf("template %q: nil store: %w", truncate(name, 80), errdefs.ErrInvalidArgument)
	}
	if err := validateStoreName(name); err != nil {
		return nil, err
	}
	if _, err := store.Get(name); err != nil {
		return nil, err
	}
	return &Stored{store: store, name: name}, nil
}

// StoredSources returns a Source for every template in store, sorted by
// name, for registering in a Registry at start-up.
func StoredSources(store *layers.Store) []Source {
	var out []Source
	for _, m := range store.List() {
		out = append(out, &Stored{store: store, name: m.Name})
	}
	return out
}

// Name returns the template's store name (OWNER~NAME for an owned one).
func (t *Stored) Name() string { return t.name }

// Manifest returns the template's manifest (layers and image defaults:
// env, user, cmd, entrypoint).
func (t *Stored) Manifest() (layers.Manifest, error) { return t.store.Get(t.name) }

// Limits returns the template's default limits (none once it is removed).
func (t *Stored) Limits() runtime.Limits {
	m, err := t.store.Get(t.name)
	if err != nil {
		return runtime.Limits{}
	}
	return m.Config.Limits
}

var _ Limiter = (*Stored)(nil)

// Network returns the template's default network policy (nil when it has
// none, or once it is removed).
func (t *Stored) Network() *layers.Network {
	m, err := t.store.Get(t.name)
	if err != nil {
		return nil
	}
	return m.Config.Network
}

var _ Networker = (*Stored)(nil)

// Toolsets returns the names of the template's default toolsets (nil when
// it has none, or once it is removed).
func (t *Stored) Toolsets() []string {
	m, err := t.store.Get(t.name)
	if err != nil {
		return nil
	}
	return slices.Clone(m.Config.Toolsets)
}

var _ Toolsetter = (*Stored)(nil)

// CommandPolicy returns the template's default command policy (nil when
// it has none, or once it is removed).
func (t *Stored) CommandPolicy() *cmdpolicy.Policy {
	m, err := t.store.Get(t.name)
	if err != nil {
		return nil
	}
	return m.Config.CommandPolicy
}

var _ CommandPolicier = (*Stored)(nil)

// Resolve returns the template's layer directories and its defaults
// (working directory, user, environment), all from one read of the
// manifest (a replace landing in between cannot mix two versions). It
// fails with ErrNotFound once the template is removed.
func (t *Stored) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	dirs, m, err := t.store.Rootfs(ctx, t.name)
	if err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			return runtime.Rootfs{}, fmt.Errorf("template %q: %w", t.name, errdefs.ErrNotFound)
		}
		return runtime.Rootfs{}, err
	}
	return runtime.Rootfs{Layers: dirs, Workdir: m.Config.Workdir, User: m.Config.User, Env: m.Config.EnvMap()}, nil
}
