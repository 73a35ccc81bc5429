// Command testsummary reads `go test -json` events on its standard input
// and prints what a developer needs from a run of every package: one line
// per package, the output of each test that failed (and of a package that
// failed to build or outside any test), and at the end every test that
// skipped, with the reason it gave. scripts/test pipes the test run through
// it, so that a skipped test is never silent.
//
// With -no-skip (scripts/test sets it when AIRLOCK_TEST_NO_SKIP=1, as CI
// does) a skipped test fails the run unless an entry of the allowlist
// given with -allow names it: a test that skips by design, such as one
// that runs only inside the cgroup v2 guests of internal/vmtest. So CI
// proves what a passing run claims.
//
// It exits 1 when a package or test failed, a skip was not allowed or the
// event stream was cut short, 2 on unreadable input or allowlist, else 0.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"
)

func main() {
	var opts options
	flag.BoolVar(&opts.noSkip, "no-skip", false, "fail the run on a skipped test that the allowlist does not name")
	allow := flag.String("allow", "", "allowlist of the tests that skip by design (see allowed-skips.txt)")
	flag.Parse()
	if *allow != "" {
		f, err := os.Open(*allow)
		if err == nil {
			opts.allowed, err = parseAllowlist(f)
			f.Close()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "testsummary: allowlist %s: %v\n", *allow, err)
			os.Exit(2)
		}
		opts.allowFile = *allow
	}
	os.Exit(run(os.Stdin, os.Stdout, opts))
}

// options are the command's flags.
type options struct {
	noSkip    bool
	allowed   []allowed
	allowFile string // for messages
}

// allowed is one entry of the allowlist: the skips of tests in pkg (the
// path after the module's) whose full name (Test/sub) test matches
// entirely; why says why they skip by design.
type allowed struct {
	line    int
	pkg     string
	pattern string
	test    *regexp.Regexp
	why     string
}

// maxAllowlistBytes caps the allowlist file.
const maxAllowlistBytes = 64 << 10

// parseAllowlist reads an allowlist: one entry a line, "PACKAGE
// TEST-REGEXP WHY...", separated by blanks; blank lines and lines starting
// with # are ignored. Every entry must say why.
func parseAllowlist(r io.Reader) ([]allowed, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxAllowlistBytes+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxAllowlistBytes {
		return nil, fmt.Errorf("larger than %d bytes", maxAllowlistBytes)
	}
	var out []allowed
	for i, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Fields(l)
		if len(f) < 3 {
			return nil, fmt.Errorf("line %d: want PACKAGE TEST-REGEXP WHY, got %q", i+1, l)
		}
		re, err := regexp.Compile("^(?:" + f[1] + ")$")
		if err != nil {
			return nil, fmt.Errorf("line %d: %v", i+1, err)
		}
		out = append(out, allowed{line: i + 1, pkg: f[0], pattern: f[1], test: re, why: strings.Join(f[2:], " ")})
	}
	if len(out) == 0 {
		return nil, errors.New("no entries")
	}
	return out, nil
}

// allowedBy returns the index of the first entry that allows sk, or -1.
func (o *options) allowedBy(sk skip) int {
	pkg := strings.TrimPrefix(sk.pkg, modulePrefix)
	for i, a := range o.allowed {
		if a.pkg == pkg && a.test.MatchString(sk.test) {
			return i
		}
	}
	return -1
}

// event is one line of `go test -json` (see `go doc test2json`).
type event struct {
	Time       time.Time
	Action     string
	Package    string
	ImportPath string // build-output and build-fail
	Test       string
	Elapsed    float64
	Output     string
}

// maxKept bounds the output kept per test or package for printing on a
// failure: the end of it, where the failure is.
const maxKept = 256 << 10

type summary struct {
	out     io.Writer
	opts    options
	outputs map[string]*tail // by package + "\x00" + test
	skips   []skip
	failed  int
	open    map[string]bool // packages started and not ended
	builds  map[string]*tail
}

type skip struct{ pkg, test, reason string }

// tail keeps the last maxKept bytes written to it.
type tail struct {
	b       []byte
	dropped bool
}

func (t *tail) add(s string) {
	t.b = append(t.b, s...)
	if len(t.b) > maxKept {
		t.b = slices.Clone(t.b[len(t.b)-maxKept:])
		t.dropped = true
	}
}

func (t *tail) String() string {
	if t == nil {
		return ""
	}
	if t.dropped {
		return "[... earlier output dropped ...]\n" + string(t.b)
	}
	return string(t.b)
}

func run(in io.Reader, out io.Writer, opts options) int {
	s := &summary{out: out, opts: opts, outputs: map[string]*tail{}, open: map[string]bool{}, builds: map[string]*tail{}}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 || line[0] != '{' {
			// Not an event: go's own messages (e.g. a package that
			// does not build before -json can say so).
			fmt.Fprintln(out, string(line))
			continue
		}
		var e event
		if err := json.Unmarshal(line, &e); err != nil {
			fmt.Fprintf(out, "testsummary: bad event %q: %v\n", clip(string(line)), err)
			return 2
		}
		s.handle(e)
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(out, "testsummary: read: %v\n", err)
		return 2
	}
	return s.finish()
}

func key(pkg, test string) string { return pkg + "\x00" + test }

func (s *summary) buf(pkg, test string) *tail {
	k := key(pkg, test)
	t := s.outputs[k]
	if t == nil {
		t = &tail{}
		s.outputs[k] = t
	}
	return t
}

func (s *summary) handle(e event) {
	switch e.Action {
	case "build-output":
		t := s.builds[e.ImportPath]
		if t == nil {
			t = &tail{}
			s.builds[e.ImportPath] = t
		}
		t.add(e.Output)
	case "build-fail":
		s.failed++
		fmt.Fprintf(s.out, "FAIL\t%s [build failed]\n%s", e.ImportPath, s.builds[e.ImportPath])
	case "start":
		s.open[e.Package] = true
	case "output":
		s.buf(e.Package, e.Test).add(e.Output)
	case "skip":
		if e.Test != "" {
			s.skips = append(s.skips, skip{e.Package, e.Test, skipReason(s.outputs[key(e.Package, e.Test)].String())})
		}
		if e.Test == "" {
			s.endPackage(e, "?   ", "")
		}
		delete(s.outputs, key(e.Package, e.Test))
	case "pass":
		if e.Test == "" {
			s.endPackage(e, "ok  ", "")
		}
		delete(s.outputs, key(e.Package, e.Test))
	case "fail":
		if e.Test != "" {
			s.failed++
			fmt.Fprintf(s.out, "%s: %s", e.Package, s.outputs[key(e.Package, e.Test)])
			delete(s.outputs, key(e.Package, e.Test))
			return
		}
		s.failed++
		s.endPackage(e, "FAIL", packageOutput(s.outputs[key(e.Package, "")].String()))
	}
}

// endPackage prints a package's result line, and extra (its output outside
// tests) before it.
func (s *summary) endPackage(e event, word, extra string) {
	delete(s.open, e.Package)
	if extra != "" {
		fmt.Fprint(s.out, extra)
	}
	if word == "?   " {
		fmt.Fprintf(s.out, "%s\t%s\t[no tests to run]\n", word, e.Package)
		return
	}
	fmt.Fprintf(s.out, "%s\t%s\t%.3fs\n", word, e.Package, e.Elapsed)
	// Drop what is left of the package's tests (subtests of a failed
	// parent print with it).
	for k := range s.outputs {
		if strings.HasPrefix(k, e.Package+"\x00") {
			delete(s.outputs, k)
		}
	}
}

func (s *summary) finish() int {
	if len(s.open) > 0 {
		var pkgs []string
		for p := range s.open {
			pkgs = append(pkgs, p)
		}
		slices.Sort(pkgs)
		for _, p := range pkgs {
			fmt.Fprintf(s.out, "FAIL\t%s [ended without a result: killed or timed out?]\n%s", p, s.outputs[key(p, "")])
		}
		s.failed++
	}
	if len(s.skips) > 0 {
		fmt.Fprintf(s.out, "\n== %d test(s) skipped:\n", len(s.skips))
		for _, k := range s.skips {
			fmt.Fprintf(s.out, "SKIP\t%s %s: %s\n", strings.TrimPrefix(k.pkg, modulePrefix), k.test, k.reason)
		}
	}
	if s.opts.noSkip {
		s.checkSkips()
	}
	if s.failed > 0 {
		return 1
	}
	return 0
}

// checkSkips fails the run for every skip that no allowlist entry
// allows (-no-skip), and notes the entries that allowed none.
func (s *summary) checkSkips() {
	used := make([]bool, len(s.opts.allowed))
	var bad []skip
	for _, k := range s.skips {
		if i := s.opts.allowedBy(k); i >= 0 {
			used[i] = true
		} else {
			bad = append(bad, k)
		}
	}
	if len(bad) > 0 {
		s.failed++
		fmt.Fprintf(s.out, "\n== -no-skip: %d skipped test(s) not in the allowlist %s; each must run here (install what it needs) or be listed there with why it skips by design:\n",
			len(bad), s.opts.allowFile)
		for _, k := range bad {
			fmt.Fprintf(s.out, "FAIL\t%s %s skipped: %s\n", strings.TrimPrefix(k.pkg, modulePrefix), k.test, k.reason)
		}
	}
	for i, a := range s.opts.allowed {
		if !used[i] {
			fmt.Fprintf(s.out, "note: allowlist line %d (%s %s) allowed no skip in this run\n", a.line, a.pkg, a.pattern)
		}
	}
}

// packageOutput is a failed package's output outside its tests, less the
// result lines that endPackage prints itself.
func packageOutput(out string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(out, "\n") {
		if t := strings.TrimSpace(l); t == "FAIL" || strings.HasPrefix(t, "FAIL\t") {
			continue
		}
		b.WriteString(l)
	}
	return b.String()
}

// modulePrefix is trimmed from package paths in the skip list.
const modulePrefix = "github.com/airlock-sandbox/airlock/"

// skipReason picks the reason out of a skipped test's output: the lines
// after its "=== RUN" and before "--- SKIP", file:line prefixes removed.
func skipReason(out string) string {
	var lines []string
	for _, l := range strings.Split(out, "\n") {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		if i := strings.Index(t, ".go:"); i > 0 && !strings.Contains(t[:i], " ") {
			if j := strings.Index(t[i:], ": "); j > 0 {
				t = t[i+j+2:]
			}
		}
		lines = append(lines, t)
	}
	if len(lines) == 0 {
		return "(no reason given)"
	}
	return clip(strings.Join(lines, " / "))
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "..."
	}
	return s
}
