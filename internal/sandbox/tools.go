package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// The tool gateway's sandbox side.
//
// Every sandbox whose runtime gives it a tools socket (runtime.Tools)
// has, while it lives and the manager has a gateway (Config.Gateway), an
// HTTP server on that socket: gateway.Handler for the Caller made of the
// sandbox's record (its owner, id, creating key and granted tools), never
// of anything the sandbox sends. Its agent joins runtime.ToolsBridgeAddr
// inside to that socket, and every process started through the manager
// gets AIRLOCK_TOOLS_URL naming it (toolsEnv). The server starts at create
// and adoption and stops at destroy and Close, as the egress proxy does;
// without a gateway nothing listens, and the bridge closes every
// connection.

// Limits of a sandbox's tools server.
const (
	// MaxTools caps the tools granted to one sandbox.
	MaxTools = 256
	// maxToolsConns caps the connections a sandbox's tools server
	// serves at once; more wait to be accepted (see connLimiter).
	maxToolsConns = 64
	// Timeouts of the tools server: reading a request's header, its
	// whole request (at most gateway.MaxCallBytes from loopback), and
	// keeping an idle connection. Answers have no timeout: a call may
	// wait for an approval, bounded by the gateway.
	toolsHeaderTimeout = 10 * time.Second
	toolsReadTimeout   = 30 * time.Second
	toolsIdleTimeout   = 30 * time.Second
	toolsHeaderBytes   = 16 << 10
	// toolsStopWait bounds waiting for a stopped server's calls to end.
	toolsStopWait = 10 * time.Second
)

// ToolsURLEnv names the environment variable, set in every process a
// sandbox runs, that says where its code calls the tool gateway.
const ToolsURLEnv = "AIRLOCK_TOOLS_URL"

// toolsEnv is the environment that points a sandbox's processes at its
// tools bridge: every sandbox's, whatever its network mode. NO_PROXY
// (proxyEnv) lists 127.0.0.1, so proxy settings never capture it. Built
// once; never modified (mergeEnv copies).
var toolsEnv = map[string]string{ToolsURLEnv: "http://" + runtime.ToolsBridgeAddr}

// Where a sandbox finds the in-sandbox tool libraries
// (internal/gateway/sdk): ToolsLibDir, the daemon's host directory
// Config.ToolsLib mounted read-only, with python/ on PYTHONPATH (import
// tools), node/ on NODE_PATH (require('tools'); ES modules import
// ToolsLibDir+"/node/tools.mjs") and the tool command in bin/.
const ToolsLibDir = "/.airlock/lib"

// toolsLibEnv is toolsEnv with the library paths, for a manager that
// mounts the libraries. Built once; never modified.
var toolsLibEnv = mergeEnv(toolsEnv, map[string]string{
	"PYTHONPATH": ToolsLibDir + "/python",
	"NODE_PATH":  ToolsLibDir + "/node",
})

// toolsEnv is the environment every process of a sandbox gets under the
// sandbox's own (a template's PYTHONPATH wins over the libraries').
func (m *Manager) toolsEnv() map[string]string {
	if m.toolsLibBind() == nil {
		return toolsEnv
	}
	return toolsLibEnv
}

// toolsLibBind mounts Config.ToolsLib at ToolsLibDir, when set.
func (m *Manager) toolsLibBind() []runtime.Bind {
	if m.cfg.ToolsLib == "" || !path.IsAbs(m.cfg.ToolsLib) {
		return nil
	}
	return []runtime.Bind{{Source: m.cfg.ToolsLib, Target: ToolsLibDir}}
}

// forgetTools drops the gateway's counters of a sandbox that ended.
func (m *Manager) forgetTools(id string) {
	if f, ok := m.cfg.Gateway.(interface{ Forget(string) }); ok {
		f.Forget(id)
	}
}

// checkTools validates the tool names of a Spec and returns them sorted,
// without duplicates.
func checkTools(names []string) ([]string, error) {
	if len(names) > MaxTools {
		return nil, fmt.Errorf("%d tools granted, at most %d are allowed: %w", len(names), MaxTools, errdefs.ErrInvalidArgument)
	}
	for _, n := range names {
		if n == "" || len(n) > MaxKeyBytes || !utf8.ValidString(n) || containsNUL(n) {
			return nil, fmt.Errorf("tool names must be non-empty UTF-8 without NUL bytes, at most %d bytes: %w", MaxKeyBytes, errdefs.ErrInvalidArgument)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// toolsState is a sandbox's tools server, if it has one. mu serialises
// starting and stopping it.
type toolsState struct {
	mu     sync.Mutex
	srv    *http.Server
	done   chan struct{}
	closed bool // the sandbox is ending: no server starts any more
}

// caller is who calls through rec's tools socket. Call with Manager.mu
// held, or before rec is shared.
func (r *record) caller() gateway.Caller {
	return gateway.Caller{Tenant: r.sb.Owner, Sandbox: r.sb.ID, KeyID: r.keyID, Tools: slices.Clone(r.sb.Tools)}
}

// startTools starts rec's tools server. Without a gateway it does
// nothing; a runtime that gives sandboxes no tools socket is
// ErrNotSupported.
func (m *Manager) startTools(rec *record) error {
	calls := m.cfg.Gateway
	if calls == nil {
		return nil
	}
	m.mu.Lock()
	caller := rec.caller()
	m.mu.Unlock()
	id := caller.Sandbox
	tl, ok := rec.inst.(runtime.Tools)
	if !ok {
		return fmt.Errorf("sandbox %s: this runtime gives sandboxes no tools socket: %w", id, errdefs.ErrNotSupported)
	}
	rec.tools.mu.Lock()
	defer rec.tools.mu.Unlock()
	if rec.tools.closed {
		return fmt.Errorf("sandbox %s is ending: %w", id, errdefs.ErrFailedPrecondition)
	}
	if rec.tools.srv != nil {
		return nil
	}
	ln, err := tl.ListenTools()
	if err != nil {
		return err
	}
	cl := newConnLimiter(ln, maxToolsConns)
	log := m.log.With("sandbox", id, "component", "tools")
	srv := &http.Server{
		Handler:           gateway.Handler(calls, caller),
		ReadHeaderTimeout: toolsHeaderTimeout,
		ReadTimeout:       toolsReadTimeout,
		IdleTimeout:       toolsIdleTimeout,
		MaxHeaderBytes:    toolsHeaderBytes,
		ConnState:         cl.connState,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(cl); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("tools server stopped", "err", err)
		}
	}()
	rec.tools.srv, rec.tools.done = srv, done
	return nil
}

// stopTools stops rec's tools server for good (its listener, which
// removes the socket, and every connection, which cancels the calls in
// flight) and waits for it, at most toolsStopWait: the sandbox is
// ending, or the manager closing (the next daemon starts it again on
// adoption).
func (m *Manager) stopTools(rec *record) {
	rec.tools.mu.Lock()
	defer rec.tools.mu.Unlock()
	rec.tools.closed = true
	if rec.tools.srv == nil {
		return
	}
	_ = rec.tools.srv.Close()
	select {
	case <-rec.tools.done:
	case <-time.After(toolsStopWait):
		m.log.Warn("the tools server of a sandbox did not stop in time", "sandbox", rec.sb.ID)
	}
	rec.tools.srv, rec.tools.done = nil, nil
}

// serving reports whether rec has a tools server (for tests).
func (t *toolsState) serving() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.srv != nil
}

// createTools starts the tools server of a sandbox Create made; when it
// cannot, the sandbox is destroyed and the error returned. A runtime
// without tools sockets is an error only for a sandbox granted tools.
func (m *Manager) createTools(ctx context.Context, sb Sandbox, err error) (Sandbox, error) {
	if err != nil || sb.Ended() || m.cfg.Gateway == nil {
		return sb, err
	}
	m.mu.Lock()
	rec := m.records[sb.ID]
	m.mu.Unlock()
	if rec == nil {
		return Sandbox{}, notFound(sb.ID)
	}
	err = m.startTools(rec)
	if err == nil || (errors.Is(err, errdefs.ErrNotSupported) && len(sb.Tools) == 0) {
		return sb, nil
	}
	m.log.Error("starting the tools server of a new sandbox", "sandbox", sb.ID, "err", err)
	if derr := m.destroyRecord(ctx, rec, "its tools server did not start", false); derr != nil {
		m.log.Warn("destroying a sandbox whose tools server did not start", "sandbox", sb.ID, "err", derr)
	}
	return Sandbox{}, publicErr("start the sandbox's tools server", err)
}

// adoptTools restarts the tools server of an adopted sandbox. A failure
// leaves the sandbox running without tools (its calls are refused), and
// is logged.
func (m *Manager) adoptTools(rec *record) {
	if err := m.startTools(rec); err != nil && !errors.Is(err, errdefs.ErrNotSupported) {
		m.log.Error("restarting the tools server of an adopted sandbox", "sandbox", rec.sb.ID, "err", err)
	}
}

// connLimiter caps the connections accepted from a listener and not yet
// closed at n. A connection beyond the cap waits to be accepted (it is
// not refused: a program's concurrent calls queue rather than fail);
// while one waits, connections that go idle (kept alive between
// requests) are closed, so that a client's idle pool cannot keep the
// waiting ones out for the idle timeout.
type connLimiter struct {
	net.Listener
	slots  chan struct{}
	closed chan struct{}
	once   sync.Once

	mu      sync.Mutex
	idle    map[net.Conn]struct{}
	waiting int
}

func newConnLimiter(ln net.Listener, n int) *connLimiter {
	return &connLimiter{Listener: ln, slots: make(chan struct{}, n), closed: make(chan struct{}), idle: make(map[net.Conn]struct{})}
}

func (l *connLimiter) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
	default:
		l.mu.Lock()
		l.waiting++
		for ic := range l.idle {
			ic.Close()
			delete(l.idle, ic)
		}
		l.mu.Unlock()
		select {
		case l.slots <- struct{}{}:
		case <-l.closed:
		}
		l.mu.Lock()
		l.waiting--
		l.mu.Unlock()
		select {
		case <-l.closed:
			c.Close()
			return nil, net.ErrClosed
		default:
		}
	}
	return &limitedConn{Conn: c, l: l}, nil
}

func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.closed) })
	return l.Listener.Close()
}

// connState is the server's ConnState hook: it keeps the idle
// connections, closing one at once while a connection waits.
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch st {
	case http.StateIdle:
		if l.waiting > 0 {
			c.Close()
			return
		}
		l.idle[c] = struct{}{}
	default:
		delete(l.idle, c)
	}
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l    *connLimiter
	once sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.l.slots })
	return err
}
