package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
	code := run(bytes.NewReader(events), &out)
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
	if code := run(bytes.NewReader(events), &out); code != 0 || strings.Contains(out.String(), "skipped") {
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
	if code := run(bytes.NewReader(cut), &out); code != 1 || !strings.Contains(out.String(), "ended without a result") {
		t.Errorf("exit %d, want 1 and the package named:\n%s", code, out.String())
	}
}
