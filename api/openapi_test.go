package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// wireType maps a schema of openapi.yaml's components to the Go type that
// is its wire form.
type wireType struct {
	schema string
	typ    reflect.Type
	// response: the server sends this shape, so every field it always
	// sends (no omitempty or omitzero) must be required, and a pointer it
	// always sends must be nullable.
	response bool
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// wireTypes is every object schema with its Go type.
var wireTypes = []wireType{
	{"Error", typeOf[Error](), true},
	{"Limits", typeOf[Limits](), true},
	{"Network", typeOf[Network](), false},
	{"CreateSandboxRequest", typeOf[CreateSandboxRequest](), false},
	{"Sandbox", typeOf[Sandbox](), true},
	{"SandboxList", typeOf[SandboxList](), true},
	{"TimeoutRequest", typeOf[TimeoutRequest](), false},
	{"FileEntry", typeOf[FileEntry](), true},
	{"FileWriteResult", typeOf[FileWriteResult](), true},
	{"DirListing", typeOf[DirListing](), true},
	{"AuditRecord", typeOf[AuditRecord](), true},
	{"AuditList", typeOf[AuditList](), true},
	{"AuditHead", typeOf[AuditHead](), true},
	{"AuditCheckpoint", typeOf[AuditCheckpoint](), true},
	{"AuditCheckpointResponse", typeOf[AuditCheckpointResponse](), true},
	{"VerifyRequest", typeOf[VerifyRequest](), false},
	{"VerifyReport", typeOf[VerifyReport](), true},
	{"InfoResponse", typeOf[Info](), true},
	{"HostReport", typeOf[HostReport](), true},
	{"HostCheck", typeOf[HostCheck](), true},
	{"CreateKeyRequest", typeOf[CreateKeyRequest](), false},
	{"Key", typeOf[Key](), true},
	{"CreatedKey", typeOf[CreatedKey](), true},
	{"KeyList", typeOf[KeyList](), true},
	{"CreateTenantRequest", typeOf[CreateTenantRequest](), false},
	{"Tenant", typeOf[Tenant](), true},
	{"CreatedTenant", typeOf[CreatedTenant](), true},
	{"TenantList", typeOf[TenantList](), true},
}

// untyped are the object schemas whose Go types still live in
// internal/api and package client (exec, processes, code, PTY and
// templates): issue 21 moves them here next, and then this list goes.
var untyped = []string{
	"ExecRequest", "ExecResult", "ExecStreamLine", "ProcessList", "SandboxProcess",
	"CodeRequest", "CodeResult", "CodeError", "CodeExecution", "CodeStreamLine",
	"CodeContextRequest", "CodeContext", "CodeContextList", "PtyExit", "PTYToken",
	"Template", "TemplateLayer", "TemplateConfig", "TemplateDetail", "TemplateUsage",
	"TemplateList", "TemplateDeleted", "RegistryAuth", "BuildTemplateRequest", "BuildStreamLine",
}

// schema is the part of a JSON Schema the comparison reads.
type schema struct {
	Ref        string             `json:"$ref"`
	Type       any                `json:"type"` // a name, or a list of them
	Format     string             `json:"format"`
	Properties map[string]*schema `json:"properties"`
	Required   []string           `json:"required"`
	Items      *schema            `json:"items"`
	AllOf      []*schema          `json:"allOf"`
	OneOf      []*schema          `json:"oneOf"`
}

// types returns the JSON types s allows.
func (s *schema) types() []string {
	switch t := s.Type.(type) {
	case string:
		return []string{t}
	case []any:
		var out []string
		for _, v := range t {
			if n, ok := v.(string); ok {
				out = append(out, n)
			}
		}
		return out
	}
	return nil
}

func (s *schema) isObject() bool {
	return slices.Contains(s.types(), "object") || s.Properties != nil || len(s.AllOf) > 0 || len(s.OneOf) > 0
}

// TestOpenAPISchemasMatchTypes compares each object schema of
// openapi.yaml with the JSON fields of its Go type: the same property
// names, required properties always sent, JSON types that fit the Go
// types, and references to the schema of the very type a field holds.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]*schema `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatalf("openapi.yaml is not JSON-compatible YAML: %v", err)
	}
	for _, p := range compareSchemas(doc.Components.Schemas, wireTypes, untyped) {
		t.Error(p)
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
		embedded            // flattened, as encoding/json does
	}
	type other struct {
		B string `json:"b"`
	}
	raw := `{
		"Thing": {"type": "object", "required": ["id", "opt"], "properties": {
			"id": {"type": "string"}, "missing": {"type": "string"}, "opt": {"type": "string"},
			"always": {"type": "string"}, "when": {"type": "string", "format": "date-time"},
			"ptr": {"type": "string", "format": "date-time"}, "inner": {"$ref": "#/components/schemas/Other"},
			"e": {"type": "integer"}}},
		"Other": {"type": "object", "required": ["b"], "properties": {"b": {"type": "string"}}},
		"Inner": {"type": "object", "required": ["a"], "properties": {"a": {"type": "string"}}},
		"Stray": {"type": "object", "properties": {}}
	}`
	var schemas map[string]*schema
	if err := json.Unmarshal([]byte(raw), &schemas); err != nil {
		t.Fatal(err)
	}
	got := compareSchemas(schemas, []wireType{
		{"Thing", typeOf[thing](), true}, {"Other", typeOf[other](), true}, {"Inner", typeOf[inner](), true},
	}, nil)
	want := []string{
		`Thing: property "missing" has no JSON field in`,
		`Thing: JSON field "extra" of`,
		`Thing.opt: required, but the Go field is omitempty`,
		`Thing.always: always sent, but not required`,
		`Thing.always: schema type [string] does not fit Go type int`,
		`Thing.when: format date-time needs a time.Time, not string`,
		`Thing.ptr: always sent and may be null, but the schema does not allow null`,
		`Thing.inner: refers to Other`,
		`Stray: no Go type maps to this schema`,
	}
	for _, w := range want {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, w) }) {
			t.Errorf("no report containing %q; got:\n%s", w, strings.Join(got, "\n"))
		}
	}
	if slices.ContainsFunc(got, func(g string) bool { return strings.Contains(g, `"e"`) }) {
		t.Errorf("the embedded struct's field e was not flattened:\n%s", strings.Join(got, "\n"))
	}
}

// compareSchemas compares schemas with their Go types and returns what
// disagrees. Every object schema must be in types or in pending.
func compareSchemas(schemas map[string]*schema, types []wireType, pending []string) []string {
	c := comparer{schemas: schemas, byName: map[string]wireType{}}
	for _, wt := range types {
		c.byName[wt.schema] = wt
	}
	names := make([]string, 0, len(schemas))
	for name := range schemas {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := schemas[name]
		wt, ok := c.byName[name]
		switch {
		case ok && slices.Contains(pending, name):
			c.errorf("%s: both typed and pending: take it off the pending list", name)
		case ok:
			c.object(name, s, wt.typ, wt.response)
		case slices.Contains(pending, name):
		case s.isObject():
			c.errorf("%s: no Go type maps to this schema (add its type to package api and wireTypes)", name)
		}
	}
	for _, wt := range types {
		if schemas[wt.schema] == nil {
			c.errorf("%s: no such schema in openapi.yaml (Go type %v)", wt.schema, wt.typ)
		}
	}
	return c.problems
}

type comparer struct {
	schemas  map[string]*schema
	byName   map[string]wireType
	problems []string
}

func (c *comparer) errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// resolve follows a reference to a component schema; name is the
// schema's name, or "" when s is not a reference.
func (c *comparer) resolve(s *schema) (name string, target *schema) {
	if s.Ref == "" && len(s.AllOf) == 1 && s.AllOf[0].Ref != "" && s.Properties == nil {
		s = s.AllOf[0] // a reference with its own description
	}
	if s.Ref == "" {
		return "", s
	}
	name = strings.TrimPrefix(s.Ref, "#/components/schemas/")
	if t := c.schemas[name]; t != nil {
		return name, t
	}
	c.errorf("reference %s names no schema", s.Ref)
	return name, &schema{}
}

// flatten returns the properties and required names of s, merging the
// parts of an allOf.
func (c *comparer) flatten(s *schema) (map[string]*schema, []string) {
	_, s = c.resolve(s)
	props := map[string]*schema{}
	var required []string
	for _, part := range s.AllOf {
		p, r := c.flatten(part)
		for k, v := range p {
			props[k] = v
		}
		required = append(required, r...)
	}
	for k, v := range s.Properties {
		props[k] = v
	}
	return props, append(required, s.Required...)
}

// field is a JSON field of a Go struct.
type field struct {
	typ  reflect.Type
	omit bool // omitempty or omitzero
}

// jsonFields returns the JSON fields of struct type t as encoding/json
// sees them: embedded structs without a name are flattened.
func jsonFields(t reflect.Type) map[string]field {
	out := map[string]field{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				if _, ok := out[k]; !ok {
					out[k] = v
				}
			}
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" })
		out[name] = field{typ: f.Type, omit: omit}
	}
	return out
}

// object compares the object schema s with struct type t.
func (c *comparer) object(where string, s *schema, t reflect.Type, response bool) {
	if t.Kind() != reflect.Struct {
		c.errorf("%s: an object schema, but Go type %v is not a struct", where, t)
		return
	}
	props, required := c.flatten(s)
	fields := jsonFields(t)
	for _, name := range sortedKeys(props) {
		if _, ok := fields[name]; !ok {
			c.errorf("%s: property %q has no JSON field in %v", where, name, t)
		}
	}
	for _, name := range sortedKeys(fields) {
		f := fields[name]
		ps, ok := props[name]
		if !ok {
			c.errorf("%s: JSON field %q of %v is not a property of the schema", where, name, t)
			continue
		}
		at := where + "." + name
		req := slices.Contains(required, name)
		switch {
		case req && f.omit:
			c.errorf("%s: required, but the Go field is omitempty", at)
		case response && !req && !f.omit:
			c.errorf("%s: always sent, but not required", at)
		}
		if response && !f.omit && f.typ.Kind() == reflect.Pointer && !slices.Contains(ps.types(), "null") {
			c.errorf("%s: always sent and may be null, but the schema does not allow null", at)
		}
		c.value(at, ps, f.typ, response)
	}
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// value compares the schema s of a value with its Go type t.
func (c *comparer) value(where string, s *schema, t reflect.Type, response bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawType {
		return // any JSON
	}
	if name, target := c.resolve(s); name != "" {
		if !target.isObject() {
			c.value(where, target, t, response)
			return
		}
		if wt, ok := c.byName[name]; !ok || wt.typ != t {
			c.errorf("%s: refers to %s, whose Go type is not %v", where, name, t)
		}
		return
	}
	if s.Properties != nil {
		c.object(where, s, t, response)
		return
	}
	if s.Format == "date-time" && t != timeType {
		c.errorf("%s: format date-time needs a time.Time, not %v", where, t)
		return
	}
	var fits bool
	types := s.types()
	for _, jt := range types {
		switch jt {
		case "string":
			fits = t.Kind() == reflect.String || t == timeType
		case "integer":
			fits = t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64
		case "number":
			fits = t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64
		case "boolean":
			fits = t.Kind() == reflect.Bool
		case "array":
			fits = t.Kind() == reflect.Slice
			if fits && s.Items != nil {
				c.value(where+"[]", s.Items, t.Elem(), response)
			}
		case "object":
			fits = t.Kind() == reflect.Map || t.Kind() == reflect.Struct
		}
		if fits {
			return
		}
	}
	if len(types) > 0 && !(len(types) == 1 && types[0] == "null") {
		c.errorf("%s: schema type %v does not fit Go type %v", where, types, t)
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
