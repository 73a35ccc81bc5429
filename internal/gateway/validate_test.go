package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestValidName(t *testing.T) {
	for _, name := range []string{"a", "get_team_members", "x1", "a_", strings.Repeat("a", 64), "calls", "match", "type"} {
		if err := ValidName(name); err != nil {
			t.Errorf("ValidName(%q) = %v, want nil", name, err)
		}
	}
	for _, name := range []string{"", "A", "Get", "1a", "_a", "a-b", "a.b", "a b", "é", strings.Repeat("a", 65),
		"class", "def", "lambda", "import", "return", "await", "async", "function", "delete", "new", "typeof",
		"null", "true", "let", "yield", "eval", "arguments", "constructor", "call"} {
		err := ValidName(name)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("ValidName(%q) = %v, want invalid argument", name, err)
		}
	}
}

// goodTool is a valid HTTP tool each case of TestToolValidate changes.
func goodTool() Tool {
	return Tool{
		Name:         "get_expenses",
		Description:  "Expenses of one employee in a quarter.",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"employee_id":{"type":"string"},"quarter":{"$ref":"#/$defs/q"}},"required":["employee_id"],"$defs":{"q":{"enum":["Q1","Q2","Q3","Q4"]}}}`),
		OutputSchema: json.RawMessage(`{"type":"array","items":{"type":"object"}}`),
		Upstream: Upstream{Kind: UpstreamHTTP, HTTP: &HTTPUpstream{
			Method:  "GET",
			URL:     "https://expenses.example.com/v1/employees/{args.employee_id}/expenses?q={args.quarter}",
			Headers: map[string]string{"Authorization": "Bearer {secret.EXPENSES_TOKEN}", "X-Employee": "{args.employee_id}"},
		}},
		Governance: Governance{ReadOnly: true, TimeoutS: 10, RatePerMinute: 600, MaxCallsPerSandbox: 1000, MaxConcurrent: 10,
			Redact: []string{"employee_id"}},
	}
}

func TestToolValidate(t *testing.T) {
	ok := []struct {
		name string
		mut  func(*Tool)
	}{
		{"as is", func(*Tool) {}},
		{"no output schema", func(tl *Tool) { tl.OutputSchema = nil }},
		{"null output schema", func(tl *Tool) { tl.OutputSchema = json.RawMessage("null") }},
		{"caller upstream", func(tl *Tool) { tl.Upstream = Upstream{Kind: UpstreamCaller} }},
		{"draft-07 by $schema", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"$schema":"http://json-schema.org/draft-07/schema#","type":"object","definitions":{"a":{"type":"string"}},"properties":{"a":{"$ref":"#/definitions/a"}}}`)
		}},
		{"ref by $id within the document", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"$id":"https://schemas.example.com/in.json","type":"object","properties":{"a":{"$ref":"#/$defs/a"}},"$defs":{"a":{"type":"integer"}}}`)
		}},
		{"json body template with braces", func(tl *Tool) {
			tl.Upstream.HTTP.Method = "POST"
			tl.Upstream.HTTP.Body = `{"query": {"employee": {args.employee_id}, "filter": {}}}`
		}},
		{"delete with body", func(tl *Tool) { tl.Upstream.HTTP.Method, tl.Upstream.HTTP.Body = "DELETE", `{"id":{args.employee_id}}` }},
		{"zero governance", func(tl *Tool) { tl.Governance = Governance{} }},
		{"largest caps", func(tl *Tool) {
			tl.Governance = Governance{TimeoutS: MaxTimeoutS, RatePerMinute: MaxRatePerMinute, MaxCallsPerSandbox: MaxCallsPerSandbox, MaxConcurrent: MaxConcurrent}
		}},
		{"longest description", func(tl *Tool) { tl.Description = strings.Repeat("d", MaxDescriptionBytes) }},
		{"http scheme, port, placeholder in path", func(tl *Tool) { tl.Upstream.HTTP.URL = "http://127.0.0.1:8080/{args.a}" }},
		{"32 headers", func(tl *Tool) {
			tl.Upstream.HTTP.Headers = map[string]string{}
			for i := range MaxHeaders {
				tl.Upstream.HTTP.Headers[fmt.Sprintf("X-H%d", i)] = "v"
			}
		}},
	}
	for _, c := range ok {
		tl := goodTool()
		c.mut(&tl)
		if err := tl.Validate(); err != nil {
			t.Errorf("%s: Validate() = %v, want nil", c.name, err)
		}
	}

	bad := []struct {
		name, want string // want: a part of the message, naming the field
		mut        func(*Tool)
	}{
		{"bad name", "tool name", func(tl *Tool) { tl.Name = "Get-Expenses" }},
		{"keyword name", "reserved", func(tl *Tool) { tl.Name = "import" }},
		{"long description", "description", func(tl *Tool) { tl.Description = strings.Repeat("d", MaxDescriptionBytes+1) }},
		{"bad utf8 description", "description", func(tl *Tool) { tl.Description = "\xff" }},
		{"no input schema", "input_schema is required", func(tl *Tool) { tl.InputSchema = nil }},
		{"null input schema", "input_schema is required", func(tl *Tool) { tl.InputSchema = json.RawMessage("null") }},
		{"input schema true", "input_schema: must be a JSON Schema written as a JSON object", func(tl *Tool) { tl.InputSchema = json.RawMessage("true") }},
		{"input schema not object type", `input_schema: must have "type": "object"`, func(tl *Tool) { tl.InputSchema = json.RawMessage(`{"type":"string"}`) }},
		{"input schema no type", `input_schema: must have "type": "object"`, func(tl *Tool) { tl.InputSchema = json.RawMessage(`{"properties":{}}`) }},
		{"input schema bad JSON", "input_schema: must be a JSON Schema", func(tl *Tool) { tl.InputSchema = json.RawMessage(`{"type":"object"`) }},
		{"input schema invalid keyword", "input_schema: schema", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"strin"}}}`)
		}},
		{"input schema bad pattern", "input_schema: schema", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"pattern":"("}}}`)
		}},
		{"input schema missing local ref", "input_schema: schema", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"$ref":"#/$defs/nope"}}}`)
		}},
		{"input schema too large", "more than 65536", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","description":"` + strings.Repeat("x", MaxSchemaBytes) + `"}`)
		}},
		{"output schema array", "output_schema: must be a JSON Schema written as a JSON object", func(tl *Tool) { tl.OutputSchema = json.RawMessage(`[]`) }},
		{"output schema bad", "output_schema: schema", func(tl *Tool) { tl.OutputSchema = json.RawMessage(`{"minimum":"x"}`) }},
		{"remote $schema", "input_schema: schema", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"$schema":"https://schemas.example.com/meta.json","type":"object"}`)
		}},
		{"relative ref against $id", "input_schema: schema", func(tl *Tool) {
			tl.InputSchema = json.RawMessage(`{"$id":"https://schemas.example.com/in.json","type":"object","properties":{"a":{"$ref":"other.json"}}}`)
		}},
		{"no kind", "upstream.kind is required", func(tl *Tool) { tl.Upstream.Kind = "" }},
		{"unknown kind", "upstream.kind", func(tl *Tool) { tl.Upstream.Kind = "ftp" }},
		{"http without http", "upstream.http is required", func(tl *Tool) { tl.Upstream.HTTP = nil }},
		{"caller with http", "upstream.http must be empty", func(tl *Tool) { tl.Upstream.Kind = UpstreamCaller }},
		{"bad method", "upstream.http.method", func(tl *Tool) { tl.Upstream.HTTP.Method = "get" }},
		{"no url", "upstream.http.url is required", func(tl *Tool) { tl.Upstream.HTTP.URL = "" }},
		{"long url", "upstream.http.url is longer", func(tl *Tool) {
			tl.Upstream.HTTP.URL = "https://a.example.com/" + strings.Repeat("a", MaxURLBytes)
		}},
		{"relative url", "absolute http or https", func(tl *Tool) { tl.Upstream.HTTP.URL = "/v1/x" }},
		{"file url", "absolute http or https", func(tl *Tool) { tl.Upstream.HTTP.URL = "file:///etc/passwd" }},
		{"ftp url", "absolute http or https", func(tl *Tool) { tl.Upstream.HTTP.URL = "ftp://a.example.com/x" }},
		{"placeholder host", "host", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://{args.host}/x" }},
		{"placeholder in host suffix", "host", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://api.example.com{args.x}/x" }},
		{"placeholder scheme", "absolute http or https", func(tl *Tool) { tl.Upstream.HTTP.URL = "{args.u}" }},
		{"userinfo", "user or password", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://u:p@a.example.com/x" }},
		{"fragment", "fragment", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://a.example.com/x#frag" }},
		{"secret in url", "secrets may be used only in header values", func(tl *Tool) {
			tl.Upstream.HTTP.URL = "https://a.example.com/x?key={secret.KEY}"
		}},
		{"unclosed placeholder", "no closing", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://a.example.com/{args.x" }},
		{"bad arg name", "{args.a-b}", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://a.example.com/{args.a-b}" }},
		{"empty arg name", "{args.}", func(tl *Tool) { tl.Upstream.HTTP.URL = "https://a.example.com/{args.}" }},
		{"bad secret name", "{secret.1x}", func(tl *Tool) { tl.Upstream.HTTP.Headers["X-Key"] = "{secret.1x}" }},
		{"too many headers", "upstream.http.headers has 33", func(tl *Tool) {
			for i := range MaxHeaders {
				tl.Upstream.HTTP.Headers[fmt.Sprintf("X-H%d", i)] = "v"
			}
		}},
		{"bad header name", "not a valid header name", func(tl *Tool) { tl.Upstream.HTTP.Headers["X Bad"] = "v" }},
		{"empty header name", "not a valid header name", func(tl *Tool) { tl.Upstream.HTTP.Headers[""] = "v" }},
		{"host header", "set by the gateway", func(tl *Tool) { tl.Upstream.HTTP.Headers["Host"] = "evil.example.com" }},
		{"content-length header", "set by the gateway", func(tl *Tool) { tl.Upstream.HTTP.Headers["content-length"] = "1" }},
		{"header twice", "given twice", func(tl *Tool) { tl.Upstream.HTTP.Headers["authorization"] = "x" }},
		{"header newline", "control character", func(tl *Tool) { tl.Upstream.HTTP.Headers["X-A"] = "a\r\nX-B: b" }},
		{"long header", "longer than", func(tl *Tool) { tl.Upstream.HTTP.Headers["X-A"] = strings.Repeat("a", MaxHeaderValueBytes+1) }},
		{"body on GET", "GET request has no body", func(tl *Tool) { tl.Upstream.HTTP.Body = "{}" }},
		{"secret in body", "upstream.http.body: {secret.T}", func(tl *Tool) {
			tl.Upstream.HTTP.Method, tl.Upstream.HTTP.Body = "POST", `{"token":"{secret.T}"}`
		}},
		{"long body", "upstream.http.body", func(tl *Tool) {
			tl.Upstream.HTTP.Method, tl.Upstream.HTTP.Body = "POST", strings.Repeat("b", MaxBodyBytes+1)
		}},
		{"timeout negative", "governance.timeout_s", func(tl *Tool) { tl.Governance.TimeoutS = -1 }},
		{"timeout high", "governance.timeout_s", func(tl *Tool) { tl.Governance.TimeoutS = MaxTimeoutS + 1 }},
		{"rate negative", "governance.rate_per_minute", func(tl *Tool) { tl.Governance.RatePerMinute = -1 }},
		{"rate high", "governance.rate_per_minute", func(tl *Tool) { tl.Governance.RatePerMinute = MaxRatePerMinute + 1 }},
		{"calls high", "governance.max_calls_per_sandbox", func(tl *Tool) { tl.Governance.MaxCallsPerSandbox = MaxCallsPerSandbox + 1 }},
		{"concurrency negative", "governance.max_concurrent", func(tl *Tool) { tl.Governance.MaxConcurrent = -5 }},
		{"redact many", "governance.redact has 33", func(tl *Tool) { tl.Governance.Redact = make([]string, MaxRedact+1) }},
		{"redact bad name", "governance.redact[1]", func(tl *Tool) { tl.Governance.Redact = []string{"a", "a.b"} }},
		{"redact twice", "twice", func(tl *Tool) { tl.Governance.Redact = []string{"a", "a"} }},
	}
	for _, c := range bad {
		tl := goodTool()
		tl.Upstream.HTTP.Headers = map[string]string{"Authorization": "Bearer {secret.EXPENSES_TOKEN}"}
		c.mut(&tl)
		err := tl.Validate()
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate() = %v, want invalid argument saying %q", c.name, err, c.want)
		}
	}
}

// TestSchemaNeverLoads: a schema that refers to an HTTP URL or a file
// fails to compile, and nothing is fetched or read.
func TestSchemaNeverLoads(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"type":"string"}`))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "s.json")
	if err := os.WriteFile(file, []byte(`{"type":"string"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{srv.URL + "/s.json", "file://" + file, file, "s.json", srv.URL + "/s.json#/x"} {
		for _, doc := range []string{
			fmt.Sprintf(`{"type":"object","properties":{"a":{"$ref":%q}}}`, ref),
			fmt.Sprintf(`{"$schema":%q,"type":"object"}`, ref),
			fmt.Sprintf(`{"type":"object","properties":{"a":{"$dynamicRef":%q}}}`, ref),
		} {
			_, err := CompileSchema(json.RawMessage(doc))
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("CompileSchema(%s) = %v, want invalid argument", doc, err)
				continue
			}
			if strings.Contains(err.Error(), schemaBase) {
				t.Errorf("error %q names the internal schema URL", err)
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("the schema server was asked %d times, want 0", n)
	}
}

func TestCompileSchemaValidates(t *testing.T) {
	s, err := CompileSchema(goodTool().InputSchema)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args string
		ok   bool
	}{
		{`{"employee_id":"e1","quarter":"Q3"}`, true},
		{`{"employee_id":"e1"}`, true},
		{`{"quarter":"Q3"}`, false},
		{`{"employee_id":1}`, false},
		{`{"employee_id":"e1","quarter":"Q5"}`, false},
	} {
		v, err := DecodeJSON([]byte(c.args))
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Validate(v); (err == nil) != c.ok {
			t.Errorf("Validate(%s) = %v, want ok=%v", c.args, err, c.ok)
		}
	}
	if _, err := DecodeJSON([]byte(`{"a":1} {}`)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("DecodeJSON of two values = %v, want invalid argument", err)
	}
}

func TestGovernanceTimeout(t *testing.T) {
	if got := (Governance{}).Timeout(); got != DefaultTimeoutS {
		t.Errorf("default timeout = %d, want %d", got, DefaultTimeoutS)
	}
	if got := (Governance{TimeoutS: 7}).Timeout(); got != 7 {
		t.Errorf("timeout = %d, want 7", got)
	}
}

func TestToolsetValidate(t *testing.T) {
	many := make([]string, MaxToolsetTools)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	for _, s := range []Toolset{
		{Name: "expenses", Tools: []string{"get_expenses", "list_team"}},
		{Name: "empty"},
		{Name: "many", Tools: many},
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("Validate(%s) = %v", s.Name, err)
		}
	}
	for _, c := range []struct {
		s    Toolset
		want string
	}{
		{Toolset{Name: "Bad"}, "toolset name"},
		{Toolset{Name: "class"}, "reserved"},
		{Toolset{Name: "x", Tools: []string{"a", "B"}}, "tools[1]"},
		{Toolset{Name: "x", Tools: []string{"a", "a"}}, "twice"},
		{Toolset{Name: "x", Tools: append(many, "one_more")}, "more than 256"},
	} {
		err := c.s.Validate()
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%s) = %v, want invalid argument saying %q", c.s.Name, err, c.want)
		}
	}
}

// FuzzToolValidate: Validate never panics on any tool a request body can
// decode to.
func FuzzToolValidate(f *testing.F) {
	b, _ := json.Marshal(goodTool())
	f.Add(b)
	f.Add([]byte(`{"name":"a","input_schema":{"type":"object","properties":{"a":{"$ref":"#"}}},"upstream":{"kind":"caller"}}`))
	f.Add([]byte(`{"name":"a","input_schema":{"type":"object"},"upstream":{"kind":"http","http":{"method":"POST","url":"https://x/{args.a}{","body":"{secret.{args.x}}"}}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tl Tool
		if json.Unmarshal(data, &tl) != nil {
			return
		}
		if err := tl.Validate(); err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("Validate() = %v, not invalid argument", err)
		}
	})
}
