// Package runtimefake is a runtime.Runtime for unit tests of the layers
// above the runtime (the sandbox manager, the API). It isolates nothing and
// needs no privileges: each "sandbox" is a directory under a base directory
// (with home/user, root and tmp) and a real internal/agent.Agent served
// in-process on a unix socket. Processes the agent starts run on the host
// as the calling user.
//
// Restarts are simulated on one Runtime value: Recover returns the
// instances this value still holds whose agent answers, so a new sandbox
// manager built over the same value adopts them. Crash simulates an agent
// that dies, Hang one that stops answering but lives; SetCreateError and SetCreateDelay inject failures
// and latency. A sandbox's deadline (runtime.Spec.Deadline, SetDeadline)
// ends it as it ends a real one: its processes killed, its agent stopped
// (Exited closes), what is left for Destroy or Recover to remove. Call
// Close (e.g. in t.Cleanup) to destroy everything.
package runtimefake

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"connectrpc.com/connect"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/gen/airlock/agent/v1/agentv1connect"
	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/agentclient"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// Name is the backend name the fake reports.
const Name = "fake"

// maxSocketPath keeps socket paths under the kernel's sun_path limit (108
// bytes including the terminating NUL).
const maxSocketPath = 100

// readyTimeout bounds how long Create waits for the agent to answer, and
// how long Recover waits for each agent.
const readyTimeout = 5 * time.Second

// Runtime is the fake backend. It is safe for concurrent use.
type Runtime struct {
	base    string
	sockDir string // base, or a short temporary directory when base is long
	ownSock bool   // sockDir was created by New and is removed by Close
	log     *slog.Logger
	uid     uint32
	gid     uint32

	mu         sync.Mutex
	instances  map[string]*Instance
	createErr  error
	destroyErr error
	delay      time.Duration
	creates    atomic.Int64
}

var _ runtime.Runtime = (*Runtime)(nil)

// New returns a fake runtime that keeps its sandboxes under baseDir (for
// example t.TempDir()), which must exist.
func New(baseDir string, log *slog.Logger) (*Runtime, error) {
	if !filepath.IsAbs(baseDir) {
		return nil, fmt.Errorf("runtimefake: base dir must be absolute: %w", errdefs.ErrInvalidArgument)
	}
	if fi, err := os.Stat(baseDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("runtimefake: base dir is not a directory: %w", errdefs.ErrInvalidArgument)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runtime{
		base:      filepath.Clean(baseDir),
		sockDir:   filepath.Clean(baseDir),
		log:       log.With("runtime", Name),
		uid:       uint32(os.Getuid()),
		gid:       uint32(os.Getgid()),
		instances: make(map[string]*Instance),
	}
	// "<sockDir>/<63-byte id>.sock" must fit in sun_path.
	if len(r.sockDir)+1+63+5 > maxSocketPath {
		d, err := os.MkdirTemp("", "rtfake-")
		if err != nil {
			return nil, fmt.Errorf("runtimefake: socket dir: %w", err)
		}
		r.sockDir, r.ownSock = d, true
	}
	return r, nil
}

// Name returns "fake".
func (r *Runtime) Name() string { return Name }

// SetCreateError makes every later Create fail with err (nil restores
// success).
func (r *Runtime) SetCreateError(err error) {
	r.mu.Lock()
	r.createErr = err
	r.mu.Unlock()
}

// SetDestroyError makes every later Destroy fail with err, leaving the
// instance running (nil restores success).
func (r *Runtime) SetDestroyError(err error) {
	r.mu.Lock()
	r.destroyErr = err
	r.mu.Unlock()
}

// SetCreateDelay makes every later Create take at least d, to model a slow
// backend.
func (r *Runtime) SetCreateDelay(d time.Duration) {
	r.mu.Lock()
	r.delay = d
	r.mu.Unlock()
}

// Creates returns how many Create calls have succeeded.
func (r *Runtime) Creates() int { return int(r.creates.Load()) }

// Live returns the IDs of the instances not yet destroyed, sorted.
func (r *Runtime) Live() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := make([]string, 0, len(r.instances))
	for id := range r.instances {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Crash stops the agent of sandbox id without cleaning anything up, as if
// it had died: Dial fails from then on, Exited is closed, Recover
// discards the instance, and Destroy still cleans up.
func (r *Runtime) Crash(id string) error {
	inst, err := r.instance(id)
	if err != nil {
		return err
	}
	inst.stopAgent()
	return nil
}

// Hang makes the agent of sandbox id stop answering while it stays alive
// (Exited stays open), as a frozen or starved agent would: Dial fails
// from then on and open connections drop. Destroy still cleans up.
func (r *Runtime) Hang(id string) error {
	inst, err := r.instance(id)
	if err != nil {
		return err
	}
	inst.halt()
	return nil
}

// SetStats makes Stats of sandbox id report what f returns, called at
// each Stats, instead of asking the agent (tests of the layers that
// sample a sandbox's use script it this way), even while the agent
// hangs. Stats fails once the agent has exited or the sandbox is
// destroyed.
func (r *Runtime) SetStats(id string, f func() runtime.Stats) error {
	inst, err := r.instance(id)
	if err != nil {
		return err
	}
	inst.mu.Lock()
	inst.stats = f
	inst.mu.Unlock()
	return nil
}

// instance returns the instance called id.
func (r *Runtime) instance(id string) (*Instance, error) {
	r.mu.Lock()
	inst, ok := r.instances[id]
	r.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return inst, nil
}

// Close destroys every instance and removes what New created.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	insts := make([]*Instance, 0, len(r.instances))
	for _, inst := range r.instances {
		insts = append(insts, inst)
	}
	r.mu.Unlock()
	var errs []error
	for _, inst := range insts {
		errs = append(errs, inst.Destroy(ctx))
	}
	if r.ownSock {
		errs = append(errs, os.RemoveAll(r.sockDir))
	}
	return errors.Join(errs...)
}

// Create makes the sandbox directory, starts an agent for it and returns
// once the agent answers. spec.Rootfs must name a layer, as for a real
// backend, but is only recorded, never mounted.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (runtime.Instance, error) {
	if !runtime.IDPattern.MatchString(spec.ID) {
		return nil, fmt.Errorf("sandbox id %q: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	if len(spec.Rootfs.Layers) == 0 {
		return nil, fmt.Errorf("sandbox %s: rootfs has no layers: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	l := spec.Limits
	if l.CPUs < 0 || l.MemoryBytes < 0 || l.Pids < 0 || l.DiskBytes < 0 {
		return nil, fmt.Errorf("sandbox %s: negative limit: %w", spec.ID, errdefs.ErrInvalidArgument)
	}
	r.mu.Lock()
	createErr, delay := r.createErr, r.delay
	if _, ok := r.instances[spec.ID]; ok {
		r.mu.Unlock()
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
	}
	inst := &Instance{rt: r, spec: cloneSpec(spec), created: time.Now(), exited: make(chan struct{})}
	r.instances[spec.ID] = inst // reserve the ID
	r.mu.Unlock()

	if err := r.start(ctx, inst, createErr, delay); err != nil {
		r.mu.Lock()
		delete(r.instances, spec.ID)
		r.mu.Unlock()
		return nil, err
	}
	r.creates.Add(1)
	return inst, nil
}

// start does the work of Create; on error nothing is left behind.
func (r *Runtime) start(ctx context.Context, inst *Instance, createErr error, delay time.Duration) (err error) {
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("sandbox %s: create: %w", inst.spec.ID, errdefs.ErrCanceled)
		}
	}
	if createErr != nil {
		return createErr
	}
	id := inst.spec.ID
	inst.dir = filepath.Join(r.base, id)
	inst.root = filepath.Join(inst.dir, "root")
	inst.sock = filepath.Join(r.sockDir, id+".sock")
	defer func() {
		if err != nil {
			inst.stopAgent()
			_ = os.RemoveAll(inst.dir)
			_ = os.Remove(inst.sock)
		}
	}()
	if err := os.Mkdir(inst.dir, 0o700); err != nil {
		return fmt.Errorf("sandbox %s: %w: %v", id, errdefs.ErrInternal, err)
	}
	if err := inst.spec.Rootfs.Validate(); err != nil {
		return fmt.Errorf("sandbox %s: %w", id, err)
	}
	for _, d := range []string{"root/home/user", "root/root", "root/tmp", "root" + inst.spec.Rootfs.Workdir} {
		if err := os.MkdirAll(filepath.Join(inst.dir, d), 0o755); err != nil {
			return fmt.Errorf("sandbox %s: %w: %v", id, errdefs.ErrInternal, err)
		}
	}
	env := map[string]string{"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	maps.Copy(env, inst.spec.BaseEnv())
	env[markerEnv] = inst.dir
	a, err := agent.New(agent.Options{
		Root: inst.root,
		Users: map[string]agent.User{
			"user": {Name: "user", UID: r.uid, GID: r.gid, Home: "/home/user"},
			"root": {Name: "root", UID: r.uid, GID: r.gid, Home: "/root"},
		},
		DefaultUser: fakeDefaultUser(inst.spec.Rootfs.User),
		Workdir:     inst.spec.Rootfs.Workdir,
		BaseEnv:     env,
		// At the deadline the agent has killed what it tracks; the rest
		// of the sandbox's processes go as Destroy's do, and the agent
		// stops as a real one exits.
		End: func() {
			killMarked(markerEnv + "=" + inst.dir)
			inst.stopAgent()
		},
		Deadline: inst.spec.Deadline,
		Logger:   r.log.With("sandbox", id),
	})
	if err != nil {
		return fmt.Errorf("sandbox %s: start agent: %w", id, err)
	}
	_ = os.Remove(inst.sock)
	uln, err := net.Listen("unix", inst.sock)
	if err != nil {
		_ = a.Close()
		return fmt.Errorf("sandbox %s: listen: %w: %v", id, errdefs.ErrInternal, err)
	}
	ln := &trackingListener{Listener: uln, conns: make(map[net.Conn]struct{})}
	serveCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	inst.mu.Lock()
	inst.agent, inst.cancel, inst.served, inst.ln = a, cancel, done, ln
	inst.mu.Unlock()
	go func() {
		defer close(done)
		if err := a.Serve(serveCtx, ln); err != nil && !errors.Is(err, net.ErrClosed) {
			r.log.Debug("agent stopped", "sandbox", id, "err", err)
		}
		_ = ln.Close()
	}()

	readyCtx, stop := context.WithTimeout(ctx, readyTimeout)
	defer stop()
	c := agentclient.New(inst.Dial)
	defer c.Close()
	if _, err := c.Info(readyCtx); err != nil {
		return fmt.Errorf("sandbox %s: agent did not answer: %w", id, err)
	}
	return nil
}

// Recover returns the instances this Runtime value holds whose agent
// answers; the others (see Crash) are destroyed.
func (r *Runtime) Recover(ctx context.Context) ([]runtime.Instance, error) {
	r.mu.Lock()
	insts := make([]*Instance, 0, len(r.instances))
	for _, inst := range r.instances {
		insts = append(insts, inst)
	}
	r.mu.Unlock()
	sort.Slice(insts, func(i, j int) bool { return insts[i].spec.ID < insts[j].spec.ID })
	var out []runtime.Instance
	var errs []error
	for _, inst := range insts {
		if !inst.started() {
			continue // still being created: not ours to adopt yet
		}
		pctx, cancel := context.WithTimeout(ctx, readyTimeout)
		c := agentclient.New(inst.Dial)
		_, err := c.Info(pctx)
		c.Close()
		cancel()
		if err != nil {
			r.log.Info("discarding sandbox whose agent does not answer", "sandbox", inst.spec.ID, "err", err)
			errs = append(errs, inst.Destroy(ctx))
			continue
		}
		out = append(out, inst)
	}
	return out, errors.Join(errs...)
}

// Instance is one fake sandbox.
type Instance struct {
	rt      *Runtime
	spec    runtime.Spec
	created time.Time
	dir     string // <base>/<id>
	root    string // <dir>/root: the agent's "/"
	sock    string

	mu        sync.Mutex
	agent     *agent.Agent
	cancel    context.CancelFunc
	served    chan struct{}
	ln        *trackingListener
	stopped   bool
	destroyed bool
	exited    chan struct{} // closed by stopAgent
	exitOnce  sync.Once
	stats     func() runtime.Stats // set by SetStats
}

var _ runtime.Instance = (*Instance)(nil)

// ID returns the sandbox ID.
func (i *Instance) ID() string { return i.spec.ID }

// Spec returns a copy of the spec the sandbox was created from.
func (i *Instance) Spec() runtime.Spec { return cloneSpec(i.spec) }

// CreatedAt is when Create was called.
func (i *Instance) CreatedAt() time.Time { return i.created }

// Root is the host directory the agent treats as "/" (for tests that
// inspect files directly).
func (i *Instance) Root() string { return i.root }

// started reports whether Create got as far as starting the agent.
func (i *Instance) started() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.agent != nil
}

// Exited is closed once the agent has stopped: by Crash, Destroy, or a
// failed Create.
func (i *Instance) Exited() <-chan struct{} { return i.exited }

// Dial connects to the agent's socket.
func (i *Instance) Dial(ctx context.Context) (net.Conn, error) {
	i.mu.Lock()
	gone := i.stopped || i.destroyed
	i.mu.Unlock()
	if gone {
		return nil, fmt.Errorf("sandbox %s: agent is not running: %w", i.spec.ID, errdefs.ErrUnavailable)
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", i.sock)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: dial agent: %w", i.spec.ID, errdefs.ErrUnavailable)
	}
	return conn, nil
}

// Stats reports what the function given to SetStats returns, or else
// zeros except for the number of processes the agent tracks.
func (i *Instance) Stats(ctx context.Context) (runtime.Stats, error) {
	i.mu.Lock()
	destroyed, f := i.destroyed, i.stats
	i.mu.Unlock()
	select {
	case <-i.exited:
		destroyed = true
	default:
	}
	if destroyed {
		return runtime.Stats{}, fmt.Errorf("sandbox %s has ended: %w", i.spec.ID, errdefs.ErrFailedPrecondition)
	}
	if f != nil {
		return f(), nil // a hung agent does not matter, as for the native backend
	}
	c := agentclient.New(i.Dial)
	defer c.Close()
	info, err := c.Info(ctx)
	if err != nil {
		return runtime.Stats{}, err
	}
	return runtime.Stats{Pids: uint64(info.GetProcesses())}, nil
}

// Destroy kills the processes the agent started, stops the agent and
// removes the sandbox directory. It is idempotent and safe to call
// concurrently.
func (i *Instance) Destroy(ctx context.Context) error {
	i.rt.mu.Lock()
	injected := i.rt.destroyErr
	i.rt.mu.Unlock()
	if injected != nil {
		return injected
	}
	i.mu.Lock()
	if i.destroyed {
		i.mu.Unlock()
		return nil
	}
	i.destroyed = true
	stopped := i.stopped
	i.mu.Unlock()

	var errs []error
	if !stopped {
		errs = append(errs, i.killProcesses(ctx))
	}
	i.stopAgent()
	if i.dir != "" {
		killMarked(markerEnv + "=" + i.dir)
	}
	if i.dir != "" {
		errs = append(errs, os.RemoveAll(i.dir))
	}
	if i.sock != "" {
		if err := os.Remove(i.sock); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	i.rt.mu.Lock()
	if i.rt.instances[i.spec.ID] == i {
		delete(i.rt.instances, i.spec.ID)
	}
	i.rt.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sandbox %s: destroy: %w: %v", i.spec.ID, errdefs.ErrInternal, err)
	}
	return nil
}

// markerEnv marks every process a fake sandbox starts (its value is the
// sandbox's directory), so that Destroy can find the background processes
// that outlived their command: the fake has no PID namespace or cgroup to
// kill them with.
const markerEnv = "AIRLOCK_FAKE_SANDBOX"

// killMarked SIGKILLs every process whose environment holds entry. It is
// best effort (processes that changed their environment escape it); the
// fake is for tests, not isolation.
func killMarked(entry string) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	want := []byte(entry)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if bytes.Equal(kv, want) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
		}
	}
}

// killProcesses SIGKILLs every process the agent lists. An agent without
// a process service (Unimplemented) has none.
func (i *Instance) killProcesses(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return i.dialRaw(ctx) },
		Protocols:   &protocols,
	}
	defer tr.CloseIdleConnections()
	pc := agentv1connect.NewProcessServiceClient(&http.Client{Transport: tr}, "http://agent")
	res, err := pc.List(ctx, connect.NewRequest(&agentv1.ListRequest{}))
	if err != nil {
		if connect.CodeOf(err) == connect.CodeUnimplemented {
			return nil
		}
		return fmt.Errorf("list processes: %w", err)
	}
	var errs []error
	for _, p := range res.Msg.GetProcesses() {
		_, err := pc.SendSignal(ctx, connect.NewRequest(&agentv1.SendSignalRequest{
			Process: &agentv1.ProcessSelector{Selector: &agentv1.ProcessSelector_Pid{Pid: p.GetPid()}},
			Signal:  int32(syscall.SIGKILL),
		}))
		// A process that exited between List and the signal is gone
		// already (NotFound, or FailedPrecondition while being reaped).
		if code := connect.CodeOf(err); err != nil && code != connect.CodeNotFound && code != connect.CodeFailedPrecondition {
			errs = append(errs, fmt.Errorf("kill %d: %w", p.GetPid(), err))
		}
	}
	return errors.Join(errs...)
}

// dialRaw dials the socket even while Destroy is in progress.
func (i *Instance) dialRaw(ctx context.Context) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "unix", i.sock)
}

// stopAgent stops serving and closes the agent, which then counts as
// exited; processes it started keep running (Destroy kills them first).
func (i *Instance) stopAgent() {
	i.halt()
	i.exitOnce.Do(func() { close(i.exited) })
}

// halt stops serving and closes the agent, without it counting as exited.
func (i *Instance) halt() {
	i.mu.Lock()
	if i.stopped {
		i.mu.Unlock()
		return
	}
	i.stopped = true
	a, cancel, served, ln := i.agent, i.cancel, i.served, i.ln
	i.mu.Unlock()
	if cancel != nil {
		cancel()
		// A dead agent drops its connections; without this the server's
		// graceful shutdown waits for clients that keep theirs open.
		ln.closeAll()
		<-served
	}
	if a != nil {
		_ = a.Close()
	}
}

// cloneSpec deep-copies the maps and slices of s.
func cloneSpec(s runtime.Spec) runtime.Spec {
	s.Env = cloneMap(s.Env)
	s.Labels = cloneMap(s.Labels)
	s.Rootfs.Layers = append([]string(nil), s.Rootfs.Layers...)
	s.Rootfs.Binds = append([]runtime.Bind(nil), s.Rootfs.Binds...)
	return s
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

// trackingListener remembers accepted connections so that stopping the
// agent can drop them, as a dying agent process would.
type trackingListener struct {
	net.Listener
	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		_ = c.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: c, l: l}
	l.conns[tc] = struct{}{}
	return tc, nil
}

// closeAll closes the listener and every accepted connection.
func (l *trackingListener) closeAll() {
	_ = l.Listener.Close()
	l.mu.Lock()
	l.closed = true
	conns := l.conns
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	for c := range conns {
		_ = c.(*trackedConn).Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	l    *trackingListener
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		delete(c.l.conns, c)
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// fakeDefaultUser maps a template's USER to one of the fake's two
// accounts: root for root or uid 0, user otherwise. (The real runtime
// looks the user up in the template's /etc/passwd.)
func fakeDefaultUser(u string) string {
	switch name, _, _ := strings.Cut(u, ":"); name {
	case "root", "0":
		return "root"
	}
	return "user"
}
