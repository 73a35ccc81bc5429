package gateway

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
)

// Caps on a tool and a toolset.
const (
	MaxNameBytes        = 64
	MaxDescriptionBytes = 4 << 10
	MaxURLBytes         = 2 << 10
	MaxHeaders          = 32
	MaxHeaderValueBytes = 4 << 10
	MaxBodyBytes        = 64 << 10
	MaxTimeoutS         = 300
	DefaultTimeoutS     = 30
	MaxRatePerMinute    = 100_000
	MaxCallsPerSandbox  = 1_000_000
	MaxConcurrent       = 1_000
	MaxRedact           = 32
	// MaxToolsetTools caps the tools of one toolset, and the tools one
	// sandbox is granted (Resolve).
	MaxToolsetTools = 256
)

// namePattern is what a tool's or toolset's name looks like.
var namePattern = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// reservedNames are the words a tool may not be named, since code calls
// a tool by its name: the keywords of Python and the reserved words of
// JavaScript (strict mode and modules included), and the names the
// in-sandbox modules themselves define (call).
var reservedNames = func() map[string]bool {
	m := map[string]bool{}
	for _, w := range strings.Fields(`
		and as assert async await break class continue def del elif else except finally for from
		global if import in is lambda nonlocal not or pass raise return try while with yield
		case catch const debugger default delete do enum export extends false function instanceof
		let new null super switch this throw true typeof var void
		implements interface package private protected public static arguments eval
		constructor prototype call`) {
		m[w] = true
	}
	return m
}()

// ValidName reports a name that cannot name a tool or a toolset: it must
// be a lower-case identifier (a letter, then letters, digits or '_', at
// most 64 bytes) that is not a Python or JavaScript keyword.
func ValidName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("name %q: must be 1-%d lower-case letters, digits or '_', starting with a letter: %w",
			clip(name), MaxNameBytes, errdefs.ErrInvalidArgument)
	}
	if reservedNames[name] {
		return fmt.Errorf("name %q is a reserved word of Python or JavaScript: %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// argNamePattern is what the NAME of an {args.NAME} placeholder, and an
// entry of Governance.Redact, look like: an argument's field name.
var argNamePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// Validate reports the first thing wrong with t, naming its field.
// Owner, CreatedAt and UpdatedAt are the registry's and not checked.
func (t Tool) Validate() error {
	if err := ValidName(t.Name); err != nil {
		return fmt.Errorf("tool %w", err)
	}
	if len(t.Description) > MaxDescriptionBytes || !utf8.ValidString(t.Description) || strings.ContainsRune(t.Description, 0) {
		return fmt.Errorf("description must be at most %d bytes of UTF-8 text: %w", MaxDescriptionBytes, errdefs.ErrInvalidArgument)
	}
	if len(bytes.TrimSpace(t.InputSchema)) == 0 || bytes.Equal(bytes.TrimSpace(t.InputSchema), []byte("null")) {
		return fmt.Errorf("input_schema is required: %w", errdefs.ErrInvalidArgument)
	}
	if err := checkSchema(t.InputSchema, true); err != nil {
		return fmt.Errorf("input_schema: %w", err)
	}
	if len(t.OutputSchema) > 0 && !bytes.Equal(bytes.TrimSpace(t.OutputSchema), []byte("null")) {
		if err := checkSchema(t.OutputSchema, false); err != nil {
			return fmt.Errorf("output_schema: %w", err)
		}
	}
	if err := t.Upstream.Validate(); err != nil {
		return err
	}
	return t.Governance.Validate()
}

// checkSchema reports a schema that is not a JSON object, that does not
// compile, or (when input) that does not describe a JSON object.
func checkSchema(raw json.RawMessage, input bool) error {
	if len(raw) > MaxSchemaBytes {
		return fmt.Errorf("schema is %d bytes, more than %d: %w", len(raw), MaxSchemaBytes, errdefs.ErrInvalidArgument)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return fmt.Errorf("must be a JSON Schema written as a JSON object: %w", errdefs.ErrInvalidArgument)
	}
	if input {
		var typ string
		if err := json.Unmarshal(obj["type"], &typ); err != nil || typ != "object" {
			return fmt.Errorf(`must have "type": "object" (the arguments are a JSON object): %w`, errdefs.ErrInvalidArgument)
		}
	}
	if _, err := CompileSchema(raw); err != nil {
		return err
	}
	return nil
}

// Validate reports the first thing wrong with u, naming its field.
func (u Upstream) Validate() error {
	kinds := fmt.Sprintf("%q, %q or %q", UpstreamHTTP, UpstreamCaller, UpstreamMCP)
	switch u.Kind {
	case UpstreamHTTP:
		if u.HTTP == nil {
			return fmt.Errorf("upstream.http is required for kind %q: %w", UpstreamHTTP, errdefs.ErrInvalidArgument)
		}
		if u.MCP != nil {
			return fmt.Errorf("upstream.mcp must be empty for kind %q: %w", UpstreamHTTP, errdefs.ErrInvalidArgument)
		}
		return u.HTTP.Validate()
	case UpstreamCaller:
		if u.HTTP != nil {
			return fmt.Errorf("upstream.http must be empty for kind %q: %w", UpstreamCaller, errdefs.ErrInvalidArgument)
		}
		if u.MCP != nil {
			return fmt.Errorf("upstream.mcp must be empty for kind %q: %w", UpstreamCaller, errdefs.ErrInvalidArgument)
		}
		return nil
	case UpstreamMCP:
		if u.MCP == nil {
			return fmt.Errorf("upstream.mcp is required for kind %q: %w", UpstreamMCP, errdefs.ErrInvalidArgument)
		}
		if u.HTTP != nil {
			return fmt.Errorf("upstream.http must be empty for kind %q: %w", UpstreamMCP, errdefs.ErrInvalidArgument)
		}
		return u.MCP.Validate()
	case "":
		return fmt.Errorf("upstream.kind is required (%s): %w", kinds, errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("upstream.kind %q: must be %s: %w", clip(u.Kind), kinds, errdefs.ErrInvalidArgument)
}

// methods are the HTTP methods an upstream may use.
var methods = []string{"GET", "POST", "PUT", "PATCH", "DELETE"}

// forbiddenHeaders are headers the HTTP client sets itself (framing,
// connection and host), which a tool may not set.
var forbiddenHeaders = map[string]bool{
	"host": true, "content-length": true, "transfer-encoding": true, "connection": true,
	"keep-alive": true, "upgrade": true, "te": true, "trailer": true,
	"proxy-authorization": true, "proxy-connection": true,
}

// urlProbe replaces each placeholder of the URL when it is parsed, to
// find where placeholders are (see Validate).
const urlProbe = "airlockplaceholder"

// Validate reports the first thing wrong with h, naming its field. The
// URL is an absolute http or https URL whose scheme and host are fixed:
// placeholders ({args.NAME} only) may stand in its path and query, never
// its host, so that a caller's arguments cannot choose where the request
// goes; it carries no user:password (credentials belong in a header
// from a secret). Header values may use {args.NAME} and {secret.NAME};
// the body {args.NAME} only.
func (h HTTPUpstream) Validate() error {
	if !slices.Contains(methods, h.Method) {
		return fmt.Errorf("upstream.http.method %q: must be one of %s: %w", clip(h.Method), strings.Join(methods, ", "), errdefs.ErrInvalidArgument)
	}
	if h.URL == "" {
		return fmt.Errorf("upstream.http.url is required: %w", errdefs.ErrInvalidArgument)
	}
	if len(h.URL) > MaxURLBytes {
		return fmt.Errorf("upstream.http.url is longer than %d bytes: %w", MaxURLBytes, errdefs.ErrInvalidArgument)
	}
	probe, err := checkTemplate("upstream.http.url", h.URL, false)
	if err != nil {
		return err
	}
	u, err := url.Parse(probe)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("upstream.http.url must be an absolute http or https URL: %w", errdefs.ErrInvalidArgument)
	}
	if strings.Contains(u.Host, urlProbe) {
		return fmt.Errorf("upstream.http.url: a placeholder may not stand in the host: %w", errdefs.ErrInvalidArgument)
	}
	if u.User != nil {
		return fmt.Errorf("upstream.http.url may not carry a user or password (put credentials in a header from a secret): %w", errdefs.ErrInvalidArgument)
	}
	if u.Fragment != "" || strings.Contains(probe, "#") {
		return fmt.Errorf("upstream.http.url may not have a fragment: %w", errdefs.ErrInvalidArgument)
	}
	if len(h.Headers) > MaxHeaders {
		return fmt.Errorf("upstream.http.headers has %d entries, more than %d: %w", len(h.Headers), MaxHeaders, errdefs.ErrInvalidArgument)
	}
	names := make([]string, 0, len(h.Headers))
	for name := range h.Headers {
		names = append(names, name)
	}
	slices.Sort(names) // the first error is the same every time
	seen := map[string]bool{}
	for _, name := range names {
		value := h.Headers[name]
		if !validHeaderName(name) {
			return fmt.Errorf("upstream.http.headers: %q is not a valid header name: %w", clip(name), errdefs.ErrInvalidArgument)
		}
		lower := strings.ToLower(name)
		if forbiddenHeaders[lower] {
			return fmt.Errorf("upstream.http.headers: %s is set by the gateway, not by a tool: %w", name, errdefs.ErrInvalidArgument)
		}
		if seen[lower] {
			return fmt.Errorf("upstream.http.headers: %s is given twice (header names ignore case): %w", name, errdefs.ErrInvalidArgument)
		}
		seen[lower] = true
		where := "upstream.http.headers." + name
		if len(value) > MaxHeaderValueBytes {
			return fmt.Errorf("%s is longer than %d bytes: %w", where, MaxHeaderValueBytes, errdefs.ErrInvalidArgument)
		}
		if strings.ContainsFunc(value, func(r rune) bool { return r < 0x20 && r != '\t' || r == 0x7f }) || !utf8.ValidString(value) {
			return fmt.Errorf("%s has a control character: %w", where, errdefs.ErrInvalidArgument)
		}
		if _, err := checkTemplate(where, value, true); err != nil {
			return err
		}
	}
	if h.Body != "" {
		if h.Method == "GET" {
			return fmt.Errorf("upstream.http.body: a GET request has no body: %w", errdefs.ErrInvalidArgument)
		}
		if len(h.Body) > MaxBodyBytes || !utf8.ValidString(h.Body) {
			return fmt.Errorf("upstream.http.body must be at most %d bytes of UTF-8 text: %w", MaxBodyBytes, errdefs.ErrInvalidArgument)
		}
		if _, err := checkTemplate("upstream.http.body", h.Body, false); err != nil {
			return err
		}
	}
	return nil
}

// validHeaderName reports whether name is an HTTP token (RFC 9110 5.6.2).
func validHeaderName(name string) bool {
	if name == "" || len(name) > 256 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// The placeholders of a template.
const (
	argsPrefix   = "{args."
	secretPrefix = "{secret."
)

// checkTemplate reports a malformed placeholder of s, where is the
// field's name: every "{args." must close with "}" around a valid
// argument name, every "{secret." (allowed only when secretsOK) around a
// valid secret name. Other braces are text (a JSON body has many). It
// returns s with each placeholder replaced by urlProbe.
func checkTemplate(where, s string, secretsOK bool) (string, error) {
	var out strings.Builder
	rest := s
	for {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			out.WriteString(rest)
			return out.String(), nil
		}
		out.WriteString(rest[:i])
		rest = rest[i:]
		var prefix string
		switch {
		case strings.HasPrefix(rest, argsPrefix):
			prefix = argsPrefix
		case strings.HasPrefix(rest, secretPrefix):
			prefix = secretPrefix
		default:
			out.WriteByte('{')
			rest = rest[1:]
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return "", fmt.Errorf("%s: %s... has no closing '}': %w", where, prefix, errdefs.ErrInvalidArgument)
		}
		name := rest[len(prefix):end]
		if prefix == argsPrefix {
			if !argNamePattern.MatchString(name) {
				return "", fmt.Errorf("%s: {args.%s}: an argument's name is 1-64 letters, digits or '_', not starting with a digit: %w",
					where, clip(name), errdefs.ErrInvalidArgument)
			}
		} else {
			if !secretsOK {
				return "", fmt.Errorf("%s: {secret.%s}: secrets may be used only in header values: %w", where, clip(name), errdefs.ErrInvalidArgument)
			}
			if err := secrets.ValidateName(name); err != nil {
				return "", fmt.Errorf("%s: {secret.%s}: %w", where, clip(name), err)
			}
		}
		out.WriteString(urlProbe)
		rest = rest[end+1:]
	}
}

// Validate reports the first setting of g out of range, naming its field.
func (g Governance) Validate() error {
	for _, f := range []struct {
		name      string
		v, lo, hi int
	}{
		{"timeout_s", g.TimeoutS, 0, MaxTimeoutS},
		{"rate_per_minute", g.RatePerMinute, 0, MaxRatePerMinute},
		{"max_calls_per_sandbox", g.MaxCallsPerSandbox, 0, MaxCallsPerSandbox},
		{"max_concurrent", g.MaxConcurrent, 0, MaxConcurrent},
	} {
		if f.v < f.lo || f.v > f.hi {
			return fmt.Errorf("governance.%s %d: must be %d-%d (0: the default): %w", f.name, f.v, f.lo, f.hi, errdefs.ErrInvalidArgument)
		}
	}
	if len(g.Redact) > MaxRedact {
		return fmt.Errorf("governance.redact has %d names, more than %d: %w", len(g.Redact), MaxRedact, errdefs.ErrInvalidArgument)
	}
	for i, name := range g.Redact {
		if !argNamePattern.MatchString(name) {
			return fmt.Errorf("governance.redact[%d] %q: an argument's name is 1-64 letters, digits or '_', not starting with a digit: %w",
				i, clip(name), errdefs.ErrInvalidArgument)
		}
		if slices.Contains(g.Redact[:i], name) {
			return fmt.Errorf("governance.redact names %q twice: %w", name, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}

// Timeout is the tool's upstream timeout in seconds: TimeoutS, or
// DefaultTimeoutS when it is 0.
func (g Governance) Timeout() int {
	if g.TimeoutS == 0 {
		return DefaultTimeoutS
	}
	return g.TimeoutS
}

// Validate reports the first thing wrong with s, naming its field: its
// name, and its tools (at most MaxToolsetTools valid names, none twice).
// Whether the tools exist is the registry's check.
func (s Toolset) Validate() error {
	if err := ValidName(s.Name); err != nil {
		return fmt.Errorf("toolset %w", err)
	}
	if len(s.Tools) > MaxToolsetTools {
		return fmt.Errorf("tools has %d names, more than %d: %w", len(s.Tools), MaxToolsetTools, errdefs.ErrInvalidArgument)
	}
	seen := make(map[string]bool, len(s.Tools))
	for i, name := range s.Tools {
		if err := ValidName(name); err != nil {
			return fmt.Errorf("tools[%d]: tool %w", i, err)
		}
		if seen[name] {
			return fmt.Errorf("tools names %q twice: %w", name, errdefs.ErrInvalidArgument)
		}
		seen[name] = true
	}
	return nil
}

// clip shortens s for an error message and replaces what is not
// printable text.
func clip(s string) string {
	const max = 64
	if len(s) > max {
		s = s[:max] + "..."
	}
	return strings.Map(func(r rune) rune {
		if r == utf8.RuneError || r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}
