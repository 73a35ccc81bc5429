package openai

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"unicode/utf8"
)

// v4aCase is a case of testdata/v4a_cases.json, whose want and err are
// what the reference applyDiff of @openai/agents-core returned for it
// (testdata/v4a_gen.mjs regenerates the file).
type v4aCase struct {
	Name   string `json:"name"`
	Input  string `json:"input"`
	Diff   string `json:"diff"`
	Create bool   `json:"create"`
	Want   string `json:"want"`
	Err    string `json:"err"`
}

func TestApplyDiffMatchesReference(t *testing.T) {
	raw, err := os.ReadFile("testdata/v4a_cases.json")
	if err != nil {
		t.Fatal(err)
	}
	var cases []v4aCase
	if err := json.Unmarshal(raw, &cases); err != nil {
		t.Fatal(err)
	}
	if len(cases) < 30 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			got, err := applyDiff(c.Input, c.Diff, c.Create)
			switch {
			case c.Err != "" && err == nil:
				t.Fatalf("applied (%q), want error %q", got, c.Err)
			case c.Err != "" && err.Error() != c.Err:
				t.Fatalf("error %q, want %q", err, c.Err)
			case c.Err == "" && err != nil:
				t.Fatalf("error %v, want %q", err, c.Want)
			case c.Err == "" && got != c.Want:
				t.Fatalf("got %q, want %q", got, c.Want)
			}
		})
	}
}

// FuzzApplyDiff: a diff is the model's text; no input makes the applier
// panic, and a create's result has no line the diff did not add.
func FuzzApplyDiff(f *testing.F) {
	f.Add("a\nb\n", "@@\n a\n-b\n+c\n", false)
	f.Add("x\r\ny\r\n", "@@ x\n-y\n+z\n*** End of File\n", false)
	f.Add("", "+a\n+b\n", true)
	f.Add("a\n", "@@\n@@ q\n***\n", false)
	f.Fuzz(func(t *testing.T, input, diff string, create bool) {
		got, err := applyDiff(input, diff, create)
		if err != nil || !create || got == "" {
			return
		}
		for _, l := range strings.Split(got, "\n") {
			if !strings.Contains(diff, "+"+l) {
				t.Fatalf("created line %q is not in the diff %q", l, diff)
			}
		}
		if utf8.ValidString(diff) && !utf8.ValidString(got) {
			t.Fatalf("invalid UTF-8 from a valid diff")
		}
	})
}
