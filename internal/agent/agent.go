// Package agent is the in-sandbox agent: PID 1 of every sandbox. It serves
// the daemon over the Connect protocol in proto/airlock/agent/v1 on a
// listener it inherits (a unix socket that sandboxed code cannot reach),
// starts and reaps processes, and reads and writes the sandbox filesystem.
//
// The agent does not set up isolation itself; the runtime backend does that
// before calling Serve (see runtime/linux). The same code also runs
// in-process, unisolated, under runtime/runtimefake for tests of the layers
// above.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/agentwire"
)

// Version is reported by Info; main sets it at build time.
var Version = "dev"

// User is an account that processes and file operations can run as.
type User = account.User

// Options configure an Agent. Root and Users are required.
type Options struct {
	// Root is the directory that file operations treat as "/": "/" inside
	// a sandbox, a temporary directory under the fake runtime. Paths never
	// resolve outside it.
	Root string
	// Users maps names accepted in requests ("user", "root") to accounts.
	Users map[string]User
	// DefaultUser is used when a request names no user.
	DefaultUser string
	// Workdir is the working directory of processes whose request names
	// none (a template's WORKDIR, a path in Root's terms). Empty, or a
	// directory that is gone, means the user's home.
	Workdir string
	// BaseEnv is the environment every process starts with.
	BaseEnv map[string]string
	// SwitchUser makes children run with the requested user's uid/gid.
	// The fake runtime turns it off when not running as root.
	SwitchUser bool
	// ReapAll makes the agent reap every child that is reparented to it
	// (it must when it is PID 1). When false it waits only for its own.
	ReapAll bool
	// Cgroups, when set, gives every started process tree its own cgroup
	// for tree kill, peak memory, CPU time and OOM attribution. When nil the
	// agent falls back to process groups and rusage.
	Cgroups ExecCgroups
	// MaxOutputBytes caps the bytes forwarded per output stream of one
	// process; requests may ask for less. 0 means 64 MiB.
	MaxOutputBytes uint64
	// MaxProcesses caps the processes the agent tracks at once. 0 means 1024.
	MaxProcesses int
	// Changes, when set, is the directory of the root filesystem's
	// writable layer (an overlayfs upper directory), which ExportChanges
	// streams. The agent owns it from New on.
	Changes *os.File
	// End ends the sandbox when its deadline passes (see SetDeadline),
	// after the agent has killed every process of it: under the native
	// runtime it exits the agent, PID 1, which ends the PID namespace.
	// Without it the agent holds no deadline.
	End func()
	// Deadline, if set (it needs End), is the sandbox's first deadline,
	// in the host's wall-clock time (see deadline.go).
	Deadline time.Time
	Logger   *slog.Logger
}

// ExecCgroups creates one cgroup per started process tree. It is
// implemented over delegated cgroup directories by internal/cgroups (wired
// in runtime/linux).
type ExecCgroups interface {
	New(name string) (ExecCgroup, error)
}

// MemoryRoomer is an optional ability of the ExecCgroups in Options.Cgroups:
// how many more bytes the whole sandbox may be charged before it reaches
// its memory cap (known is false when it has none). The file service
// checks it before every chunk it writes, because the kernel charges the
// pages of the files it writes to the agent, not to sandboxed code.
type MemoryRoomer interface {
	MemoryRoom() (room int64, known bool, err error)
}

// ExecCgroup is the cgroup of one process tree.
type ExecCgroup interface {
	// Start calls start so that the process it forks begins life inside the
	// cgroup. It may set fields of attr (which start must then use) or run
	// start on a thread that it has moved into the cgroup.
	Start(attr *syscall.SysProcAttr, start func() (int, error)) (int, error)
	// Kill kills every process in the cgroup and returns once it is empty
	// or ctx is done.
	Kill(ctx context.Context) error
	// Usage reports what the tree used so far.
	Usage() (ExecUsage, error)
	// Close removes the cgroup once it is empty. A cgroup that still holds
	// processes (background children) is removed later by Sweep.
	Close() error
}

// ExecUsage is what one process tree consumed.
type ExecUsage struct {
	CPUTime         time.Duration
	PeakMemoryBytes uint64
	OOMKills        uint64
}

// Agent serves the agent protocol.
type Agent struct {
	opts     Options
	log      *slog.Logger
	started  time.Time
	procs    *processTable
	files    *fileService
	ports    *portService
	deadline *deadline
}

// New validates opts and returns an agent ready to Serve.
func New(opts Options) (*Agent, error) {
	if opts.Root == "" {
		return nil, errors.New("agent: Root is required")
	}
	if len(opts.Users) == 0 {
		return nil, errors.New("agent: Users is required")
	}
	if opts.DefaultUser == "" {
		opts.DefaultUser = "user"
	}
	if _, ok := opts.Users[opts.DefaultUser]; !ok {
		return nil, fmt.Errorf("agent: default user %q is not in Users", opts.DefaultUser)
	}
	if opts.Workdir != "" && !filepath.IsAbs(opts.Workdir) {
		return nil, fmt.Errorf("agent: working directory %q is not absolute", opts.Workdir)
	}
	if opts.MaxOutputBytes == 0 {
		opts.MaxOutputBytes = 64 << 20
	}
	if opts.MaxProcesses == 0 {
		opts.MaxProcesses = 1024
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if !opts.Deadline.IsZero() && opts.End == nil {
		return nil, errors.New("agent: a Deadline needs End")
	}
	a := &Agent{opts: opts, log: opts.Logger, started: time.Now(), ports: newPortService()}
	var err error
	if a.procs, err = newProcessTable(a); err != nil {
		return nil, err
	}
	if a.files, err = newFileService(a); err != nil {
		_ = a.procs.close()
		return nil, err
	}
	// Last: from here on the deadline may fire, which needs the rest.
	if a.deadline, err = newDeadline(a, opts.End, opts.Deadline); err != nil {
		_ = errors.Join(a.procs.close(), a.files.close())
		return nil, err
	}
	return a, nil
}

// MaxMessageBytes caps one request message the agent accepts.
const MaxMessageBytes = 4 << 20

// Handler returns the HTTP handler that serves every agent service.
func (a *Agent) Handler() http.Handler {
	opts := connect.WithHandlerOptions(
		// The daemon is on the other end of a local socket: compression
		// would only cost CPU.
		connect.WithCompression("gzip", nil, nil),
		// No request message needs more: file writes come in 256 KiB
		// chunks, stdin in 64 KiB ones.
		connect.WithReadMaxBytes(MaxMessageBytes),
	)
	mux := http.NewServeMux()
	mux.Handle(agentv1connect.NewAgentServiceHandler(&infoService{a: a}, opts))
	mux.Handle(agentv1connect.NewProcessServiceHandler(a.procs, opts))
	mux.Handle(agentv1connect.NewFileServiceHandler(a.files, opts))
	mux.Handle(agentv1connect.NewPortServiceHandler(a.ports, opts))
	return mux
}

// Serve serves the agent protocol on ln (HTTP/2 without TLS) until ctx is
// done, then stops accepting and returns. Processes keep running.
func (a *Agent) Serve(ctx context.Context, ln net.Listener) error {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	protocols.SetHTTP1(true)
	srv := &http.Server{
		Handler:           a.Handler(),
		Protocols:         &protocols,
		HTTP2:             agentwire.HTTP2Config(),
		ReadHeaderTimeout: 10 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdownCtx)
		return nil
	}
}

// Close stops background work (reaper, watchers, the deadline). It does
// not kill processes.
func (a *Agent) Close() error {
	return errors.Join(a.deadline.close(), a.procs.close(), a.files.close())
}

type infoService struct{ a *Agent }

func (s *infoService) Info(ctx context.Context, _ *connect.Request[agentv1.InfoRequest]) (*connect.Response[agentv1.InfoResponse], error) {
	res := &agentv1.InfoResponse{
		Version:           Version,
		StartedAtUnixNano: s.a.started.UnixNano(),
		Processes:         uint32(s.a.procs.count()),
	}
	if left, ok := s.a.deadline.remaining(); ok {
		ms := left.Milliseconds()
		res.DeadlineInMs = &ms
	}
	return connect.NewResponse(res), nil
}
