// Package registry is the template service the API calls: it keeps the
// template.Registry that sandboxes are created from and the layer store
// consistent while templates are listed, built, imported and removed.
//
// It owns the rules of template names (a tenant's template hides a shared
// one of its name; a built-in name can be neither replaced nor hidden; a
// name being built is taken), the build slots (at most Config.MaxBuilds
// builds and imports at once), the build and import jobs (their private
// directories, the uploads they receive, their timeout, the registration
// of what they store) and the removal of templates, one at a time with
// registrations, so that the registry and the store agree after a build
// races a delete.
//
// Templates have namespaces: a tenant sees and uses its own templates and
// the shared ones (the built-in host, and those the operator builds),
// never another tenant's, which it is told about exactly as about a
// missing one. Who may do what (the operator alone builds and removes
// shared templates and pulls images) is the caller's to decide.
//
// Errors wrap the classes of internal/errdefs; an upload over one of its
// caps is a *LimitError.
package registry

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
)

// Store is the store of imported and built templates: the shared ones
// and every tenant's, each under its store name (template.StoreName;
// Manifest.Name is that store name). *layers.Store satisfies it.
type Store interface {
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

var _ Store = (*layers.Store)(nil)

// MaxToolsets caps a template's default toolsets (layers.MaxToolsets),
// for the API to check a build before it starts.
const MaxToolsets = layers.MaxToolsets

// Builder builds one template into the Store: it pulls the base, runs the
// steps, saves the manifest and returns it. events, if not nil, is called
// with the build's progress (possibly from several goroutines, never after
// Build returns).
type Builder interface {
	Build(ctx context.Context, req BuildRequest, events func(Event)) (layers.Manifest, error)
}

// Importer imports a template from an image archive a Job has received
// and checked (see ImportRequest). It stores the layers the store lacks
// and the template's manifest, and returns the manifest. events, if not
// nil, receives progress (step 1 of 1), never after Import returns.
type Importer interface {
	Import(ctx context.Context, req ImportRequest, events func(Event)) (layers.Manifest, error)
}

// BuildRequest is a template build as the builder gets it.
type BuildRequest struct {
	// Name is the template's name; Owner its namespace: "" for a shared
	// template (the operator's), else the tenant whose template it is.
	// The template is stored as template.StoreName(Owner, Name), and a
	// FROM template:NAME base resolves as a sandbox's template does: the
	// owner's own, else the shared one. Job.Build sets both.
	Name  string
	Owner string
	// Shared tells that the request asked for a shared template (Owner
	// ""). It is the request's field, not the builder's.
	Shared bool
	// Replace allows replacing a stored template of the same name (not
	// one in use by a sandbox, nor a built-in one).
	Replace bool
	// Airfile is the recipe (see package airfile), parsed once by the
	// caller.
	Airfile []byte
	// ContextDir holds the unpacked build context that COPY and ADD read
	// from; empty when the request had none (the Airfile then has no
	// COPY or ADD). Job.Build sets it, and removes it once the build
	// returns.
	ContextDir string
	// NoCache rebuilds every step instead of reusing cached layers.
	NoCache bool
	// AllowSetuid keeps set-user-ID and set-group-ID bits on files;
	// without it they are stripped (sandboxes mount their root nosuid,
	// so the bits would have no effect anyway).
	AllowSetuid bool
	// Registry holds the credentials for the base image's registry.
	Registry Credentials
	// Insecure allows a plain-HTTP registry.
	Insecure bool
	// Limits are the template's default resource limits (zero fields
	// unset; a FROM template keeps its base's).
	Limits runtime.Limits
	// Network is the template's default network policy, validated by
	// the caller (sandbox.TemplateNetwork); nil keeps a FROM template's.
	Network *Network
	// Toolsets name the template's default toolsets (layers.Config
	// .Toolsets), validated by the caller (gateway.ValidName); empty
	// keeps a FROM template's.
	Toolsets []string
	// CommandPolicy is the template's default command policy
	// (layers.Config.CommandPolicy), validated by the caller; nil keeps
	// a FROM template's.
	CommandPolicy *cmdpolicy.Policy
}

// Network is a template's default network policy, as its manifest keeps
// it.
type Network = layers.Network

// Credentials are credentials for an image registry: a username and
// password, or a bearer token, or nothing (anonymous).
type Credentials struct {
	Username, Password, Token string
}

// Event is one progress report of a build or an import.
type Event struct {
	// Type is "step" (a step starts), "cached" (a step's layer comes
	// from the cache), "log" (a line of a step's output), "progress"
	// (bytes of a layer being pulled or stored) or "done" (to be
	// ignored: a job is done once its template is registered).
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

// ImportFormat is the kind of image archive an import holds.
type ImportFormat string

// The image archive formats.
const (
	// ImportDockerArchive is a `docker save` archive: a tar with
	// manifest.json at its root. ImportRequest.Path is the tar file.
	ImportDockerArchive ImportFormat = "docker-archive"
	// ImportOCILayout is an OCI image layout (oci-layout, index.json,
	// blobs/); ImportRequest.Path is the unpacked directory.
	ImportOCILayout ImportFormat = "oci-layout"
)

// ImportRequest is a template import as the importer gets it.
type ImportRequest struct {
	// Name, Owner, Shared and Replace are as in BuildRequest; Job.Import
	// sets Name and Owner.
	Name    string
	Owner   string
	Shared  bool
	Replace bool
	// Format says what Path is; Job.Import sets both from the upload.
	Format ImportFormat
	// Path is the archive (a tar file) or the layout (a directory), in
	// the job's private directory, removed after the import.
	Path string
	// Tag picks an image of an archive that holds several: "repo:tag" in
	// a docker archive, a reference name (org.opencontainers.image.ref.name)
	// in a layout. Empty means the only one.
	Tag string
	// AllowSetuid keeps set-user-ID and set-group-ID bits (stripped
	// otherwise).
	AllowSetuid bool
}

// LimitError is an upload (a build context, an image archive) over one of
// its caps: its class is resource exhausted, and an HTTP server answers it
// as a request that is too large. Msg is free of host paths.
type LimitError = layers.LimitError

// Config configures a Service.
type Config struct {
	// Registry is the set of templates sandboxes are created from; a
	// built template is added to it, a removed one taken out.
	Registry *template.Registry
	// Store holds the imported and built templates.
	Store Store
	// Builder builds templates.
	Builder Builder
	// Source returns the Registry source of the stored template whose
	// store name is name (template.NewStored).
	Source func(name string) (template.Source, error)
	// Importer imports `docker save` archives and OCI layouts; nil means
	// imports are refused (ErrNotSupported). They need ContextDir too.
	Importer Importer
	// ContextDir is where jobs keep their uploads (build contexts,
	// image archives), each in a private directory removed when the job
	// ends. Empty means build contexts and imports are refused
	// (ErrNotSupported).
	ContextDir string
	// MaxContextBytes caps an uploaded build context (the tar stream,
	// and apart its files' size). Default 1 GiB.
	MaxContextBytes int64
	// MaxContextFiles caps the entries of a build context. Default
	// 100,000.
	MaxContextFiles int64
	// MaxImportBytes caps an uploaded image archive. Default 8 GiB.
	MaxImportBytes int64
	// BuildTimeout bounds one build or import. Default 2 hours.
	BuildTimeout time.Duration
	// MaxBuilds caps the builds (imports included) that run at once;
	// more are refused with ErrResourceExhausted. Default 2.
	MaxBuilds int
	// OwnerGone, if set, reports whether a template owner (a tenant) was
	// deleted, so that a build that finishes after its tenant's deletion
	// does not leave a template nobody can see.
	OwnerGone func(ctx context.Context, owner string) (bool, error)
	// Log receives the failures nobody else hears of (a job directory
	// that could not be removed); nil discards.
	Log *slog.Logger
}

// Defaults of Config.
const (
	defaultMaxContextBytes = 1 << 30
	defaultMaxContextFiles = 100_000
	defaultMaxImportBytes  = 8 << 30
	defaultBuildTimeout    = 2 * time.Hour
	defaultMaxBuilds       = 2
)

// Service is the template service. Build it with New; it is safe for
// concurrent use.
type Service struct {
	cfg Config
	log *slog.Logger
	// mu orders registry changes with store removals, so that the
	// registry and the store agree after a build races a delete.
	mu sync.Mutex
	// bmu guards building.
	bmu      sync.Mutex
	building map[string]bool // store names of the jobs in flight
}

// New checks cfg and returns its service.
func New(cfg Config) (*Service, error) {
	if cfg.Registry == nil || cfg.Store == nil || cfg.Builder == nil || cfg.Source == nil {
		return nil, fmt.Errorf("templates need a registry, a store, a builder and a source function: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.MaxContextBytes <= 0 {
		cfg.MaxContextBytes = defaultMaxContextBytes
	}
	if cfg.MaxContextFiles <= 0 {
		cfg.MaxContextFiles = defaultMaxContextFiles
	}
	if cfg.MaxImportBytes <= 0 {
		cfg.MaxImportBytes = defaultMaxImportBytes
	}
	if cfg.BuildTimeout <= 0 {
		cfg.BuildTimeout = defaultBuildTimeout
	}
	if cfg.MaxBuilds <= 0 {
		cfg.MaxBuilds = defaultMaxBuilds
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{cfg: cfg, log: log, building: make(map[string]bool)}, nil
}

// MaxContextBytes is the cap of an uploaded build context, or
// ErrNotSupported when build contexts are refused.
func (s *Service) MaxContextBytes() (int64, error) {
	if s.cfg.ContextDir == "" {
		return 0, fmt.Errorf("this server does not accept build contexts: %w", errdefs.ErrNotSupported)
	}
	return s.cfg.MaxContextBytes, nil
}

// MaxImportBytes is the cap of an uploaded image archive, or
// ErrNotSupported when imports are refused.
func (s *Service) MaxImportBytes() (int64, error) {
	if s.cfg.Importer == nil || s.cfg.ContextDir == "" {
		return 0, fmt.Errorf("this server does not import image archives: %w", errdefs.ErrNotSupported)
	}
	return s.cfg.MaxImportBytes, nil
}
