package linux

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/cgroups"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Config configures the native backend.
type Config struct {
	// StateDir holds one directory per sandbox (state file, control
	// socket, agent log, mount points). It must be on a local filesystem.
	StateDir string
	// CgroupParent names the cgroup under which every sandbox gets its own
	// subtree. Default "airlock".
	CgroupParent string
	// UIDBase is the first host uid (and gid) of sandbox id ranges; each
	// sandbox gets UIDRangeSize ids from a free slot above it.
	// Default 1<<28, far above ordinary users and subuid ranges.
	UIDBase uint32
	// UIDRangeSize is the size of each sandbox's id range. Default 65536.
	UIDRangeSize uint32
	// MaxSandboxes bounds the number of uid slots. Default 4096.
	MaxSandboxes int
	// AgentPath is the binary started as the sandbox's PID 1 and
	// AgentArgs its arguments (argv[0] included). Defaults: /proc/self/exe
	// and {"airlock", "agent"}: the daemon's own binary.
	AgentPath string
	AgentArgs []string
	// StartTimeout bounds how long Create waits for the agent. Default 10s.
	StartTimeout time.Duration
	// DefaultLimits fill zero fields of a spec's limits.
	DefaultLimits runtime.Limits
	Logger        *slog.Logger
}

// DefaultLimits are used where neither the spec nor Config set a limit.
var DefaultLimits = runtime.Limits{
	CPUs:        1,
	MemoryBytes: 512 << 20,
	Pids:        256,
	DiskBytes:   1 << 30,
	NoFile:      4096,
}

// The agent's allowances. A sandbox's cgroup (<id>) as a whole is capped
// at its memory limit plus AgentMemoryAllowance (no swap) and its pids
// limit plus AgentPidsAllowance, so that nothing of the sandbox exceeds
// that, whatever cgroup the kernel charges it to: the files the agent
// writes for the file API are tmpfs pages charged to the agent's cgroup,
// outside work/'s limit. The agent refuses a write that would leave less
// than its reserve (64 MiB, agent.fsMemoryReserve) below the cap, so the
// memory allowance holds the agent's working set plus that reserve: the
// agent's cgroup peaked at 47 MiB under 32 concurrent execs streaming
// output (TestSandboxCgroupCaps checks it stays under half the allowance).
const (
	AgentMemoryAllowance = 128 << 20
	AgentPidsAllowance   = 256
)

func (c *Config) setDefaults() error {
	if c.StateDir == "" {
		return fmt.Errorf("linux runtime: StateDir is required: %w", errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(c.StateDir) {
		return fmt.Errorf("linux runtime: StateDir must be absolute: %w", errdefs.ErrInvalidArgument)
	}
	if c.CgroupParent == "" {
		c.CgroupParent = "airlock"
	}
	if c.UIDBase == 0 {
		c.UIDBase = 1 << 28
	}
	if c.UIDRangeSize == 0 {
		c.UIDRangeSize = 65536
	}
	if c.UIDRangeSize < 65536 {
		return fmt.Errorf("linux runtime: UIDRangeSize must be at least 65536 (uid 65534 is nobody): %w", errdefs.ErrInvalidArgument)
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = 4096
	}
	if uint64(c.UIDBase)+uint64(c.MaxSandboxes)*uint64(c.UIDRangeSize) > 1<<32-2 {
		return fmt.Errorf("linux runtime: uid ranges overflow 32 bits: %w", errdefs.ErrInvalidArgument)
	}
	if c.AgentPath == "" {
		c.AgentPath = "/proc/self/exe"
	}
	if len(c.AgentArgs) == 0 {
		c.AgentArgs = []string{"airlock", AgentCommand}
	}
	if c.StartTimeout == 0 {
		c.StartTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Runtime is the native Linux backend.
type Runtime struct {
	cfg Config
	log *slog.Logger
	cg  *cgroups.Manager
	bin string // host path of the agent binary bound into sandboxes

	warnNoIDMap sync.Once

	mu    sync.Mutex
	slots map[int]string // uid slot → sandbox id
	live  map[string]*Instance
}

var _ runtime.Runtime = (*Runtime)(nil)

// New checks that the host supports the backend and prepares StateDir.
func New(cfg Config) (*Runtime, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("linux runtime: must run as root: %w", errdefs.ErrPermissionDenied)
	}
	// 0711: sandbox agents (unprivileged host uids) must traverse to their
	// own mount points but may not list other sandboxes.
	if err := os.MkdirAll(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("linux runtime: state dir: %w", err)
	}
	if err := os.Chmod(cfg.StateDir, 0o711); err != nil {
		return nil, fmt.Errorf("linux runtime: state dir: %w", err)
	}
	cg, err := cgroups.NewManager(cfg.CgroupParent, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("linux runtime: %w", err)
	}
	bin, err := installAgentBinary(cfg.StateDir, cfg.AgentPath)
	if err != nil {
		return nil, fmt.Errorf("linux runtime: agent binary: %w", err)
	}
	return &Runtime{
		cfg:   cfg,
		bin:   bin,
		log:   cfg.Logger,
		cg:    cg,
		slots: make(map[int]string),
		live:  make(map[string]*Instance),
	}, nil
}

// agentBinDir holds the copy of the agent binary that sandboxes see. It
// sits in the state dir (which sandbox uids can traverse) because the
// daemon's own binary may live where they cannot, and a bind mount needs
// a path in the agent's mount namespace. The copy also means that no
// sandbox ever holds the daemon's own executable.
const agentBinDir = ".bin"

// installAgentBinary copies the agent binary into the state dir unless an
// identical copy is there already, and returns its path.
func installAgentBinary(stateDir, src string) (string, error) {
	dir := filepath.Join(stateDir, agentBinDir)
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil { // whatever the umask
		return "", err
	}
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	h := sha256.New()
	if _, err := io.Copy(h, in); err != nil {
		return "", err
	}
	// One directory per version: sandboxes see it through a read-only
	// view (see viewReadOnly), which holds just this binary.
	dir = filepath.Join(dir, hex.EncodeToString(h.Sum(nil))[:16])
	dst := filepath.Join(dir, "airlock")
	if _, err := os.Stat(dst); err == nil {
		return dst, nil
	}
	if err := os.Mkdir(dir, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		return "", err
	}
	if _, err := in.Seek(0, io.SeekStart); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".tmp-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	return dst, os.Rename(tmp.Name(), dst)
}

// Name implements runtime.Runtime.
func (r *Runtime) Name() string { return "linux" }

// allocSlot reserves a free uid slot for id.
func (r *Runtime) allocSlot(id string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.live[id]; ok {
		return 0, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrAlreadyExists)
	}
	for s := 0; s < r.cfg.MaxSandboxes; s++ {
		if _, used := r.slots[s]; !used {
			r.slots[s] = id
			return s, nil
		}
	}
	return 0, fmt.Errorf("no free sandbox slot (max %d): %w", r.cfg.MaxSandboxes, errdefs.ErrResourceExhausted)
}

func (r *Runtime) freeSlot(slot int, id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slots[slot] == id {
		delete(r.slots, slot)
	}
}

func (r *Runtime) uidBase(slot int) uint32 {
	return r.cfg.UIDBase + uint32(slot)*r.cfg.UIDRangeSize
}

func (r *Runtime) forget(inst *Instance, freeSlot bool) {
	r.mu.Lock()
	if r.live[inst.id] == inst {
		delete(r.live, inst.id)
	}
	if freeSlot && r.slots[inst.state.Slot] == inst.id {
		delete(r.slots, inst.state.Slot)
	}
	r.mu.Unlock()
}

// fillLimits applies defaults and validates limits.
func (r *Runtime) fillLimits(l runtime.Limits) (runtime.Limits, error) {
	d := r.cfg.DefaultLimits
	pick := func(v, cfg, def int64) int64 {
		if v != 0 {
			return v
		}
		if cfg != 0 {
			return cfg
		}
		return def
	}
	l.MemoryBytes = pick(l.MemoryBytes, d.MemoryBytes, DefaultLimits.MemoryBytes)
	l.Pids = pick(l.Pids, d.Pids, DefaultLimits.Pids)
	l.DiskBytes = pick(l.DiskBytes, d.DiskBytes, DefaultLimits.DiskBytes)
	l.NoFile = uint64(pick(int64(l.NoFile), int64(d.NoFile), int64(DefaultLimits.NoFile)))
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
		if l.CPUs == 0 {
			l.CPUs = DefaultLimits.CPUs
		}
	}
	switch {
	case l.CPUs < 0.01 || l.CPUs > 1024:
		return l, fmt.Errorf("cpus must be between 0.01 and 1024: %w", errdefs.ErrInvalidArgument)
	case l.MemoryBytes < 16<<20:
		return l, fmt.Errorf("memory must be at least 16 MiB: %w", errdefs.ErrInvalidArgument)
	case l.Pids < 8 || l.Pids > 1<<22:
		return l, fmt.Errorf("pids must be between 8 and %d: %w", 1<<22, errdefs.ErrInvalidArgument)
	case l.DiskBytes < 1<<20:
		return l, fmt.Errorf("disk must be at least 1 MiB: %w", errdefs.ErrInvalidArgument)
	case l.NoFile < 64 || l.NoFile > 1<<20:
		return l, fmt.Errorf("nofile must be between 64 and %d: %w", 1<<20, errdefs.ErrInvalidArgument)
	}
	return l, nil
}

func validateSpec(spec *runtime.Spec) error {
	if !runtime.IDPattern.MatchString(spec.ID) {
		return fmt.Errorf("sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Rootfs.Layers) == 0 {
		return fmt.Errorf("sandbox %s: rootfs has no layers: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Rootfs.Layers) > runtime.MaxLayers {
		return fmt.Errorf("sandbox %s: rootfs has %d layers, at most %d are supported: %w", spec.ID, len(spec.Rootfs.Layers), runtime.MaxLayers, errdefs.ErrInvalidArgument)
	}
	for _, l := range spec.Rootfs.Layers {
		if !filepath.IsAbs(l) {
			return fmt.Errorf("sandbox %s: layer path must be absolute: %w", spec.ID, errdefs.ErrInvalidArgument)
		}
	}
	if err := spec.Rootfs.Validate(); err != nil {
		return fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	for _, b := range spec.Rootfs.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) || filepath.Clean(b.Target) == "/" {
			return fmt.Errorf("sandbox %s: bind %q: %w", spec.ID, b.Target, errdefs.ErrInvalidArgument)
		}
	}
	if spec.Hostname == "" {
		spec.Hostname = spec.ID
	}
	if len(spec.Hostname) > 64 {
		return fmt.Errorf("sandbox %s: hostname too long: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	return nil
}

// state is what a sandbox's state file records, enough to re-adopt or
// remove it after a daemon restart.
type state struct {
	Spec      runtime.Spec `json:"spec"`
	Slot      int          `json:"slot"`
	UIDBase   uint32       `json:"uid_base"`
	Pid       int          `json:"pid"`
	PidStart  uint64       `json:"pid_start"` // /proc/<pid>/stat starttime, guards against pid reuse
	CreatedAt time.Time    `json:"created_at"`
}

const (
	stateFile  = "state.json"
	socketFile = "agent.sock"
	logFile    = "agent.log"
	mntDir     = "mnt"
)

func writeState(dir string, st *state) error {
	b, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, stateFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

func readState(dir string) (*state, error) {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return nil, err
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	return &st, nil
}

// recoverConcurrency bounds the sandboxes Recover removes at once.
const recoverConcurrency = 8

// Recover implements runtime.Runtime: it adopts every sandbox left by an
// earlier daemon whose agent process is still the recorded one (pid and
// start time), without waiting for it to answer: an agent starved of CPU
// or frozen by a destroy the restart cut short is alive, and the caller
// decides whether to thaw and wait for it (Resume) or destroy it. It
// removes the sandboxes whose agent is gone and the cgroups that have no
// state directory, up to recoverConcurrency at a time.
func (r *Runtime) Recover(ctx context.Context) ([]runtime.Instance, error) {
	entries, err := os.ReadDir(r.cfg.StateDir)
	if err != nil {
		return nil, fmt.Errorf("recover: %w", err)
	}
	var adopted []runtime.Instance
	var doomed []string
	seen := make(map[string]bool)
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || !runtime.IDPattern.MatchString(id) {
			continue
		}
		seen[id] = true
		r.mu.Lock()
		_, known := r.live[id]
		r.mu.Unlock()
		if known {
			continue
		}
		inst, err := r.adopt(id)
		if err != nil {
			r.log.Info("removing sandbox that cannot be adopted", "sandbox", id, "reason", err)
			doomed = append(doomed, id)
			continue
		}
		adopted = append(adopted, inst)
	}
	var errs []error
	ids, err := r.cg.List()
	if err != nil {
		errs = append(errs, err)
	}
	for _, id := range ids {
		if !seen[id] {
			r.log.Info("removing orphaned sandbox cgroup", "sandbox", id)
			doomed = append(doomed, id)
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, recoverConcurrency)
	for _, id := range doomed {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.purge(ctx, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return adopted, errors.Join(errs...)
}

// adopt makes the Instance of sandbox id if its recorded agent process
// is alive, watching that process through a pidfd from now on (see
// agentProc). It does not talk to the agent.
func (r *Runtime) adopt(id string) (*Instance, error) {
	dir := filepath.Join(r.cfg.StateDir, id)
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if st.Spec.ID != id {
		return nil, errors.New("state file names another sandbox")
	}
	agent := openAgentProc(st)
	if agent == nil {
		return nil, errors.New("agent process is gone")
	}
	cg, err := r.cg.Open(id)
	if err != nil {
		agent.close()
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if owner, used := r.slots[st.Slot]; used && owner != id {
		agent.close()
		return nil, fmt.Errorf("uid slot %d already used by %s", st.Slot, owner)
	}
	r.slots[st.Slot] = id
	inst := newInstance(r, dir, st, cg, agent)
	r.live[id] = inst
	return inst, nil
}

// purge removes every trace of sandbox id: processes (the agent recorded
// in its state by pidfd, if it still runs, and whatever is in its cgroup
// tree), cgroups, state dir. Like Destroy it fails closed: while a process
// of the sandbox may run, its state dir stays and its uid slot stays
// reserved.
func (r *Runtime) purge(ctx context.Context, id string) error {
	dir := filepath.Join(r.cfg.StateDir, id)
	st, _ := readState(dir) // unreadable: the cgroup tree is all there is
	if st != nil && st.Spec.ID != id {
		st = nil
	}
	var cg *cgroups.Sandbox
	var errs []error
	if c, err := r.cg.Open(id); err == nil {
		cg = c
	} else if !errors.Is(err, errdefs.ErrNotFound) {
		errs = append(errs, err)
	}
	agent := openAgentProc(st)
	err := r.killSandbox(ctx, id, cg, agent, st)
	if agent != nil {
		agent.close()
	}
	if err != nil {
		if st != nil {
			r.mu.Lock()
			if _, used := r.slots[st.Slot]; !used {
				r.slots[st.Slot] = id
			}
			r.mu.Unlock()
		}
		return fmt.Errorf("sandbox %s: cleanup: %w", id, errors.Join(append(errs, err)...))
	}
	if cg != nil {
		if err := cg.Remove(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeStateDir(dir); err != nil {
		errs = append(errs, err)
	}
	if st != nil {
		r.freeSlot(st.Slot, id)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox %s: cleanup: %w", id, err)
	}
	return nil
}

// removeStateDir removes a sandbox's state directory. The mount point in
// it is only ever mounted in the sandbox's own mount namespace, so by the
// time the sandbox's processes are gone it is an empty directory.
func removeStateDir(dir string) error {
	err := os.RemoveAll(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
