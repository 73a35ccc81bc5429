// Package template provides the root filesystems sandboxes start from.
//
// A template is a named Source that resolves to a runtime.Rootfs: read-only
// layers (host directories stacked by the runtime under each sandbox's
// writable layer) plus read-only bind mounts. Two sources live here:
//
//   - Host ("host", the default): a read-only view of the host's system
//     directories (/usr, /bin, /lib, ...) bind-mounted over a small skeleton
//     layer that holds a curated copy of /etc and empty mount points. No
//     user data of the host (/root, /home, /var, /srv, /opt, /run, /tmp,
//     /mnt) and no credential from /etc enters the sandbox.
//   - Dir: any prepared root filesystem directory, used as the single layer.
//
// Sources are registered explicitly in a Registry built by main; there is
// no global registry.
//
// # Namespaces
//
// A template is shared (the built-in ones, and those the host operator
// stores for everyone) or belongs to one owner (a tenant). Both kinds live
// in one Registry and one layer store under their store name (StoreName):
// a shared template's is its name, an owned one's is OWNER~NAME. Names
// that requests give (NamePattern) cannot hold "~", so no request names
// another owner's template directly; Registry.Lookup resolves a name for
// an owner: the owner's template of that name, else the shared one.
package template

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// Source is one template: it knows how to produce the root filesystem of a
// new sandbox. Resolve may do expensive work the first time (building a
// layer) and must be safe for concurrent use; later calls should be cheap.
// The layers it returns stay valid as long as sandboxes may use them.
type Source interface {
	// Name is the template name that requests use; it matches NamePattern.
	Name() string
	// Resolve returns the root filesystem for a new sandbox.
	Resolve(ctx context.Context) (runtime.Rootfs, error)
}

// Limiter is implemented by sources whose templates carry default
// resource limits (a stored template built with limits). A sandbox
// request's unset limits take them before the daemon's defaults.
type Limiter interface {
	// Limits returns the template's limits; zero fields are unset.
	Limits() runtime.Limits
}

// Networker is implemented by sources whose templates may carry a default
// network policy (a stored template built with one). A sandbox request
// without a network takes it; one with a network replaces it whole.
type Networker interface {
	// Network returns the template's default network, nil when it has
	// none.
	Network() *layers.Network
}

// Toolsetter is implemented by sources whose templates may name default
// toolsets (a stored template built with some). A sandbox request that
// grants no tools and no toolsets is granted them, resolved for its
// tenant; one that names any replaces them whole.
type Toolsetter interface {
	// Toolsets returns the names of the template's default toolsets,
	// nil when it has none.
	Toolsets() []string
}

// CommandPolicier is implemented by sources whose templates may carry a
// default command policy for exec (a stored template built with one). A
// sandbox request without a command policy takes it; one with a policy
// replaces it whole.
type CommandPolicier interface {
	// CommandPolicy returns the template's default command policy, nil
	// when it has none. The caller must not change it.
	CommandPolicy() *cmdpolicy.Policy
}

// NamePattern is the syntax of template names.
var NamePattern = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateName reports whether name is a valid template name.
func ValidateName(name string) error {
	if !NamePattern.MatchString(name) {
		return fmt.Errorf("template name %q: must match %s: %w", truncate(name, 80), NamePattern, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ownerSep joins an owner and a template name in a store name; neither
// an owner nor a name can hold it.
const ownerSep = "~"

// OwnerPattern is the syntax of template owners: tenant IDs.
var OwnerPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// StoreNamePattern is the syntax of store names (see StoreName); it equals
// the layer store's name syntax (layers.NamePattern).
var StoreNamePattern = regexp.MustCompile(`^(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,63}~)?[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidateOwner reports whether owner can own templates.
func ValidateOwner(owner string) error {
	if !OwnerPattern.MatchString(owner) {
		return fmt.Errorf("template owner %q: must match %s: %w", truncate(owner, 80), OwnerPattern, errdefs.ErrInvalidArgument)
	}
	return nil
}

// StoreName is the name under which the Registry and the layer store keep
// owner's template name: name itself for a shared template (owner ""),
// OWNER~NAME otherwise. owner and name must be valid.
func StoreName(owner, name string) string {
	if owner == "" {
		return name
	}
	return owner + ownerSep + name
}

// SplitStoreName is the inverse of StoreName: the owner ("" for a shared
// template) and the name.
func SplitStoreName(storeName string) (owner, name string) {
	if o, n, ok := strings.Cut(storeName, ownerSep); ok {
		return o, n
	}
	return "", storeName
}

// validateStoreName reports whether s is a valid store name.
func validateStoreName(s string) error {
	if !StoreNamePattern.MatchString(s) {
		return fmt.Errorf("template %q: not a valid template name: %w", truncate(s, 80), errdefs.ErrInvalidArgument)
	}
	return nil
}

// Registry is the set of templates the daemon offers. It is safe for
// concurrent use. Build it in main and pass it to the consumers.
type Registry struct {
	mu      sync.RWMutex
	sources map[string]Source
}

// NewRegistry returns a registry holding sources.
func NewRegistry(sources ...Source) (*Registry, error) {
	r := &Registry{sources: make(map[string]Source)}
	for _, s := range sources {
		if err := r.Add(s); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Add registers s under s.Name(), a store name (see StoreName). A second
// source with the same name is rejected with ErrAlreadyExists.
func (r *Registry) Add(s Source) error {
	if s == nil {
		return fmt.Errorf("template: nil source: %w", errdefs.ErrInvalidArgument)
	}
	name := s.Name()
	if err := validateStoreName(name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sources[name]; ok {
		return fmt.Errorf("template %q: %w", name, errdefs.ErrAlreadyExists)
	}
	r.sources[name] = s
	return nil
}

// Lookup resolves name for owner: the owner's template of that name if
// there is one, else the shared one; ErrNotFound when neither exists, and
// ErrInvalidArgument for a malformed name. An owner that is "" or not a
// valid owner sees only the shared templates.
func (r *Registry) Lookup(owner, name string) (Source, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	if owner != "" && ValidateOwner(owner) == nil {
		if s, ok := r.sources[StoreName(owner, name)]; ok {
			return s, nil
		}
	}
	if s, ok := r.sources[name]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("template %q: %w", name, errdefs.ErrNotFound)
}

// Get returns the template whose store name is name (a shared template's
// name, or OWNER~NAME), or an error wrapping ErrNotFound.
func (r *Registry) Get(name string) (Source, error) {
	r.mu.RLock()
	s, ok := r.sources[name]
	r.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("template %q: %w", truncate(name, 80), errdefs.ErrNotFound)
	}
	return s, nil
}

// Remove unregisters the template called name, or fails with ErrNotFound.
// Sandboxes already made from it are not affected; new ones can no longer
// name it.
func (r *Registry) Remove(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.sources[name]; !ok {
		return fmt.Errorf("template %q: %w", truncate(name, 80), errdefs.ErrNotFound)
	}
	delete(r.sources, name)
	return nil
}

// Replace registers s under s.Name(), replacing a source of the same
// name if there is one (a rebuilt template). Sandboxes already made from
// the old source are not affected.
func (r *Registry) Replace(s Source) error {
	if s == nil {
		return fmt.Errorf("template: nil source: %w", errdefs.ErrInvalidArgument)
	}
	name := s.Name()
	if err := validateStoreName(name); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sources[name] = s
	return nil
}

// List returns every registered template, every owner's included, sorted
// by store name.
func (r *Registry) List() []Source {
	r.mu.RLock()
	out := make([]Source, 0, len(r.sources))
	for _, s := range r.sources {
		out = append(out, s)
	}
	r.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// truncate shortens s for error messages.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
