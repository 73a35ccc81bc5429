// Package openai runs the client-executed tool calls of an OpenAI
// Responses API response in an Airlock sandbox: the shell tool
// (shell_call), the local shell tool (local_shell_call), apply_patch
// (apply_patch_call, V4A diffs applied here) and Airlock's own function
// airlock_run_program (a program that calls the tool gateway), and
// returns the items that answer them, to send back as the next
// request's input. It serves POST /v1/sandboxes/{id}/openai/tool-calls,
// which both SDKs call, so there is one implementation of each tool.
//
// Like internal/mcp it is an edge, not a service: every call becomes
// calls of Airlock's public API (exec, files, run) through the Go client
// with the caller's own key, so scopes, tenancy, command policy, limits
// and the audit log are the API's.
package openai

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/toolexec/inflight"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// Pattern is the route this package serves, as a ServeMux pattern.
const Pattern = "POST /v1/sandboxes/{id}/openai/tool-calls"

// Bounds of a request.
const (
	// maxBody caps the request body: a response's output items, which
	// may hold long messages and reasoning.
	maxBody = 8 << 20
	// maxItems caps the output items of a request, maxCalls the calls
	// among them this route runs.
	maxItems = 1000
	maxCalls = 64
	// maxCommands caps the commands of one shell call, maxCommandBytes
	// each command and a program's code.
	maxCommands     = 32
	maxCommandBytes = 100 << 10
	// defaultTimeout is a command's or program's timeout when neither
	// the call nor the request sets one; maxTimeout caps any.
	defaultTimeout = 60 * time.Second
	maxTimeout     = 10 * time.Minute
	// maxRequestTime caps the whole request.
	maxRequestTime = 30 * time.Minute
	// defaultOutputLength caps what the model gets of each output stream
	// of a command when neither the call nor the request sets
	// max_output_length; maxOutputLength caps any (the API's buffered
	// exec keeps 1 MiB per stream).
	defaultOutputLength = 64 << 10
	maxOutputLength     = 1 << 20
	// maxPatchFile caps a file apply_patch updates.
	maxPatchFile = 8 << 20
	// maxEnv caps the request's environment variables.
	maxEnv = 256
)

// Config configures the handler.
type Config struct {
	// APIURL is Airlock's API, which every call is translated onto.
	APIURL string
	// HTTPClient carries the translated calls (default: one without a
	// timeout: each call bounds its own).
	HTTPClient *http.Client
	Log        *slog.Logger
}

// Handler returns the handler of Pattern.
func Handler(cfg Config) http.Handler {
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: tracing.Transport(&http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second})}
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	lim := &limits{inflight: make(chan struct{}, maxInflight), patches: make(chan struct{}, maxPatchesAtOnce), tenants: &inflight.Tenants{Max: maxInflightPerTenant}}
	mux := http.NewServeMux()
	mux.HandleFunc(Pattern, func(w http.ResponseWriter, r *http.Request) { serve(&cfg, lim, w, r) })
	return mux
}

// limits are a handler's: its requests in flight and its patches being
// applied (see bounds.go).
type limits struct {
	inflight, patches chan struct{}
	tenants           *inflight.Tenants
}

// Request is the route's body: the output items of a response (Output,
// or Response's), and how to run them.
type Request struct {
	// Output is a response's output items.
	Output []json.RawMessage `json:"output"`
	// Response is a whole response (any object with an output), whose
	// output is run instead.
	Response json.RawMessage `json:"response"`
	// User runs the commands and file operations: "user" or "root"
	// (default: the template's user).
	User string `json:"user"`
	// Cwd is the working directory of commands, and the directory
	// relative patch paths start at (default: the user's home).
	Cwd string `json:"cwd"`
	// Env is added to the commands' environment.
	Env map[string]string `json:"env"`
	// TimeoutMS is a command's or program's timeout when its call sets
	// none (default 60 s, at most 10 min).
	TimeoutMS int64 `json:"timeout_ms"`
	// MaxOutputLength caps each output stream of a command, in bytes,
	// when its call sets no max_output_length (default 64 KiB, at most
	// 1 MiB).
	MaxOutputLength int `json:"max_output_length"`
}

// Response is the route's answer.
type Response struct {
	// Input are the items that answer the calls, in call order.
	Input []any `json:"input"`
	// Unhandled are the call_ids of function calls this route does not
	// run (functions other than airlock_run_program): the caller answers
	// them itself.
	Unhandled []string `json:"unhandled"`
}

// items are the output items to run: Output, or the output of Response.
func (req *Request) items() ([]json.RawMessage, error) {
	if req.Response == nil {
		return req.Output, nil
	}
	var r struct {
		Output []json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(req.Response, &r); err != nil || r.Output == nil {
		return nil, errors.New("response must be a response object with its output")
	}
	return r.Output, nil
}

func (req *Request) validate() error {
	switch {
	case req.Response != nil && req.Output != nil:
		return errors.New("give output or response, not both")
	case req.Response == nil && req.Output == nil:
		return errors.New("output (a response's output items) or response is required")
	case req.User != "" && req.User != "user" && req.User != "root":
		return errors.New(`user must be "user" or "root"`)
	case req.TimeoutMS < 0 || time.Duration(req.TimeoutMS)*time.Millisecond > maxTimeout:
		return fmt.Errorf("timeout_ms must be between 0 and %d", maxTimeout.Milliseconds())
	case req.MaxOutputLength < 0 || req.MaxOutputLength > maxOutputLength:
		return fmt.Errorf("max_output_length must be between 0 and %d", maxOutputLength)
	case len(req.Env) > maxEnv:
		return fmt.Errorf("at most %d environment variables", maxEnv)
	case len(req.Cwd) > 4096:
		return errors.New("cwd is too long")
	}
	return nil
}

func serve(cfg *Config, lim *limits, w http.ResponseWriter, r *http.Request) {
	bodyRead := inflight.BodyDeadline(w, bodyTimeout)
	select {
	case lim.inflight <- struct{}{}:
		defer func() { <-lim.inflight }()
	default:
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, wire.CodeResourceExhausted, fmt.Sprintf("too many tool-call requests in flight (%d); retry", maxInflight))
		return
	}
	key, ok := bearer(r)
	if !ok {
		writeError(w, http.StatusUnauthorized, wire.CodeUnauthenticated, "an API key is required (Authorization: Bearer KEY)")
		return
	}
	id := r.PathValue("id")
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		writeError(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "the body must be application/json")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), maxRequestTime)
	defer cancel()
	c, err := client.New(cfg.APIURL, key, client.WithHTTPClient(cfg.HTTPClient), client.WithUserAgent("airlock-openai-executor"))
	if err != nil {
		writeAPIError(w, err)
		return
	}
	// The key before the body: a request without a valid key holds no
	// slot while its body arrives, and a tenant's bodies hold only its
	// own slots.
	who, err := c.WhoAmI(ctx)
	if err != nil {
		writeAPIError(w, err)
		return
	}
	done, ok := lim.tenants.Take(who.TenantID)
	if !ok {
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusTooManyRequests, wire.CodeResourceExhausted, fmt.Sprintf("too many tool-call requests of this tenant in flight (%d); retry", maxInflightPerTenant))
		return
	}
	defer done()
	var req Request
	if err := decodeBody(w, r, &req); err != nil {
		var tooBig *http.MaxBytesError
		switch {
		case errors.As(err, &tooBig):
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeRequestTooLarge, fmt.Sprintf("the body is larger than %d bytes", maxBody))
		case errors.Is(err, os.ErrDeadlineExceeded):
			writeError(w, http.StatusRequestTimeout, wire.CodeTimeout, fmt.Sprintf("the body did not arrive within %s", bodyTimeout))
		case errors.Is(err, errTrailing):
			writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, "the body must be one JSON object")
		default:
			writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, "the body is not a valid request: "+err.Error())
		}
		return
	}
	bodyRead()
	if err := req.validate(); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, err.Error())
		return
	}
	items, err := req.items()
	if err == nil && len(items) > maxItems {
		err = fmt.Errorf("at most %d output items", maxItems)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, err.Error())
		return
	}
	calls, unhandled, err := parseCalls(items)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, err.Error())
		return
	}
	if err := authorize(ctx, c, who.Scopes, id, calls); err != nil {
		writeAPIError(w, err)
		return
	}
	x := &executor{c: c, id: id, req: &req, patches: lim.patches, budget: answerBudget{left: maxAnswerBytes}}
	resp := Response{Input: []any{}, Unhandled: unhandled}
	for _, call := range calls {
		out, err := x.run(ctx, call)
		if err != nil {
			cfg.Log.Debug("an OpenAI tool-call batch stopped", "sandbox", id, "call", call.CallID, "err", err)
			writeAPIError(w, err)
			return
		}
		resp.Input = append(resp.Input, out)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(resp)
}

// authorize checks, before any call runs, what would make the whole
// request fail beside the key (checked first, 401): the scopes its calls
// need (403) and, where the key may read it, that the sandbox exists for
// its tenant (404). A key without sandboxes:read learns of a missing
// sandbox from the first command.
func authorize(ctx context.Context, c *client.Client, scopes []string, id string, calls []*call) error {
	has := func(s string) bool {
		return slices.Contains(scopes, s) || slices.Contains(scopes, "operator") ||
			s != "operator" && slices.Contains(scopes, "admin")
	}
	for _, cl := range calls {
		for _, s := range cl.scopes() {
			if !has(s) {
				return &client.APIError{Status: http.StatusForbidden, Code: wire.CodePermissionDenied,
					Message: fmt.Sprintf("the API key lacks the %s scope (needed by %s)", s, cl.Type)}
			}
		}
	}
	if has("sandboxes:read") {
		if _, err := c.GetSandbox(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// bearer is the request's API key.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, key, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	key = strings.TrimSpace(key)
	return key, key != ""
}

// writeAPIError answers with the API's own error when err is one (its
// status and code), else with 504 for a request that ran out of time and
// 503 for an API that could not be reached.
func writeAPIError(w http.ResponseWriter, err error) {
	var ae *client.APIError
	switch {
	case errors.As(err, &ae):
		code := ae.Code
		if code == "" {
			code = wire.CodeInternal
		}
		writeError(w, ae.Status, code, ae.Message)
	case errors.Is(err, client.ErrInvalid):
		writeError(w, http.StatusBadRequest, wire.CodeInvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		writeError(w, http.StatusGatewayTimeout, wire.CodeTimeout, fmt.Sprintf("the tool calls took longer than %s", maxRequestTime))
	case errors.Is(err, context.Canceled):
		writeError(w, 499, wire.CodeCanceled, "the request was canceled")
	default:
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "the API could not be reached")
	}
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(wire.Error{Error: wire.ErrorDetail{Code: code, Message: msg}})
}
