// Package sandbox manages the lifecycle of sandboxes: creation (cold, or
// claimed from a warm pool), expiry and idle reaping, health, adoption of
// the sandboxes a previous daemon left running, and the typed operations
// (exec, files) that the API layer and tests call.
//
// A Manager sits on top of one runtime.Runtime and a template.Registry. It
// keeps an in-memory record per sandbox and persists what a restarted
// daemon needs to rebuild that record: the creation record in the
// runtime's Spec.Labels (immutable, written at creation) and, for changes
// made later (a pooled sandbox being claimed, SetTimeout), a small JSON
// state file per sandbox in Config.StateDir, which takes precedence over
// the labels.
//
// Lifecycle of a sandbox:
//
//	creating -> running -> stopping -> stopped
//	              |  ^         |
//	              v  |         v
//	             failed ------>
//
// A sandbox a restarted daemon finds alive is adopting (its cgroup thawed,
// its agent waited for) until its agent answers, then running; one whose
// agent does not answer within Config.AdoptTimeout is failed (it returns to
// running when it answers a health check). Operations on an adopting
// sandbox fail with ErrUnavailable: retry. See Manager.Start for what
// recovery ends instead of adopting, and EndRecorder for how it says so.
//
// The manager probes the agent of every running sandbox every
// Config.HealthInterval (see health.go for the policy): a sandbox whose
// agent misses a probe is unhealthy (Sandbox.Health) but running, healthy
// again when it answers one, and ended (EndAgentUnhealthy, failed) once
// it has missed Config.HealthFailures in a row. A sandbox is failed, not
// ended, when destroying it failed; it still counts against
// MaxConcurrent and is destroyed at expiry or on request. (A failed
// sandbox whose StoppedAt is set has ended instead: see below.)
//
// A sandbox whose agent exits (its PID 1 died, and with it every process
// of the sandbox) is failed at once: the runtime reports the exit
// (runtime.Instance.Exited) and the manager marks it failed, with
// EndReason EndAgentDied, and releases everything it held right away
// (processes left in its cgroups, cgroups, mounts, state dir, uid slot,
// its record file and its MaxConcurrent slot), as a destroy does.
//
// A sandbox's agent holds a deadline of its own, the sandbox's expiry
// plus Config.DeadlineGrace, and ends the sandbox itself when no daemon
// has by then (see deadline.go): expiry holds while the daemon is down.
//
// Every end is on the record: the manager reports to Config.Ends each
// sandbox it ends on its own authority (expiry, idle timeout, a dead
// agent, recovery; see End), and Destroy's callers record theirs. An
// ended sandbox keeps its record, stopped (or failed, for a dead agent),
// with EndReason and StoppedAt, for Config.EndedRetention and among the
// Config.MaxEnded latest ends, so that Get and List show what became of
// it instead of "not found"; then it is dropped. Operations on it fail
// with ErrFailedPrecondition, saying that it has ended and why.
package sandbox

import (
	"fmt"
	"math"
	"regexp"
	goruntime "runtime"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/cmdpolicy"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// State is where a sandbox is in its lifecycle.
type State string

// The sandbox states. StatePaused is reserved for backends that can freeze
// a sandbox; nothing sets it yet.
const (
	StateCreating State = "creating"
	StateAdopting State = "adopting"
	StateRunning  State = "running"
	StatePaused   State = "paused"
	StateStopping State = "stopping"
	StateStopped  State = "stopped"
	StateFailed   State = "failed"
)

// Valid reports whether s is one of the defined states.
func (s State) Valid() bool {
	switch s {
	case StateCreating, StateAdopting, StateRunning, StatePaused, StateStopping, StateStopped, StateFailed:
		return true
	}
	return false
}

// Spec is a request to create a sandbox. Zero values mean "default".
type Spec struct {
	// Owner identifies who the sandbox belongs to (the API layer puts the
	// tenant here). It is persisted with the sandbox, usable as a List
	// filter, and the template namespace the Template name resolves in.
	Owner string
	// Template names the root filesystem; Config.DefaultTemplate if empty.
	// It resolves to Owner's template of that name if there is one, else
	// to the shared one (template.Registry.Lookup); the Sandbox's Template
	// is then the template's store name (OWNER~NAME for an owned one).
	Template string
	// Limits caps the sandbox's resources; each zero field takes the
	// template's value (template.Limiter), else Config.DefaultLimits, and
	// no field may exceed Config.MaxLimits.
	Limits runtime.Limits
	// Env is added to the environment of every process started through
	// the Manager's Exec and StartProcess (request env wins over it). It
	// is not handed to the runtime, so that pooled and cold sandboxes
	// behave the same; callers of Client must merge it themselves.
	Env map[string]string
	// Metadata are caller-defined labels returned with the sandbox and
	// usable as List filters.
	Metadata map[string]string
	// Timeout is how long the sandbox lives: it expires at creation +
	// Timeout unless SetTimeout changes that. Config.DefaultTimeout if
	// zero; at most Config.MaxLifetime.
	Timeout time.Duration
	// IdleTimeout, if set, destroys the sandbox after this long without
	// exec or file activity (and no operation in flight).
	IdleTimeout time.Duration
	// Network is its network policy. The zero value (Mode "") takes the
	// template's default network (template.Networker), else NetworkNone;
	// a Network with a Mode replaces the template's whole.
	Network Network
	// Pending makes the sandbox provisional until Confirm: a daemon that
	// restarts before Confirm removes it (EndCreateInterrupted), so that
	// a create whose caller never got an answer leaves nothing behind.
	// The API sets it and confirms once the create is on the record.
	Pending bool
	// Origin is an opaque reference to the request that created the
	// sandbox (the API puts the seq of its audit intent), kept with the
	// sandbox and handed back in every End.
	Origin string
	// Tools are the names of the tools granted to the sandbox (its
	// caller resolves them from tools and toolsets), at most MaxTools;
	// its code calls them through the tool gateway (see tools.go).
	// Kept with the sandbox for a restarted daemon.
	Tools []string
	// KeyID is the API key that creates the sandbox, given to the
	// gateway with each of its calls (gateway.Caller.KeyID).
	KeyID string
	// CommandPolicy, if set, judges the commands the API execs in the
	// sandbox (see cmdpolicy.go). Kept with the sandbox. Nil takes the
	// template's default policy (template.CommandPolicier), if any; a
	// policy replaces the template's whole.
	CommandPolicy *cmdpolicy.Policy
}

// Sandbox is a point-in-time snapshot of one sandbox. It is a copy: the
// maps may be modified by the caller.
type Sandbox struct {
	ID       string
	Owner    string
	Template string
	State    State
	Limits   runtime.Limits
	Env      map[string]string
	Metadata map[string]string
	// Network is its network policy (see Network, SetNetwork).
	Network Network
	// Tools are the names of the tools granted to it, sorted.
	Tools []string
	// CmdPolicy is its command policy (Spec.CommandPolicy), if any;
	// never modified.
	CmdPolicy *cmdpolicy.Policy
	// CreatedAt is when the sandbox was handed to its creator (for a
	// pooled sandbox, when it was claimed).
	CreatedAt time.Time
	// ExpiresAt is when the reaper destroys the sandbox.
	ExpiresAt time.Time
	// MaxExpiresAt is CreatedAt + Config.MaxLifetime: SetTimeout cannot
	// extend past it.
	MaxExpiresAt time.Time
	IdleTimeout  time.Duration
	// LastActivity is when an exec or file operation last started or
	// ended (for adopted sandboxes: at the earliest, their adoption).
	LastActivity time.Time
	// StoppedAt is set once the sandbox has ended: it is stopped, or
	// failed with nothing of it left (its agent died). Its resources are
	// released and it no longer counts against MaxConcurrent.
	StoppedAt time.Time
	// EndReason says why the sandbox ended or is ending: EndDeleted, or
	// one of the End* reasons the manager reports (EndExpired, EndIdle,
	// EndAgentDied, the recovery ones). Empty while it lives.
	EndReason string
	// Error says why a failed sandbox failed.
	Error string
	// Health is what the health probes found of its agent (health.go).
	Health Health
}

// Ended reports whether the sandbox has ended (see StoppedAt).
func (s *Sandbox) Ended() bool { return !s.StoppedAt.IsZero() }

// Filter selects sandboxes in List. Empty fields match everything.
type Filter struct {
	// States, if not empty, keeps sandboxes in one of these states.
	States []State
	// Metadata keeps sandboxes whose metadata holds every pair given.
	Metadata map[string]string
	// Owner, if not empty, keeps the sandboxes of this owner.
	Owner string
	// Live keeps only the sandboxes that have not ended (that hold
	// resources: what a quota counts).
	Live bool
}

// Caps on the size of a Spec's Env and Metadata.
const (
	MaxMapKeys     = 64
	MaxKeyBytes    = 256
	MaxValueBytes  = 4 << 10
	maxPoolTotal   = 256
	defaultPoolMax = 64
	maxEnded       = 100000
)

// Config tunes a Manager. Zero values take the defaults documented on each
// field; Validate reports values that make no sense.
type Config struct {
	// StateDir holds one small JSON file per sandbox whose record changed
	// after creation (claimed from a pool, SetTimeout), so that a
	// restarted daemon adopts it with its current expiry and metadata.
	// Required; e.g. <data-dir>/sandboxes.
	StateDir string
	// DefaultTemplate is used when a Spec names none. Default "host".
	DefaultTemplate string
	// DefaultTimeout is a sandbox's lifetime when a Spec gives none.
	// Default 5 minutes.
	DefaultTimeout time.Duration
	// MaxLifetime caps how long after creation any sandbox may live, even
	// through SetTimeout. Default 24 hours.
	MaxLifetime time.Duration
	// MaxConcurrent caps sandboxes that are creating, running, stopping
	// or failed. Warm-pool members do not count: they have their own cap
	// (MaxPooled). Default 500.
	MaxConcurrent int
	// DefaultLimits fill the zero fields of a Spec's Limits that its
	// template's own limits (template.Limiter) leave unset. Defaults:
	// 1 CPU, 512 MiB memory, 256 pids, 1 GiB disk, 4096 open files.
	DefaultLimits runtime.Limits
	// MaxLimits caps every field of a Spec's Limits. Defaults: the host's
	// CPU count, 16 GiB memory, 4096 pids, 64 GiB disk, 65536 open files.
	MaxLimits runtime.Limits
	// PoolSize is how many ready sandboxes to keep per template, created
	// with the template's default limits (its own over DefaultLimits). A
	// Create whose resolved limits equal those claims one instead of
	// creating a sandbox.
	PoolSize map[string]int
	// MaxPooled caps the sum of PoolSize. Default 64.
	MaxPooled int
	// PoolFillConcurrency bounds the pool members being created at once,
	// across templates. Default 2.
	PoolFillConcurrency int
	// ReapInterval is how often expiry and idleness are checked.
	// Default 1 second.
	ReapInterval time.Duration
	// DeadlineGrace is how long after its expiry a sandbox's agent ends
	// the sandbox by itself when no daemon has (see deadline.go): long
	// enough for the reaper to win whenever it runs. Default 5 seconds,
	// at most a minute.
	DeadlineGrace time.Duration
	// HealthInterval is how often running sandboxes' agents are probed
	// (see health.go); a negative value disables the probes. Default 30
	// seconds.
	HealthInterval time.Duration
	// HealthTimeout bounds one probe (at most HealthInterval), and the
	// other short calls on an agent (a pool claim's ping, a deadline
	// sent). Default 2 seconds.
	HealthTimeout time.Duration
	// HealthFailures is how many probes missed in a row end a sandbox
	// (EndAgentUnhealthy); the first one missed marks it unhealthy.
	// Default 3.
	HealthFailures int
	// Health, if set, is told of every change of a sandbox's health
	// status (see HealthRecorder).
	Health HealthRecorder
	// CreateTimeout bounds creating one sandbox in the runtime.
	// Default 60 seconds.
	CreateTimeout time.Duration
	// DestroyTimeout bounds destroying one sandbox. Default 30 seconds.
	DestroyTimeout time.Duration
	// EndedRetention is how long an ended sandbox (stopped, or failed
	// with its agent dead) stays visible to Get and List, with its
	// EndReason and StoppedAt. Default 1 hour; negative drops records at
	// once. The audit log, not this, is the lasting record of an end.
	EndedRetention time.Duration
	// MaxEnded caps the ended sandboxes kept (the oldest ends go first),
	// whatever EndedRetention says. Default 1000; an ended record holds
	// the sandbox's metadata (its env is dropped), at most about 280 KiB.
	MaxEnded int
	// AdoptTimeout is how long a restarted manager waits for the agent of
	// a sandbox it adopts to answer before marking it failed (never
	// destroyed: its agent is alive, only slow). Default 60 seconds.
	AdoptTimeout time.Duration
	// AdoptConcurrency bounds the sandboxes adopted, or ended by
	// recovery, at once. Default 16.
	AdoptConcurrency int
	// Ends, if set, is told of every sandbox the manager ends itself:
	// expiry, idle timeout, a dead agent, recovery (see EndRecorder);
	// the daemon records them in the audit log.
	Ends EndRecorder
	// Records, if set, keeps the durable record of every sandbox created
	// for a caller, with the tenant's quota checked atomically at create
	// (see RecordStore, RecordCreated, RecordStopped and SyncRecords).
	Records RecordStore
	// Egress configures the egress proxies of sandboxes in allowlist
	// mode (see network.go).
	Egress EgressConfig
	// OpenNetwork, if set, plugs sandboxes in NetworkOpen mode into a
	// routed network (opennet.Router); without it that mode is refused.
	OpenNetwork OpenNetwork
	// Gateway, if set, serves each sandbox's tools socket (see
	// tools.go); without it no sandbox can call a tool.
	Gateway gateway.Calls
	// ToolsLib, if set, is a host directory holding the in-sandbox tool
	// libraries (gateway/sdk.WriteDir), world-readable, mounted
	// read-only at ToolsLibDir in every sandbox.
	ToolsLib string
	// Metrics, if set, counts creates (by template and origin, failures
	// by error code), pool claims and destroys (by end reason); nil
	// records nothing. The gauges are read at scrape time (Counts,
	// PoolStats).
	Metrics *metrics.Metrics
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.DefaultTemplate == "" {
		c.DefaultTemplate = template.HostName
	}
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = 5 * time.Minute
	}
	if c.MaxLifetime == 0 {
		c.MaxLifetime = 24 * time.Hour
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = 500
	}
	d := &c.DefaultLimits
	if d.CPUs == 0 {
		d.CPUs = 1
	}
	if d.MemoryBytes == 0 {
		d.MemoryBytes = 512 << 20
	}
	if d.Pids == 0 {
		d.Pids = 256
	}
	if d.DiskBytes == 0 {
		d.DiskBytes = 1 << 30
	}
	if d.NoFile == 0 {
		d.NoFile = 4096
	}
	m := &c.MaxLimits
	if m.CPUs == 0 {
		m.CPUs = float64(goruntime.NumCPU())
	}
	if m.MemoryBytes == 0 {
		m.MemoryBytes = 16 << 30
	}
	if m.Pids == 0 {
		m.Pids = 4096
	}
	if m.DiskBytes == 0 {
		m.DiskBytes = 64 << 30
	}
	if m.NoFile == 0 {
		m.NoFile = 65536
	}
	if c.MaxPooled == 0 {
		c.MaxPooled = defaultPoolMax
	}
	if c.PoolFillConcurrency == 0 {
		c.PoolFillConcurrency = 2
	}
	if c.ReapInterval == 0 {
		c.ReapInterval = time.Second
	}
	if c.DeadlineGrace == 0 {
		c.DeadlineGrace = defaultDeadlineGrace
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = 30 * time.Second
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = 2 * time.Second
	}
	if c.HealthFailures == 0 {
		c.HealthFailures = 3
	}
	if c.CreateTimeout == 0 {
		c.CreateTimeout = time.Minute
	}
	if c.DestroyTimeout == 0 {
		c.DestroyTimeout = 30 * time.Second
	}
	if c.EndedRetention == 0 {
		c.EndedRetention = time.Hour
	}
	if c.MaxEnded == 0 {
		c.MaxEnded = 1000
	}
	if c.AdoptTimeout == 0 {
		c.AdoptTimeout = time.Minute
	}
	if c.AdoptConcurrency == 0 {
		c.AdoptConcurrency = 16
	}
	return c
}

// Validate reports the first invalid field of c (after defaults). Errors
// wrap errdefs.ErrInvalidArgument.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("sandbox config: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	switch {
	case c.StateDir == "":
		return bad("state dir is required")
	case template.ValidateName(c.DefaultTemplate) != nil:
		return bad("default template %q is not a valid name", c.DefaultTemplate)
	case c.MaxLifetime <= 0:
		return bad("max lifetime must be positive")
	case c.DefaultTimeout <= 0 || c.DefaultTimeout > c.MaxLifetime:
		return bad("default timeout must be positive and at most the max lifetime")
	case c.MaxConcurrent < 0:
		return bad("max concurrent must be positive")
	case c.MaxPooled < 0 || c.MaxPooled > maxPoolTotal:
		return bad("max pooled must be between 0 and %d", maxPoolTotal)
	case c.PoolFillConcurrency < 0 || c.PoolFillConcurrency > 64:
		return bad("pool fill concurrency must be between 1 and 64")
	case c.ReapInterval < 0 || c.HealthTimeout < 0 || c.CreateTimeout < 0 || c.DestroyTimeout < 0:
		return bad("intervals and timeouts must be positive")
	case c.HealthFailures < 0:
		return bad("health failures must be positive")
	case c.DeadlineGrace < 0 || c.DeadlineGrace > maxDeadlineGrace:
		return bad("deadline grace must be between 0 and %v", maxDeadlineGrace)
	case c.MaxEnded < 0 || c.MaxEnded > maxEnded:
		return bad("max ended must be between 1 and %d", maxEnded)
	case c.AdoptTimeout < 0:
		return bad("adopt timeout must be positive")
	case c.AdoptConcurrency < 0 || c.AdoptConcurrency > 256:
		return bad("adopt concurrency must be between 1 and 256")
	}
	if err := checkLimits(c.MaxLimits, runtime.Limits{}, false); err != nil {
		return bad("max limits: %v", err)
	}
	if err := checkLimits(c.DefaultLimits, c.MaxLimits, true); err != nil {
		return bad("default limits: %v", err)
	}
	total := 0
	for name, n := range c.PoolSize {
		if template.ValidateName(name) != nil {
			return bad("pool template %q is not a valid name", name)
		}
		if n < 0 {
			return bad("pool size of %q is negative", name)
		}
		total += n
	}
	if total > c.MaxPooled {
		return bad("pool sizes add up to %d, more than max pooled %d", total, c.MaxPooled)
	}
	return nil
}

// MinCPUs is the smallest CPU limit a sandbox may have. The agent shares
// its sandbox's CPU quota with the sandbox's processes (its cgroup and
// work/'s get equal shares), so a smaller quota starves the agent when the
// sandbox runs busy loops: it answers exec, health checks and the pings of
// a restarted daemon too late. Measured on a 2-core host with 8 busy loops
// in the sandbox (internal/e2e TestRestartSlow logs the
// latencies; docs/BENCHMARKS.md has the figures): an exec took 3.6 s at
// 0.01 CPU, up to 3.0 s at 0.02 and 1.1 s at 0.03, and at most 0.71 s at
// 0.05, a third of the 2 s health-check timeout.
const MinCPUs = 0.05

// The smallest memory, disk and pids limits a sandbox may have: below
// them the agent and a shell cannot start (the native runtime refuses
// them too). Create checks them with the other limits, so that a request
// below them fails before anything of the sandbox exists.
const (
	MinMemoryBytes = 16 << 20
	MinDiskBytes   = 1 << 20
	MinPids        = 8
)

// checkLimits reports a negative field of l or, when capped, a field
// above max or below its minimum (MinCPUs and the others). Memory and
// disk are said in MiB, the unit of the API's memory_mb and disk_mb.
func checkLimits(l, max runtime.Limits, capped bool) error {
	if l.CPUs < 0 || l.MemoryBytes < 0 || l.Pids < 0 || l.DiskBytes < 0 {
		return fmt.Errorf("limits must not be negative")
	}
	if math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0) {
		return fmt.Errorf("cpus must be a finite number")
	}
	if l.CPUs != 0 && l.CPUs < MinCPUs {
		return fmt.Errorf("cpus %g is below the minimum %g, at which the sandbox's agent still answers while the sandbox is busy", l.CPUs, MinCPUs)
	}
	if !capped {
		return nil
	}
	switch {
	case l.CPUs > max.CPUs:
		return fmt.Errorf("cpus %g is above the maximum %g", l.CPUs, max.CPUs)
	case l.MemoryBytes > max.MemoryBytes:
		return fmt.Errorf("memory %s is above the maximum %s", inMiB(l.MemoryBytes), inMiB(max.MemoryBytes))
	case l.MemoryBytes < MinMemoryBytes:
		return fmt.Errorf("memory %s is below the minimum %s", inMiB(l.MemoryBytes), inMiB(MinMemoryBytes))
	case l.Pids > max.Pids:
		return fmt.Errorf("pids %d is above the maximum %d", l.Pids, max.Pids)
	case l.Pids < MinPids:
		return fmt.Errorf("pids %d is below the minimum %d", l.Pids, MinPids)
	case l.DiskBytes > max.DiskBytes:
		return fmt.Errorf("disk %s is above the maximum %s", inMiB(l.DiskBytes), inMiB(max.DiskBytes))
	case l.DiskBytes < MinDiskBytes:
		return fmt.Errorf("disk %s is below the minimum %s", inMiB(l.DiskBytes), inMiB(MinDiskBytes))
	case l.NoFile > max.NoFile:
		return fmt.Errorf("nofile %d is above the maximum %d", l.NoFile, max.NoFile)
	}
	return nil
}

// inMiB says n bytes in MiB, or in bytes when it is not a whole number
// of MiB.
func inMiB(n int64) string {
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d bytes", n)
}

// defaultsFor returns the limits a sandbox of src gets for the fields a
// request leaves unset: the template's own (see template.Limiter) over
// DefaultLimits. Pools create their members with them.
func (c Config) defaultsFor(src template.Source) runtime.Limits {
	if t, ok := src.(template.Limiter); ok {
		return t.Limits().Over(c.DefaultLimits)
	}
	return c.DefaultLimits
}

// resolvedSpec is a validated Spec with defaults applied.
type resolvedSpec struct {
	owner    string
	template template.Source
	limits   runtime.Limits
	// defaults are the template's default limits, which its pool's
	// members have: a Create whose limits equal them can claim one.
	defaults    runtime.Limits
	env         map[string]string
	metadata    map[string]string
	timeout     time.Duration
	idleTimeout time.Duration
	pending     bool
	origin      string
	network     Network
	policy      *egress.Policy // nil in mode none
	tools       []string
	keyID       string
	cmdPolicy   *cmdpolicy.Policy
}

// envKeyPattern is what an environment variable name may look like.
var envKeyPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// lookupTemplate resolves the template a Spec names for owner: name, or
// DefaultTemplate when it is empty, in owner's namespace, else the
// shared one (template.Registry.Lookup).
func (c Config) lookupTemplate(templates *template.Registry, owner, name string) (template.Source, error) {
	if name == "" {
		name = c.DefaultTemplate
	}
	return templates.Lookup(owner, name)
}

// resolve validates s against c and fills defaults.
func (c Config) resolve(s Spec, templates *template.Registry) (resolvedSpec, error) {
	bad := func(format string, args ...any) (resolvedSpec, error) {
		return resolvedSpec{}, fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	src, err := c.lookupTemplate(templates, s.Owner, s.Template)
	if err != nil {
		return resolvedSpec{}, err
	}
	if err := checkLimits(s.Limits, runtime.Limits{}, false); err != nil {
		return bad("%v", err)
	}
	defaults := c.defaultsFor(src)
	l := s.Limits.Over(defaults)
	if err := checkLimits(l, c.MaxLimits, true); err != nil {
		return bad("%v", err)
	}
	timeout := s.Timeout
	switch {
	case timeout < 0:
		return bad("timeout must not be negative")
	case timeout == 0:
		timeout = c.DefaultTimeout
	case timeout > c.MaxLifetime:
		return bad("timeout %v is above the maximum lifetime %v", timeout, c.MaxLifetime)
	}
	if s.IdleTimeout < 0 || s.IdleTimeout > c.MaxLifetime {
		return bad("idle timeout must be between 0 and the maximum lifetime %v", c.MaxLifetime)
	}
	if err := checkMap("env", s.Env, func(k string) bool { return envKeyPattern.MatchString(k) }); err != nil {
		return resolvedSpec{}, err
	}
	n := s.Network
	if n.Mode == "" {
		if tn, ok := templateNetwork(src); ok {
			n = tn
		}
	}
	network, policy, err := n.resolve()
	if err != nil {
		return resolvedSpec{}, err
	}
	if err := checkMap("metadata", s.Metadata, func(k string) bool { return k != "" }); err != nil {
		return resolvedSpec{}, err
	}
	if len(s.Owner) > MaxKeyBytes || !utf8.ValidString(s.Owner) || containsNUL(s.Owner) {
		return bad("owner must be UTF-8 without NUL bytes and at most %d bytes", MaxKeyBytes)
	}
	if len(s.Origin) > MaxKeyBytes || !utf8.ValidString(s.Origin) || containsNUL(s.Origin) {
		return bad("origin must be UTF-8 without NUL bytes and at most %d bytes", MaxKeyBytes)
	}
	if len(s.KeyID) > MaxKeyBytes || !utf8.ValidString(s.KeyID) || containsNUL(s.KeyID) {
		return bad("key id must be UTF-8 without NUL bytes and at most %d bytes", MaxKeyBytes)
	}
	tools, err := checkTools(s.Tools)
	if err != nil {
		return resolvedSpec{}, err
	}
	if s.CommandPolicy == nil {
		s.CommandPolicy = templateCommandPolicy(src)
	}
	cmdPolicy, err := checkCommandPolicy(s.CommandPolicy)
	if err != nil {
		return resolvedSpec{}, err
	}
	return resolvedSpec{
		owner:       s.Owner,
		template:    src,
		limits:      l,
		defaults:    defaults,
		env:         cloneMap(s.Env),
		metadata:    cloneMap(s.Metadata),
		timeout:     timeout,
		idleTimeout: s.IdleTimeout,
		pending:     s.Pending,
		origin:      s.Origin,
		network:     network,
		policy:      policy,
		tools:       tools,
		keyID:       s.KeyID,
		cmdPolicy:   cmdPolicy,
	}, nil
}

// checkMap enforces the size caps on m and that keys pass validKey and
// keys and values are NUL-free UTF-8.
func checkMap(what string, m map[string]string, validKey func(string) bool) error {
	if len(m) > MaxMapKeys {
		return fmt.Errorf("%s has %d keys, at most %d are allowed: %w", what, len(m), MaxMapKeys, errdefs.ErrInvalidArgument)
	}
	for k, v := range m {
		switch {
		case len(k) > MaxKeyBytes:
			return fmt.Errorf("%s key is longer than %d bytes: %w", what, MaxKeyBytes, errdefs.ErrInvalidArgument)
		case len(v) > MaxValueBytes:
			return fmt.Errorf("%s value of %q is longer than %d bytes: %w", what, k, MaxValueBytes, errdefs.ErrInvalidArgument)
		case !utf8.ValidString(k) || !utf8.ValidString(v) || containsNUL(k) || containsNUL(v):
			return fmt.Errorf("%s entries must be UTF-8 without NUL bytes: %w", what, errdefs.ErrInvalidArgument)
		case !validKey(k):
			return fmt.Errorf("%s key %q is not valid: %w", what, k, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

func containsNUL(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == 0 {
			return true
		}
	}
	return false
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
