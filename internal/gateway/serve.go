package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	wire "github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The sandbox side of the gateway: what code in a sandbox speaks, over
// HTTP/1.1 with JSON bodies, to its tools address (runtime.ToolsBridgeAddr,
// the processes' AIRLOCK_TOOLS_URL), which its agent joins to the
// sandbox's tools socket on the host:
//
//	GET  /v1/tools  200 {"tools": [{"name", "description", "input_schema", "output_schema"}]}
//	POST /v1/call   {"tool": NAME, "args": {...}}  200 {"result": JSON}
//
// Any other answer is an error status with {"error": {"code", "message"}},
// the codes and statuses of the REST API (errdefs.HTTP). Who calls is
// the Caller the handler was made for, never anything in the request.

// Limits of the sandbox side.
const (
	// MaxCallBytes caps the body of POST /v1/call.
	MaxCallBytes = 1 << 20
	// maxToolName caps a tool name in a call (registered names are
	// shorter; a longer one is refused before any lookup).
	maxToolName = 256
	// maxErrorBytes caps an error message.
	maxErrorBytes = 1024
)

// ToolView is a granted tool as code in the sandbox sees it: what it
// needs to call it and generate stubs, nothing of its upstream or
// governance.
type ToolView struct {
	Name         string          `json:"name"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"input_schema"`
	OutputSchema json.RawMessage `json:"output_schema,omitempty"`
}

// ToolList is the body of GET /v1/tools.
type ToolList struct {
	Tools []ToolView `json:"tools"`
}

// CallRequest is the body of POST /v1/call. Args is a JSON object
// (absent: {}).
type CallRequest struct {
	Tool string          `json:"tool"`
	Args json.RawMessage `json:"args,omitempty"`
}

// CallResponse is the body of a successful POST /v1/call.
type CallResponse struct {
	Result json.RawMessage `json:"result"`
}

// ErrorResponse is the body of every error answer.
type ErrorResponse struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error's public code (one of package api's Code*
// constants) and message.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Handler serves the sandbox side of the gateway for caller, the sandbox
// on whose tools socket it is served: GET /v1/tools lists
// calls.Granted(caller), POST /v1/call runs calls.Call(caller, ...). The
// request's context is the call's: a client that goes away cancels its
// call.
func Handler(calls Calls, caller Caller) http.Handler {
	return &handler{calls: calls, caller: caller}
}

type handler struct {
	calls  Calls
	caller Caller
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var route, method string
	switch r.URL.Path {
	case "/v1/tools":
		route, method = "tools", http.MethodGet
	case "/v1/call":
		route, method = "call", http.MethodPost
	default:
		answerError(w, fmt.Errorf("no such endpoint %q; the tools endpoint serves GET /v1/tools and POST /v1/call: %w", capMessage(r.URL.Path, 64), errdefs.ErrNotFound))
		return
	}
	if r.Method != method {
		w.Header().Set("Allow", method)
		answerJSON(w, http.StatusMethodNotAllowed, ErrorResponse{Error: ErrorDetail{Code: wire.CodeMethodNotAllowed, Message: r.URL.Path + " takes " + method}})
		return
	}
	if route == "tools" {
		h.list(w, r)
		return
	}
	h.call(w, r)
}

// list serves GET /v1/tools.
func (h *handler) list(w http.ResponseWriter, r *http.Request) {
	tools, err := h.calls.Granted(r.Context(), h.caller)
	if err != nil {
		answerError(w, err)
		return
	}
	out := ToolList{Tools: make([]ToolView, 0, len(tools))}
	for _, t := range tools {
		out.Tools = append(out.Tools, ToolView{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema, OutputSchema: t.OutputSchema})
	}
	answerJSON(w, http.StatusOK, out)
}

// call serves POST /v1/call.
func (h *handler) call(w http.ResponseWriter, r *http.Request) {
	req, err := decodeCall(http.MaxBytesReader(w, r.Body, MaxCallBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			answerJSON(w, http.StatusRequestEntityTooLarge, ErrorResponse{Error: ErrorDetail{Code: wire.CodeRequestTooLarge,
				Message: fmt.Sprintf("call body is larger than the limit of %d bytes", MaxCallBytes)}})
			return
		}
		answerError(w, err)
		return
	}
	res, err := h.calls.Call(r.Context(), h.caller, req.Tool, req.Args)
	if err != nil {
		answerError(w, err)
		return
	}
	out := res.Output
	if len(out) == 0 {
		out = json.RawMessage("null")
	}
	answerJSON(w, http.StatusOK, CallResponse{Result: out})
}

// decodeCall reads and checks a call's body: one JSON object with a
// tool name and, if any, args that are a JSON object. Unknown fields are
// refused, so that a misspelt field is not silently dropped.
func decodeCall(body io.Reader) (CallRequest, error) {
	bad := func(format string, args ...any) (CallRequest, error) {
		return CallRequest{}, fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var req CallRequest
	if err := dec.Decode(&req); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return CallRequest{}, err
		}
		if errors.Is(err, io.EOF) {
			return bad(`call body is empty; want {"tool": NAME, "args": {...}}`)
		}
		return bad("call body is not a valid call: %s", capMessage(err.Error(), 200))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return CallRequest{}, err
		}
		return bad("call body has data after its JSON object")
	}
	switch {
	case req.Tool == "":
		return bad("call names no tool")
	case len(req.Tool) > maxToolName || !utf8.ValidString(req.Tool):
		return bad("tool name is not valid UTF-8 of at most %d bytes", maxToolName)
	}
	args := bytes.TrimSpace(req.Args)
	switch {
	case len(args) == 0 || bytes.Equal(args, []byte("null")):
		req.Args = json.RawMessage("{}")
	case args[0] != '{':
		return bad("args of %s must be a JSON object", req.Tool)
	}
	return req, nil
}

// answerError answers err with its status, code and message (errdefs.HTTP).
func answerError(w http.ResponseWriter, err error) {
	status, code, msg := errdefs.HTTP(err)
	answerJSON(w, status, ErrorResponse{Error: ErrorDetail{Code: code, Message: capMessage(msg, maxErrorBytes)}})
}

// answerJSON answers v with status.
func answerJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// A result that is not valid JSON (the gateway validates its
		// outputs, so a bug): say so rather than send half an answer.
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorResponse{Error: ErrorDetail{Code: wire.CodeInternal, Message: "the result could not be encoded"}})
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// capMessage makes s valid UTF-8 of at most n bytes.
func capMessage(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) > n {
		s = strings.ToValidUTF8(s[:n], "") + "..."
	}
	return s
}
