package api

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// This file is the comparison of openapi.yaml's schemas with Go types
// that openapi_test.go runs.

// wireType maps a schema of openapi.yaml's components to the Go types
// that are its wire form: an object schema to one struct; a oneOf schema
// (the lines of a stream) to a struct per branch, in order, and to the
// struct a reader decodes any line into.
type wireType struct {
	schema string
	typ    reflect.Type
	// branches are a oneOf schema's types, reader the union of their
	// fields.
	branches []reflect.Type
	reader   reflect.Type
	// response: the server sends this shape, so every field it always
	// sends (no omitempty or omitzero) must be required, and a pointer it
	// always sends must be nullable.
	response bool
}

func typeOf[T any]() reflect.Type { return reflect.TypeFor[T]() }

// object maps an object schema to T.
func object[T any](schema string, response bool) wireType {
	return wireType{schema: schema, typ: typeOf[T](), response: response}
}

// lines maps a oneOf schema, whose lines the server sends, to its
// branches' types and the type R a reader decodes every line into.
func lines[R any](schema string, branches ...reflect.Type) wireType {
	return wireType{schema: schema, branches: branches, reader: typeOf[R](), response: true}
}

// schema is the part of a JSON Schema the comparison reads.
type schema struct {
	Ref             string             `json:"$ref"`
	Type            any                `json:"type"` // a name, or a list of them
	Format          string             `json:"format"`
	ContentEncoding string             `json:"contentEncoding"`
	Enum            []any              `json:"enum"`
	Const           any                `json:"const"`
	Properties      map[string]*schema `json:"properties"`
	Required        []string           `json:"required"`
	Items           *schema            `json:"items"`
	AllOf           []*schema          `json:"allOf"`
	OneOf           []*schema          `json:"oneOf"`
}

// types returns the JSON types s allows: its type, or, without one, that
// of its const or enum values when they are strings.
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
	if _, ok := s.Const.(string); ok {
		return []string{"string"}
	}
	if len(s.Enum) > 0 && !slices.ContainsFunc(s.Enum, func(v any) bool { _, ok := v.(string); return !ok }) {
		return []string{"string"}
	}
	return nil
}

func (s *schema) isObject() bool {
	return slices.Contains(s.types(), "object") || s.Properties != nil || len(s.AllOf) > 0 || len(s.OneOf) > 0
}

// nullable reports whether s allows null: by its type, or by a oneOf
// branch that is null.
func (s *schema) nullable() bool {
	return slices.Contains(s.types(), "null") ||
		slices.ContainsFunc(s.OneOf, func(b *schema) bool { return slices.Equal(b.types(), []string{"null"}) })
}

// nonNull is the one branch of a oneOf [X, null] that is not null, or s.
func (s *schema) nonNull() *schema {
	if len(s.OneOf) != 2 || !s.nullable() {
		return s
	}
	for _, b := range s.OneOf {
		if !slices.Equal(b.types(), []string{"null"}) {
			return b
		}
	}
	return s
}

// compareSchemas compares schemas with their Go types and returns what
// disagrees. Every object schema must be in types.
func compareSchemas(schemas map[string]*schema, types []wireType) []string {
	c := comparer{schemas: schemas, byName: map[string]wireType{}}
	for _, wt := range types {
		c.byName[wt.schema] = wt
	}
	for _, name := range sortedKeys(schemas) {
		s := schemas[name]
		wt, ok := c.byName[name]
		switch {
		case ok && wt.typ != nil:
			c.object(name, s, wt.typ, wt.response)
		case ok:
			c.oneOf(name, s, wt)
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

// resolve follows a reference to a component schema, or to a property
// of one (#/components/schemas/Error/properties/error); name is the
// schema's name (with the path of the property), or "" when s is not a
// reference.
func (c *comparer) resolve(s *schema) (name string, target *schema) {
	if s.Ref == "" && len(s.AllOf) == 1 && s.AllOf[0].Ref != "" && s.Properties == nil {
		s = s.AllOf[0] // a reference with its own description
	}
	if s.Ref == "" {
		return "", s
	}
	name = strings.TrimPrefix(s.Ref, "#/components/schemas/")
	parts := strings.Split(name, "/")
	target = c.schemas[parts[0]]
	for rest := parts[1:]; target != nil && len(rest) > 0; rest = rest[2:] {
		if len(rest) < 2 || rest[0] != "properties" {
			target = nil
			break
		}
		target = target.Properties[rest[1]]
	}
	if target == nil {
		c.errorf("reference %s names no schema", s.Ref)
		return name, &schema{}
	}
	return name, target
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

// oneOf compares the branches of the oneOf schema s with wt's types, in
// order, and checks that wt's reader has a field for each of their
// properties and no other.
func (c *comparer) oneOf(name string, s *schema, wt wireType) {
	if len(s.OneOf) != len(wt.branches) {
		c.errorf("%s: %d oneOf branches, but %d Go types", name, len(s.OneOf), len(wt.branches))
		return
	}
	all := map[string]bool{}
	for i, b := range s.OneOf {
		c.object(fmt.Sprintf("%s.oneOf[%d]", name, i), b, wt.branches[i], wt.response)
		props, _ := c.flatten(b)
		for p := range props {
			all[p] = true
		}
	}
	fields := jsonFields(wt.reader)
	for _, p := range sortedKeys(all) {
		if _, ok := fields[p]; !ok {
			c.errorf("%s: the reader %v has no JSON field for property %q", name, wt.reader, p)
		}
	}
	for _, f := range sortedKeys(fields) {
		if !all[f] {
			c.errorf("%s: JSON field %q of the reader %v is in no branch", name, f, wt.reader)
		}
	}
}

// field is a JSON field of a Go struct.
type field struct {
	typ  reflect.Type
	omit bool // omitempty or omitzero
}

// jsonFields returns the JSON fields of struct type t as encoding/json
// sees them: embedded structs without a name are flattened, and a field
// of t itself hides an embedded struct's field of the same name (of two
// embedded structs' fields, the first is kept).
func jsonFields(t reflect.Type) map[string]field {
	out := map[string]field{}
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			embedded = append(embedded, f.Type)
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
	for _, et := range embedded {
		for k, v := range jsonFields(et) {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
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
		if response && !f.omit && f.typ.Kind() == reflect.Pointer && !ps.nullable() {
			c.errorf("%s: always sent and may be null, but the schema does not allow null", at)
		}
		c.value(at, ps, f.typ, response)
	}
}

var (
	timeType  = reflect.TypeFor[time.Time]()
	rawType   = reflect.TypeFor[json.RawMessage]()
	bytesType = reflect.TypeFor[[]byte]()
)

// value compares the schema s of a value with its Go type t.
func (c *comparer) value(where string, s *schema, t reflect.Type, response bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == rawType {
		return // any JSON
	}
	s = s.nonNull()
	if name, target := c.resolve(s); name != "" {
		switch {
		case !target.isObject():
			c.value(where, target, t, response)
		case strings.Contains(name, "/"): // a property of a schema
			c.object(where, target, t, response)
		default:
			if wt, ok := c.byName[name]; !ok || wt.typ != t {
				c.errorf("%s: refers to %s, whose Go type is not %v", where, name, t)
			}
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
	if t == bytesType && s.ContentEncoding != "base64" {
		c.errorf("%s: a []byte is base64 on the wire, but the schema has no contentEncoding base64", where)
		return
	}
	var fits bool
	types := s.types()
	for _, jt := range types {
		switch jt {
		case "string":
			fits = t.Kind() == reflect.String || t == timeType || t == bytesType
		case "integer":
			fits = t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64
		case "number":
			fits = t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64
		case "boolean":
			fits = t.Kind() == reflect.Bool
		case "array":
			fits = t.Kind() == reflect.Slice && t != bytesType
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
