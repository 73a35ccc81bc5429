package openai

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"
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

// TestApplyDiffHostileWork: a diff is the model's text and the file may be
// the sandbox's, so the matching work is bounded, not the product of the
// file's and the diff's lengths: a context that almost matches at every
// line, and a section per line each searching for an anchor from the
// file's top, fail fast with an error instead of burning the daemon's
// CPU for hours. Before the bound, each case took minutes to days.
func TestApplyDiffHostileWork(t *testing.T) {
	file := strings.Repeat("a\n", 200_000)
	cases := map[string]struct{ input, diff string }{
		// 100,000 context lines of "a" then a "b" that is nowhere: every
		// start in the file compares ~100,000 lines, three passes.
		"near-miss context": {file, "@@\n" + strings.Repeat(" a\n", 100_000) + " b\n+c\n"},
		// Each section's first anchor is searched from the file's top,
		// and "x" is at its end.
		"anchor per section": {file + "x\n", strings.Repeat("@@ x\n+y\n", 200_000)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			done := make(chan error, 1)
			start := time.Now()
			go func() {
				_, err := applyDiff(c.input, c.diff, false)
				done <- err
			}()
			select {
			case err := <-done:
				if err == nil || !strings.Contains(err.Error(), "too much work") {
					t.Fatalf("err = %v, want the work bound's error", err)
				}
				if took := time.Since(start); took > 5*time.Second {
					t.Fatalf("took %v", took)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("applyDiff still running after 20 s")
			}
		})
	}
}

// TestApplyDiffLineCaps: a file or diff of more lines than the applier
// takes is refused before it is split (each line costs the daemon 16
// bytes or more per copy).
func TestApplyDiffLineCaps(t *testing.T) {
	many := strings.Repeat("\n", maxPatchLines+1)
	if _, err := applyDiff(many, "@@\n+x\n", false); err == nil || !strings.Contains(err.Error(), "lines") {
		t.Fatalf("a file of %d lines: err = %v", maxPatchLines+1, err)
	}
	if _, err := applyDiff("", strings.Repeat("+\n", maxPatchLines+1), true); err == nil || !strings.Contains(err.Error(), "lines") {
		t.Fatalf("a diff of %d lines: err = %v", maxPatchLines+1, err)
	}
	// A large patch that matches still applies.
	in := strings.Repeat("line\n", 100_000) + "end\n"
	got, err := applyDiff(in, "@@\n line\n-end\n+END\n", false)
	if err != nil || !strings.HasSuffix(got, "line\nEND\n") {
		t.Fatalf("err = %v", err)
	}
}
