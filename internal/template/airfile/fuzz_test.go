package airfile

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// FuzzParse checks that Parse never panics, fails only with an *Error,
// and that what it accepts is well formed and survives a round trip
// through the canonical rendering.
func FuzzParse(f *testing.F) {
	seeds := []string{
		keyFile,
		"FROM template:host\nRUN [\"a\", \"b\"]\nRUN [ x ]\n",
		"FROM python:3\nCOPY --chown=1:1 [\"a b\", \"/c/\"]\nADD x /y\n",
		"DEBIAN sid \\\n a1 \\\n# c\n\n b2\nENV A=\"x y\" B='z' C=${D:-e}\nENV L v w\nWORKDIR $HOME/x\nUSER 1000:1000\n",
		"# escape=\\\nFROM a\nRUN echo \\\n",
		"FROM a\nrun\tx\nENV A \"q\"\n",
	}
	if ents, err := os.ReadDir(recipesDir); err == nil {
		for _, e := range ents {
			if b, err := os.ReadFile(filepath.Join(recipesDir, e.Name())); err == nil {
				seeds = append(seeds, string(b))
			}
		}
	}
	for _, s := range seeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		file, err := Parse(strings.NewReader(src))
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not an *Error", err)
			}
			if pe.Line < 0 || pe.Line > strings.Count(src, "\n")+1 {
				t.Fatalf("error line %d out of range", pe.Line)
			}
			return
		}
		if len(file.Steps) == 0 || len(file.Steps) > MaxSteps {
			t.Fatalf("%d steps", len(file.Steps))
		}
		last := 0
		for i, s := range file.Steps {
			if s.Line <= last {
				t.Fatalf("step %d at line %d after line %d", i, s.Line, last)
			}
			last = s.Line
			if (i == 0) != (s.Base != nil) || len(s.Args) == 0 {
				t.Fatalf("step %d malformed: %#v", i, s)
			}
		}
		again, err := Parse(strings.NewReader(file.String()))
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, file)
		}
		if len(again.Steps) != len(file.Steps) {
			t.Fatalf("round trip: %d steps, want %d", len(again.Steps), len(file.Steps))
		}
		for i := range file.Steps {
			a, b := file.Steps[i], again.Steps[i]
			a.Line, b.Line = 0, 0
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("round trip of step %d:\n got %#v\nwant %#v", i, b, a)
			}
		}
	})
}

// FuzzExpand checks that Expand never panics and keeps its output cap.
func FuzzExpand(f *testing.F) {
	for _, s := range []string{"$A", "${A:-${B:+c}}", `"a\"$A"`, `'x'`, `a\`, "${", "}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out, err := Expand(s, func(k string) (string, bool) { return k + k, k != "U" })
		if err == nil && len(out) > maxExpandBytes {
			t.Fatalf("output of %d bytes", len(out))
		}
	})
}
