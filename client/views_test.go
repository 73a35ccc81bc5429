package client

import (
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

// TestViewsCarryEveryField checks the client's own types that are views
// of a wire type (Sandbox, Key, CreatedKey, FileInfo, ExecResult,
// PTYExit, CodeResult, CodeExecution, CodeContext, Template,
// TemplateDetail, FreedSpace, BuildEvent): each has a field for every
// field of its wire type, and its conversion fills them all, so that a
// field added to package api is not dropped on its way to callers.
func TestViewsCarryEveryField(t *testing.T) {
	var sb api.Sandbox
	fill(reflect.ValueOf(&sb).Elem())
	var k api.Key
	fill(reflect.ValueOf(&k).Elem())
	var ck api.CreatedKey
	fill(reflect.ValueOf(&ck).Elem())
	var fw api.FileWriteResult
	fill(reflect.ValueOf(&fw).Elem())
	var er api.ExecResult
	fill(reflect.ValueOf(&er).Elem())
	var pe api.PtyExit
	fill(reflect.ValueOf(&pe).Elem())
	var cr api.CodeResult
	fill(reflect.ValueOf(&cr).Elem())
	cr.PNG, cr.JPEG = "eA==", "eQ==" // base64, as the server sends them
	var ce api.CodeExecution
	fill(reflect.ValueOf(&ce).Elem())
	ce.Results = []api.CodeResult{cr}
	var cc api.CodeContext
	fill(reflect.ValueOf(&cc).Elem())
	var td api.TemplateDetail
	fill(reflect.ValueOf(&td).Elem())
	var del api.TemplateDeleted
	fill(reflect.ValueOf(&del).Elem())
	var bl api.BuildStreamLine
	fill(reflect.ValueOf(&bl).Elem())
	created, err := createdKeyFrom(&ck)
	if err != nil {
		t.Fatal(err)
	}
	result, err := codeResultFrom(&cr)
	if err != nil {
		t.Fatal(err)
	}
	execution, err := codeExecutionFrom(&ce)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		wire, view any
		renamed    map[string]string // wire field -> view field ("": not carried, on purpose)
	}{
		{sb, *sandboxFrom(&sb), map[string]string{"IdleTimeoutS": "IdleTimeout"}},
		{k, keyFrom(&k), nil},
		{ck, created, map[string]string{"Key": "Secret"}},
		{fw, fileInfo(&fw.FileEntry, fw.SHA256), nil},
		{er, *execResultFrom(&er), map[string]string{"StdoutB64": "Stdout", "StderrB64": "Stderr", "DurationMS": "Duration", "CPUMS": "CPUTime"}},
		{pe, *ptyExitFrom(&pe), map[string]string{"Type": "", "DurationMS": "Duration"}},
		{cr, result, nil},
		{ce, *execution, map[string]string{"DurationMS": "Duration"}},
		{cc, CodeContext(cc), nil},
		{td.Template, templateFrom(&td.Template), nil},
		{td, *templateDetailFrom(&td), nil},
		{del, *freedSpaceFrom(&del), map[string]string{"Name": "", "FreedLayers": "Layers", "FreedBytes": "Bytes"}},
		// A build line's template and error end the stream: they are
		// BuildTemplate's result and error, not an event's.
		{bl, buildEventFrom(&bl), map[string]string{"Template": "", "Error": ""}},
	} {
		view := reflect.ValueOf(tt.view)
		for _, name := range leafFields(reflect.TypeOf(tt.wire)) {
			if n, ok := tt.renamed[name]; ok {
				if n == "" {
					continue
				}
				name = n
			}
			f := view.FieldByName(name)
			switch {
			case !f.IsValid():
				t.Errorf("%T has no field for %T.%s", tt.view, tt.wire, name)
			case f.IsZero():
				t.Errorf("%T.%s is not filled from %T", tt.view, name, tt.wire)
			}
		}
	}
	if string(result.PNG) != "x" || string(result.JPEG) != "y" {
		t.Errorf("images %q %q, want them decoded from base64", result.PNG, result.JPEG)
	}
	if _, err := codeResultFrom(&api.CodeResult{PNG: "not base64!"}); err == nil {
		t.Error("an image that is not base64 converts without an error")
	}
}

// leafFields names the fields of struct type t, those of embedded
// structs in their place.
func leafFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous && f.Type.Kind() == reflect.Struct {
			out = append(out, leafFields(f.Type)...)
			continue
		}
		out = append(out, f.Name)
	}
	return out
}

// fill sets every field of v to a value that is not zero.
func fill(v reflect.Value) {
	if v.Type() == reflect.TypeFor[time.Time]() {
		v.Set(reflect.ValueOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)))
		return
	}
	switch v.Kind() {
	case reflect.Struct:
		for i := range v.NumField() {
			fill(v.Field(i))
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fill(v.Index(0))
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		key, val := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(key)
		fill(val)
		m.SetMapIndex(key, val)
		v.Set(m)
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	}
}
