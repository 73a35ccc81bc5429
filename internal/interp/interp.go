// Package interp is Airlock's code interpreter: stateful Python,
// JavaScript and bash contexts inside sandboxes, with rich results.
//
// A context is a daemon-side object (a Manager keeps them per sandbox)
// backed by one long-lived background process in the sandbox, the kernel:
// a small driver program (see drivers.go) started through the sandbox's
// agent that runs cells in one persistent namespace (Python), realm
// (JavaScript) or shell (bash). Run sends a cell to a context's kernel and
// streams what it produces as Events: stdout and stderr text, results
// (the value of the last expression, figures, display() calls) as MIME
// bundles, an error with its traceback, and one final End.
//
// Lifecycle. A context is created explicitly (CreateContext) or, as the
// default context of its language, on the first Run that names no
// context. One cell runs at a time per context: a Run on a busy context
// fails at once with errdefs.ErrFailedPrecondition (the caller can wait
// or interrupt; queueing would hold HTTP requests for unbounded times). A
// cell's timeout interrupts it (SIGINT to the kernel's process group:
// KeyboardInterrupt in Python, a broken-off script in JavaScript, the
// foreground job in bash); the context and its state live on. A cell that
// does not stop within Limits.InterruptGrace of the interrupt gets its
// kernel killed: the context is then dead, like one whose process exited
// (os._exit, exit). A dead default context restarts on its next Run; a
// dead named context reports why until RestartContext. RestartContext
// replaces the kernel (state is lost); DeleteContext kills it.
//
// Contexts die with their sandbox: when a kernel's stream ends and the
// sandbox is no longer running, the sandbox's contexts are forgotten.
// Kernels are background processes tagged with their context, so a
// restarted daemon adopts them (state intact) the first time it serves a
// code request for their sandbox; only their per-context env is lost.
//
// Limits bound code size, output and results per cell, image size, and
// contexts per sandbox.
package interp

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
)

// Language is the language of a context.
type Language string

// The languages.
const (
	Python     Language = "python"
	JavaScript Language = "javascript"
	Bash       Language = "bash"
)

// ParseLanguage returns the language named s: python (py, python3),
// javascript (js, node, nodejs) or bash (sh, shell).
func ParseLanguage(s string) (Language, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "python", "py", "python3":
		return Python, nil
	case "javascript", "js", "node", "nodejs":
		return JavaScript, nil
	case "bash", "sh", "shell":
		return Bash, nil
	case "":
		return "", fmt.Errorf("language is required (python, javascript or bash): %w", errdefs.ErrInvalidArgument)
	}
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return "", fmt.Errorf("language %q is not supported; want python, javascript or bash: %w", strings.ToValidUTF8(s, "?"), errdefs.ErrInvalidArgument)
}

// ContextState is what a context is doing.
type ContextState string

// The context states.
const (
	// StateIdle: the kernel runs and waits for a cell.
	StateIdle ContextState = "idle"
	// StateBusy: a cell (or a start or restart) is running.
	StateBusy ContextState = "busy"
	// StateDead: the kernel is gone (Error says why); a default context
	// restarts on its next Run, a named one needs RestartContext.
	StateDead ContextState = "dead"
)

// ContextInfo describes a context.
type ContextInfo struct {
	ID       string
	Language Language
	// Cwd is the working directory the kernel started in ("" for the
	// sandbox's default: its template's WORKDIR, else the user's home).
	Cwd string
	// Default marks the context Run uses for its language when given no
	// context ID.
	Default bool
	State   ContextState
	// Error says why a dead context died.
	Error string
	// ExecutionCount is the number of cells run, across restarts.
	ExecutionCount int
	CreatedAt      time.Time
}

// ContextOptions describe a context to create.
type ContextOptions struct {
	Language Language
	// Cwd is the kernel's working directory (relative to the user's
	// home); empty means the sandbox's default: its template's WORKDIR,
	// else the user's home.
	Cwd string
	// Env is added to the sandbox's environment for the kernel.
	Env map[string]string
}

// RunRequest is one cell to run.
type RunRequest struct {
	// ContextID names the context; empty means the default context of
	// Language (created on first use).
	ContextID string
	// Language is required without ContextID; with it, it must match
	// the context's (or be empty).
	Language Language
	// Code is the cell's source.
	Code string
	// Env is set for this cell only.
	Env map[string]string
	// Timeout interrupts the cell; 0 means Limits.DefaultTimeout.
	Timeout time.Duration
}

// EventType is the kind of an Event.
type EventType string

// The event types, in the order a cell produces them: any number of
// stdout, stderr and result events, at most one error, then one end.
const (
	EventStdout EventType = "stdout"
	EventStderr EventType = "stderr"
	EventResult EventType = "result"
	EventError  EventType = "error"
	EventEnd    EventType = "end"
)

// Event is one thing a cell produced.
type Event struct {
	Type EventType
	// Text is the output of stdout and stderr events.
	Text string
	// Result is set for result events.
	Result *Result
	// Error is set for error events.
	Error *ExecError
	// End is set for the end event.
	End *End
}

// Result is a value the cell showed: the value of its last expression
// (IsMain), a figure or a display() call. Each field holds one
// representation of the value; Text is nearly always set.
type Result struct {
	IsMain   bool
	Text     string
	HTML     string
	Markdown string
	SVG      string
	// PNG and JPEG are base64 (standard encoding).
	PNG, JPEG  string
	LaTeX      string
	JavaScript string
	// JSON is a JSON value.
	JSON json.RawMessage
	// Omitted says what was left out because of a size limit.
	Omitted string
}

// size is the number of bytes r carries.
func (r *Result) size() int {
	return len(r.Text) + len(r.HTML) + len(r.Markdown) + len(r.SVG) + len(r.PNG) + len(r.JPEG) +
		len(r.LaTeX) + len(r.JavaScript) + len(r.JSON) + len(r.Omitted)
}

// ExecError is an error raised by a cell (an exception, a failed bash
// command) or by its context (which died).
type ExecError struct {
	Name      string
	Value     string
	Traceback string
}

// Status is how a cell ended.
type Status string

// The cell statuses.
const (
	// StatusOK: the cell ran to its end.
	StatusOK Status = "ok"
	// StatusError: the cell raised an error (bash: exited non-zero).
	StatusError Status = "error"
	// StatusTimeout: the cell's timeout interrupted it.
	StatusTimeout Status = "timeout"
	// StatusInterrupted: InterruptContext (or the caller going away)
	// interrupted it.
	StatusInterrupted Status = "interrupted"
	// StatusDied: the context's process ended during the cell; its state
	// is lost.
	StatusDied Status = "died"
)

// End is the last event of a cell.
type End struct {
	ContextID      string
	Language       Language
	ExecutionCount int
	Status         Status
	// ExitCode is the exit status of a bash cell (0 for other languages).
	ExitCode int
	// OutputTruncated says stdout and stderr went over the cap and the
	// rest was dropped; ResultsTruncated the same of results.
	OutputTruncated  bool
	ResultsTruncated bool
	Duration         time.Duration
}

// Sandboxes is what a Manager needs of the sandbox manager
// (*sandbox.Manager satisfies it): its wrapped operations, the only door
// to a sandbox's agent. Each fails on a sandbox that is unknown or not
// running and counts as activity for its idle timeout while it runs; a
// kernel's own stream does not (see sandbox.Manager.StartBackground).
type Sandboxes interface {
	// Get returns a snapshot of a sandbox.
	Get(id string) (sandbox.Sandbox, error)
	// Touch marks activity on a running sandbox.
	Touch(id string) error
	// Exec runs a process to completion.
	Exec(ctx context.Context, id string, req agentclient.ExecRequest) (*agentclient.ExecResult, error)
	// StartBackground starts a kernel, with the sandbox's Env merged
	// under req.Env.
	StartBackground(ctx context.Context, id string, req agentclient.ExecRequest) (*agentclient.Process, error)
	// ConnectProcess attaches to a running kernel (adoption).
	ConnectProcess(ctx context.Context, id string, pid int, stdout, stderr io.Writer) (*agentclient.Process, error)
	// ListProcesses lists the processes the agent started.
	ListProcesses(ctx context.Context, id string) ([]agentclient.ProcessInfo, error)
	// SignalProcess signals a process the agent started, by pid.
	SignalProcess(ctx context.Context, id string, pid, signal int) error
}

var _ Sandboxes = (*sandbox.Manager)(nil)

// Limits bound contexts and cells. Zero fields take the defaults given.
type Limits struct {
	// MaxContexts caps the contexts of one sandbox, default ones
	// included; past it a new context fails with ErrFailedPrecondition
	// until one is deleted. Default 8.
	MaxContexts int
	// MaxCodeBytes caps a cell's code. Default 512 KiB.
	MaxCodeBytes int
	// MaxOutputBytes caps stdout plus stderr of a cell (characters as
	// the drivers count them, bytes for raw output). Default 1 MiB.
	MaxOutputBytes int
	// MaxTextBytes caps each text representation of a result (text,
	// HTML, JSON...) and a traceback. Default 1 MiB.
	MaxTextBytes int
	// MaxImageBytes caps one image (decoded). Default 5 MiB.
	MaxImageBytes int
	// MaxResultBytes caps all results of one cell; later results keep
	// only a note. Default 12 MiB (with the output caps, a buffered
	// response stays under the Go client's default 16 MiB).
	MaxResultBytes int
	// DefaultTimeout applies to a cell given no timeout. Default 5 min.
	DefaultTimeout time.Duration
	// MaxTimeout caps a cell's timeout. Default 1 hour.
	MaxTimeout time.Duration
	// InterruptGrace is how long an interrupted cell may take to stop
	// before its kernel is killed. Default 3 s.
	InterruptGrace time.Duration
	// StartTimeout bounds the start of a kernel. Default 30 s.
	StartTimeout time.Duration
}

func (l Limits) withDefaults() Limits {
	defI := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defI(&l.MaxContexts, 8)
	defI(&l.MaxCodeBytes, 512<<10)
	defI(&l.MaxOutputBytes, 1<<20)
	defI(&l.MaxTextBytes, 1<<20)
	defI(&l.MaxImageBytes, 5<<20)
	defI(&l.MaxResultBytes, 12<<20)
	defD(&l.DefaultTimeout, 5*time.Minute)
	defD(&l.MaxTimeout, time.Hour)
	defD(&l.InterruptGrace, 3*time.Second)
	defD(&l.StartTimeout, 30*time.Second)
	return l
}

// maxFrame is the longest frame the daemon accepts: an image at the cap
// in base64, or a text at the cap with every character escaped.
func (l Limits) maxFrame() int {
	return max(l.MaxImageBytes/3*4, 6*l.MaxTextBytes) + 64<<10
}

// Config wires a Manager. Sandboxes is required.
type Config struct {
	Sandboxes Sandboxes
	// Log receives failures that have no caller to go to; nil discards.
	Log    *slog.Logger
	Limits Limits
}

// Manager keeps the contexts of every sandbox. It is safe for concurrent
// use. Build it with New; Close detaches it from the kernels (which keep
// running for the next daemon to adopt).
type Manager struct {
	sb  Sandboxes
	log *slog.Logger
	lim Limits

	// budget is how much output a kernel may send over its life before it
	// is retired (tests lower it).
	budget int64

	mu        sync.Mutex
	boxes     map[string]*box
	closed    bool
	lastSweep time.Time
}

// New returns a Manager.
func New(cfg Config) (*Manager, error) {
	if cfg.Sandboxes == nil {
		return nil, fmt.Errorf("interp: Sandboxes is required: %w", errdefs.ErrInvalidArgument)
	}
	m := &Manager{sb: cfg.Sandboxes, log: cfg.Log, lim: cfg.Limits.withDefaults(), boxes: map[string]*box{},
		budget: agentOutputBudget - budgetMargin}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	return m, nil
}

// Close detaches the Manager from every kernel: their streams end, the
// processes keep running and a later Manager adopts them. Calls after
// Close fail with errdefs.ErrUnavailable.
func (m *Manager) Close() {
	m.mu.Lock()
	m.closed = true
	boxes := m.boxes
	m.boxes = map[string]*box{}
	m.mu.Unlock()
	for _, b := range boxes {
		b.detach()
	}
}

// IDPrefix starts every context ID.
const IDPrefix = "ctx-"

var idPattern = regexp.MustCompile(`^ctx-[a-z2-7]{16}$`)

// ValidContextID reports whether s has the form of a context ID.
func ValidContextID(s string) bool { return idPattern.MatchString(s) }

var idEncoding = base32.StdEncoding.WithPadding(base32.NoPadding)

func newContextID() string {
	var b [10]byte
	_, _ = rand.Read(b[:])
	return IDPrefix + strings.ToLower(idEncoding.EncodeToString(b[:]))
}

// contextNotFound is the error for an unknown context.
func contextNotFound(id string) error {
	if len(id) > 64 {
		id = id[:64] + "..."
	}
	return fmt.Errorf("context %s: %w", strings.ToValidUTF8(id, "?"), errdefs.ErrNotFound)
}

// CreateContext starts a context in sandbox sandboxID and returns it once
// its kernel serves.
func (m *Manager) CreateContext(ctx context.Context, sandboxID string, opts ContextOptions) (ContextInfo, error) {
	if _, err := ParseLanguage(string(opts.Language)); err != nil {
		return ContextInfo{}, err
	}
	if err := checkEnv(opts.Env); err != nil {
		return ContextInfo{}, err
	}
	if len(opts.Cwd) > 4096 || strings.IndexByte(opts.Cwd, 0) >= 0 {
		return ContextInfo{}, fmt.Errorf("cwd must be at most 4096 bytes without NUL bytes: %w", errdefs.ErrInvalidArgument)
	}
	b, err := m.box(ctx, sandboxID)
	if err != nil {
		return ContextInfo{}, err
	}
	c, err := b.add(opts.Language, opts.Cwd, maps.Clone(opts.Env), false)
	if err != nil {
		return ContextInfo{}, err
	}
	if err := c.ensureStarted(ctx); err != nil {
		b.remove(c)
		c.kill()
		return ContextInfo{}, err
	}
	return c.info(), nil
}

// ListContexts returns the contexts of sandbox sandboxID, oldest first.
func (m *Manager) ListContexts(ctx context.Context, sandboxID string) ([]ContextInfo, error) {
	b, err := m.box(ctx, sandboxID)
	if err != nil {
		return nil, err
	}
	return b.list(), nil
}

// DeleteContext kills a context's kernel and forgets the context. A cell
// running in it ends with StatusDied.
func (m *Manager) DeleteContext(ctx context.Context, sandboxID, contextID string) error {
	b, err := m.box(ctx, sandboxID)
	if err != nil {
		return err
	}
	c, err := b.get(contextID)
	if err != nil {
		return err
	}
	b.remove(c)
	c.delete()
	return nil
}

// RestartContext replaces a context's kernel with a new one (state is
// lost; a running cell ends with StatusDied) and returns the context once
// the new kernel serves.
func (m *Manager) RestartContext(ctx context.Context, sandboxID, contextID string) (ContextInfo, error) {
	b, err := m.box(ctx, sandboxID)
	if err != nil {
		return ContextInfo{}, err
	}
	c, err := b.get(contextID)
	if err != nil {
		return ContextInfo{}, err
	}
	if err := c.restart(ctx); err != nil {
		return ContextInfo{}, err
	}
	return c.info(), nil
}

// InterruptContext interrupts the cell running in a context, if any; the
// cell ends with StatusInterrupted. It reports whether a cell was running.
func (m *Manager) InterruptContext(ctx context.Context, sandboxID, contextID string) (bool, error) {
	b, err := m.box(ctx, sandboxID)
	if err != nil {
		return false, err
	}
	c, err := b.get(contextID)
	if err != nil {
		return false, err
	}
	return c.interruptCell(ctx)
}

// Run runs one cell and calls emit with each event, in order, from the
// calling goroutine, ending with the EventEnd event. Errors before the
// cell starts (validation, unknown or busy context, a kernel that cannot
// start) are returned and nothing is emitted. Once the cell runs, what
// happens to it is reported by events (an error event, End.Status), and
// the returned error is nil, or emit's first error: then the cell is
// interrupted and Run returns once it ends, emitting nothing more.
func (m *Manager) Run(ctx context.Context, sandboxID string, req RunRequest, emit func(Event) error) error {
	if err := m.checkRun(&req); err != nil {
		return err
	}
	b, err := m.box(ctx, sandboxID)
	if err != nil {
		return err
	}
	var c *codeContext
	if req.ContextID != "" {
		if c, err = b.get(req.ContextID); err != nil {
			return err
		}
		if req.Language != "" && req.Language != c.lang {
			return fmt.Errorf("context %s is a %s context, not %s: %w", c.id, c.lang, req.Language, errdefs.ErrInvalidArgument)
		}
	} else if c, err = b.defaultContext(req.Language); err != nil {
		return err
	}
	return c.run(ctx, req, emit)
}

// checkRun validates req and fills its defaults.
func (m *Manager) checkRun(req *RunRequest) error {
	if req.ContextID != "" && !ValidContextID(req.ContextID) {
		return fmt.Errorf("malformed context_id; want %s followed by 16 characters [a-z2-7]: %w", IDPrefix, errdefs.ErrInvalidArgument)
	}
	// With a context the language is optional; without, required.
	if req.ContextID == "" || req.Language != "" {
		l, err := ParseLanguage(string(req.Language))
		if err != nil {
			return err
		}
		req.Language = l
	}
	switch {
	case len(req.Code) > m.lim.MaxCodeBytes:
		return fmt.Errorf("code is %d bytes, the limit is %d: %w", len(req.Code), m.lim.MaxCodeBytes, errdefs.ErrInvalidArgument)
	case strings.IndexByte(req.Code, 0) >= 0:
		return fmt.Errorf("code must not contain NUL bytes: %w", errdefs.ErrInvalidArgument)
	case req.Timeout < 0:
		return fmt.Errorf("timeout must not be negative: %w", errdefs.ErrInvalidArgument)
	case req.Timeout > m.lim.MaxTimeout:
		return fmt.Errorf("timeout is above the maximum of %d s (%v): %w",
			int64(m.lim.MaxTimeout/time.Second), m.lim.MaxTimeout, errdefs.ErrInvalidArgument)
	case req.Timeout == 0:
		req.Timeout = m.lim.DefaultTimeout
	}
	return checkEnv(req.Env)
}

// Caps on environments.
const (
	maxEnvKeys  = 256
	maxEnvValue = 128 << 10
)

var envKey = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,255}$`)

func checkEnv(env map[string]string) error {
	if len(env) > maxEnvKeys {
		return fmt.Errorf("env has more than %d variables: %w", maxEnvKeys, errdefs.ErrInvalidArgument)
	}
	for k, v := range env {
		if !envKey.MatchString(k) {
			if len(k) > 64 {
				k = k[:64] + "..."
			}
			return fmt.Errorf("env name %q is not valid; want [A-Za-z_][A-Za-z0-9_]*: %w", strings.ToValidUTF8(k, "?"), errdefs.ErrInvalidArgument)
		}
		if strings.HasPrefix(k, "AIRLOCK_INTERP_") {
			return fmt.Errorf("env name %s is reserved: %w", k, errdefs.ErrInvalidArgument)
		}
		if len(v) > maxEnvValue || strings.IndexByte(v, 0) >= 0 {
			return fmt.Errorf("env value of %s must be at most %d bytes without NUL bytes: %w", k, maxEnvValue, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// sweepEvery bounds how often box looks for sandboxes that are gone.
const sweepEvery = 30 * time.Second

// box returns the contexts of a running sandbox, adopting the kernels a
// previous daemon left on first use.
func (m *Manager) box(ctx context.Context, sandboxID string) (*box, error) {
	// A use of the sandbox's contexts is activity of the sandbox.
	if err := m.sb.Touch(sandboxID); err != nil {
		return nil, err
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil, fmt.Errorf("the code interpreter is shutting down: %w", errdefs.ErrUnavailable)
	}
	var stale []*box
	if now := time.Now(); now.Sub(m.lastSweep) >= sweepEvery {
		m.lastSweep = now
		for id, b := range m.boxes {
			if id != sandboxID && !m.running(id) {
				stale = append(stale, b)
				delete(m.boxes, id)
			}
		}
	}
	b, ok := m.boxes[sandboxID]
	if !ok {
		b = newBox(m, sandboxID)
		m.boxes[sandboxID] = b
	}
	m.mu.Unlock()
	for _, s := range stale {
		s.detach()
	}
	if err := b.adopt(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// running reports whether sandbox id still runs.
func (m *Manager) running(id string) bool {
	sb, err := m.sb.Get(id)
	return err == nil && sb.State == sandbox.StateRunning
}

// kernelGone is called when a kernel's stream ended: if its sandbox is
// gone, the sandbox's contexts are forgotten.
func (m *Manager) kernelGone(sandboxID string) {
	if m.running(sandboxID) {
		return
	}
	m.mu.Lock()
	b := m.boxes[sandboxID]
	delete(m.boxes, sandboxID)
	m.mu.Unlock()
	if b != nil {
		b.detach()
	}
}
