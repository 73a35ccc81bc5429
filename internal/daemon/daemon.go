package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/api"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/e2b"
	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/gateway"
	"github.com/airlock-sandbox/airlock/internal/gateway/sdk"
	"github.com/airlock-sandbox/airlock/internal/hostcheck"
	"github.com/airlock-sandbox/airlock/internal/interp"
	"github.com/airlock-sandbox/airlock/internal/mcp"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/runtime/backends"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/template"
	"github.com/airlock-sandbox/airlock/internal/toolexec/anthropic"
	"github.com/airlock-sandbox/airlock/internal/toolexec/openai"
)

// Data directory layout.
const (
	dbFile       = "airlock.db"
	sandboxesDir = "sandboxes" // runtime state, one directory per sandbox
	recordsDir   = "records"   // the manager's per-sandbox records
	templatesDir = "templates"
	toolsLibDir  = "tools-lib" // the in-sandbox tool libraries, mounted read-only in every sandbox
)

// recordSyncInterval is how often the store's sandbox records are brought
// in line with the sandboxes that ended on their own.
const recordSyncInterval = time.Minute

// shutdownTimeout bounds the graceful shutdown of the API server and the
// manager. Requests in flight get shutdownGrace of it to finish; then they
// are ended, and the rest of it lets them record their outcome and answer.
const (
	shutdownTimeout = 10 * time.Second
	shutdownGrace   = 8 * time.Second
)

// Options are what the caller of Run provides besides the Config.
type Options struct {
	// Log receives the daemon's log.
	Log *slog.Logger
	// Announce receives the one-time admin key of a new installation and
	// the "listening" line. Default: discard.
	Announce io.Writer
	// Ready, if set, is called with the bound address once the API serves.
	Ready func(addr net.Addr)
	// CheckHost replaces the host checks run at start (hostcheck.Run);
	// tests use it to present a host that lacks a guarantee.
	CheckHost func(context.Context, hostcheck.Options) hostcheck.Report
}

// Run starts the daemon and serves until ctx ends, then shuts down
// gracefully: the API stops accepting requests, lets those in flight
// finish for up to 8 s and then ends them (PTY sessions and followed
// output at once), each with its audit outcome and an answer saying
// why, background work stops, and the sandboxes keep running for the
// next daemon to adopt.
func Run(ctx context.Context, cfg Config, opts Options) (retErr error) {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Identical warnings and errors in a row are collapsed (a full disk
	// fails every request the same way).
	dedupLog, flushLog := newDedupHandler(log.Handler(), dedupWindow)
	defer flushLog()
	log = slog.New(dedupLog)
	announce := opts.Announce
	if announce == nil {
		announce = io.Discard
	}
	// Requests in flight hold at most ExecMemoryMB; a soft limit on the
	// Go heap keeps the garbage that the collector lets pile up from
	// doubling that in the daemon's memory. GOMEMLIMIT, if set, wins.
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(cfg.softMemoryLimit())
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("airlock serve must run as root (it creates namespaces, cgroups and mounts): %w", errdefs.ErrPermissionDenied)
	}
	// Sandbox uids must traverse the data dir to reach template layers
	// and their mount points; nothing in it is readable to them (the
	// entries are secured once the lock is held, by openState).
	if err := os.MkdirAll(cfg.DataDir, dataDirMode); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	if err := os.Chmod(cfg.DataDir, dataDirMode); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	// Fail closed: a host without a guarantee the sandboxes rely on is
	// refused before anything is locked, opened or adopted; without an
	// optional one the daemon starts degraded and says so.
	startedAt := time.Now().UTC()
	hostOpts := hostcheck.Options{DataDir: cfg.DataDir, MaxSandboxes: cfg.MaxSandboxes}
	checkHost := opts.CheckHost
	if checkHost == nil {
		checkHost = hostcheck.Run
	}
	hostReport := checkHost(ctx, hostOpts)
	if err := admitHost(hostReport, log); err != nil {
		return err
	}

	// One daemon per host: daemons share the cgroup parent and the uid
	// ranges, so a second one (even on another data dir) would purge the
	// first one's sandboxes as orphans and hand out the same host uids.
	unlockHost, err := lockFile(hostLockPath, "host")
	if err != nil {
		return err
	}
	defer unlockHost()
	// And one per data directory, whatever the host lock's fate.
	unlock, err := lockFile(filepath.Join(cfg.DataDir, lockFileName), cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlock()
	// Listen before anything is adopted or created, so that a busy port
	// fails the start at once.
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	defer ln.Close()

	// The daemon's metrics (metrics.go), recorded from here on.
	met := metrics.New()
	// Its traces (tracing.go): the last spans are flushed after the
	// listeners have stopped.
	tr, stopTracing, err := startTracing(ctx, cfg, log.With("component", "tracing"))
	if err != nil {
		return err
	}
	defer stopTracing()
	metricsLn, err := listenMetrics(cfg)
	if err != nil {
		return err
	}
	if metricsLn != nil {
		defer metricsLn.Close()
	}

	data, err := openState(ctx, cfg, log, met)
	if err != nil {
		return err
	}
	defer closeWith(&retErr, "close state", data.close)
	st, auditLog, keys := data.store, data.audit, data.keys
	if data.adminKey != "" {
		fmt.Fprintf(announce, "Created the admin API key (shown once; also in %s, mode 0600):\n\n    %s\n\n",
			filepath.Join(cfg.DataDir, auth.AdminKeyFile), data.adminKey)
	}
	stopExport, err := startCheckpointExport(ctx, cfg, data, log.With("component", "audit"))
	if err != nil {
		return fmt.Errorf("audit checkpoint export: %w", err)
	}
	defer stopExport() // after the API's shutdown: the last checkpoint covers every answered request
	limiter, err := auth.NewLimiter(auth.LimiterOptions{Rate: cfg.RateLimit, Burst: cfg.RateBurst})
	if err != nil {
		return err
	}

	rt, err := backends.Default().New(backends.Options{
		StateDir: filepath.Join(cfg.DataDir, sandboxesDir),
		Logger:   log.With("component", "runtime"),
	})
	if err != nil {
		return fmt.Errorf("runtime: %w", err)
	}
	host, err := template.NewHost(template.HostOptions{CacheDir: filepath.Join(cfg.DataDir, templatesDir, template.HostName),
		Logger: log.With("component", "template")})
	if err != nil {
		return fmt.Errorf("host template: %w", err)
	}
	defer host.Close()
	templates, err := template.NewRegistry(host)
	if err != nil {
		return err
	}
	tstore, err := openTemplateStore(ctx, cfg.DataDir, log.With("component", "templates"))
	if err != nil {
		return err
	}
	if err := registerStored(templates, tstore.store, log); err != nil {
		return err
	}
	// Every egress decision of the sandboxes' proxies goes to the audit
	// log through a bounded queue; it closes after the manager, whose
	// Close stops the proxies.
	egressEvents := newEgressAudit(auditLog, log.With("component", "egress"))
	defer egressEvents.Close()
	egressCreds, err := egressCredentials(cfg.DataDir, cfg.EgressRoots, data.secrets, log.With("component", "egress"))
	if err != nil {
		return err
	}
	router, err := openRouter(cfg, log.With("component", "opennet"))
	if err != nil {
		return err
	}
	// The tool gateway: tenants' tools and toolsets, kept in the store
	// and served at /v1/tools and /v1/toolsets, resolve the tools a
	// create grants (api.Config.ToolResolver); the gateway runs every
	// call a sandbox makes on its tools socket (sandbox.Config.Gateway),
	// with the tenants' secrets, recording each in the audit log; the
	// in-sandbox libraries are written to the data dir and mounted in
	// every sandbox (sandbox.Config.ToolsLib).
	toolRegistry := gateway.NewRegistry(st)
	allowUpstream := parseGatewayAllow(cfg.GatewayAllow)
	// Calls of tools that require approval wait in memory for a
	// decision at /v1/approvals.
	var acfg gateway.ApprovalsConfig
	if cfg.ApprovalWebhook != "" {
		hook := newApprovalWebhook(cfg.ApprovalWebhook, log.With("component", "approvals"))
		defer hook.Close()
		acfg.Notify = hook.Notify
	}
	approvals, err := gateway.NewApprovals(acfg)
	if err != nil {
		return err
	}
	// Calls of caller-executed tools wait in memory for the program's
	// caller to answer them (/v1/sandboxes/{id}/tool-calls, run streams).
	relay, err := gateway.NewRelay(gateway.RelayConfig{})
	if err != nil {
		return err
	}
	gw, err := gateway.New(gateway.Config{
		Registry: toolRegistry,
		Relay:    relay,
		Approve:  approvals.Approve,
		Secrets:  secrets.NewReader(data.secrets),
		// Each tenant's Cedar policy text, set at /v1/policies.
		Policies: storePolicies(st),
		Record:   observeTools(met, toolAudit{log: auditLog, logger: log.With("component", "gateway")}.Record),
		Tracer:   tr.Provider(),
		AllowUpstream: func(a netip.Addr) bool {
			return slices.ContainsFunc(allowUpstream, func(p netip.Prefix) bool { return p.Contains(a) })
		},
	})
	if err != nil {
		return err
	}
	defer gw.Close()
	// Registering a tool of an upstream MCP server pins what the
	// upstream says of it, through the gateway's sessions.
	toolRegistry.SetPinner(gw.PinMCP)
	toolsLib := filepath.Join(cfg.DataDir, toolsLibDir)
	if err := sdk.WriteDir(toolsLib); err != nil {
		return fmt.Errorf("writing the in-sandbox tool libraries: %w", err)
	}
	var (
		toolCalls    gateway.Calls    = gw
		toolResolver api.ToolResolver = toolRegistry
	)
	scfg := sandbox.Config{
		Egress: sandbox.EgressConfig{Events: observeEgress(met, egressEvents.Record), Credentials: egressCreds, Limits: egress.Limits{
			MaxConns:             cfg.EgressMaxConns,
			BandwidthBytesPerSec: int64(cfg.EgressBandwidth),
			IdleTimeout:          time.Duration(cfg.EgressIdleTimeout),
		}},
		StateDir:        filepath.Join(cfg.DataDir, recordsDir),
		DefaultTemplate: cfg.DefaultTemplate,
		DefaultTimeout:  time.Duration(cfg.DefaultTimeout),
		MaxLifetime:     time.Duration(cfg.MaxLifetime),
		MaxConcurrent:   cfg.MaxSandboxes,
		EndedRetention:  time.Duration(cfg.EndedRetention),
		HealthInterval:  healthInterval(cfg.HealthInterval),
		HealthFailures:  cfg.HealthFailures,
		Health:          auditEnds{log: auditLog, timeout: 10 * time.Second, logger: log.With("component", "sandbox")},
		// Every sandbox the manager ends itself (expiry, idle timeout,
		// a dead agent, recovery) is on the audit record.
		Ends: auditEnds{log: auditLog, timeout: 10 * time.Second, logger: log.With("component", "sandbox")},
		// The store keeps a record of every sandbox, which the tenants'
		// quotas count.
		Records:  st,
		Gateway:  toolCalls,
		ToolsLib: toolsLib,
		Metrics:  met,
	}
	if cfg.PoolSize > 0 {
		scfg.PoolSize = map[string]int{cfg.DefaultTemplate: cfg.PoolSize}
	}
	if router != nil {
		defer router.Close() // its interfaces and table stay for the next daemon
		scfg.OpenNetwork = router
	}
	mgr, err := sandbox.New(rt, templates, scfg, log.With("component", "sandbox"))
	if err != nil {
		return err
	}
	tstore.mgr.Store(mgr)
	// Start returns once every sandbox found has its record; thawing and
	// waiting for their agents, and ending those that must go, go on in
	// the background while the API serves (an adopting sandbox answers
	// 503: retry).
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("start sandbox manager: %w", err)
	}
	defer closeWith(&retErr, "close sandbox manager", func() error {
		cctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		return mgr.Close(cctx)
	})

	// The code interpreter's contexts; Close detaches from their
	// processes, which the next daemon adopts.
	watchSources(met, mgr, auditLog, approvals)

	code, err := interp.New(interp.Config{Sandboxes: mgr, Log: log.With("component", "interp")})
	if err != nil {
		return err
	}
	defer code.Close()

	tplRoutes, err := templateService(cfg.DataDir, tstore, rt, templates, keys, log)
	if err != nil {
		return fmt.Errorf("template builder: %w", err)
	}
	h, err := api.New(api.Config{
		Sandboxes:   mgr,
		HostPaths:   []string{cfg.DataDir},
		Code:        code,
		Auth:        keys,
		Audit:       auditLog,
		Limiter:     limiter,
		Quota:       keys,
		Ready:       (&readiness{runtime: mgr.Ready, dataDir: cfg.DataDir, head: st.AuditHead, writeErr: auditLog.WriteErr, now: time.Now}).check,
		Metrics:     met,
		Tracer:      tr.Provider(),
		AuditLog:    auditLog,
		AuditSigner: data.signer,
		Keys:        keys,
		Tenants:     keys,
		Templates:   tplRoutes,
		Secrets:     data.secrets,
		Tools:       toolRegistry,
		Policies:    st,
		PortDomain:  cfg.PortDomain,
		// The tools a create names, resolved by the gateway's registry.
		ToolResolver: toolResolver,
		Approvals:    approvals,
		ToolCalls:    runToolCalls{gw, relay},
		// A key's direct calls of its tenant's tools.
		ToolGateway: gw,
		Info: &api.Info{
			Version:   Version(),
			Runtime:   rt.Name(),
			StartedAt: startedAt,
			Host: func(ctx context.Context) hostcheck.Report {
				return hostcheck.Refresh(ctx, hostReport, hostOpts)
			},
		},
		Log: log.With("component", "api"),
		Limits: api.Limits{
			MaxInflightPerSandbox: cfg.MaxExecsPerSandbox,
			MaxInflightPerKey:     cfg.MaxExecsPerKey,
			InflightMemory:        int64(cfg.ExecMemoryMB) << 20,
		},
	})
	if err != nil {
		return err
	}
	// Sandboxes that expired or idled out while no daemon ran (or since
	// the last sync) end without the API: mark their records stopped.
	if err := mgr.SyncRecords(ctx); err != nil {
		return fmt.Errorf("sync sandbox records: %w", err)
	}
	syncCtx, stopSync := context.WithCancel(ctx)
	defer stopSync()
	go func() {
		t := time.NewTicker(recordSyncInterval)
		defer t.Stop()
		for {
			select {
			case <-syncCtx.Done():
				return
			case <-t.C:
				if err := mgr.SyncRecords(syncCtx); err != nil && syncCtx.Err() == nil {
					log.Warn("sync sandbox records", "err", err)
				}
			}
		}
	}()
	// MCP clients reach the sandboxes at /mcp on the API's listener, as
	// tools translated onto this API with the caller's key.
	mcpH, err := mcp.Handler(mcp.Config{APIURL: "http://" + loopbackAddr(ln.Addr()), Version: Version(), Log: log.With("component", "mcp")})
	if err != nil {
		return err
	}
	root := http.NewServeMux()
	root.Handle(mcp.Path, mcpH)
	root.Handle(mcp.MetadataPath, mcpH)
	root.Handle(openai.Pattern, openai.Handler(openai.Config{APIURL: "http://" + loopbackAddr(ln.Addr()), Log: log.With("component", "openai")}))
	// The Anthropic tool executor, a client of this API with the caller's key.
	anth, err := anthropic.Mount(root, anthropic.Config{APIURL: "http://" + loopbackAddr(ln.Addr()), Log: log.With("component", "anthropic")})
	if err != nil {
		return err
	}
	root.Handle("/", h)
	srv := api.NewServer(cfg.Listen, traced(tr, root), log.With("component", "http"))
	// The E2B-compatible listener translates E2B's protocol onto this
	// API, through the API's own listener, with the caller's key.
	var e2bSrv *http.Server
	var e2bLn net.Listener
	if cfg.E2BListen != "" {
		eh, err := e2b.New(e2b.Config{
			APIURL: "http://" + loopbackAddr(ln.Addr()), Domain: cfg.E2BDomain, DefaultTemplate: cfg.DefaultTemplate,
			OpenNetwork: router != nil, Log: log.With("component", "e2b"),
		})
		if err != nil {
			return err
		}
		if e2bLn, err = net.Listen("tcp", cfg.E2BListen); err != nil {
			return fmt.Errorf("e2b listen: %w", err)
		}
		defer e2bLn.Close()
		e2bSrv = api.NewServer(cfg.E2BListen, traced(tr, eh), log.With("component", "e2b"))
		fmt.Fprintf(announce, "E2B-compatible API on http://%s (E2B_API_URL and E2B_SANDBOX_URL)\n", e2bLn.Addr())
		log.Info("serving e2b", "addr", e2bLn.Addr().String())
	}
	if metricsLn != nil {
		defer serveMetrics(metricsLn, met, log.With("component", "metrics"))()
		fmt.Fprintf(announce, "Metrics on http://%s/metrics (no key: keep the address private)\n", metricsLn.Addr())
		log.Info("serving metrics", "addr", metricsLn.Addr().String())
	}
	fmt.Fprintf(announce, "Airlock is listening on http://%s (data in %s)\n", ln.Addr(), cfg.DataDir)
	log.Info("serving", "addr", ln.Addr().String(), "data_dir", cfg.DataDir)
	if opts.Ready != nil {
		opts.Ready(ln.Addr())
	}

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if e2bSrv != nil {
		go func() {
			if err := e2bSrv.Serve(e2bLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("e2b listener: %w", err)
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
			defer cancel()
			if err := e2bSrv.Shutdown(sctx); err != nil {
				_ = e2bSrv.Close()
			}
		}()
	}
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down; sandboxes keep running")
	if err := anth.Close(); err != nil { // its bash sessions end with their streams
		log.Warn("anthropic executor close", "err", err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	// The handler ends its own requests (sessions at once, the rest after
	// shutdownGrace), each recording its outcome and answering, and waits
	// for the hijacked ones (PTY) that srv.Shutdown does not.
	handlerDone := make(chan error, 1)
	go func() { handlerDone <- h.Shutdown(sctx, shutdownGrace) }()
	if err := srv.Shutdown(sctx); err != nil {
		log.Warn("API shutdown", "err", err)
		_ = srv.Close()
	}
	if err := <-handlerDone; err != nil {
		log.Warn("API shutdown", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve: %w", err)
	}
	return nil
}

// loopbackAddr is an address that reaches the listener at a from this
// host: an unspecified IP becomes loopback.
func loopbackAddr(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String()
	}
	ip := ta.IP
	switch {
	case ip == nil || ip.IsUnspecified() && ip.To4() != nil:
		ip = net.IPv4(127, 0, 0, 1)
	case ip.IsUnspecified():
		ip = net.IPv6loopback
	}
	return net.JoinHostPort(ip.String(), strconv.Itoa(ta.Port))
}

// admitHost logs what the host checks found and returns the error naming
// every mandatory guarantee the host lacks, if any.
func admitHost(r hostcheck.Report, log *slog.Logger) error {
	if err := r.Err(); err != nil {
		return err
	}
	for _, c := range r.Warnings() {
		log.Warn("host check: starting without "+c.Name, "found", c.Found, "means", c.Meaning, "fix", c.Fix)
	}
	attrs := []any{"warnings", len(r.Warnings())}
	for _, c := range r.Checks {
		switch c.Name {
		case "kernel", "cgroups", "landlock":
			attrs = append(attrs, c.Name, c.Found)
		}
	}
	log.Info("host checked", attrs...)
	return nil
}

// Locks held while a daemon runs. The kernel drops them when the process
// dies, however it dies.
const (
	lockFileName = "daemon.lock"
	hostLockPath = "/run/airlock/daemon.lock"
)

// lockFile takes an exclusive lock on path, failing at once if another
// daemon holds it; what names the scope in the error.
func lockFile(path, what string) (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another airlock daemon is running (it holds %s): %w", path, errdefs.ErrFailedPrecondition)
		}
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	return func() { f.Close() }, nil
}

// closeWith runs close and records its error in *err unless one is there.
func closeWith(err *error, what string, close func() error) {
	if cerr := close(); cerr != nil && *err == nil {
		*err = fmt.Errorf("%s: %w", what, cerr)
	}
}

// NewLogger returns the daemon's logger at level in format, text or
// json (Config.LogFormat).
func NewLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	l, err := parseLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text", "":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("log format %q must be text or json: %w", format, errdefs.ErrInvalidArgument)
}

func parseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("%w: %w", errLevel, errdefs.ErrInvalidArgument)
}
