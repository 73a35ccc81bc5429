package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// The code interpreter's languages.
const (
	LangPython     = api.LangPython
	LangJavaScript = api.LangJavaScript
	LangBash       = api.LangBash
)

// The statuses of a cell (CodeExecution.Status).
const (
	// CodeStatusOK: the cell ran to its end.
	CodeStatusOK = api.CodeStatusOK
	// CodeStatusError: the cell raised an error (bash: exited non-zero).
	CodeStatusError = api.CodeStatusError
	// CodeStatusTimeout: its timeout interrupted the cell.
	CodeStatusTimeout = api.CodeStatusTimeout
	// CodeStatusInterrupted: an interrupt (or the output cap) stopped it.
	CodeStatusInterrupted = api.CodeStatusInterrupted
	// CodeStatusDied: the context's process ended; its state is lost.
	CodeStatusDied = api.CodeStatusDied
)

// maxCodeLine caps one line of a streamed cell: a result may carry an
// image of up to 5 MiB in base64 and texts of up to 1 MiB.
const maxCodeLine = 32 << 20

// RunCodeRequest is one cell to run.
type RunCodeRequest struct {
	// Language is python, javascript or bash; required without
	// ContextID.
	Language string
	// Code is the cell's source.
	Code string
	// ContextID names a context; empty means the default context of
	// Language (shared by every caller that names none).
	ContextID string
	// Env is set for this cell only.
	Env map[string]string
	// Timeout interrupts the cell (rounded up to whole seconds); zero
	// means the server's default (5 minutes).
	Timeout time.Duration
}

// CodeResult is a value a cell showed: its last expression's value
// (IsMainResult), a figure or a display() call, in one or more
// representations.
type CodeResult struct {
	IsMainResult bool   `json:"is_main_result"`
	Text         string `json:"text"`
	HTML         string `json:"html"`
	Markdown     string `json:"markdown"`
	SVG          string `json:"svg"`
	// PNG and JPEG are the image bytes (base64 on the wire).
	PNG        []byte          `json:"png"`
	JPEG       []byte          `json:"jpeg"`
	LaTeX      string          `json:"latex"`
	JSON       json.RawMessage `json:"json"`
	JavaScript string          `json:"javascript"`
	// Omitted says what the server left out for a size limit.
	Omitted string `json:"omitted"`
}

// codeResultFrom is the CodeResult that the wire form r describes: its
// images decoded from base64.
func codeResultFrom(r *api.CodeResult) (CodeResult, error) {
	out := CodeResult{
		IsMainResult: r.IsMainResult, Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, SVG: r.SVG,
		LaTeX: r.LaTeX, JSON: r.JSON, JavaScript: r.JavaScript, Omitted: r.Omitted,
	}
	var err error
	if out.PNG, err = decodeImage(r.PNG); err != nil {
		return out, fmt.Errorf("png: %w", err)
	}
	if out.JPEG, err = decodeImage(r.JPEG); err != nil {
		return out, fmt.Errorf("jpeg: %w", err)
	}
	return out, nil
}

// decodeImage decodes an image's standard base64 as encoding/json decodes
// a []byte (line breaks are ignored); "" is none.
func decodeImage(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	b := make([]byte, base64.StdEncoding.DecodedLen(len(s)))
	n, err := base64.StdEncoding.Decode(b, []byte(s))
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

// CodeError is the error a cell raised: for Python and JavaScript the
// exception's class, message and traceback; ExitStatus for a bash cell
// that exited non-zero; ContextDied when the context's process ended.
type CodeError = api.CodeError

// CodeExecution is how a cell ran. A cell that failed is an execution
// with Status CodeStatusError and Error set, not a Go error.
type CodeExecution struct {
	ContextID string
	Language  string
	// ExecutionCount counts the cells of the context, this one included.
	ExecutionCount int
	// Status is one of the CodeStatus constants.
	Status string
	// ExitCode is the exit status of a bash cell.
	ExitCode int
	// Results are the values shown, in order.
	Results []CodeResult
	// Stdout and Stderr are the output (RunCodeStream also delivers it
	// as it comes).
	Stdout, Stderr                    string
	Error                             *CodeError
	OutputTruncated, ResultsTruncated bool
	Duration                          time.Duration
}

// MainResult returns the value of the cell's last expression, or nil.
func (e *CodeExecution) MainResult() *CodeResult {
	for i := range e.Results {
		if e.Results[i].IsMainResult {
			return &e.Results[i]
		}
	}
	return nil
}

// CodeEvent is one streamed event of a cell.
type CodeEvent struct {
	// Type is "stdout", "stderr", "result" or "error".
	Type string
	// Data is the output of stdout and stderr events.
	Data   string
	Result *CodeResult
	Error  *CodeError
}

// fillEnd sets the fields of x that say how the cell ended.
func fillEnd(x *CodeExecution, e *api.CodeEnd) {
	x.ContextID, x.Language, x.ExecutionCount, x.Status = e.ContextID, e.Language, e.ExecutionCount, e.Status
	x.ExitCode, x.OutputTruncated, x.ResultsTruncated = e.ExitCode, e.OutputTruncated, e.ResultsTruncated
	x.Duration = time.Duration(e.DurationMS) * time.Millisecond
}

// codeExecutionFrom is the CodeExecution that the wire form e describes.
func codeExecutionFrom(e *api.CodeExecution) (*CodeExecution, error) {
	x := &CodeExecution{Stdout: e.Stdout, Stderr: e.Stderr, Error: e.Error}
	if e.Results != nil {
		x.Results = make([]CodeResult, 0, len(e.Results))
	}
	for i := range e.Results {
		r, err := codeResultFrom(&e.Results[i])
		if err != nil {
			return nil, err
		}
		x.Results = append(x.Results, r)
	}
	fillEnd(x, &e.CodeEnd)
	return x, nil
}

func (req *RunCodeRequest) body() (api.CodeRequest, error) {
	if req.Language == "" && req.ContextID == "" {
		return api.CodeRequest{}, fmt.Errorf("airlock: run code: Language or ContextID is required: %w", ErrInvalid)
	}
	if req.ContextID != "" {
		if err := checkContextID(req.ContextID); err != nil {
			return api.CodeRequest{}, err
		}
	}
	code := req.Code
	return api.CodeRequest{Language: req.Language, Code: &code, ContextID: req.ContextID, Env: req.Env, TimeoutS: seconds(req.Timeout)}, nil
}

// RunCode runs a cell in sandbox id and returns how it ran, with its
// results and output (the server caps output at 1 MiB and results at
// 12 MiB per cell; a client built with WithMaxResponseBytes below 16 MiB
// may refuse the largest answers).
func (c *Client) RunCode(ctx context.Context, id string, req RunCodeRequest) (*CodeExecution, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	in, err := req.body()
	if err != nil {
		return nil, err
	}
	var out api.CodeExecution
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/code"), nil, in, &out, http.StatusOK); err != nil {
		return nil, err
	}
	x, err := codeExecutionFrom(&out)
	if err != nil {
		return nil, fmt.Errorf("airlock: decode response: %w", err)
	}
	return x, nil
}

// RunCodeStream runs a cell in sandbox id and calls onEvent with each
// event as the server sends it (in order, from one goroutine). If
// onEvent returns an error, the request is cancelled (the server then
// interrupts the cell) and RunCodeStream returns that error. The
// returned execution also holds every result and all output.
func (c *Client) RunCodeStream(ctx context.Context, id string, req RunCodeRequest, onEvent func(CodeEvent) error) (*CodeExecution, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	b, err := req.body()
	if err != nil {
		return nil, err
	}
	x := &CodeExecution{}
	var stdout, stderr strings.Builder
	err = streamJSON(ctx, c, sandboxPath(id, "/code"), b, "code stream", maxCodeLine, func(line *api.CodeStreamLine) (bool, error) {
		var ev CodeEvent
		switch line.Type {
		case api.StreamStdout, api.StreamStderr:
			ev = CodeEvent{Type: line.Type, Data: line.Data}
			if line.Type == api.StreamStdout {
				stdout.WriteString(line.Data)
			} else {
				stderr.WriteString(line.Data)
			}
		case "result":
			r, err := codeResultFrom(&line.CodeResult)
			if err != nil {
				return true, fmt.Errorf("airlock: code stream: malformed line: %w", err)
			}
			x.Results = append(x.Results, r)
			ev = CodeEvent{Type: "result", Result: &r}
		case "error":
			if line.Error != nil {
				// The stream broke: {"type":"error","error":{...}}.
				return true, streamError(line.Error, "code stream failed")
			}
			cellErr := line.CodeError
			x.Error = &cellErr
			ev = CodeEvent{Type: "error", Error: x.Error}
		case "end":
			fillEnd(x, &line.CodeEnd)
			x.Stdout, x.Stderr = stdout.String(), stderr.String()
			return true, nil
		default:
			return false, nil
		}
		if onEvent != nil {
			return false, onEvent(ev)
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	return x, nil
}

// CodeContext is a stateful code context of a sandbox: api.CodeContext's
// fields, converted from it, with an Error that its JSON encoding writes
// even when empty (as `airlock contexts ls --json` prints it).
type CodeContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	// Cwd is the working directory its process started in.
	Cwd string `json:"cwd"`
	// Default marks the language's default context.
	Default bool `json:"default"`
	// State is idle, busy or dead (Error says why).
	State          string    `json:"state"`
	Error          string    `json:"error"`
	ExecutionCount int       `json:"execution_count"`
	CreatedAt      time.Time `json:"created_at"`
}

// CreateCodeContextRequest describes a context to create: Language
// (python, javascript or bash), and optionally its working directory Cwd
// (relative to the user's home) and Env, added to the sandbox's
// environment for the context.
type CreateCodeContextRequest = api.CodeContextRequest

// checkContextID rejects IDs that cannot name a context.
func checkContextID(id string) error {
	if id == "" || strings.ContainsAny(id, "/?#") {
		return fmt.Errorf("airlock: context id %q is not valid: %w", id, ErrInvalid)
	}
	return nil
}

func contextPath(id, contextID, suffix string) string {
	return sandboxPath(id, "/contexts/"+url.PathEscape(contextID)+suffix)
}

// CreateCodeContext starts a context in sandbox id and returns it once it
// serves. A sandbox has at most 8 contexts (ErrQuotaExceeded beyond).
func (c *Client) CreateCodeContext(ctx context.Context, id string, req CreateCodeContextRequest) (*CodeContext, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.CodeContext
	if err := c.doJSON(ctx, http.MethodPost, sandboxPath(id, "/contexts"), nil, req, &out, http.StatusCreated); err != nil {
		return nil, err
	}
	cc := CodeContext(out)
	return &cc, nil
}

// ListCodeContexts returns the contexts of sandbox id, oldest first.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]CodeContext, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.CodeContextList
	if err := c.doJSON(ctx, http.MethodGet, sandboxPath(id, "/contexts"), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	if out.Contexts == nil {
		return nil, nil
	}
	list := make([]CodeContext, 0, len(out.Contexts))
	for _, cc := range out.Contexts {
		list = append(list, CodeContext(cc))
	}
	return list, nil
}

// DeleteCodeContext kills a context and forgets it.
func (c *Client) DeleteCodeContext(ctx context.Context, id, contextID string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := checkContextID(contextID); err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodDelete, contextPath(id, contextID, ""), nil, nil, nil, http.StatusNoContent)
}

// RestartCodeContext replaces a context's process (its state is lost) and
// returns the context once it serves again.
func (c *Client) RestartCodeContext(ctx context.Context, id, contextID string) (*CodeContext, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if err := checkContextID(contextID); err != nil {
		return nil, err
	}
	var out api.CodeContext
	if err := c.doJSON(ctx, http.MethodPost, contextPath(id, contextID, "/restart"), nil, nil, &out, http.StatusOK); err != nil {
		return nil, err
	}
	cc := CodeContext(out)
	return &cc, nil
}

// InterruptCodeContext interrupts the cell running in a context and
// reports whether one was running.
func (c *Client) InterruptCodeContext(ctx context.Context, id, contextID string) (bool, error) {
	if err := checkID(id); err != nil {
		return false, err
	}
	if err := checkContextID(contextID); err != nil {
		return false, err
	}
	var out api.InterruptResult
	if err := c.doJSON(ctx, http.MethodPost, contextPath(id, contextID, "/interrupt"), nil, nil, &out, http.StatusOK); err != nil {
		return false, err
	}
	return out.Interrupted, nil
}
