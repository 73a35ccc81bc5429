package gateway

import (
	"encoding/json"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// MCPUpstream is a tool of an upstream MCP server that runs a tool. The
// server is either a command run on the host that speaks MCP on its
// stdin and stdout (Command, Args, Env), as the daemon's user, or a
// Streamable HTTP endpoint (URL, Headers) reached through the gateway's
// SSRF guard. Env and header values may use "{secret.NAME}", replaced
// by the tenant's secret NAME; nothing else is a template (a call's
// arguments go to the upstream tool as its arguments).
//
// What the upstream says of its tool (its description, annotations and
// schemas) is an untrusted hint: the registry pins it when the tool is
// registered (Pinned), every call compares what the upstream lists then
// and is refused if it changed, and the tool's governance (read-only,
// destructive) is Airlock's own, never the upstream's.
type MCPUpstream struct {
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	URL     string            `json:"url,omitempty"`
	Headers map[string]string `json:"headers,omitempty"`
	// Tool is the upstream tool's name; "" means the Airlock tool's.
	Tool string `json:"tool,omitempty"`
	// Pinned is what the upstream said of the tool when it was
	// registered; the registry sets it (see StoreRegistry.SetPinner).
	Pinned *MCPPin `json:"pinned,omitempty"`
}

// MCPPin is what an upstream MCP server said of a tool when it was
// registered: its description, title and annotations as it listed them,
// and the sha256 of its input and output schemas (as JSON with sorted
// keys).
type MCPPin struct {
	Title              string          `json:"title,omitempty"`
	Description        string          `json:"description"`
	Annotations        json.RawMessage `json:"annotations,omitempty"`
	InputSchemaSHA256  string          `json:"input_schema_sha256"`
	OutputSchemaSHA256 string          `json:"output_schema_sha256,omitempty"`
	PinnedAt           time.Time       `json:"pinned_at"`
}

// Caps on an MCP upstream.
const (
	MaxMCPArgs     = 64
	MaxMCPArgBytes = 4 << 10
	MaxMCPEnv      = 64
	MaxPathBytes   = 4 << 10
	// MaxMCPToolName is the MCP specification's cap on a tool's name.
	MaxMCPToolName = 128
)

// ToolName is the upstream tool's name: Tool, or name (the Airlock
// tool's) when Tool is "".
func (m MCPUpstream) ToolName(name string) string {
	if m.Tool != "" {
		return m.Tool
	}
	return name
}

// Stdio reports whether the upstream is a command run on the host.
func (m MCPUpstream) Stdio() bool { return m.Command != "" }

// mcpToolName is what an MCP tool's name looks like (the specification's
// rule since 2025-11-25).
var mcpToolName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// envName is what an environment variable's name looks like.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)

// mcpManagedHeaders are the headers the MCP transport sets itself.
var mcpManagedHeaders = map[string]bool{
	"accept": true, "content-type": true, "mcp-session-id": true, "mcp-protocol-version": true,
	"last-event-id": true, "mcp-method": true, "mcp-name": true,
}

// Validate reports the first thing wrong with m, naming its field:
// exactly one of command (an absolute, clean path, with args and env)
// and url (an absolute http or https URL without credentials,
// placeholders or fragment, with headers); secrets only as whole
// "{secret.NAME}" placeholders in env and header values; tool, if set,
// an MCP tool name. Pinned is the registry's and not checked.
func (m MCPUpstream) Validate() error {
	const f = "upstream.mcp."
	switch {
	case m.Command == "" && m.URL == "":
		return fmt.Errorf("%scommand (a stdio server run on the host) or %surl (a Streamable HTTP server) is required: %w", f, f, errdefs.ErrInvalidArgument)
	case m.Command != "" && m.URL != "":
		return fmt.Errorf("%scommand and %surl are exclusive: %w", f, f, errdefs.ErrInvalidArgument)
	}
	if m.Tool != "" && !mcpToolName.MatchString(m.Tool) {
		return fmt.Errorf("%stool %q: an MCP tool's name is 1-%d letters, digits, '_', '-' or '.': %w", f, clip(m.Tool), MaxMCPToolName, errdefs.ErrInvalidArgument)
	}
	if m.Stdio() {
		if len(m.Headers) > 0 {
			return fmt.Errorf("%sheaders are for a url; a command takes env: %w", f, errdefs.ErrInvalidArgument)
		}
		return m.validateCommand()
	}
	if len(m.Args) > 0 || len(m.Env) > 0 {
		return fmt.Errorf("%sargs and env are for a command; a url takes headers: %w", f, errdefs.ErrInvalidArgument)
	}
	return m.validateURL()
}

func (m MCPUpstream) validateCommand() error {
	const f = "upstream.mcp."
	c := m.Command
	if len(c) > MaxPathBytes || !utf8.ValidString(c) || strings.ContainsRune(c, 0) {
		return fmt.Errorf("%scommand must be at most %d bytes of text: %w", f, MaxPathBytes, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(c) || filepath.Clean(c) != c {
		return fmt.Errorf("%scommand %q must be an absolute, clean path (no PATH lookup): %w", f, clip(c), errdefs.ErrInvalidArgument)
	}
	if len(m.Args) > MaxMCPArgs {
		return fmt.Errorf("%sargs has %d entries, more than %d: %w", f, len(m.Args), MaxMCPArgs, errdefs.ErrInvalidArgument)
	}
	for i, a := range m.Args {
		if len(a) > MaxMCPArgBytes || !utf8.ValidString(a) || strings.ContainsRune(a, 0) {
			return fmt.Errorf("%sargs[%d] must be at most %d bytes of text: %w", f, i, MaxMCPArgBytes, errdefs.ErrInvalidArgument)
		}
		if strings.Contains(a, secretPrefix) || strings.Contains(a, argsPrefix) {
			// Arguments show in the host's process list; secrets go in env.
			return fmt.Errorf("%sargs[%d]: placeholders are not replaced in args (a secret goes in env, which the process list does not show): %w", f, i, errdefs.ErrInvalidArgument)
		}
	}
	if len(m.Env) > MaxMCPEnv {
		return fmt.Errorf("%senv has %d entries, more than %d: %w", f, len(m.Env), MaxMCPEnv, errdefs.ErrInvalidArgument)
	}
	for _, name := range sortedKeys(m.Env) {
		if !envName.MatchString(name) {
			return fmt.Errorf("%senv: %q is not a valid variable name: %w", f, clip(name), errdefs.ErrInvalidArgument)
		}
		if err := checkSecretTemplate(f+"env."+name, m.Env[name]); err != nil {
			return err
		}
	}
	return nil
}

func (m MCPUpstream) validateURL() error {
	const f = "upstream.mcp."
	if len(m.URL) > MaxURLBytes {
		return fmt.Errorf("%surl is longer than %d bytes: %w", f, MaxURLBytes, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsAny(m.URL, "{}") {
		return fmt.Errorf("%surl may hold no placeholder: %w", f, errdefs.ErrInvalidArgument)
	}
	u, err := url.Parse(m.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("%surl must be an absolute http or https URL: %w", f, errdefs.ErrInvalidArgument)
	}
	if u.User != nil {
		return fmt.Errorf("%surl may not carry a user or password (put credentials in a header from a secret): %w", f, errdefs.ErrInvalidArgument)
	}
	if u.Fragment != "" || strings.Contains(m.URL, "#") {
		return fmt.Errorf("%surl may not have a fragment: %w", f, errdefs.ErrInvalidArgument)
	}
	if len(m.Headers) > MaxHeaders {
		return fmt.Errorf("%sheaders has %d entries, more than %d: %w", f, len(m.Headers), MaxHeaders, errdefs.ErrInvalidArgument)
	}
	seen := map[string]bool{}
	for _, name := range sortedKeys(m.Headers) {
		if !validHeaderName(name) {
			return fmt.Errorf("%sheaders: %q is not a valid header name: %w", f, clip(name), errdefs.ErrInvalidArgument)
		}
		lower := strings.ToLower(name)
		if forbiddenHeaders[lower] || mcpManagedHeaders[lower] {
			return fmt.Errorf("%sheaders: %s is set by the gateway, not by a tool: %w", f, name, errdefs.ErrInvalidArgument)
		}
		if seen[lower] {
			return fmt.Errorf("%sheaders: %s is given twice (header names ignore case): %w", f, name, errdefs.ErrInvalidArgument)
		}
		seen[lower] = true
		if err := checkSecretTemplate(f+"headers."+name, m.Headers[name]); err != nil {
			return err
		}
	}
	return nil
}

// checkSecretTemplate reports what is wrong with value, an env or header
// value of an MCP upstream: its size, a control character, a malformed
// placeholder, or an {args.NAME} (only secrets are replaced there).
func checkSecretTemplate(where, value string) error {
	if len(value) > MaxHeaderValueBytes {
		return fmt.Errorf("%s is longer than %d bytes: %w", where, MaxHeaderValueBytes, errdefs.ErrInvalidArgument)
	}
	if strings.ContainsFunc(value, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) || !utf8.ValidString(value) {
		return fmt.Errorf("%s has a control character: %w", where, errdefs.ErrInvalidArgument)
	}
	if strings.Contains(value, argsPrefix) {
		return fmt.Errorf("%s: only {secret.NAME} may stand here (the call's arguments go to the upstream tool): %w", where, errdefs.ErrInvalidArgument)
	}
	_, err := checkTemplate(where, value, true)
	return err
}

// sortedKeys returns m's keys in order, so that the first error is the
// same every time.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
