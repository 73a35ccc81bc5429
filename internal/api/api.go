// Package api serves Airlock's public REST API (v1): sandboxes, exec,
// files and an interactive PTY over WebSocket, the audit log, API keys,
// plus health endpoints. It is
// the one place where internal errors become HTTP statuses and public error
// codes (see publicError).
//
// Every /v1 request carries `Authorization: Bearer <key>`. The key is
// resolved to an auth.Principal by an Authenticator, rate limited per key,
// and checked for the scope its route needs. Sandboxes belong to the
// principal's tenant (sandbox.Spec.Owner); a sandbox of another tenant is
// reported exactly like one that does not exist. Every mutation (create,
// delete, timeout, exec, file write, file delete, PTY session, key
// create and revoke, audit verification) is appended to the audit log with
// its outcome. A tenant sees only its own audit records and keys; the
// admin scope does not cross tenants. The wire format is documented in
// api/openapi.yaml, whose routes a test keeps equal to the routes served.
package api

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/auth"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/sandbox"
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

// Auditor records what was done through the API.
type Auditor interface {
	Append(ctx context.Context, ev audit.Event) error
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

// Settings for the http.Server that serves the API (see NewServer). Request
// headers larger than MaxHeaderBytes are refused by net/http with 431.
// There is deliberately no ReadTimeout or WriteTimeout: uploads, streamed
// exec output and PTY sessions may last long; instead each handler bounds
// the idle time of bodies and streams (Limits.BodyIdleTimeout and
// Limits.WriteIdleTimeout).
const (
	ReadHeaderTimeout = 10 * time.Second
	MaxHeaderBytes    = 64 << 10
	IdleTimeout       = 120 * time.Second
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
	// WriteIdleTimeout fails a streamed response (exec output, file
	// download) that the client does not read for this long.
	// Default 60 s.
	WriteIdleTimeout time.Duration
	// AuditTimeout bounds one append to the audit log. Default 10 s.
	AuditTimeout time.Duration
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
	defD(&l.WriteIdleTimeout, time.Minute)
	defD(&l.AuditTimeout, 10*time.Second)
	return l
}

// Config wires a Handler. Sandboxes, Auth and Audit are required.
type Config struct {
	// Sandboxes is the started sandbox manager.
	Sandboxes *sandbox.Manager
	// Auth resolves API keys.
	Auth Authenticator
	// Audit receives one event per mutation.
	Audit Auditor
	// Limiter, if set, limits requests per API key (429 rate_limited).
	Limiter RateLimiter
	// Quota, if set, caps sandboxes per tenant (429 resource_exhausted)
	// before a sandbox is created. With Records set, the store's atomic
	// check of the tenant's quota applies too (see Records).
	Quota Quota
	// AuditLog, if set, serves GET /v1/audit and POST /v1/audit/verify;
	// without it they answer 501 not_supported. Usually the same
	// *audit.Log as Audit.
	AuditLog AuditLog
	// Keys, if set, serves /v1/keys; without it those routes answer 501
	// not_supported.
	Keys KeyManager
	// Records, if set, keeps the durable record of every sandbox the API
	// creates and destroys (see Records and Handler.SyncRecords).
	Records Records
	// Ready, if set, is asked by GET /readyz; nil means always ready.
	Ready func(ctx context.Context) error
	// Log receives server-side failures; nil discards.
	Log *slog.Logger
	// Limits caps requests; zero fields take defaults.
	Limits Limits
}

// Handler is the API's http.Handler. Build it with New.
type Handler struct {
	mgr     *sandbox.Manager
	authn   Authenticator
	auditor Auditor
	limiter RateLimiter
	quota   Quota
	// auditLog, keys and records are optional (nil: not served / not kept).
	auditLog AuditLog
	keys     KeyManager
	records  Records
	ready    func(ctx context.Context) error
	log      *slog.Logger
	lim      Limits
	mux      *http.ServeMux
}

// New returns the API handler for cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.Sandboxes == nil || cfg.Auth == nil || cfg.Audit == nil {
		return nil, fmt.Errorf("api: sandboxes, auth and audit are required: %w", errdefs.ErrInvalidArgument)
	}
	h := &Handler{
		mgr:      cfg.Sandboxes,
		authn:    cfg.Auth,
		auditor:  cfg.Audit,
		limiter:  cfg.Limiter,
		quota:    cfg.Quota,
		auditLog: cfg.AuditLog,
		keys:     cfg.Keys,
		records:  cfg.Records,
		ready:    cfg.Ready,
		log:      cfg.Log,
		lim:      cfg.Limits.withDefaults(),
		mux:      http.NewServeMux(),
	}
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

// ServeHTTP serves one request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mux.ServeHTTP(w, r)
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
		MaxHeaderBytes:    MaxHeaderBytes,
		IdleTimeout:       IdleTimeout,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// route is one entry of the route table: the only place routes are listed.
type route struct {
	method string
	path   string // a ServeMux pattern path; {id} is a sandbox ID (a key ID under /v1/keys)
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
	ActionAuditVerify    = "audit.verify"
)

// routes is the route table. It does not use h's fields, so a zero Handler
// may list it.
func (h *Handler) routes() []route {
	return []route{
		{"GET", "/healthz", "", "", h.healthz},
		{"GET", "/readyz", "", "", h.readyz},
		{"POST", "/v1/sandboxes", auth.ScopeSandboxesWrite, ActionSandboxCreate, h.createSandbox},
		{"GET", "/v1/sandboxes", auth.ScopeSandboxesRead, "", h.listSandboxes},
		{"GET", "/v1/sandboxes/{id}", auth.ScopeSandboxesRead, "", h.getSandbox},
		{"DELETE", "/v1/sandboxes/{id}", auth.ScopeSandboxesWrite, ActionSandboxDelete, h.deleteSandbox},
		{"POST", "/v1/sandboxes/{id}/timeout", auth.ScopeSandboxesWrite, ActionSandboxTimeout, h.setTimeout},
		{"POST", "/v1/sandboxes/{id}/exec", auth.ScopeExec, ActionSandboxExec, h.exec},
		{"PUT", "/v1/sandboxes/{id}/files", auth.ScopeFiles, ActionFileWrite, h.writeFile},
		{"GET", "/v1/sandboxes/{id}/files", auth.ScopeFiles, "", h.readFile},
		{"DELETE", "/v1/sandboxes/{id}/files", auth.ScopeFiles, ActionFileDelete, h.removeFile},
		{"GET", "/v1/sandboxes/{id}/files/list", auth.ScopeFiles, "", h.listDir},
		{"GET", "/v1/sandboxes/{id}/pty", auth.ScopeExec, ActionSandboxPTY, h.pty},
		{"GET", "/v1/audit", auth.ScopeAuditRead, "", h.listAudit},
		{"POST", "/v1/audit/verify", auth.ScopeAdmin, ActionAuditVerify, h.verifyAudit},
		{"POST", "/v1/keys", auth.ScopeAdmin, ActionKeyCreate, h.createKey},
		{"GET", "/v1/keys", auth.ScopeAdmin, "", h.listKeys},
		{"DELETE", "/v1/keys/{id}", auth.ScopeAdmin, ActionKeyRevoke, h.revokeKey},
	}
}

// healthz reports that the process serves requests.
func (h *Handler) healthz(c *call) error {
	return c.json(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz reports whether the daemon is ready to serve (Config.Ready).
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
