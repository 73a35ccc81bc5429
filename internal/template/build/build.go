// Package build turns Airfiles into stored templates.
//
// A Builder runs the steps of an Airfile (see internal/template/airfile)
// on top of a base and saves the result in the layer store as a
// template:
//
//   - FROM <image> pulls the image with internal/template/oci (layers
//     the store holds are reused); FROM template:<name> starts from a
//     stored template's layers and config; DEBIAN <suite> <packages>
//     builds a root filesystem with internal/template/debian in the
//     scratch directory and streams it as a tar into the store.
//   - RUN executes in a sandbox (runtime.Create, no network) over the
//     layers so far, with the accumulated ENV, WORKDIR and USER; its
//     writable layer (agentclient.ExportChanges) becomes the step's layer.
//   - COPY and ADD stream the named files of the build context as a tar;
//     ADD is COPY (local files only; a local tar archive is copied, not
//     unpacked).
//   - WORKDIR creates its directory (a small layer) when the image lacks
//     it; ENV and USER only change the config.
//
// Every layer, whatever made it, enters the store through
// layers.Lease.Extract, with the same limits and set-id policy.
//
// Steps are cached by their airfile cache key in <store>/build-cache.json:
// a step whose key was built before and whose layer is still stored is
// skipped; the first step that misses is run with everything after it.
// Cached layers that no template uses are not protected: Store.Prune (or
// the removal of the template that used them) deletes them, and the cache
// notices that on its next use and rebuilds.
package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/template/airfile"
	"github.com/airlock-sandbox/airlock/internal/template/debian"
	"github.com/airlock-sandbox/airlock/internal/template/layers"
	"github.com/airlock-sandbox/airlock/internal/template/oci"
)

// Defaults of Config.
const (
	// DefaultStepTimeout bounds one step (a RUN, a pull, a Debian build).
	DefaultStepTimeout = 30 * time.Minute
	// MaxConcurrent is the most builds that run at once; more wait.
	MaxConcurrent = 2
)

// DefaultLimits are the resources of a RUN sandbox where Config.Limits
// leaves a field zero.
var DefaultLimits = runtime.Limits{
	CPUs:        2,
	MemoryBytes: 2 << 30,
	DiskBytes:   8 << 30,
}

// Event types.
const (
	// EventStep: a step starts (Step of Steps, Instruction).
	EventStep = "step"
	// EventLog: a line of output (RUN output, Debian build lines).
	EventLog = "log"
	// EventProgress: bytes of a pull or an extraction (Layer of Layers,
	// Done of Total bytes; Total is 0 when unknown).
	EventProgress = "progress"
	// EventCached: a step was skipped, its result taken from the cache
	// (or, for a base, already in the store).
	EventCached = "cached"
	// EventDone: the template is saved (Template).
	EventDone = "done"
)

// Config configures a Builder.
type Config struct {
	// Store holds the layers and the templates; the step cache is kept
	// beside them (build-cache.json in its root).
	Store *layers.Store
	// Runtime creates the sandboxes RUN steps execute in.
	Runtime runtime.Runtime
	// Templates is the daemon's registry; a finished build is registered
	// in it (replacing a stored template of the same name).
	Templates *template.Registry
	// WorkDir is scratch space (Debian trees are built there); it is
	// created if missing and should be under the data directory, on the
	// store's file system.
	WorkDir string
	// Logger receives debug lines and warnings; nil discards them.
	Logger *slog.Logger
	// StepTimeout bounds each step; default DefaultStepTimeout.
	StepTimeout time.Duration
	// Limits are the resources of RUN sandboxes; zero fields take
	// DefaultLimits, then the runtime's defaults.
	Limits runtime.Limits
	// Debian holds the defaults of DEBIAN bases: Mirror, SecurityMirror,
	// Variant (default debian.DefaultVariant), KeepDocs, Binary. Suite,
	// Packages, Target, Progress and Timeout are set per build.
	Debian debian.Options
}

// Request is one build.
type Request struct {
	// Name is the template to create or replace.
	Name string
	// Owner is the namespace the template is built in: "" for a shared
	// template, else its owner (a tenant ID; see template.StoreName). The
	// template is stored as template.StoreName(Owner, Name); a FROM
	// template: base resolves as a sandbox's template does (the owner's
	// own, else the shared one; never another owner's); and the step
	// cache is the namespace's own, so that no build reuses, or learns of,
	// a layer another namespace's build made.
	Owner string
	// Airfile is the build recipe (at most airfile.MaxFileBytes).
	Airfile []byte
	// Limits are the template's default resource limits; fields left
	// zero keep the base template's (see layers.Config.Limits). They do
	// not change the RUN sandboxes' resources (Config.Limits).
	Limits runtime.Limits
	// Network is the template's default network policy (see
	// layers.Config.Network); nil keeps the base template's. RUN steps
	// have no network whatever it says.
	Network *layers.Network
	// Toolsets name the template's default toolsets (see
	// layers.Config.Toolsets); empty keeps the base template's.
	Toolsets []string
	// CommandPolicy is the template's default command policy for exec
	// (see layers.Config.CommandPolicy); nil keeps the base template's.
	// RUN steps are not judged by it.
	CommandPolicy *cmdpolicy.Policy
	// ContextDir is the build context COPY and ADD read from (an
	// absolute path); "" allows no COPY or ADD.
	ContextDir string
	// NoCache runs every step even if the cache has it (the results are
	// still cached).
	NoCache bool
	// AllowSetuid keeps set-user-ID and set-group-ID bits in every layer;
	// StripSetuid clears them. With neither, a pulled, copied or RUN-made
	// layer holding such a file fails the build. A Debian base is always
	// stripped unless AllowSetuid: its su and mount are useless in
	// sandboxes, whose root is mounted nosuid.
	AllowSetuid, StripSetuid bool
	// Pull sets credentials, plain HTTP and platform for a FROM image;
	// its Replace, Progress and set-id fields are ignored.
	Pull oci.Options
}

// Event reports the progress of a build. Fields not listed for a Type are
// zero.
type Event struct {
	// Type is one of EventStep, EventLog, EventProgress, EventCached and
	// EventDone.
	Type string
	// Step (1-based) of Steps is the step the event belongs to.
	Step, Steps int
	// Instruction is the step's canonical text (step, cached), shortened
	// to 512 bytes.
	Instruction string
	// Text is a line of output (log), without its newline.
	Text string
	// Layer of Layers is the image layer being pulled (progress).
	Layer, Layers int
	// Done and Total are bytes pulled or extracted (progress).
	Done, Total int64
	// Template is the saved manifest (done).
	Template *layers.Manifest
}

// Builder builds templates from Airfiles. It is safe for concurrent use:
// builds of one name run one after the other, at most MaxConcurrent
// builds run at once.
type Builder struct {
	cfg   Config
	log   *slog.Logger
	cache *cache
	slots chan struct{}

	mu    sync.Mutex
	names map[string]*nameLock
}

// nameLock serializes the builds of one template name.
type nameLock struct {
	ch   chan struct{}
	refs int
}

// New checks cfg, creates the scratch directory (emptying what an
// interrupted build left there) and loads the step cache.
func New(cfg Config) (*Builder, error) {
	if cfg.Store == nil || cfg.Runtime == nil || cfg.Templates == nil {
		return nil, fmt.Errorf("template builder: Store, Runtime and Templates are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.WorkDir == "" || !filepath.IsAbs(cfg.WorkDir) || filepath.Clean(cfg.WorkDir) != cfg.WorkDir {
		return nil, fmt.Errorf("template builder: WorkDir must be an absolute clean path: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.StepTimeout < 0 {
		return nil, fmt.Errorf("template builder: negative StepTimeout: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.StepTimeout == 0 {
		cfg.StepTimeout = DefaultStepTimeout
	}
	if cfg.Limits.CPUs == 0 {
		cfg.Limits.CPUs = DefaultLimits.CPUs
	}
	if cfg.Limits.MemoryBytes == 0 {
		cfg.Limits.MemoryBytes = DefaultLimits.MemoryBytes
	}
	if cfg.Limits.DiskBytes == 0 {
		cfg.Limits.DiskBytes = DefaultLimits.DiskBytes
	}
	d := cfg.Debian
	d.Suite, d.Packages, d.Target, d.Progress = "bookworm", nil, "", nil
	if err := d.Validate(); err != nil {
		return nil, fmt.Errorf("template builder: Debian defaults: %w", err)
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o700); err != nil {
		return nil, fmt.Errorf("template builder: scratch directory: %w", errdefs.ErrInternal)
	}
	if err := cleanWorkDir(cfg.WorkDir); err != nil {
		return nil, err
	}
	c, err := openCache(filepath.Join(cfg.Store.Root(), cacheFile), log)
	if err != nil {
		return nil, err
	}
	return &Builder{
		cfg:   cfg,
		log:   log,
		cache: c,
		slots: make(chan struct{}, MaxConcurrent),
		names: make(map[string]*nameLock),
	}, nil
}

// cleanWorkDir removes the scratch trees of builds a crash interrupted.
func cleanWorkDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("template builder: scratch directory: %w", errdefs.ErrInternal)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), scratchPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("template builder: cleaning the scratch directory: %w", errdefs.ErrInternal)
			}
		}
	}
	return nil
}

// scratchPrefix names the per-build directories under WorkDir.
const scratchPrefix = "build-"

// Build runs req and returns the saved template. events, if not nil,
// receives the build's progress; it is called from one goroutine at a
// time and should return quickly. On error no template is created or
// changed, every sandbox the build made is destroyed, and the layers of
// the steps that succeeded stay in the cache (until pruned).
//
// Errors wrap errdefs classes: ErrInvalidArgument for a bad request or
// Airfile (an *airfile.Error names the line), ErrFailedPrecondition for a
// RUN that fails (with its exit code and last output lines) or a template
// in use, ErrNotFound for a missing base, ErrTimeout and ErrCanceled when
// cut short.
func (b *Builder) Build(ctx context.Context, req Request, events func(Event)) (layers.Manifest, error) {
	if err := template.ValidateName(req.Name); err != nil {
		return layers.Manifest{}, err
	}
	if req.Owner != "" {
		if err := template.ValidateOwner(req.Owner); err != nil {
			return layers.Manifest{}, err
		}
	}
	name := template.StoreName(req.Owner, req.Name)
	if len(req.Airfile) == 0 {
		return layers.Manifest{}, fmt.Errorf("airfile is empty: %w", errdefs.ErrInvalidArgument)
	}
	if len(req.Airfile) > airfile.MaxFileBytes {
		return layers.Manifest{}, fmt.Errorf("airfile is larger than %d bytes: %w", airfile.MaxFileBytes, errdefs.ErrInvalidArgument)
	}
	if req.AllowSetuid && req.StripSetuid {
		return layers.Manifest{}, fmt.Errorf("AllowSetuid and StripSetuid exclude each other: %w", errdefs.ErrInvalidArgument)
	}
	if err := (&layers.Config{Limits: req.Limits, Network: req.Network, Toolsets: req.Toolsets, CommandPolicy: req.CommandPolicy}).Validate(); err != nil {
		return layers.Manifest{}, err
	}
	file, err := airfile.Parse(bytes.NewReader(req.Airfile))
	if err != nil {
		return layers.Manifest{}, err
	}
	if src, err := b.cfg.Templates.Get(req.Name); err == nil { // no namespace may shadow a built-in
		if _, ok := src.(*template.Stored); !ok {
			return layers.Manifest{}, fmt.Errorf("template %q is built in and cannot be replaced by a build: %w", req.Name, errdefs.ErrAlreadyExists)
		}
	}
	if req.ContextDir != "" {
		fi, err := os.Stat(req.ContextDir)
		if err != nil || !fi.IsDir() || !filepath.IsAbs(req.ContextDir) {
			return layers.Manifest{}, fmt.Errorf("the build context is not a directory: %w", errdefs.ErrInvalidArgument)
		}
	}

	unlock, err := b.lockName(ctx, name)
	if err != nil {
		return layers.Manifest{}, err
	}
	defer unlock()
	select {
	case b.slots <- struct{}{}:
	case <-ctx.Done():
		return layers.Manifest{}, ctxErr(ctx, "waiting for a build slot")
	}
	defer func() { <-b.slots }()

	start := time.Now()
	em := &emitter{f: events, steps: len(file.Steps)}
	j := &job{b: b, req: req, file: file, em: em, lease: b.cfg.Store.NewLease()}
	defer j.lease.Release()
	m, err := j.run(ctx)
	// The steps that succeeded stay cached, whether or not the build did.
	if err := b.cache.flush(); err != nil {
		b.log.Warn("build cache: not saved", "err", err)
	}
	if err != nil {
		b.log.Info("template build failed", "template", name, "took", time.Since(start).Round(time.Millisecond), "err", err)
		return layers.Manifest{}, err
	}
	b.log.Info("template built", "template", name, "layers", len(m.Layers), "took", time.Since(start).Round(time.Millisecond))
	em.emit(Event{Type: EventDone, Step: len(file.Steps), Template: &m})
	return m, nil
}

// lockName waits for the other builds of name to finish.
func (b *Builder) lockName(ctx context.Context, name string) (func(), error) {
	b.mu.Lock()
	l := b.names[name]
	if l == nil {
		l = &nameLock{ch: make(chan struct{}, 1)}
		b.names[name] = l
	}
	l.refs++
	b.mu.Unlock()
	release := func() {
		b.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(b.names, name)
		}
		b.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctxErr(ctx, "waiting for another build of "+name)
	}
}

// emitter delivers events one at a time.
type emitter struct {
	mu    sync.Mutex
	f     func(Event)
	steps int
}

func (e *emitter) emit(ev Event) {
	if e.f == nil {
		return
	}
	ev.Steps = e.steps
	e.mu.Lock()
	defer e.mu.Unlock()
	e.f(ev)
}

// ctxErr maps the end of ctx to an error class, saying what was cut short.
func ctxErr(ctx context.Context, what string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%s: timed out: %w", what, errdefs.ErrTimeout)
	}
	return fmt.Errorf("%s: canceled: %w", what, errdefs.ErrCanceled)
}

// clip shortens s to n bytes for events and messages.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
