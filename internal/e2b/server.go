package e2b

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// The ports of E2B's in-sandbox servers.
const (
	EnvdPort    = 49983
	JupyterPort = 49999
)

// EnvdVersion is the envd version this layer reports: the SDKs decide by
// it which wire features to use. 0.5.7 turns on what is implemented
// (default user, stdin flag, octet-stream upload, closeStdin) and keeps
// off what is not (file metadata, 0.6.2; entry info in watch events,
// 0.6.3).
const EnvdVersion = "0.5.7"

// Bounds of requests this layer decodes itself.
const (
	maxJSONBody = 1 << 20
	// callTimeout bounds a control-plane call to the API.
	callTimeout = 2 * time.Minute
)

// Config configures New.
type Config struct {
	// APIURL is the base URL of Airlock's API (the daemon's own
	// listener), which every request is translated onto. Required.
	APIURL string
	// HTTPClient carries the translated requests (default: a client
	// without a timeout: streams are bounded by their own).
	HTTPClient *http.Client
	// Domain, if set, is the wildcard domain of sandbox traffic by host
	// name: {port}-{id}.{Domain}, and the domain create answers with.
	Domain string
	// DefaultTemplate is the Airlock template E2B's default templates
	// ("base", "code-interpreter-v1", ...) map to; empty: the daemon's.
	DefaultTemplate string
	// OpenNetwork says the daemon gives sandboxes network mode open
	// (allow_internet_access); without it such sandboxes get none, and
	// say so (allowInternetAccess false).
	OpenNetwork bool
	Log         *slog.Logger
}

// Handler serves E2B's control plane and sandbox traffic.
type Handler struct {
	cfg     Config
	hc      *http.Client
	log     *slog.Logger
	mux     *http.ServeMux
	connect *http.ServeMux // envd's Connect services
}

// New returns a Handler configured by cfg.
func New(cfg Config) (*Handler, error) {
	if cfg.APIURL == "" {
		return nil, errors.New("e2b: the API URL is required")
	}
	h := &Handler{cfg: cfg, hc: cfg.HTTPClient, log: cfg.Log}
	if h.hc == nil {
		h.hc = &http.Client{Transport: tracing.Transport(&http.Transport{MaxIdleConnsPerHost: 256, IdleConnTimeout: 90 * time.Second})}
	}
	if h.log == nil {
		h.log = slog.New(slog.DiscardHandler)
	}
	h.connect = connectHandlers(&envd{watchers: newWatchers()})
	h.mux = http.NewServeMux()
	h.mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	h.mux.HandleFunc("POST /sandboxes", h.control(h.createSandbox))
	h.mux.HandleFunc("POST /v2/sandboxes", h.control(h.createSandbox))
	h.mux.HandleFunc("GET /sandboxes", h.control(h.listSandboxesV1))
	h.mux.HandleFunc("GET /v2/sandboxes", h.control(h.listSandboxes))
	h.mux.HandleFunc("GET /sandboxes/{id}", h.control(h.getSandbox))
	h.mux.HandleFunc("DELETE /sandboxes/{id}", h.control(h.killSandbox))
	h.mux.HandleFunc("POST /sandboxes/{id}/timeout", h.control(h.setTimeout))
	h.mux.HandleFunc("POST /sandboxes/{id}/connect", h.control(h.connectSandbox))
	h.mux.HandleFunc("POST /v2/sandboxes/{id}/connect", h.control(h.connectSandbox))
	h.mux.HandleFunc("POST /sandboxes/{id}/resume", h.control(h.connectSandbox))
	h.mux.HandleFunc("POST /sandboxes/{id}/pause", h.control(h.pauseSandbox))
	h.mux.HandleFunc("/", h.control(h.notServed))
	return h, nil
}

// ServeHTTP routes sandbox traffic (by header or host) to the sandbox's
// surface and everything else to the control plane.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if t, ok, err := h.target(r); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	} else if ok {
		h.serveSandbox(w, r, t)
		return
	}
	h.mux.ServeHTTP(w, r)
}

// target is the sandbox and port a request of sandbox traffic is for.
type target struct {
	id   string // the Airlock ID
	port int
}

// target finds the sandbox a request is for: the E2b-Sandbox-Id and
// E2b-Sandbox-Port headers, else a {port}-{id}.{domain} host.
func (h *Handler) target(r *http.Request) (target, bool, error) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port, err := parsePort(r.Header.Get("E2b-Sandbox-Port"))
		if err != nil {
			return target{}, false, err
		}
		aid, err := FromE2BID(id)
		if err != nil {
			return target{}, false, err
		}
		return target{id: aid, port: port}, true, nil
	}
	if h.cfg.Domain == "" {
		return target{}, false, nil
	}
	host := r.Host
	if i := strings.LastIndexByte(host, ':'); i >= 0 && !strings.Contains(host[i:], "]") {
		host = host[:i]
	}
	label, ok := strings.CutSuffix(strings.ToLower(host), "."+h.cfg.Domain)
	if !ok || strings.Contains(label, ".") {
		return target{}, false, nil
	}
	p, id, ok := strings.Cut(label, "-")
	if !ok {
		return target{}, false, nil
	}
	port, err := parsePort(p)
	if err != nil {
		return target{}, false, err
	}
	aid, err := FromE2BID(id)
	if err != nil {
		return target{}, false, err
	}
	return target{id: aid, port: port}, true, nil
}

func parsePort(s string) (int, error) {
	if s == "" {
		return EnvdPort, nil
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("sandbox port %q is not a port number", clip(s))
	}
	return p, nil
}

// ToE2BID is the E2B form of an Airlock sandbox ID: sb-XXXX becomes
// sbXXXX.
func ToE2BID(id string) string { return strings.Replace(id, "sb-", "sb", 1) }

// FromE2BID is the Airlock ID of an E2B sandbox ID (sbXXXX or sb-XXXX).
func FromE2BID(id string) (string, error) {
	rest, ok := strings.CutPrefix(id, "sb")
	rest = strings.TrimPrefix(rest, "-")
	if !ok || len(rest) != 16 || strings.Trim(rest, "abcdefghijklmnopqrstuvwxyz234567") != "" {
		return "", fmt.Errorf("sandbox ID %q is not one of this server's", clip(id))
	}
	return "sb-" + rest, nil
}

// Key is the E2B form of an Airlock API key: e2b_ and its bytes in hex,
// which E2B's SDKs accept (they check ^e2b_[0-9a-f]+$).
func Key(airlockKey string) string { return "e2b_" + hex.EncodeToString([]byte(airlockKey)) }

// airlockKey is the Airlock key a request carries: X-API-Key (the
// control plane), or X-Access-Token or E2B-Traffic-Access-Token (sandbox
// traffic, which carries the envdAccessToken and trafficAccessToken
// create answered with: the code interpreter's /contexts carry only the
// latter), in E2B's form or as it is.
func airlockKey(r *http.Request) (string, bool) {
	k := r.Header.Get("X-API-Key")
	if k == "" {
		k = r.Header.Get("X-Access-Token")
	}
	if k == "" {
		k = r.Header.Get("E2B-Traffic-Access-Token")
	}
	if k == "" {
		return "", false
	}
	if rest, ok := strings.CutPrefix(k, "e2b_"); ok {
		b, err := hex.DecodeString(rest)
		if err != nil || len(b) == 0 || len(b) > 512 {
			return "", false
		}
		return string(b), true
	}
	return k, true
}

// client returns an API client with the request's key.
func (h *Handler) client(r *http.Request) (*client.Client, error) {
	key, ok := airlockKey(r)
	if !ok {
		return nil, errUnauthenticated
	}
	return client.New(h.cfg.APIURL, key, client.WithHTTPClient(h.hc))
}

var errUnauthenticated = errors.New("an API key is required: X-API-Key with an Airlock key in E2B's form (e2b_ and the key in hex)")

// e2bError is E2B's error body.
type e2bError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, e2bError{Code: status, Message: msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"code":500,"message":"internal error"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// statusOf is the HTTP status of an API error, as E2B's API answers it.
func statusOf(err error) (int, string) {
	var ae *client.APIError
	msg := err.Error()
	if errors.As(err, &ae) {
		msg = ae.Message
	}
	switch {
	case errors.Is(err, errUnauthenticated), errors.Is(err, client.ErrUnauthorized):
		return http.StatusUnauthorized, msg
	case errors.Is(err, client.ErrForbidden):
		return http.StatusForbidden, msg
	case errors.Is(err, client.ErrNotFound):
		return http.StatusNotFound, msg
	case errors.Is(err, client.ErrInvalid), errors.Is(err, client.ErrTooLarge):
		return http.StatusBadRequest, msg
	case errors.Is(err, client.ErrConflict):
		return http.StatusConflict, msg
	case errors.Is(err, client.ErrRateLimited), errors.Is(err, client.ErrQuotaExceeded):
		return http.StatusTooManyRequests, msg
	case errors.Is(err, client.ErrNotSupported):
		return http.StatusNotImplemented, msg
	case errors.Is(err, client.ErrTimeout):
		return http.StatusGatewayTimeout, msg
	case errors.Is(err, client.ErrUnavailable):
		return http.StatusServiceUnavailable, msg
	}
	return http.StatusInternalServerError, "internal error"
}

// clip shortens s for an error message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
