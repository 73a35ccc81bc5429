// Package anthropic runs the client tools of Anthropic's Messages API in
// a sandbox: given an assistant message, it runs its tool_use blocks —
// bash (bash_20250124) in a persistent shell per conversation, the text
// editor (text_editor_20250728, str_replace_based_edit_tool) and
// Airlock's program tool (airlock_run_program: a program that may call
// the sandbox's gateway tools) — and answers the matching tool_result
// blocks, ready to be the next user message's content. Both SDKs'
// AnthropicExecutor call it.
//
// It is served on the daemon's root mux beside /mcp, at
// POST /v1/sandboxes/{id}/anthropic/tool-uses and
// DELETE /v1/sandboxes/{id}/anthropic/sessions/{session}. Like the MCP
// server and the E2B edge it is a translator: every tool use becomes
// calls of Airlock's public API through the Go client, over loopback,
// with the key the request presented, so scopes, tenancy, limits,
// command policy and the audit log are the API's. What it keeps is the
// bash sessions (see Handler).
package anthropic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/toolexec/inflight"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// The routes, as http.ServeMux patterns.
const (
	ToolUsesPattern = "POST /v1/sandboxes/{id}/anthropic/tool-uses"
	SessionPattern  = "DELETE /v1/sandboxes/{id}/anthropic/sessions/{session}"
)

// The tool names the executor runs.
const (
	BashTool    = "bash"
	EditorTool  = "str_replace_based_edit_tool"
	ProgramTool = "airlock_run_program"
)

// Tools are the tool definitions to send in a Messages API request's
// tools: the two client tools by their type, and the program tool as a
// custom tool with its input schema. The SDKs carry the same list.
var Tools = []map[string]any{
	{"type": "bash_20250124", "name": BashTool},
	{"type": "text_editor_20250728", "name": EditorTool},
	{
		"name": ProgramTool,
		"description": "Run a program in the sandbox and get its output. The program may call the tools " +
			"granted to the sandbox: in Python `from tools import NAME` then `NAME(arg=...)`, in JavaScript " +
			"`const { NAME } = require('tools')` then `await NAME({...})`. Only the program's output and " +
			"the outcome of each tool call come back.",
		"input_schema": map[string]any{
			"type": "object",
			"properties": map[string]any{
				"language":  map[string]any{"type": "string", "enum": []string{"python", "javascript", "bash"}},
				"code":      map[string]any{"type": "string", "description": "The program's source."},
				"timeout_s": map[string]any{"type": "integer", "minimum": 1, "maximum": 3600, "description": "How long it may run (default 60)."},
			},
			"required": []string{"language", "code"},
		},
	},
}

// Defaults and caps.
const (
	// maxBody caps a request's body.
	maxBody = 8 << 20
	// maxBlocks caps the content blocks of a message; maxToolUses its
	// tool_use blocks.
	maxBlocks   = 1000
	maxToolUses = 100
	// maxIDBytes caps a tool_use id.
	maxIDBytes = 256

	defaultSession         = "default"
	defaultBashTimeout     = 120 * time.Second
	maxBashTimeout         = time.Hour
	defaultSessionTimeoutS = 3600
	maxSessionTimeoutS     = 24 * 3600
	defaultMaxOutputChars  = 64 << 10
	minMaxOutputChars      = 1024
	maxMaxOutputChars      = 1 << 20
	defaultMaxFileBytes    = 16 << 20
	maxMaxFileBytes        = 16 << 20
	defaultProgramTimeoutS = 60
	maxProgramTimeoutS     = 3600
	// maxInflight caps the requests served at once.
	maxInflight = 64
)

var sessionName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,48}$`)

// Config configures a Handler.
type Config struct {
	// APIURL is Airlock's API, which every tool use is translated onto.
	APIURL string
	// HTTPClient carries the translated calls (default: one without a
	// timeout: each call bounds its own).
	HTTPClient *http.Client
	// Idle ends a conversation (and its bash session) unused this long
	// (default DefaultIdle).
	Idle time.Duration
	// MaxSessions caps the conversations kept, in all (default 1024) and
	// per key (default 64): past a cap the one idle longest is closed.
	MaxSessions, MaxSessionsPerKey int
	Log                            *slog.Logger
}

// DefaultIdle is how long an unused conversation lives.
const DefaultIdle = 30 * time.Minute

// Handler serves the routes. Conversations — a bash session and the
// lock that serialises the conversation's tool uses — are kept per
// (tenant and key, sandbox, session name): a key never reaches another
// key's shell. A conversation ends when unused for Config.Idle, when
// its shell ends (the sandbox ended, or the shell exited) and it is
// unused for a sweep, when a cap evicts it, on DELETE of its session,
// and on Close. A shell is an exec stream that is not background, so
// ending the stream (the handler's Close, the daemon's shutdown) kills
// it with everything it started.
type Handler struct {
	cfg      Config
	mux      *http.ServeMux
	sessions *sessions
	inflight chan struct{}
	tenants  *inflight.Tenants
	files    chan struct{} // see bounds.go
}

// New returns a Handler; Close ends its sessions.
func New(cfg Config) (*Handler, error) {
	if cfg.APIURL == "" {
		return nil, errors.New("anthropic: the API URL is required")
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Transport: tracing.Transport(&http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second})}
	}
	if cfg.Idle <= 0 {
		cfg.Idle = DefaultIdle
	}
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 1024
	}
	if cfg.MaxSessionsPerKey <= 0 {
		cfg.MaxSessionsPerKey = 64
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), inflight: make(chan struct{}, maxInflight),
		files: make(chan struct{}, maxFilesAtOnce), tenants: &inflight.Tenants{Max: maxInflightPerTenant}}
	h.sessions = newSessions(cfg.Idle, cfg.MaxSessions, cfg.MaxSessionsPerKey, cfg.Log)
	h.mux.HandleFunc(ToolUsesPattern, h.toolUses)
	h.mux.HandleFunc(SessionPattern, h.endSession)
	return h, nil
}

// Patterns are the patterns to mount the Handler at.
func Patterns() []string { return []string{ToolUsesPattern, SessionPattern} }

// ServeHTTP serves the routes.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// Mount makes a Handler and serves it on mux at its patterns.
func Mount(mux *http.ServeMux, cfg Config) (*Handler, error) {
	h, err := New(cfg)
	if err != nil {
		return nil, err
	}
	for _, p := range Patterns() {
		mux.Handle(p, h)
	}
	return h, nil
}

// closeWait bounds Close's wait for the shells' streams.
const closeWait = 10 * time.Second

// Close ends every bash session (and so the processes they run) and
// refuses later requests; it waits up to 10 s for the sessions'
// streams to end. Call it before the API stops serving.
func (h *Handler) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	return h.sessions.close(ctx)
}

// ToolUse is a tool_use block.
type ToolUse struct {
	Type  string          `json:"type"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// ToolResult is a tool_result block.
type ToolResult struct {
	Type      string `json:"type"`
	ToolUseID string `json:"tool_use_id"`
	Content   string `json:"content"`
	IsError   bool   `json:"is_error,omitempty"`
}

// Request is the body of POST .../anthropic/tool-uses.
type Request struct {
	// Message is a Messages API response, or any object with its content
	// blocks, or the content array itself.
	Message json.RawMessage `json:"message"`
	// Session names the conversation (default "default"): its bash
	// session and the order of its tool uses.
	Session string `json:"session,omitempty"`
	// User runs bash, the program and the editor's file requests as
	// "user" or "root" (default the sandbox's).
	User string `json:"user,omitempty"`
	// Cwd and Env are the bash session's, when this request starts it.
	Cwd string            `json:"cwd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	// BashTimeoutMS bounds one bash command (default 120 000).
	BashTimeoutMS int64 `json:"bash_timeout_ms,omitempty"`
	// SessionTimeoutS bounds the bash session's life (default 3600), when
	// this request starts it.
	SessionTimeoutS int64 `json:"session_timeout_s,omitempty"`
	// MaxOutputChars is what a result keeps of a command's or program's
	// output (default 65 536; 1024 to 1 MiB).
	MaxOutputChars int `json:"max_output_chars,omitempty"`
	// MaxFileBytes is the largest file the editor reads (default and
	// at most 16 MiB).
	MaxFileBytes int64 `json:"max_file_bytes,omitempty"`
	// ProgramTimeoutS is the program tool's default timeout (60 s).
	ProgramTimeoutS int64 `json:"program_timeout_s,omitempty"`
}

// Response is the answer: the tool_result blocks in tool_use order.
type Response struct {
	Content []ToolResult `json:"content"`
}

// options are a request's validated settings.
type options struct {
	session        string
	user, cwd      string
	env            map[string]string
	bashTimeout    time.Duration
	sessionTimeout time.Duration
	maxOutput      int
	maxFile        int64
	programTimeout time.Duration
}

// validate checks req and returns its options with the defaults filled.
func (req *Request) validate() (options, error) {
	o := options{session: req.Session, user: req.User, cwd: req.Cwd, env: req.Env}
	if o.session == "" {
		o.session = defaultSession
	} else if !sessionName.MatchString(o.session) {
		return o, fmt.Errorf("session %q must be 1 to 48 letters, digits, '.', '_' or '-'", trunc(o.session, 64))
	}
	switch o.user {
	case "", "user", "root":
	default:
		return o, errors.New(`user must be "user" or "root"`)
	}
	if len(o.cwd) > 4096 || strings.IndexByte(o.cwd, 0) >= 0 {
		return o, errors.New("cwd must be at most 4096 bytes without NUL bytes")
	}
	if len(o.env) > 256 {
		return o, errors.New("env has more than 256 variables")
	}
	var err error
	if o.bashTimeout, err = millis("bash_timeout_ms", req.BashTimeoutMS, defaultBashTimeout, maxBashTimeout); err != nil {
		return o, err
	}
	if o.sessionTimeout, err = secs("session_timeout_s", req.SessionTimeoutS, defaultSessionTimeoutS, maxSessionTimeoutS); err != nil {
		return o, err
	}
	if o.programTimeout, err = secs("program_timeout_s", req.ProgramTimeoutS, defaultProgramTimeoutS, maxProgramTimeoutS); err != nil {
		return o, err
	}
	switch o.maxOutput = req.MaxOutputChars; {
	case o.maxOutput == 0:
		o.maxOutput = defaultMaxOutputChars
	case o.maxOutput < minMaxOutputChars || o.maxOutput > maxMaxOutputChars:
		return o, fmt.Errorf("max_output_chars must be from %d to %d", minMaxOutputChars, maxMaxOutputChars)
	}
	switch o.maxFile = req.MaxFileBytes; {
	case o.maxFile == 0:
		o.maxFile = defaultMaxFileBytes
	case o.maxFile < 1 || o.maxFile > maxMaxFileBytes:
		return o, fmt.Errorf("max_file_bytes must be from 1 to %d", maxMaxFileBytes)
	}
	return o, nil
}

func millis(name string, v int64, def, max time.Duration) (time.Duration, error) {
	switch {
	case v == 0:
		return def, nil
	case v < 1 || v > max.Milliseconds():
		return 0, fmt.Errorf("%s must be from 1 to %d", name, max.Milliseconds())
	}
	return time.Duration(v) * time.Millisecond, nil
}

func secs(name string, v, def, max int64) (time.Duration, error) {
	switch {
	case v == 0:
		v = def
	case v < 1 || v > max:
		return 0, fmt.Errorf("%s must be from 1 to %d", name, max)
	}
	return time.Duration(v) * time.Second, nil
}

// toolUses picks the tool_use blocks of a message (an object with a
// content array, or the array), in order.
func toolUses(raw json.RawMessage) ([]ToolUse, error) {
	raw = json.RawMessage(strings.TrimSpace(string(raw)))
	if len(raw) == 0 || string(raw) == "null" {
		return nil, errors.New("message is required: a Messages API response or its content array")
	}
	var blocks []json.RawMessage
	if raw[0] == '[' {
		if err := json.Unmarshal(raw, &blocks); err != nil {
			return nil, fmt.Errorf("message: %v", err)
		}
	} else {
		var m struct {
			Content []json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(raw, &m); err != nil || m.Content == nil {
			return nil, errors.New("message has no content array")
		}
		blocks = m.Content
	}
	if len(blocks) > maxBlocks {
		return nil, fmt.Errorf("message has more than %d content blocks", maxBlocks)
	}
	var uses []ToolUse
	for i, b := range blocks {
		var u ToolUse
		if err := json.Unmarshal(b, &u); err != nil {
			// Not an object, or a field of another type: not a tool_use
			// unless its type says so.
			var t struct {
				Type string `json:"type"`
			}
			if json.Unmarshal(b, &t) == nil && t.Type == "tool_use" {
				return nil, fmt.Errorf("content block %d: a malformed tool_use block", i)
			}
			continue
		}
		if u.Type != "tool_use" {
			continue
		}
		if u.ID == "" || len(u.ID) > maxIDBytes {
			return nil, fmt.Errorf("content block %d: a tool_use block needs an id of 1 to %d bytes", i, maxIDBytes)
		}
		if len(uses) == maxToolUses {
			return nil, fmt.Errorf("message has more than %d tool_use blocks", maxToolUses)
		}
		uses = append(uses, u)
	}
	return uses, nil
}

// caller is who a request speaks for.
type caller struct {
	c      *client.Client
	key    string // tenant/key id
	tenant string
	scopes []string
}

func (k *caller) has(s string) bool {
	return slices.Contains(k.scopes, s) || slices.Contains(k.scopes, "operator") || slices.Contains(k.scopes, "admin")
}

// newCaller asks the API who the request's key is.
func (h *Handler) newCaller(r *http.Request) (*caller, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		return nil, &client.APIError{Status: http.StatusUnauthorized, Code: api.CodeUnauthenticated, Message: "an API key is required (Authorization: Bearer KEY)"}
	}
	c, err := client.New(h.cfg.APIURL, token, client.WithHTTPClient(h.cfg.HTTPClient), client.WithUserAgent("airlock-anthropic-executor"))
	if err != nil {
		return nil, err
	}
	who, err := c.WhoAmI(r.Context())
	if err != nil {
		return nil, err
	}
	return &caller{c: c, key: who.TenantID + "/" + who.KeyID, tenant: who.TenantID, scopes: who.Scopes}, nil
}

// toolUses serves POST /v1/sandboxes/{id}/anthropic/tool-uses.
func (h *Handler) toolUses(w http.ResponseWriter, r *http.Request) {
	bodyRead := inflight.BodyDeadline(w, bodyTimeout)
	select {
	case h.inflight <- struct{}{}:
		defer func() { <-h.inflight }()
	default:
		writeError(w, &client.APIError{Status: http.StatusTooManyRequests, Code: api.CodeResourceExhausted, Message: "too many tool-use requests in flight; retry"})
		return
	}
	id := r.PathValue("id")
	k, err := h.newCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	done, ok := h.tenants.Take(k.tenant)
	if !ok {
		writeError(w, &client.APIError{Status: http.StatusTooManyRequests, Code: api.CodeResourceExhausted,
			Message: fmt.Sprintf("too many tool-use requests of this tenant in flight (%d); retry", maxInflightPerTenant)})
		return
	}
	defer done()
	// The sandbox first, as the API answers: a missing one is 404 whatever
	// the body.
	sb, err := k.c.GetSandbox(r.Context(), id)
	if err != nil {
		writeError(w, err)
		return
	}
	var req Request
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, &client.APIError{Status: http.StatusRequestEntityTooLarge, Code: api.CodeRequestTooLarge, Message: fmt.Sprintf("the body is larger than %d bytes", maxBody)})
			return
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			writeError(w, &client.APIError{Status: http.StatusRequestTimeout, Code: api.CodeTimeout, Message: fmt.Sprintf("the body did not arrive within %s", bodyTimeout)})
			return
		}
		writeError(w, invalid("the body is not a valid request: %v", err))
		return
	}
	bodyRead()
	if dec.More() {
		writeError(w, invalid("the body holds more than one JSON value"))
		return
	}
	o, err := req.validate()
	if err != nil {
		writeError(w, invalid("%v", err))
		return
	}
	uses, err := toolUses(req.Message)
	if err != nil {
		writeError(w, invalid("%v", err))
		return
	}
	// The scopes the tools need are the route's: a key without them is
	// refused as a whole, as the API refuses a route.
	for _, u := range uses {
		need := ""
		switch u.Name {
		case BashTool, ProgramTool:
			need = "exec"
		case EditorTool:
			need = "files"
		}
		if need != "" && !k.has(need) {
			writeError(w, &client.APIError{Status: http.StatusForbidden, Code: api.CodePermissionDenied,
				Message: fmt.Sprintf("the API key lacks the %s scope, which the tool %s needs", need, u.Name)})
			return
		}
	}
	out := Response{Content: make([]ToolResult, 0, len(uses))}
	if len(uses) > 0 {
		if err := h.runUses(r.Context(), k, sb, o, uses, &out); err != nil {
			writeError(w, err)
			return
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

// runUses runs uses in order in their conversation.
func (h *Handler) runUses(ctx context.Context, k *caller, sb *client.Sandbox, o options, uses []ToolUse, out *Response) error {
	conv, err := h.sessions.acquire(ctx, convKey{key: k.key, sandbox: sb.ID, name: o.session})
	if err != nil {
		return err
	}
	defer h.sessions.release(conv)
	x := &run{h: h, k: k, sb: sb, o: o, conv: conv, budget: answerBudget{left: maxAnswerBytes}}
	for _, u := range uses {
		out.Content = append(out.Content, x.one(ctx, u))
	}
	return nil
}

// endSession serves DELETE /v1/sandboxes/{id}/anthropic/sessions/{session}:
// the conversation's bash session ends (204 whether or not there was one).
func (h *Handler) endSession(w http.ResponseWriter, r *http.Request) {
	k, err := h.newCaller(r)
	if err != nil {
		writeError(w, err)
		return
	}
	name := r.PathValue("session")
	if !sessionName.MatchString(name) {
		writeError(w, invalid("session %q must be 1 to 48 letters, digits, '.', '_' or '-'", trunc(name, 64)))
		return
	}
	if err := h.sessions.end(r.Context(), convKey{key: k.key, sandbox: r.PathValue("id"), name: name}); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// run is one request's tool uses.
type run struct {
	h    *Handler
	k    *caller
	sb   *client.Sandbox
	o    options
	conv *conversation
	// budget is what the answer may still carry of results.
	budget answerBudget
}

// toolError is a failure the model is told about as it is.
type toolError string

func (e toolError) Error() string { return string(e) }

func toolErrorf(format string, args ...any) error { return toolError(fmt.Sprintf(format, args...)) }

// one runs a tool use; a failure is an is_error result.
func (x *run) one(ctx context.Context, u ToolUse) ToolResult {
	text, err := x.dispatch(ctx, u)
	if err == nil {
		return ToolResult{Type: "tool_result", ToolUseID: u.ID, Content: x.budget.keep(text)}
	}
	var te toolError
	msg := ""
	switch {
	case errors.As(err, &te):
		msg = string(te)
	default:
		msg = "Error: " + apiMessage(err)
	}
	return ToolResult{Type: "tool_result", ToolUseID: u.ID, Content: x.budget.keep(msg), IsError: true}
}

func (x *run) dispatch(ctx context.Context, u ToolUse) (string, error) {
	var input map[string]any
	d := json.NewDecoder(strings.NewReader(string(u.Input)))
	d.UseNumber()
	if err := d.Decode(&input); err != nil || input == nil {
		return "", toolErrorf("The input of tool %q must be an object.", u.Name)
	}
	switch u.Name {
	case BashTool:
		return x.bash(ctx, input)
	case EditorTool:
		return x.editor(ctx, input)
	case ProgramTool:
		return x.program(ctx, input)
	}
	return "", toolErrorf("Unknown tool %q: this executor runs bash, str_replace_based_edit_tool and airlock_run_program.", u.Name)
}

// apiMessage is the API's message of err, or err's text.
func apiMessage(err error) string {
	var ae *client.APIError
	if errors.As(err, &ae) {
		return ae.Message
	}
	// A transport failure names the API's address: not for the model.
	var ue *url.Error
	if errors.As(err, &ue) {
		return "the API could not be reached"
	}
	return err.Error()
}

func invalid(format string, args ...any) error {
	return &client.APIError{Status: http.StatusBadRequest, Code: api.CodeInvalidArgument, Message: fmt.Sprintf(format, args...)}
}

// writeError answers err in the API's error shape: an API error as the
// API said it, anything else as unavailable.
func writeError(w http.ResponseWriter, err error) {
	var ae *client.APIError
	if !errors.As(err, &ae) {
		ae = &client.APIError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: apiMessage(err)}
		if errors.Is(err, errClosed) {
			ae.Message = "the daemon is shutting down"
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(ae.Status)
	_ = json.NewEncoder(w).Encode(api.Error{Error: api.ErrorDetail{Code: ae.Code, Message: ae.Message}})
}

func trunc(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// discard drains and closes a body.
func discard(rc io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(rc, 64<<10))
	_ = rc.Close()
}
