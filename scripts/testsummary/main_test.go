package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// goTestJSON runs `go test -json` on a module made of files and returns its
// event stream.
func goTestJSON(t *testing.T, files map[string]string) []byte {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module example.com/m\n\ngo 1.26\n"
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "test", "-json", "-count=1", "./...")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "CGO_ENABLED=0")
	out, _ := cmd.Output() // fails when a test does
	return out
}

func TestSummary(t *testing.T) {
	events := goTestJSON(t, map[string]string{
		"a/a_test.go": `package a
import "testing"
func TestPass(t *testing.T) {}
func TestFail(t *testing.T) { t.Log("context line"); t.Fatal("it broke") }
func TestSkip(t *testing.T) { t.Skip("needs a widget (apt-get install widget)") }
func TestSub(t *testing.T) { t.Run("inner", func(t *testing.T) { t.Skip("inner reason") }) }
`,
		"b/b_test.go": `package b
import "testing"
func TestOK(t *testing.T) { t.Log("quiet on success") }
`,
		"c/c.go":      "package c\nfunc F() int { return \"not an int\" }\n",
		"c/c_test.go": "package c\nimport \"testing\"\nfunc TestF(t *testing.T) { F() }\n",
	})
	var out bytes.Buffer
	code := run(bytes.NewReader(events), &out, options{})
	got := out.String()
	if code != 1 {
		t.Errorf("exit %d, want 1 (a test failed)\n%s", code, got)
	}
	for _, want := range []string{
		"FAIL\texample.com/m/a\t",
		"context line", "it broke", // the failed test's output
		"ok  \texample.com/m/b\t",
		"example.com/m/c", "not an int", // the build failure and its cause
		"== 2 test(s) skipped:",
		"SKIP\texample.com/m/a TestSkip: needs a widget (apt-get install widget)\n",
		"SKIP\texample.com/m/a TestSub/inner: inner reason\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	for _, absent := range []string{"quiet on success", "=== RUN   TestPass"} {
		if strings.Contains(got, absent) {
			t.Errorf("summary shows %q, the output of a passing test:\n%s", absent, got)
		}
	}
}

func TestSummaryPass(t *testing.T) {
	events := goTestJSON(t, map[string]string{"a/a_test.go": "package a\nimport \"testing\"\nfunc TestPass(t *testing.T) {}\n"})
	var out bytes.Buffer
	if code := run(bytes.NewReader(events), &out, options{}); code != 0 || strings.Contains(out.String(), "skipped") {
		t.Errorf("exit %d, want 0 and no skip list:\n%s", code, out.String())
	}
}

func TestSummaryCutShort(t *testing.T) {
	events := goTestJSON(t, map[string]string{"a/a_test.go": "package a\nimport \"testing\"\nfunc TestPass(t *testing.T) {}\n"})
	// Drop the package's result line, as when go test is killed.
	lines := bytes.Split(bytes.TrimSpace(events), []byte("\n"))
	var cut []byte
	for _, l := range lines {
		if bytes.Contains(l, []byte(`"Action":"pass"`)) && !bytes.Contains(l, []byte(`"Test"`)) {
			continue
		}
		cut = append(append(cut, l...), '\n')
	}
	var out bytes.Buffer
	if code := run(bytes.NewReader(cut), &out, options{}); code != 1 || !strings.Contains(out.String(), "ended without a result") {
		t.Errorf("exit %d, want 1 and the package named:\n%s", code, out.String())
	}
}

// skipEvents is a run of a module whose tests pass or skip.
func skipEvents(t *testing.T) []byte {
	return goTestJSON(t, map[string]string{
		"a/a_test.go": `package a
import "testing"
func TestPass(t *testing.T) {}
func TestGuestOnly(t *testing.T) { t.Skip("runs inside a guest") }
func TestSub(t *testing.T) {
	t.Run("v1", func(t *testing.T) {})
	t.Run("v2", func(t *testing.T) { t.Skip("needs cgroup v2") })
}
func TestNeedsWidget(t *testing.T) { t.Skip("widget is not installed") }
`,
	})
}

func mustAllow(t *testing.T, list string) []allowed {
	t.Helper()
	a, err := parseAllowlist(strings.NewReader(list))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestNoSkip: with -no-skip a skip that the allowlist does not name
// fails the run and is named; allowed skips and a run without -no-skip
// pass; an entry that allowed nothing is noted.
func TestNoSkip(t *testing.T) {
	events := skipEvents(t)
	allow := mustAllow(t, `
# package test why
example.com/m/a TestGuestOnly   runs in the VM guests only
example.com/m/a TestSub/v2      v2 only; the VM tests run it
example.com/m/b TestGone        a test that no longer skips
`)
	var out bytes.Buffer
	if code := run(bytes.NewReader(events), &out, options{}); code != 0 {
		t.Errorf("without -no-skip: exit %d, want 0\n%s", code, out.String())
	}

	out.Reset()
	code := run(bytes.NewReader(events), &out, options{noSkip: true, allowed: allow, allowFile: "allowed-skips.txt"})
	got := out.String()
	if code != 1 {
		t.Errorf("-no-skip with a skip not allowed: exit %d, want 1\n%s", code, got)
	}
	for _, want := range []string{
		"== -no-skip: 1 skipped test(s) not in the allowlist allowed-skips.txt",
		"FAIL\texample.com/m/a TestNeedsWidget skipped: widget is not installed\n",
		"note: allowlist line 5 (example.com/m/b TestGone) allowed no skip in this run",
		"SKIP\texample.com/m/a TestGuestOnly: runs inside a guest\n", // still listed
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	for _, absent := range []string{"FAIL\texample.com/m/a TestGuestOnly", "FAIL\texample.com/m/a TestSub/v2", "TestSub/v1"} {
		if strings.Contains(got, absent) {
			t.Errorf("output has %q, an allowed skip or a passing test:\n%s", absent, got)
		}
	}

	// Everything allowed: the run passes. A pattern matches the whole
	// name only: "TestSub" does not allow TestSub/v2.
	out.Reset()
	all := append(allow, mustAllow(t, "example.com/m/a TestNeeds.* installed by CI")...)
	if code := run(bytes.NewReader(events), &out, options{noSkip: true, allowed: all}); code != 0 {
		t.Errorf("-no-skip with every skip allowed: exit %d, want 0\n%s", code, out.String())
	}
	out.Reset()
	partial := mustAllow(t, "example.com/m/a TestSub why\nexample.com/m/a TestGuestOnly|TestNeedsWidget why")
	if code := run(bytes.NewReader(events), &out, options{noSkip: true, allowed: partial}); code != 1 ||
		!strings.Contains(out.String(), "FAIL\texample.com/m/a TestSub/v2 skipped") {
		t.Errorf("TestSub allowed TestSub/v2: exit %d\n%s", code, out.String())
	}
}

func TestParseAllowlist(t *testing.T) {
	a, err := parseAllowlist(strings.NewReader("# comment\n\n internal/x  TestA|TestB/.*  needs a v2 host (the VM tests run it)\n"))
	if err != nil || len(a) != 1 || a[0].pkg != "internal/x" || a[0].why != "needs a v2 host (the VM tests run it)" || a[0].line != 3 ||
		!a[0].test.MatchString("TestB/sub") || a[0].test.MatchString("TestAB") {
		t.Fatalf("got %+v, %v", a, err)
	}
	for list, want := range map[string]string{
		"internal/x TestA\n":        "line 1: want PACKAGE TEST-REGEXP WHY",
		"internal/x Test( why\n":    "line 1: error parsing regexp",
		"# only a comment\n":        "no entries",
		strings.Repeat("#", 70<<10): "larger than",
	} {
		if _, err := parseAllowlist(strings.NewReader(list)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: %v, want an error containing %q", list, err, want)
		}
	}
}

// TestAllowlistFile: the project's allowlist parses, and each entry
// names a package of this module and matches a test declared in it, so
// that a renamed or removed test does not leave a stale entry behind.
func TestAllowlistFile(t *testing.T) {
	f, err := os.Open("allowed-skips.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	list, err := parseAllowlist(f)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) > 30 {
		t.Errorf("%d entries: the allowlist is meant to be short", len(list))
	}
	declared := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	for _, a := range list {
		files, _ := filepath.Glob(filepath.Join("..", "..", a.pkg, "*_test.go"))
		if len(files) == 0 {
			t.Errorf("line %d: no tests in package %s", a.line, a.pkg)
			continue
		}
		found := false
		for _, file := range files {
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range declared.FindAllStringSubmatch(string(b), -1) {
				// A pattern for subtests matches their parent's name
				// followed by "/"; try both.
				if a.test.MatchString(m[1]) || prefixMatches(a.pattern, m[1]) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("line %d: %s declares no test that %q matches", a.line, a.pkg, a.pattern)
		}
	}
}

// prefixMatches reports whether the top-level part of pattern (before a
// "/") matches test entirely.
func prefixMatches(pattern, test string) bool {
	top, _, ok := strings.Cut(pattern, "/")
	if !ok {
		return false
	}
	re, err := regexp.Compile("^(?:" + top + ")$")
	return err == nil && re.MatchString(test)
}
