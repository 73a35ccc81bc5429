package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/airlock-sandbox/airlock/client"
)

// Bounds of the tools.
const (
	// maxFileBytes caps what read_file returns and write_file and
	// edit_file take: larger files go through the files API.
	maxFileBytes = 1 << 20
	// maxOutputText caps each output stream a result carries.
	maxOutputText = 256 << 10
	// progressEvery is the least time between two progress
	// notifications of a command.
	progressEvery = 500 * time.Millisecond
	// keyLabel and defaultLabel are the metadata that mark the
	// sandboxes a key made through MCP, and its default one.
	keyLabel     = "airlock.mcp.key"
	defaultLabel = "airlock.mcp.default"
)

// tools are the tools of one key's server.
type tools struct {
	cfg *Config
	k   *caller
}

func yes() *bool { b := true; return &b }
func no() *bool  { b := false; return &b }

// register adds the tools the key's scopes allow.
func (t *tools) register(s *sdk.Server) {
	if t.k.has("sandboxes:write") {
		sdk.AddTool(s, &sdk.Tool{Name: "create_sandbox", Title: "Create a sandbox",
			Description: "Creates an isolated Linux sandbox and makes it your default sandbox. It is destroyed after its timeout, or when idle.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: no(), OpenWorldHint: no()}}, t.createSandbox)
		sdk.AddTool(s, &sdk.Tool{Name: "destroy_sandbox", Title: "Destroy a sandbox",
			Description: "Destroys a sandbox with its processes and files.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}}, t.destroySandbox)
	}
	if t.k.has("sandboxes:read") {
		sdk.AddTool(s, &sdk.Tool{Name: "list_sandboxes", Title: "List sandboxes",
			Description: "Lists the live sandboxes this key created through MCP.",
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no()}}, t.listSandboxes)
	}
	if t.k.has("exec") {
		sdk.AddTool(s, &sdk.Tool{Name: "run_command", Title: "Run a command",
			Description: "Runs a shell command in a sandbox and returns its exit code and output. Long commands report progress with their output so far.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), OpenWorldHint: yes()}}, t.runCommand)
		sdk.AddTool(s, &sdk.Tool{Name: "run_code", Title: "Run code",
			Description: "Runs Python, JavaScript or bash code in a stateful context of a sandbox: variables persist between calls. Returns output, results (figures come back as images) and the error, if any.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), OpenWorldHint: yes()}}, t.runCode)
	}
	if t.k.has("files") {
		sdk.AddTool(s, &sdk.Tool{Name: "read_file", Title: "Read a file",
			Description: "Reads a file of a sandbox (at most 1 MiB): text as it is, other bytes in base64.",
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no()}}, t.readFile)
		sdk.AddTool(s, &sdk.Tool{Name: "write_file", Title: "Write a file",
			Description: "Writes a file of a sandbox, replacing it if it exists, creating its directories.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), IdempotentHint: true, OpenWorldHint: no()}}, t.writeFile)
		sdk.AddTool(s, &sdk.Tool{Name: "edit_file", Title: "Edit a file",
			Description: "Replaces old_str by new_str in a text file of a sandbox. old_str must match exactly, and once unless replace_all is set.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), OpenWorldHint: no()}}, t.editFile)
		sdk.AddTool(s, &sdk.Tool{Name: "list_files", Title: "List files",
			Description: "Lists a directory of a sandbox.",
			Annotations: &sdk.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: no()}}, t.listFiles)
	}
	if t.k.has("tools:call") {
		sdk.AddTool(s, &sdk.Tool{Name: "execute_program", Title: "Run a program that calls tools",
			Description: "Runs a program in a sandbox of its own, granted the tools and toolsets named: it calls them through Airlock's tool gateway (Python: from tools import NAME; JavaScript: require('tools'); bash: the tool command), and only its output and the trace of its tool calls come back.",
			Annotations: &sdk.ToolAnnotations{DestructiveHint: yes(), OpenWorldHint: yes()}}, t.executeProgram)
	}
}

// sandboxOf returns the sandbox a call names, or the key's default one,
// created on first use (which needs the sandboxes:write scope).
func (t *tools) sandboxOf(ctx context.Context, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	list, err := t.k.c.ListSandboxes(ctx, client.ListOptions{States: []client.State{client.StateRunning},
		Metadata: map[string]string{keyLabel: t.k.who.KeyID, defaultLabel: "1"}})
	if err != nil {
		return "", err
	}
	if len(list) > 0 {
		return list[len(list)-1].ID, nil
	}
	if !t.k.has("sandboxes:write") {
		return "", errors.New("give sandbox_id: you have no default sandbox, and this key cannot create one (it lacks the sandboxes:write scope)")
	}
	sb, err := t.create(ctx, createIn{}, true)
	if err != nil {
		return "", err
	}
	return sb.ID, nil
}

type createIn struct {
	Template     string            `json:"template,omitempty" jsonschema:"the template (default: the server's)"`
	TimeoutS     int64             `json:"timeout_s,omitempty" jsonschema:"how long the sandbox lives, in seconds (default: the server's)"`
	IdleTimeoutS int64             `json:"idle_timeout_s,omitempty" jsonschema:"destroy it after this many seconds without activity (default 900)"`
	Metadata     map[string]string `json:"metadata,omitempty" jsonschema:"labels kept with the sandbox"`
	Allow        []string          `json:"allow_network,omitempty" jsonschema:"hosts it may reach (host names, *.wildcards, IPs, CIDRs, each with an optional :port); default: no network"`
	Tools        []string          `json:"tools,omitempty" jsonschema:"gateway tools granted to its code"`
	Toolsets     []string          `json:"toolsets,omitempty" jsonschema:"gateway toolsets granted to its code"`
}

type sandboxOut struct {
	SandboxID string    `json:"sandbox_id"`
	Template  string    `json:"template"`
	State     string    `json:"state"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	Default   bool      `json:"default"`
}

func outOf(sb *client.Sandbox) sandboxOut {
	return sandboxOut{SandboxID: sb.ID, Template: sb.Template, State: string(sb.State), CreatedAt: sb.CreatedAt, ExpiresAt: sb.ExpiresAt,
		Default: sb.Metadata[defaultLabel] == "1"}
}

// create creates a sandbox for the key, marked as its (and as its
// default when def is set).
func (t *tools) create(ctx context.Context, in createIn, def bool) (*client.Sandbox, error) {
	md := map[string]string{}
	for k, v := range in.Metadata {
		if strings.HasPrefix(k, "airlock.mcp.") {
			return nil, fmt.Errorf("metadata keys starting with airlock.mcp. are reserved")
		}
		md[k] = v
	}
	md[keyLabel] = t.k.who.KeyID
	if def {
		md[defaultLabel] = "1"
	}
	req := client.CreateSandboxRequest{Template: in.Template, Timeout: time.Duration(in.TimeoutS) * time.Second,
		IdleTimeout: time.Duration(in.IdleTimeoutS) * time.Second, Metadata: md, Tools: in.Tools, Toolsets: in.Toolsets}
	if req.IdleTimeout == 0 {
		req.IdleTimeout = t.cfg.IdleTimeout
	}
	if len(in.Allow) > 0 {
		req.Network = &client.Network{Mode: "allowlist", Allow: in.Allow}
	}
	return t.k.c.CreateSandbox(ctx, req)
}

func (t *tools) createSandbox(ctx context.Context, _ *sdk.CallToolRequest, in createIn) (*sdk.CallToolResult, sandboxOut, error) {
	// The newest sandbox created through create_sandbox is the default.
	sb, err := t.create(ctx, in, true)
	if err != nil {
		return nil, sandboxOut{}, err
	}
	return nil, outOf(sb), nil
}

type sandboxIn struct {
	SandboxID string `json:"sandbox_id" jsonschema:"the sandbox"`
}

type destroyOut struct {
	SandboxID string `json:"sandbox_id"`
	Destroyed bool   `json:"destroyed"`
}

func (t *tools) destroySandbox(ctx context.Context, _ *sdk.CallToolRequest, in sandboxIn) (*sdk.CallToolResult, destroyOut, error) {
	if in.SandboxID == "" {
		return nil, destroyOut{}, errors.New("sandbox_id is required")
	}
	err := t.k.c.DeleteSandbox(ctx, in.SandboxID)
	if errors.Is(err, client.ErrNotFound) {
		return nil, destroyOut{SandboxID: in.SandboxID}, nil
	}
	if err != nil {
		return nil, destroyOut{}, err
	}
	return nil, destroyOut{SandboxID: in.SandboxID, Destroyed: true}, nil
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes"`
}

func (t *tools) listSandboxes(ctx context.Context, _ *sdk.CallToolRequest, _ struct{}) (*sdk.CallToolResult, listOut, error) {
	list, err := t.k.c.ListSandboxes(ctx, client.ListOptions{States: []client.State{client.StateRunning}, Metadata: map[string]string{keyLabel: t.k.who.KeyID}})
	if err != nil {
		return nil, listOut{}, err
	}
	out := listOut{Sandboxes: []sandboxOut{}}
	for i := range list {
		out.Sandboxes = append(out.Sandboxes, outOf(&list[i]))
	}
	return nil, out, nil
}

type commandIn struct {
	SandboxID string            `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: your default sandbox)"`
	Command   string            `json:"command" jsonschema:"a shell command line"`
	Cwd       string            `json:"cwd,omitempty" jsonschema:"working directory (default: the home)"`
	Env       map[string]string `json:"env,omitempty" jsonschema:"environment variables"`
	TimeoutS  int64             `json:"timeout_s,omitempty" jsonschema:"kill it after this many seconds (default 60)"`
	User      string            `json:"user,omitempty" jsonschema:"user (default) or root"`
}

type commandOut struct {
	SandboxID       string `json:"sandbox_id"`
	ExitCode        int    `json:"exit_code"`
	Status          string `json:"status"`
	Stdout          string `json:"stdout"`
	Stderr          string `json:"stderr"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty"`
	DurationMS      int64  `json:"duration_ms"`
}

// capped collects at most n bytes.
type capped struct {
	b   bytes.Buffer
	n   int
	cut bool
}

func (c *capped) add(p []byte) {
	if room := c.n - c.b.Len(); room < len(p) {
		p, c.cut = p[:max(room, 0)], true
	}
	c.b.Write(p)
}

func (c *capped) text() string { return strings.ToValidUTF8(c.b.String(), "\uFFFD") }

func (t *tools) runCommand(ctx context.Context, req *sdk.CallToolRequest, in commandIn) (*sdk.CallToolResult, commandOut, error) {
	if strings.TrimSpace(in.Command) == "" {
		return nil, commandOut{}, errors.New("command is required")
	}
	id, err := t.sandboxOf(ctx, in.SandboxID)
	if err != nil {
		return nil, commandOut{}, err
	}
	stdout, stderr := &capped{n: maxOutputText}, &capped{n: maxOutputText}
	token := req.Params.GetProgressToken()
	var last time.Time
	var seen float64 // bytes of output so far: the progress, which must rise
	res, err := t.k.c.ExecStream(ctx, id, client.ExecRequest{Command: in.Command, Cwd: in.Cwd, Env: in.Env, User: in.User,
		Timeout: time.Duration(in.TimeoutS) * time.Second}, func(s client.Stream, b []byte) error {
		if s == client.Stderr {
			stderr.add(b)
		} else {
			stdout.add(b)
		}
		seen += float64(len(b))
		if token != nil && len(b) > 0 && time.Since(last) >= progressEvery {
			last = time.Now()
			_ = req.Session.NotifyProgress(ctx, &sdk.ProgressNotificationParams{ProgressToken: token, Progress: seen,
				Message: textOf(string(b), 200)})
		}
		return nil
	})
	if err != nil {
		return nil, commandOut{}, err
	}
	out := commandOut{SandboxID: id, ExitCode: res.ExitCode, Status: res.Status, Stdout: stdout.text(), Stderr: stderr.text(),
		StdoutTruncated: stdout.cut, StderrTruncated: stderr.cut, DurationMS: res.Duration.Milliseconds()}
	if res.Error != "" {
		return nil, out, errors.New(res.Error)
	}
	return nil, out, nil
}

type codeIn struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: your default sandbox)"`
	Code      string `json:"code" jsonschema:"the code to run"`
	Language  string `json:"language,omitempty" jsonschema:"python (default), javascript or bash"`
	ContextID string `json:"context_id,omitempty" jsonschema:"a context of the sandbox (default: the language's default context)"`
}

type codeResult struct {
	Text     string `json:"text,omitempty"`
	HTML     string `json:"html,omitempty"`
	Markdown string `json:"markdown,omitempty"`
	Image    string `json:"image,omitempty" jsonschema:"the MIME type of an image result, which comes as image content"`
	Main     bool   `json:"is_main_result,omitempty"`
}

type codeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

type codeOut struct {
	SandboxID      string       `json:"sandbox_id"`
	ContextID      string       `json:"context_id"`
	Status         string       `json:"status"`
	ExecutionCount int          `json:"execution_count"`
	Stdout         string       `json:"stdout"`
	Stderr         string       `json:"stderr"`
	Results        []codeResult `json:"results"`
	Error          *codeError   `json:"error,omitempty"`
}

func (t *tools) runCode(ctx context.Context, _ *sdk.CallToolRequest, in codeIn) (*sdk.CallToolResult, codeOut, error) {
	id, err := t.sandboxOf(ctx, in.SandboxID)
	if err != nil {
		return nil, codeOut{}, err
	}
	lang := in.Language
	if lang == "" && in.ContextID == "" {
		lang = client.LangPython
	}
	x, err := t.k.c.RunCode(ctx, id, client.RunCodeRequest{Language: lang, Code: in.Code, ContextID: in.ContextID})
	if err != nil {
		return nil, codeOut{}, err
	}
	out := codeOut{SandboxID: id, ContextID: x.ContextID, Status: x.Status, ExecutionCount: x.ExecutionCount,
		Stdout: textOf(x.Stdout, maxOutputText), Stderr: textOf(x.Stderr, maxOutputText), Results: []codeResult{}}
	res := &sdk.CallToolResult{}
	var text []string
	if out.Stdout != "" {
		text = append(text, out.Stdout)
	}
	if out.Stderr != "" {
		text = append(text, "stderr:\n"+out.Stderr)
	}
	for _, r := range x.Results {
		cr := codeResult{Text: r.Text, HTML: r.HTML, Markdown: r.Markdown, Main: r.IsMainResult}
		switch {
		case len(r.PNG) > 0:
			cr.Image = "image/png"
			res.Content = append(res.Content, &sdk.ImageContent{Data: r.PNG, MIMEType: "image/png"})
		case len(r.JPEG) > 0:
			cr.Image = "image/jpeg"
			res.Content = append(res.Content, &sdk.ImageContent{Data: r.JPEG, MIMEType: "image/jpeg"})
		}
		if r.Text != "" {
			text = append(text, r.Text)
		}
		out.Results = append(out.Results, cr)
	}
	if x.Error != nil {
		out.Error = &codeError{Name: x.Error.Name, Value: x.Error.Value, Traceback: textOf(x.Error.Traceback, 16<<10)}
		text = append(text, fmt.Sprintf("%s: %s", x.Error.Name, x.Error.Value))
		res.IsError = true
	}
	res.Content = append([]sdk.Content{&sdk.TextContent{Text: strings.Join(text, "\n")}}, res.Content...)
	return res, out, nil
}

type pathIn struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: your default sandbox)"`
	Path      string `json:"path" jsonschema:"the file's path (relative to the home)"`
}

type fileOut struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	Size      int    `json:"size"`
	Content   string `json:"content"`
	Encoding  string `json:"encoding" jsonschema:"utf-8, or base64 for bytes that are not UTF-8"`
}

// read reads a file of at most maxFileBytes.
func (t *tools) read(ctx context.Context, id, p string) ([]byte, error) {
	rc, err := t.k.c.ReadFile(ctx, id, p)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes; read it in parts with run_command (head, tail, sed -n)", p, maxFileBytes)
	}
	return b, nil
}

func (t *tools) readFile(ctx context.Context, _ *sdk.CallToolRequest, in pathIn) (*sdk.CallToolResult, fileOut, error) {
	id, err := t.sandboxOf(ctx, in.SandboxID)
	if err != nil {
		return nil, fileOut{}, err
	}
	b, err := t.read(ctx, id, in.Path)
	if err != nil {
		return nil, fileOut{}, err
	}
	out := fileOut{SandboxID: id, Path: in.Path, Size: len(b), Content: string(b), Encoding: "utf-8"}
	if !utf8.Valid(b) {
		out.Content, out.Encoding = base64.StdEncoding.EncodeToString(b), "base64"
	}
	return nil, out, nil
}

type writeIn struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: your default sandbox)"`
	Path      string `json:"path" jsonschema:"the file's path (relative to the home)"`
	Content   string `json:"content" jsonschema:"the new content"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64"`
}

type writeOut struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	Size      int64  `json:"size"`
	SHA256    string `json:"sha256"`
}

func (t *tools) writeFile(ctx context.Context, _ *sdk.CallToolRequest, in writeIn) (*sdk.CallToolResult, writeOut, error) {
	var b []byte
	switch in.Encoding {
	case "", "utf-8", "utf8":
		b = []byte(in.Content)
	case "base64":
		var err error
		if b, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return nil, writeOut{}, errors.New("content is not valid base64")
		}
	default:
		return nil, writeOut{}, errors.New("encoding must be utf-8 or base64")
	}
	if len(b) > maxFileBytes {
		return nil, writeOut{}, fmt.Errorf("content is larger than %d bytes", maxFileBytes)
	}
	id, err := t.sandboxOf(ctx, in.SandboxID)
	if err != nil {
		return nil, writeOut{}, err
	}
	fi, err := t.k.c.WriteFile(ctx, id, in.Path, bytes.NewReader(b))
	if err != nil {
		return nil, writeOut{}, err
	}
	return nil, writeOut{SandboxID: id, Path: fi.Path, Size: fi.Size, SHA256: fi.SHA256}, nil
}

type editIn struct {
	SandboxID  string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: your default sandbox)"`
	Path       string `json:"path" jsonschema:"the file's path (relative to the home)"`
	OldStr     string `json:"old_str" jsonschema:"the exact text to replace"`
	NewStr     string `json:"new_str" jsonschema:"the text to put in its place"`
	ReplaceAll bool   `json:"replace_all,omitempty" jsonschema:"replace every occurrence, not only a single one"`
}

type editOut struct {
	SandboxID    string `json:"sandbox_id"`
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
}

func (t *tools) editFile(ctx context.Context, _ *sdk.CallToolRequest, in editIn) (*sdk.CallToolResult, editOut, error) {
	if in.OldStr == "" {
		return nil, editOut{}, errors.New("old_str must not be empty")
	}
	id, err := t.sandboxOf(ctx, in.SandboxID)
	if err != nil {
		return nil, editOut{}, err
	}
	b, err := t.read(ctx, id, in.Path)
	if err != nil {
		return nil, editOut{}, err
	}
	if !utf8.Valid(b) {
		return nil, editOut{}, fmt.Errorf("%s is not UTF-8 text", in.Path)
	}
	n := strings.Count(string(b), in.OldStr)
	switch {
	case n == 0:
		return nil, editOut{}, fmt.Errorf("old_str does not appear in %s; it must match exactly, whitespace included", in.Path)
	case n > 1 && !in.ReplaceAll:
		return nil, editOut{}, fmt.Errorf("old_str appears %d times in %s; make it unique with more context, or set replace_all", n, in.Path)
	}
	s := strings.Replace(string(b), in.OldStr, in.NewStr, map[bool]int{true: -1, false: 1}[in.ReplaceAll])
	if len(s) > maxFileBytes {
		return nil, editOut{}, fmt.Errorf("the edited file would be larger than %d bytes", maxFileBytes)
	}
	if _, err := t.k.c.WriteFile(ctx, id, in.Path, strings.NewReader(s)); err != nil {
		return nil, editOut{}, err
	}
	if !in.ReplaceAll {
		n = 1
	}
	return nil, editOut{SandboxID: id, Path: in.Path, Replacements: n}, nil
}

type listIn struct {
	SandboxID string `json:"sandbox_id,omitempty" jsonschema:"the sandbox (default: your default sandbox)"`
	Path      string `json:"path,omitempty" jsonschema:"the directory (default: the home)"`
	Depth     int    `json:"depth,omitempty" jsonschema:"how deep to list (default 1)"`
}

type entryOut struct {
	Name string `json:"name"`
	Path string `json:"path"`
	Type string `json:"type"`
	Size int64  `json:"size"`
}

type filesOut struct {
	SandboxID string     `json:"sandbox_id"`
	Entries   []entryOut `json:"entries"`
	Truncated bool       `json:"truncated,omitempty"`
}

func (t *tools) listFiles(ctx context.Context, _ *sdk.CallToolRequest, in listIn) (*sdk.CallToolResult, filesOut, error) {
	id, err := t.sandboxOf(ctx, in.SandboxID)
	if err != nil {
		return nil, filesOut{}, err
	}
	p := in.Path
	if p == "" {
		p = "."
	}
	entries, truncated, err := t.k.c.ListDir(ctx, id, p, max(in.Depth, 1))
	if err != nil {
		return nil, filesOut{}, err
	}
	out := filesOut{SandboxID: id, Entries: []entryOut{}, Truncated: truncated}
	for _, e := range entries {
		out.Entries = append(out.Entries, entryOut{Name: e.Name, Path: e.Path, Type: e.Type, Size: e.Size})
	}
	return nil, out, nil
}

type programIn struct {
	Language string   `json:"language,omitempty" jsonschema:"python (default), javascript or bash"`
	Code     string   `json:"code" jsonschema:"the program"`
	Tools    []string `json:"tools,omitempty" jsonschema:"gateway tools its code may call"`
	Toolsets []string `json:"toolsets,omitempty" jsonschema:"gateway toolsets its code may call"`
	TimeoutS int64    `json:"timeout_s,omitempty" jsonschema:"kill it after this many seconds (default 60)"`
	Template string   `json:"template,omitempty" jsonschema:"the sandbox's template (default: the server's)"`
}

type toolCallOut struct {
	Tool       string  `json:"tool"`
	Outcome    string  `json:"outcome"`
	Stage      string  `json:"stage,omitempty"`
	Reason     string  `json:"reason,omitempty"`
	DurationMS float64 `json:"duration_ms"`
}

type programOut struct {
	ExitCode  int           `json:"exit_code"`
	Status    string        `json:"status"`
	Stdout    string        `json:"stdout"`
	Stderr    string        `json:"stderr"`
	ToolCalls []toolCallOut `json:"tool_calls"`
}

func (t *tools) executeProgram(ctx context.Context, _ *sdk.CallToolRequest, in programIn) (*sdk.CallToolResult, programOut, error) {
	lang := in.Language
	if lang == "" {
		lang = client.LangPython
	}
	res, err := t.k.c.RunOnce(ctx, client.RunRequest{Language: lang, Code: in.Code, Tools: in.Tools, Toolsets: in.Toolsets,
		Timeout: time.Duration(in.TimeoutS) * time.Second, Template: in.Template}, nil)
	if err != nil {
		return nil, programOut{}, err
	}
	out := programOut{ExitCode: res.ExitCode, Status: res.Status, Stdout: textOf(string(res.Stdout), maxOutputText),
		Stderr: textOf(string(res.Stderr), maxOutputText), ToolCalls: []toolCallOut{}}
	for _, c := range res.ToolCalls {
		out.ToolCalls = append(out.ToolCalls, toolCallOut{Tool: c.Tool, Outcome: c.Outcome, Stage: c.Stage, Reason: c.Reason, DurationMS: c.DurationMS})
	}
	return nil, out, nil
}
