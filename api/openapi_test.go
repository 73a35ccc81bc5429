package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/auth"
)

// wireTypes is every object schema with its Go type, and every oneOf
// schema with its branches' types and its reader's.
var wireTypes = []wireType{
	object[Error]("Error", true),
	object[Limits]("Limits", true),
	object[Network]("Network", false),
	object[CommandPolicy]("CommandPolicy", false),
	object[CommandRule]("CommandRule", true),
	object[NetworkCredential]("NetworkCredential", false),
	object[NetworkLimits]("NetworkLimits", false),
	object[NetworkStats]("NetworkStats", true),
	object[NetworkView]("NetworkView", true),
	object[CreateSandboxRequest]("CreateSandboxRequest", false),
	object[Sandbox]("Sandbox", true),
	object[SandboxList]("SandboxList", true),
	object[Health]("Health", true),
	object[SandboxStats]("SandboxStats", true),
	object[StatsCPU]("StatsCPU", true),
	object[StatsMemory]("StatsMemory", true),
	object[StatsPids]("StatsPids", true),
	object[StatsDisk]("StatsDisk", true),
	object[StatsNetwork]("StatsNetwork", true),
	object[TimeoutRequest]("TimeoutRequest", false),
	object[FileEntry]("FileEntry", true),
	object[FileWriteResult]("FileWriteResult", true),
	object[DirListing]("DirListing", true),
	object[AuditRecord]("AuditRecord", true),
	object[AuditList]("AuditList", true),
	object[AuditHead]("AuditHead", true),
	object[AuditCheckpoint]("AuditCheckpoint", true),
	object[AuditCheckpointResponse]("AuditCheckpointResponse", true),
	object[VerifyRequest]("VerifyRequest", false),
	object[VerifyReport]("VerifyReport", true),
	object[Info]("InfoResponse", true),
	object[HostReport]("HostReport", true),
	object[HostCheck]("HostCheck", true),
	object[CreateKeyRequest]("CreateKeyRequest", false),
	object[WhoAmI]("WhoAmI", true),
	object[Key]("Key", true),
	object[CreatedKey]("CreatedKey", true),
	object[KeyList]("KeyList", true),
	object[CreateTenantRequest]("CreateTenantRequest", false),
	object[Tenant]("Tenant", true),
	object[CreatedTenant]("CreatedTenant", true),
	object[TenantList]("TenantList", true),
	object[PutSecretRequest]("PutSecretRequest", false),
	object[Secret]("Secret", true),
	object[SecretList]("SecretList", true),
	object[PutToolRequest]("PutToolRequest", false),
	object[ToolUpstream]("ToolUpstream", false),
	object[ToolHTTP]("ToolHTTP", false),
	object[ToolMCP]("ToolMCP", false),
	object[ToolMCPPin]("ToolMCPPin", true),
	object[CallToolRequest]("CallToolRequest", false),
	object[CallToolResult]("CallToolResult", true),
	object[ToolGovernance]("ToolGovernance", false),
	object[Tool]("Tool", true),
	object[ToolList]("ToolList", true),
	object[PutToolsetRequest]("PutToolsetRequest", false),
	object[Toolset]("Toolset", true),
	object[ToolsetList]("ToolsetList", true),
	object[Approval]("Approval", true),
	object[ApprovalList]("ApprovalList", true),
	object[DecideApprovalRequest]("DecideApprovalRequest", false),
	object[PutPolicyRequest]("PutPolicyRequest", false),
	object[RunRequest]("RunRequest", false),
	object[ToolCallTrace]("ToolCallTrace", true),
	object[RunResult]("RunResult", true),
	object[ToolRequest]("ToolRequest", true),
	object[ToolRequestList]("ToolRequestList", true),
	object[AnswerToolCallRequest]("AnswerToolCallRequest", false),
	lines[RunStreamLine]("RunStreamLine", typeOf[RunStart](), typeOf[OutputLine](), typeOf[ToolRequest](), typeOf[RunToolCall](),
		typeOf[RunExit](), typeOf[StreamError]()),
	object[Policy]("Policy", true),
	object[ExecRequest]("ExecRequest", false),
	object[PtySize]("PtySize", false),
	object[ExecResult]("ExecResult", true),
	lines[ExecStreamLine]("ExecStreamLine", typeOf[ExecStart](), typeOf[OutputLine](), typeOf[ExecExit](), typeOf[StreamError]()),
	lines[WatchStreamLine]("WatchStreamLine", typeOf[WatchStart](), typeOf[WatchEvent](), typeOf[StreamError]()),
	object[ProcessList]("ProcessList", true),
	object[SandboxProcess]("SandboxProcess", true),
	object[CodeRequest]("CodeRequest", false),
	object[CodeResult]("CodeResult", true),
	object[CodeError]("CodeError", true),
	object[CodeExecution]("CodeExecution", true),
	lines[CodeStreamLine]("CodeStreamLine", typeOf[CodeOutputLine](), typeOf[CodeResultLine](), typeOf[CodeErrorLine](),
		typeOf[CodeEndLine](), typeOf[StreamError]()),
	object[CodeContextRequest]("CodeContextRequest", false),
	object[CodeContext]("CodeContext", true),
	object[CodeContextList]("CodeContextList", true),
	object[PtyResize]("PtyResize", false),
	object[PtyExit]("PtyExit", true),
	object[PTYToken]("PTYToken", true),
	object[PortURLRequest]("PortURLRequest", false),
	object[PortURL]("PortURL", true),
	object[Template]("Template", true),
	object[TemplateLayer]("TemplateLayer", true),
	object[TemplateConfig]("TemplateConfig", true),
	object[TemplateDetail]("TemplateDetail", true),
	object[TemplateUsage]("TemplateUsage", true),
	object[TemplateList]("TemplateList", true),
	object[TemplateDeleted]("TemplateDeleted", true),
	object[RegistryAuth]("RegistryAuth", false),
	object[BuildTemplateRequest]("BuildTemplateRequest", false),
	object[BuildStreamLine]("BuildStreamLine", true),
}

// pathTypes are the JSON bodies whose schemas openapi.yaml writes inline
// in an operation (its request body, or the response of a status), with
// their Go types.
var pathTypes = []struct {
	path, method, body string
	typ                reflect.Type
}{
	{"/v1/sandboxes/{id}/processes/{pid}/signal", "post", "requestBody", typeOf[SignalRequest]()},
	{"/v1/sandboxes/{id}/processes/kill", "post", "requestBody", typeOf[KillAllRequest]()},
	{"/v1/sandboxes/{id}/processes/{pid}/stdin", "post", "requestBody", typeOf[ProcessInputRequest]()},
	{"/v1/sandboxes/{id}/processes/kill", "post", "responses/200", typeOf[KillAllResult]()},
	{"/v1/sandboxes/{id}/contexts/{cid}/interrupt", "post", "responses/200", typeOf[InterruptResult]()},
}

// enums pairs each enum of openapi.yaml (at its JSON pointer, less
// "/components/schemas") with the const block of this package that
// declares the named constant: the enum's values and the block's must be
// the same.
var enums = []struct{ at, constant string }{
	{"State", "StateCreating"},
	{"Network/properties/mode", "NetworkNone"},
	{"NetworkView/properties/mode", "NetworkNone"},
	{"Sandbox/properties/end_reason", "EndDeleted"},
	{"Health/properties/status", "HealthHealthy"},
	{"StatsNetwork/properties/source", "NetSourceInterface"},
	{"ExecStatus", "StatusSuccess"},
	{"Error/properties/error/properties/code", "CodeInvalidArgument"},
	{"ExecStreamLine/oneOf/1/properties/type", "StreamStdout"},
	{"CodeStreamLine/oneOf/0/properties/type", "StreamStdout"},
	{"CodeRequest/properties/language", "LangPython"},
	{"RunRequest/properties/language", "LangPython"},
	{"WatchStreamLine/oneOf/1/properties/op", "WatchCreate"},
	{"CodeContextRequest/properties/language", "LangPython"},
	{"CodeExecution/properties/status", "CodeStatusOK"},
	{"CodeStreamLine/oneOf/3/properties/status", "CodeStatusOK"},
	{"AuditRecord/properties/phase", "PhaseIntent"},
	{"BuildStreamLine/properties/type", "BuildStep"},
	{"ToolUpstream/properties/kind", "UpstreamHTTP"},
	{"ApprovalState", "ApprovalPending"},
	{"DecideApprovalRequest/properties/decision", "DecisionApprove"},
}

// openAPIDoc is openapi.yaml as generic JSON.
func openAPIDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml is not JSON-compatible YAML: %v", err)
	}
	return doc
}

// at returns the value at the JSON pointer ptr of v (without its leading
// slash; array elements by index), or nil.
func at(v any, ptr string) any {
	for _, seg := range strings.Split(ptr, "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		switch x := v.(type) {
		case map[string]any:
			v = x[seg]
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// TestOpenAPISchemasMatchTypes compares each object schema of
// openapi.yaml with the JSON fields of its Go type: the same property
// names, required properties always sent, JSON types that fit the Go
// types, and references to the schema of the very type a field holds;
// each branch of a oneOf schema with its Go type, and the reader type of
// a stream with all of them; and the inline bodies of pathTypes.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Paths      map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml is not JSON-compatible YAML: %v", err)
	}
	for _, p := range compareSchemas(doc.Components.Schemas, wireTypes) {
		t.Error(p)
	}
	c := comparer{schemas: doc.Components.Schemas, byName: map[string]wireType{}}
	for _, wt := range wireTypes {
		c.byName[wt.schema] = wt
	}
	paths := openAPIDoc(t)["paths"]
	for _, pt := range pathTypes {
		where := pt.method + " " + pt.path + " " + pt.body
		op, _ := paths.(map[string]any)[pt.path].(map[string]any)
		raw, _ := json.Marshal(at(op[pt.method], pt.body+"/content/application~1json/schema"))
		var s *schema
		if err := json.Unmarshal(raw, &s); err != nil || s == nil {
			t.Errorf("%s: no application/json schema in openapi.yaml", where)
			continue
		}
		c.object(where, s, pt.typ, pt.body != "requestBody")
	}
	for _, p := range c.problems {
		t.Error(p)
	}
}

// constBlocks returns the string constants of this package's non-test
// files, by const block: each constant's name maps to the values of its
// whole block.
func constBlocks(t *testing.T) map[string][]string {
	t.Helper()
	fset := token.NewFileSet()
	blocks := map[string][]string{}
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		{
			for _, d := range f.Decls {
				gd, ok := d.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				var names, values []string
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					for i, n := range vs.Names {
						if i >= len(vs.Values) {
							continue
						}
						lit, ok := vs.Values[i].(*ast.BasicLit)
						if !ok || lit.Kind != token.STRING {
							continue
						}
						v, err := strconv.Unquote(lit.Value)
						if err != nil {
							t.Fatal(err)
						}
						names = append(names, n.Name)
						values = append(values, v)
					}
				}
				for _, n := range names {
					blocks[n] = values
				}
			}
		}
	}
	return blocks
}

// enumProblems compares the values of an enum with those of the Go
// constants that stand for them.
func enumProblems(where string, documented []any, declared []string) []string {
	var doc []string
	for _, v := range documented {
		s, _ := v.(string)
		doc = append(doc, s)
	}
	var out []string
	for _, v := range doc {
		if !slices.Contains(declared, v) {
			out = append(out, where+": "+strconv.Quote(v)+" is documented but no Go constant has it")
		}
	}
	for _, v := range declared {
		if !slices.Contains(doc, v) {
			out = append(out, where+": Go constant value "+strconv.Quote(v)+" is not in the enum")
		}
	}
	return out
}

// TestOpenAPIEnumsMatchConstants compares the enums of openapi.yaml with
// the Go constants that name their values: this package's const blocks,
// and internal/auth's scopes.
func TestOpenAPIEnumsMatchConstants(t *testing.T) {
	schemas := at(openAPIDoc(t), "components/schemas")
	blocks := constBlocks(t)
	for _, e := range enums {
		enum, _ := at(schemas, e.at+"/enum").([]any)
		if len(enum) == 0 {
			t.Errorf("%s: no enum in openapi.yaml", e.at)
			continue
		}
		declared, ok := blocks[e.constant]
		if !ok {
			t.Errorf("%s: no string constant %s in package api", e.at, e.constant)
			continue
		}
		for _, p := range enumProblems(e.at, enum, declared) {
			t.Error(p)
		}
	}
	var scopes []string
	for _, s := range auth.AllScopes {
		scopes = append(scopes, string(s))
	}
	enum, _ := at(schemas, "Scope/enum").([]any)
	for _, p := range enumProblems("Scope", enum, scopes) {
		t.Error(p)
	}
}

// TestEnumComparisonCatchesDrift checks the enum check on made-up
// values: a value only documented and one only declared are reported.
func TestEnumComparisonCatchesDrift(t *testing.T) {
	got := enumProblems("X", []any{"a", "b"}, []string{"b", "c"})
	want := []string{`X: "a" is documented but no Go constant has it`, `X: Go constant value "c" is not in the enum`}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestSchemaComparisonCatchesDrift checks the checker on made-up schemas:
// each kind of disagreement is reported.
func TestSchemaComparisonCatchesDrift(t *testing.T) {
	type inner struct {
		A string `json:"a"`
	}
	type embedded struct {
		E int `json:"e"`
	}
	type thing struct {
		ID       string     `json:"id"`
		Extra    string     `json:"extra"`
		Opt      string     `json:"opt,omitempty"`
		Always   int        `json:"always"`
		When     string     `json:"when"`
		Ptr      *time.Time `json:"ptr"`
		Inner    inner      `json:"inner"`
		Loose    string     `json:"loose"`
		Bytes    []byte     `json:"bytes"`
		Sub      inner      `json:"sub"`
		Maybe    *inner     `json:"maybe"`
		embedded            // flattened, as encoding/json does
	}
	type other struct {
		B string `json:"b"`
	}
	type lineA struct {
		Type string `json:"type"`
		A    string `json:"a"`
	}
	type lineB struct {
		Type string `json:"type"`
		B    string `json:"b"`
	}
	type reader struct {
		Type string `json:"type"`
		lineA
		C string `json:"c"`
	}
	raw := `{
		"Thing": {"type": "object", "required": ["id", "opt", "always", "when", "ptr", "inner", "bytes", "sub", "maybe", "e"], "properties": {
			"id": {"type": "string"}, "missing": {"type": "string"}, "opt": {"type": "string"}, "loose": {"type": "string"},
			"always": {"type": "string"}, "when": {"type": "string", "format": "date-time"},
			"ptr": {"type": "string", "format": "date-time"}, "inner": {"$ref": "#/components/schemas/Other"},
			"bytes": {"type": "string"}, "sub": {"$ref": "#/components/schemas/Other/properties/o"},
			"maybe": {"oneOf": [{"$ref": "#/components/schemas/Inner"}, {"type": "null"}]},
			"e": {"type": "integer"}}},
		"Other": {"type": "object", "required": ["b"], "properties": {"b": {"type": "string"},
			"o": {"type": "object", "required": ["z"], "properties": {"z": {"type": "string"}}}}},
		"Inner": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}},
		"Lines": {"oneOf": [
			{"type": "object", "required": ["type", "a"], "properties": {"type": {"const": "a"}, "a": {"type": "string"}}},
			{"type": "object", "required": ["type", "b"], "properties": {"type": {"const": "b"}, "b": {"type": "integer"}}}]},
		"Stray": {"type": "object", "properties": {}}
	}`
	var schemas map[string]*schema
	if err := json.Unmarshal([]byte(raw), &schemas); err != nil {
		t.Fatal(err)
	}
	got := compareSchemas(schemas, []wireType{
		object[thing]("Thing", true), object[other]("Other", true), object[inner]("Inner", true),
		lines[reader]("Lines", typeOf[lineA](), typeOf[lineB]()),
	})
	want := []string{
		`Thing: property "missing" has no JSON field in`,
		`Thing: JSON field "extra" of`,
		`Thing.opt: required, but the Go field is omitempty`,
		`Thing.loose: always sent, but not required`,
		`Thing.always: schema type [string] does not fit Go type int`,
		`Thing.when: format date-time needs a time.Time, not string`,
		`Thing.ptr: always sent and may be null, but the schema does not allow null`,
		`Thing.inner: refers to Other`,
		`Thing.bytes: a []byte is base64 on the wire`,
		`Thing.sub: property "z" has no JSON field`,
		`Other: property "o" has no JSON field`,
		`Lines.oneOf[1].b: schema type [integer] does not fit Go type string`,
		`Lines: the reader`,                   // no field b
		`Lines: JSON field "c" of the reader`, // in no branch
		`Stray: no Go type maps to this schema`,
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no report containing %q; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
	for _, bad := range []string{`"e"`, `Thing.maybe`} {
		if slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, bad) }) {
			t.Errorf("a report on %s, which agrees (an embedded field, a nullable reference):\n%s", bad, strings.Join(got, "\n"))
		}
	}
	got = compareSchemas(schemas, []wireType{lines[reader]("Lines", typeOf[lineA]())})
	if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, "Lines: 2 oneOf branches, but 1 Go types") }) {
		t.Errorf("a missing branch type is not reported:\n%s", strings.Join(got, "\n"))
	}
}
