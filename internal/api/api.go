// Package api serves Airlock's public REST API (v1): sandboxes, exec,
// files and an interactive PTY over WebSocket, the audit log, API keys,
// tenants (the operator's), templates (a tenant's own and the shared
// ones: list and inspect with templates:read, build and remove with
// templates:write; see Config.Templates), a tenant's secrets
// (write-only: their metadata comes back, never a value; see
// Config.Secrets), a tenant's tools and toolsets of the tool gateway
// (tools:read and tools:write; see Config.Tools) and its Cedar policy
// text (Config.Policies), the tool calls that wait for a person's
// decision (approvals scope; see Config.Approvals), plus health endpoints. It is
// the one place where internal errors become HTTP statuses and public error
// codes (see publicError).
//
// Every /v1 request carries `Authorization: Bearer <key>`. The key is
// resolved to an auth.Principal by an Authenticator, rate limited per key,
// and checked for the scope its route needs. Sandboxes belong to the
// principal's tenant (sandbox.Spec.Owner); a sandbox of another tenant is
// reported exactly like one that does not exist. Every mutation (create,
// delete, timeout, exec, file write, delete and mkdir, PTY session,
// process signal and kill-all, key create and revoke, tenant create and
// delete, template build and delete, secret put and delete, tool and
// toolset create, update and delete, policy update and delete, approval
// decision) is recorded
// twice in the audit log:
// an intent,
// durable before the action is carried out, and its outcome, durable
// before the response (see call.begin and call.commit); a request refused
// before the action, and an audit verification, get one outcome record.
// A tenant sees only its own audit records, keys and templates (and the
// shared templates); the admin scope does not cross tenants. What crosses
// tenants needs the operator scope (auth.ScopeOperator): managing
// tenants, shared templates and registry pulls. The wire format is documented in
// api/openapi.yaml, whose routes a test keeps equal to the routes served.
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/metrics"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
	"github.com/airlock-sandbox/airlock/internal/template/registry"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Authenticator resolves an API key (the bearer token) to the principal it
// belongs to, which must have a TenantID and a KeyID. An error wrapping
// errdefs.ErrUnavailable, ErrTimeout, ErrInternal or ErrCanceled is a
// server-side failure (503, 504, 500: the key may be fine); any other error
// (typically errdefs.ErrUnauthenticated) means the key is not valid and
// becomes 401 "invalid API key", whatever its message.
type Authenticator interface {
	Authenticate(ctx context.Context, token string) (auth.Principal, error)
}

// Auditor records what was done through the API: it returns once the
// record is durable, with its Seq, and does not keep ev.Details (the
// caller goes on adding to the map). *audit.Log satisfies it.
type Auditor interface {
	AppendRecord(ctx context.Context, ev audit.Event) (audit.Record, error)
}

// RateLimiter decides whether the key may make one more request now.
type RateLimiter interface {
	Allow(keyID string) bool
}

// Quota tells how many sandboxes a tenant may have at once (every state but
// stopped counts). A value of zero or less means no per-tenant limit.
type Quota interface {
	SandboxQuota(ctx context.Context, tenantID string) (int, error)
}

// Settings for the http.Server that serves the API (see NewServer).
// A request whose line and headers take more than ReadHeaderTimeout to
// arrive is cut off (slow clients such as slowloris). Request headers
// larger than MaxHeaderBytes are refused with 431 and the JSON error body
// (code request_too_large); beyond the server's hard cap of
// 4*MaxHeaderBytes, net/http refuses them itself with a plain-text 431.
// There is deliberately no ReadTimeout or WriteTimeout: uploads, streamed
// exec output and PTY sessions may last long; instead bodies must keep a
// minimum rate (Limits.MinBodyRate after Limits.BodyGrace, and never
// stall for Limits.BodyIdleTimeout), and every response write must be
// taken by the client within Limits.WriteIdleTimeout.
const (
	ReadHeaderTimeout = 10 * time.Second
	MaxHeaderBytes    = 64 << 10
	IdleTimeout       = 120 * time.Second
	// serverMaxHeaderBytes is net/http's own cap.
	serverMaxHeaderBytes = 4 * MaxHeaderBytes
	// bodyDrainTimeout bounds how long the server reads the rest of a
	// body the handler did not read (net/http reads up to 256 KiB of it
	// to keep the connection alive).
	bodyDrainTimeout = 2 * time.Second
)

// Limits caps what one request may ask for. Zero fields take the defaults
// documented on each.
type Limits struct {
	// MaxJSONBytes caps a JSON request body. Default 1 MiB.
	MaxJSONBytes int64
	// MaxFileBytes caps one file upload. Default 1 GiB (the sandbox's
	// disk limit applies too).
	MaxFileBytes int64
	// MaxStdinBytes caps the stdin of one exec. Default 512 KiB.
	MaxStdinBytes int
	// MaxOutputBytes caps each of stdout and stderr of a buffered exec
	// (the rest is dropped and reported as truncated). Default 1 MiB.
	// Streamed exec output is capped only by the agent (64 MiB).
	MaxOutputBytes int
	// DefaultExecTimeout applies to an exec that gives no timeout_s.
	// Default 60 s.
	DefaultExecTimeout time.Duration
	// MaxExecTimeout caps timeout_s of an exec. Default 1 hour.
	MaxExecTimeout time.Duration
	// BodyIdleTimeout fails a request whose body sends nothing for this
	// long. Default 60 s.
	BodyIdleTimeout time.Duration
	// BodyGrace and MinBodyRate fail a request body that arrives too
	// slowly (a client trickling it): after BodyGrace, the body must have
	// kept up MinBodyRate bytes per second on average since the handler
	// started. Defaults 10 s and 1024 B/s.
	BodyGrace   time.Duration
	MinBodyRate int64
	// WriteIdleTimeout fails a response (JSON, streamed exec output, file
	// download, PTY output) whose client does not take a write for this
	// long; a streamed exec is then killed. Default 30 s.
	WriteIdleTimeout time.Duration
	// AuditTimeout bounds one append to the audit log. Default 10 s.
	AuditTimeout time.Duration
	// MaxInflightPerSandbox caps the buffered execs, exec streams, PTY
	// sessions and code cells in flight on one sandbox; MaxInflightPerKey
	// caps them per API key. Defaults 16 and 64.
	MaxInflightPerSandbox int
	MaxInflightPerKey     int
	// PTYTokenTTL is how long a PTY token (POST
	// /v1/sandboxes/{id}/pty/token) may wait for its use. Default
	// DefaultPTYTokenTTL, 30 s.
	PTYTokenTTL time.Duration
	// InflightMemory caps, daemon-wide, the memory that those requests
	// may hold: each reserves its worst case when admitted (a buffered
	// exec 2.5 x MaxOutputBytes + 256 KiB, a stream or PTY session
	// 4.25 MiB, a code cell 20 MiB; see inflight.go). Default 512 MiB.
	InflightMemory int64
}

func (l Limits) withDefaults() Limits {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxJSONBytes, 1<<20)
	def(&l.MaxFileBytes, 1<<30)
	if l.MaxStdinBytes <= 0 {
		l.MaxStdinBytes = 512 << 10
	}
	if l.MaxOutputBytes <= 0 {
		l.MaxOutputBytes = 1 << 20
	}
	defD(&l.DefaultExecTimeout, time.Minute)
	defD(&l.MaxExecTimeout, time.Hour)
	defD(&l.BodyIdleTimeout, time.Minute)
	defD(&l.BodyGrace, 10*time.Second)
	def(&l.MinBodyRate, 1024)
	defD(&l.WriteIdleTimeout, 30*time.Second)
	defD(&l.AuditTimeout, 10*time.Second)
	if l.MaxInflightPerSandbox <= 0 {
		l.MaxInflightPerSandbox = 16
	}
	if l.MaxInflightPerKey <= 0 {
		l.MaxInflightPerKey = 64
	}
	def(&l.InflightMemory, 512<<20)
	defD(&l.PTYTokenTTL, DefaultPTYTokenTTL)
	return l
}

// Config wires a Handler. Sandboxes, Auth and Audit are required.
type Config struct {
	// Sandboxes is the started sandbox manager.
	Sandboxes *sandbox.Manager
	// HostPaths are directories of the host (the daemon's data dir) that
	// no response may name: an error message that does has each such
	// path, and what follows it, replaced by "<host path>".
	HostPaths []string
	// Auth resolves API keys.
	Auth Authenticator
	// Audit receives one event per mutation.
	Audit Auditor
	// Limiter, if set, limits requests per API key (429 rate_limited).
	Limiter RateLimiter
	// Quota, if set, caps sandboxes per tenant (429 resource_exhausted)
	// before a sandbox is created. When the Manager keeps records
	// (sandbox.Config.Records), the store's atomic check of the tenant's
	// quota applies too.
	Quota Quota
	// AuditLog, if set, serves GET /v1/audit, POST /v1/audit/verify and
	// GET /v1/audit/checkpoint; without it they answer 501 not_supported. Usually the same
	// *audit.Log as Audit.
	AuditLog AuditLog
	// AuditSigner, if set, signs the checkpoints of
	// GET /v1/audit/checkpoint and verifies signed checkpoints given to
	// POST /v1/audit/verify.
	AuditSigner *audit.Signer
	// Keys, if set, serves /v1/keys; without it those routes answer 501
	// not_supported.
	Keys KeyManager
	// Tenants, if set, serves /v1/tenants (it needs Keys too, for the
	// first admin key of a new tenant); without it those routes answer
	// 501 not_supported. Deleting a tenant removes its templates.
	Tenants TenantManager
	// Code, if set, serves the code interpreter (/code, /contexts);
	// without it those routes answer 501 not_supported.
	Code CodeRunner
	// Templates, if set, serves /v1/templates (list, inspect, build,
	// import, remove); without it those routes answer 501 not_supported.
	Templates *registry.Service
	// Secrets, if set, serves /v1/secrets (put, inspect, list and delete
	// a tenant's secrets, never their values); without it those routes
	// answer 501 not_supported.
	Secrets SecretStore
	// Tools, if set, serves /v1/tools and /v1/toolsets (register,
	// inspect, list, replace and remove a tenant's tools and toolsets);
	// without it those routes answer 501 not_supported.
	Tools ToolRegistry
	// Policies, if set, serves /v1/policies (set, read and remove a
	// tenant's Cedar policy text for the tool gateway; tools:write to
	// change it, tools:read to read it); without it those routes answer
	// 501 not_supported.
	Policies PolicyStore
	// ToolResolver, if set, resolves the tools and toolsets a create
	// grants a sandbox (see ToolResolver); without it a create that
	// names any answers 501 not_supported.
	ToolResolver ToolResolver
	// ToolGateway, if set (with Tools), serves POST /v1/tools/{name}/call:
	// a key calls a tool of its tenant through the gateway's pipeline;
	// without it that route answers 501 not_supported.
	ToolGateway ToolCaller
	// Approvals, if set, serves /v1/approvals (list, inspect and decide
	// the tenant's tool calls that wait for approval); without it those
	// routes answer 501 not_supported.
	Approvals ApprovalQueue
	// ToolCalls, if set, traces the tool calls of programs (the run
	// routes) and serves the relay of caller-executed tools
	// (/v1/sandboxes/{id}/tool-calls); without it runs have no trace and
	// those routes answer 501 not_supported.
	ToolCalls ToolCalls
	// PortDomain, if set, is the wildcard domain of sandbox ports: a
	// request whose host is {port}-{id}.{PortDomain} goes to that port
	// of that sandbox (see ports.go). Its DNS and TLS are the operator's.
	PortDomain string
	// Info, if set, serves GET /v1/info (version, runtime, host report);
	// without it that route answers 501 not_supported.
	Info *Info
	// Ready, if set, is asked by GET /readyz; nil means always ready.
	Ready func(ctx context.Context) error
	// Metrics, if set, counts and times every request by route and
	// status (see observe.go) and serves GET /metrics (operator scope);
	// without it that route answers 501 not_supported.
	Metrics *metrics.Metrics
	// Tracer, if set, traces every request: a server span named by its
	// route, continuing the trace of the request's W3C traceparent
	// header, with the spans of the work it does beneath it (see
	// observe.go); nil is tracing off.
	Tracer trace.TracerProvider
	// Log receives server-side failures; nil discards.
	Log *slog.Logger
	// Limits caps requests; zero fields take defaults.
	Limits Limits
}

// Handler is the API's http.Handler. Build it with New.
type Handler struct {
	mgr     *sandbox.Manager
	redact  func(string) string // see Config.HostPaths
	authn   Authenticator
	auditor Auditor
	limiter RateLimiter
	quota   Quota
	// auditLog and keys are optional (nil: not served).
	auditLog    AuditLog
	auditSigner *audit.Signer
	keys        KeyManager
	tenants     TenantManager
	code        CodeRunner
	tpl         *registry.Service
	secrets     SecretStore
	tools       ToolRegistry
	policies    PolicyStore
	resolver    ToolResolver
	approvals   ApprovalQueue
	toolCalls   ToolCalls
	toolGateway ToolCaller
	hostInfo    *Info
	ready       func(ctx context.Context) error
	metrics     *metrics.Metrics
	tracer      trace.Tracer // nil: tracing off
	log         *slog.Logger
	lim         Limits
	inflight    *inflight
	// tickets holds the PTY tokens not yet used; keyCheck, when the
	// authenticator has it, resolves the key a token stands for.
	tickets  *auth.Tickets
	keyCheck KeyChecker
	// portSigner signs port tokens; portDomain is Config.PortDomain.
	portSigner *portSigner
	portDomain string
	mux        *http.ServeMux
	// reqs counts the requests being served; draining ends when the
	// graceful stop begins (sessions end), stopping when its grace is
	// over (every request ends). See Shutdown.
	reqs               *requests
	draining, stopping context.Context
	drain, stop        context.CancelCauseFunc
}

// New returns the API handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Sandboxes == nil || cfg.Auth == nil || cfg.Audit == nil {
		return nil, fmt.Errorf("api: sandboxes, auth and audit are required: %w", errdefs.ErrInvalidArgument)
	}
	if cfg.Tenants != nil && cfg.Keys == nil {
		return nil, fmt.Errorf("api: tenants need keys: %w", errdefs.ErrInvalidArgument)
	}
	h := &Handler{
		mgr:         cfg.Sandboxes,
		redact:      hostPathRedactor(cfg.HostPaths),
		authn:       cfg.Auth,
		auditor:     cfg.Audit,
		limiter:     cfg.Limiter,
		quota:       cfg.Quota,
		auditLog:    cfg.AuditLog,
		auditSigner: cfg.AuditSigner,
		keys:        cfg.Keys,
		tenants:     cfg.Tenants,
		code:        cfg.Code,
		tpl:         cfg.Templates,
		secrets:     cfg.Secrets,
		tools:       cfg.Tools,
		policies:    cfg.Policies,
		resolver:    cfg.ToolResolver,
		approvals:   cfg.Approvals,
		toolCalls:   cfg.ToolCalls,
		toolGateway: cfg.ToolGateway,
		hostInfo:    cfg.Info,
		ready:       cfg.Ready,
		metrics:     cfg.Metrics,
		log:         cfg.Log,
		lim:         cfg.Limits.withDefaults(),
		mux:         http.NewServeMux(),
	}
	if cfg.Tracer != nil {
		h.tracer = cfg.Tracer.Tracer(tracing.Instrumentation)
	}
	h.inflight = newInflight(h.lim)
	h.tickets = auth.NewTickets(h.lim.PTYTokenTTL, nil)
	h.portSigner = newPortSigner()
	h.portDomain = strings.ToLower(strings.TrimSuffix(cfg.PortDomain, "."))
	h.keyCheck, _ = cfg.Auth.(KeyChecker)
	h.reqs = newRequests()
	h.draining, h.drain = context.WithCancelCause(context.Background())
	h.stopping, h.stop = context.WithCancelCause(context.Background())
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	methods := make(map[string][]string)
	var paths []string
	for _, rt := range h.routes() {
		h.mux.Handle(rt.method+" "+rt.path, h.wrap(rt))
		if methods[rt.path] == nil {
			paths = append(paths, rt.path)
		}
		methods[rt.path] = append(methods[rt.path], rt.method)
	}
	// A known path with another method: 405 with Allow. The method-less
	// pattern is less specific than the routes, so it only gets the rest.
	for _, p := range paths {
		allow := methods[p]
		h.mux.Handle(p, h.plain(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", joinMethods(allow))
			return &apiError{status: http.StatusMethodNotAllowed, code: CodeMethodNotAllowed,
				msg: fmt.Sprintf("method %s is not allowed here", clean(r.Method))}
		}))
	}
	h.mux.Handle("/", h.plain(func(w http.ResponseWriter, r *http.Request) error {
		return &apiError{status: http.StatusNotFound, code: CodeNotFound, msg: "no such route"}
	}))
	return h, nil
}

func joinMethods(ms []string) string {
	out := ""
	for i, m := range ms {
		if i > 0 {
			out += ", "
		}
		out += m
		if m == http.MethodGet {
			out += ", HEAD"
		}
	}
	return out
}

// ServeHTTP serves one request: headers over MaxHeaderBytes get 431, the
// rest of a body the route did not read is drained for at most
// bodyDrainTimeout, and the end of the response must be taken by the
// client within Limits.WriteIdleTimeout.
func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &recordWriter{ResponseWriter: rw}
	start := time.Now()
	r = h.startSpan(w, r)
	defer func() { h.observed(w, r, start) }() // r as the mux served it
	if headerBytes(r) > MaxHeaderBytes {
		w.Header().Set("Connection", "close")
		h.writeError(w, r, &apiError{status: http.StatusRequestHeaderFieldsTooLarge, code: CodeRequestTooLarge,
			msg: fmt.Sprintf("request headers are larger than the limit of %d bytes", MaxHeaderBytes)})
		return
	}
	var body *eofBody
	if r.Body != nil && r.Body != http.NoBody {
		body = &eofBody{ReadCloser: r.Body}
		r.Body = body
	}
	if id, port, ok := portHost(r.Host, h.portDomain); ok {
		r = portHostRequest(r, id, port)
	}
	rc := http.NewResponseController(w)
	// A keep-alive connection may hold the previous response's deadline.
	_ = rc.SetWriteDeadline(time.Time{})
	h.mux.ServeHTTP(w, r)
	if body != nil && !body.eof && !body.failed {
		// net/http would wait for the rest without a deadline.
		_ = rc.SetReadDeadline(time.Now().Add(bodyDrainTimeout))
	}
	// net/http flushes what is buffered after the handler: bound that
	// too (an error means the connection was hijacked; nothing to do).
	_ = rc.SetWriteDeadline(time.Now().Add(h.lim.WriteIdleTimeout))
}

// NewServer returns an http.Server for h on addr with the limits above; log
// receives net/http's own errors.
func NewServer(addr string, h http.Handler, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		MaxHeaderBytes:    serverMaxHeaderBytes,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// route is one entry of the route table: the only place routes are listed.
type route struct {
	method string
	path   string // a ServeMux pattern path; {id} is a sandbox ID (a key ID under /v1/keys, a tenant ID under /v1/tenants)
	// scope is what the key needs; "" for the unauthenticated health
	// endpoints.
	scope auth.Scope
	// action is the audit action of a mutation, "" for reads.
	action string
	serve  func(c *call) error
}

// The audit actions.
const (
	ActionSandboxCreate  = "sandbox.create"
	ActionSandboxDelete  = "sandbox.delete"
	ActionSandboxTimeout = "sandbox.timeout"
	ActionSandboxExec    = "sandbox.exec"
	ActionSandboxPTY     = "sandbox.pty"
	ActionFileWrite      = "file.write"
	ActionFileDelete     = "file.delete"
	ActionFileMkdir      = "file.mkdir"
	ActionAuditVerify    = "audit.verify"
)

// routes is the route table. It does not use h's fields, so a zero Handler
// may list it.
func (h *Handler) routes() []route {
	return []route{
		{"GET", "/healthz", "", "", h.healthz},
		{"GET", "/readyz", "", "", h.readyz},
		{"GET", "/metrics", auth.ScopeOperator, "", h.serveMetrics},
		{"GET", "/v1/openapi.json", "", "", h.openAPI},
		{"GET", "/v1/info", auth.ScopeAdmin, "", h.getInfo},
		{"GET", "/v1/whoami", scopeAnyKey, "", h.whoami},
		{"POST", "/v1/sandboxes", auth.ScopeSandboxesWrite, ActionSandboxCreate, h.createSandbox},
		{"GET", "/v1/sandboxes", auth.ScopeSandboxesRead, "", h.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", auth.ScopeSandboxesRead, "", h.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", auth.ScopeSandboxesWrite, ActionSandboxDelete, h.deleteSandbox},
		{"POST", "/v1/sandboxes/{id}/timeout", auth.ScopeSandboxesWrite, ActionSandboxTimeout, h.setTimeout},
		{"GET", "/v1/sandboxes/{id}/network", auth.ScopeSandboxesRead, "", h.getNetwork},
		{"PATCH", "/v1/sandboxes/{id}/network", auth.ScopeSandboxesWrite, ActionSandboxNetwork, h.setNetwork},
		{"GET", "/v1/sandboxes/{id}/network/log", auth.ScopeAuditRead, "", h.networkLog},
		{"GET", "/v1/sandboxes/{id}/stats", auth.ScopeSandboxesRead, "", h.getStats},
		{"POST", "/v1/sandboxes/{id}/exec", auth.ScopeExec, ActionSandboxExec, h.exec},
		{"PUT", "/v1/sandboxes/{id}/files", auth.ScopeFiles, ActionFileWrite, h.writeFile},
		{"GET", "/v1/sandboxes/{id}/files", auth.ScopeFiles, "", h.readFile},
		{"DELETE", "/v1/sandboxes/{id}/files", auth.ScopeFiles, ActionFileDelete, h.removeFile},
		{"GET", "/v1/sandboxes/{id}/files/list", auth.ScopeFiles, "", h.listDir},
		{"POST", "/v1/sandboxes/{id}/files/mkdir", auth.ScopeFiles, ActionFileMkdir, h.makeDir},
		{"GET", "/v1/sandboxes/{id}/files/stat", auth.ScopeFiles, "", h.statFile},
		{"GET", "/v1/sandboxes/{id}/files/watch", auth.ScopeFiles, "", h.watchFile},
		{"POST", "/v1/sandboxes/{id}/files/move", auth.ScopeFiles, ActionFileMove, h.moveFile},
		{"GET", "/v1/sandboxes/{id}/pty", auth.ScopeExec, ActionSandboxPTY, h.pty},
		{"POST", "/v1/sandboxes/{id}/pty/token", auth.ScopeExec, ActionSandboxPTYToken, h.createPTYToken},
		{"POST", "/v1/sandboxes/{id}/code", auth.ScopeExec, ActionSandboxCode, h.runCode},
		{"POST", "/v1/sandboxes/{id}/contexts", auth.ScopeExec, ActionContextCreate, h.createContext},
		{"GET", "/v1/sandboxes/{id}/contexts", auth.ScopeExec, "", h.listContexts},
		{"DELETE", "/v1/sandboxes/{id}/contexts/{cid}", auth.ScopeExec, ActionContextDelete, h.deleteContext},
		{"POST", "/v1/sandboxes/{id}/contexts/{cid}/restart", auth.ScopeExec, ActionContextRestart, h.restartContext},
		{"POST", "/v1/sandboxes/{id}/contexts/{cid}/interrupt", auth.ScopeExec, ActionContextInterrupt, h.interruptContext},
		{"POST", "/v1/sandboxes/{id}/run", auth.ScopeExec, ActionSandboxRun, h.runSandbox},
		{"GET", "/v1/sandboxes/{id}/tool-calls", auth.ScopeToolsCall, "", h.listToolCalls},
		{"POST", "/v1/sandboxes/{id}/tool-calls/{call}", auth.ScopeToolsCall, ActionToolAnswer, h.answerToolCall},
		{"POST", "/v1/run", auth.ScopeToolsCall, ActionRun, h.runOnce},
		{"GET", "/v1/sandboxes/{id}/processes", auth.ScopeExec, "", h.listProcesses},
		{"POST", "/v1/sandboxes/{id}/processes/kill", auth.ScopeExec, ActionProcessKillAll, h.killAllProcesses},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/signal", auth.ScopeExec, ActionProcessSignal, h.signalProcess},
		{"GET", "/v1/sandboxes/{id}/processes/{pid}/output", auth.ScopeExec, "", h.processOutput},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/stdin", auth.ScopeExec, ActionProcessStdin, h.processStdin},
		{"POST", "/v1/sandboxes/{id}/processes/{pid}/resize", auth.ScopeExec, "", h.resizeProcess},
		{"POST", "/v1/sandboxes/{id}/ports/{port}", auth.ScopeExec, ActionPortURL, h.createPortURL},
		{"GET", portProxyPath, auth.ScopeExec, "", h.proxyPort},
		{"POST", portProxyPath, auth.ScopeExec, "", h.proxyPort},
		{"PUT", portProxyPath, auth.ScopeExec, "", h.proxyPort},
		{"PATCH", portProxyPath, auth.ScopeExec, "", h.proxyPort},
		{"DELETE", portProxyPath, auth.ScopeExec, "", h.proxyPort},
		{"OPTIONS", portProxyPath, auth.ScopeExec, "", h.proxyPort},
		{"GET", "/v1/audit", auth.ScopeAuditRead, "", h.listAudit},
		{"POST", "/v1/audit/verify", auth.ScopeAdmin, ActionAuditVerify, h.verifyAudit},
		{"GET", "/v1/audit/checkpoint", auth.ScopeAdmin, "", h.auditCheckpoint},
		{"POST", "/v1/keys", auth.ScopeAdmin, ActionKeyCreate, h.createKey},
		{"GET", "/v1/keys", auth.ScopeAdmin, "", h.listKeys},
		{"DELETE", "/v1/keys/{id}", auth.ScopeAdmin, ActionKeyRevoke, h.revokeKey},
		{"POST", "/v1/tenants", auth.ScopeOperator, ActionTenantCreate, h.createTenant},
		{"GET", "/v1/tenants", auth.ScopeOperator, "", h.listTenants},
		{"DELETE", "/v1/tenants/{id}", auth.ScopeOperator, ActionTenantDelete, h.deleteTenant},
		{"GET", "/v1/templates", auth.ScopeTemplatesRead, "", h.listTemplates},
		{"POST", "/v1/templates", auth.ScopeTemplatesWrite, ActionTemplateBuild, h.buildTemplate},
		{"GET", "/v1/templates/{name}", auth.ScopeTemplatesRead, "", h.getTemplate},
		{"DELETE", "/v1/templates/{name}", auth.ScopeTemplatesWrite, ActionTemplateDelete, h.deleteTemplate},
		{"POST", "/v1/templates/{name}/import", auth.ScopeTemplatesWrite, ActionTemplateImport, h.importTemplate},
		{"GET", "/v1/secrets", auth.ScopeAdmin, "", h.listSecrets},
		{"GET", "/v1/secrets/{name}", auth.ScopeAdmin, "", h.getSecret},
		{"PUT", "/v1/secrets/{name}", auth.ScopeAdmin, ActionSecretPut, h.putSecret},
		{"DELETE", "/v1/secrets/{name}", auth.ScopeAdmin, ActionSecretDelete, h.deleteSecret},
		{"POST", "/v1/tools", auth.ScopeToolsWrite, ActionToolCreate, h.createTool},
		{"GET", "/v1/tools", auth.ScopeToolsRead, "", h.listTools},
		{"GET", "/v1/tools/{name}", auth.ScopeToolsRead, "", h.getTool},
		{"PUT", "/v1/tools/{name}", auth.ScopeToolsWrite, ActionToolUpdate, h.replaceTool},
		{"DELETE", "/v1/tools/{name}", auth.ScopeToolsWrite, ActionToolDelete, h.deleteTool},
		{"POST", "/v1/tools/{name}/call", auth.ScopeToolsCall, ActionToolInvoke, h.callTool},
		{"POST", "/v1/toolsets", auth.ScopeToolsWrite, ActionToolsetCreate, h.createToolset},
		{"GET", "/v1/toolsets", auth.ScopeToolsRead, "", h.listToolsets},
		{"GET", "/v1/toolsets/{name}", auth.ScopeToolsRead, "", h.getToolset},
		{"PUT", "/v1/toolsets/{name}", auth.ScopeToolsWrite, ActionToolsetUpdate, h.replaceToolset},
		{"DELETE", "/v1/toolsets/{name}", auth.ScopeToolsWrite, ActionToolsetDelete, h.deleteToolset},
		{"GET", "/v1/approvals", auth.ScopeApprovals, "", h.listApprovals},
		{"GET", "/v1/approvals/{id}", auth.ScopeApprovals, "", h.getApproval},
		{"POST", "/v1/approvals/{id}", auth.ScopeApprovals, ActionApprovalDecide, h.decideApproval},
		{"PUT", "/v1/policies", auth.ScopeToolsWrite, ActionPolicyUpdate, h.putPolicy},
		{"GET", "/v1/policies", auth.ScopeToolsRead, "", h.getPolicy},
		{"DELETE", "/v1/policies", auth.ScopeToolsWrite, ActionPolicyDelete, h.deletePolicy},
	}
}

// healthz reports that the process serves requests.
func (h *Handler) healthz(c *call) error {
	return c.json(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports whether the daemon is ready to serve (Config.Ready).
// Once the graceful stop has begun, wrap answers 503 for it.
func (h *Handler) readyz(c *call) error {
	if h.ready != nil {
		ctx, cancel := context.WithTimeout(c.r.Context(), 5*time.Second)
		defer cancel()
		if err := h.ready(ctx); err != nil {
			h.log.Warn("not ready", "err", err)
			return &apiError{status: http.StatusServiceUnavailable, code: CodeUnavailable, msg: "not ready"}
		}
	}
	return c.json(http.StatusOK, map[string]string{"status": "ready"})
}
