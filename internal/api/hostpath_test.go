package api

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestNoHostPathInAnswers: an error of any class whose message names the
// daemon's data directory (as the layers below may let slip) is answered
// without it, whether it is a plain error or one written for the caller.
func TestNoHostPathInAnswers(t *testing.T) {
	const dataDir = "/var/lib/airlock-test-data"
	e := newTestEnv(t, func(c *Config) { c.HostPaths = []string{dataDir, "/", "relative"} })
	for _, class := range errdefs.Classes() {
		for _, err := range []error{
			fmt.Errorf("open %s/sandboxes/sb-1/state.json: %w", dataDir, class),
			fmt.Errorf("stat %s: %w", dataDir, class),
			errdefs.Publicf(class, "layer %s/templates/store/x is corrupt; see %s", dataDir, dataDir+"/log"),
		} {
			status, code, msg := e.h.publicError(err)
			if strings.Contains(msg, dataDir) || strings.Contains(msg, "/sandboxes/sb-1") {
				t.Errorf("%v: %d %s %q names a host path", class, status, code, msg)
			}
		}
	}
	// Sandbox paths, which callers need, stay.
	if _, _, msg := e.h.publicError(fmt.Errorf("open /home/user/x: %w", errdefs.ErrNotFound)); msg != "open /home/user/x: not found" {
		t.Errorf("a sandbox path was changed: %q", msg)
	}
	if r := hostPathRedactor([]string{"/", "", "x"}); r != nil {
		t.Error("a redactor for no usable path")
	}
}

// TestAnswersGoThroughRedaction: every place that turns an error into an
// answer uses the Handler's publicError (which takes host paths out), not
// the package function directly.
func TestAnswersGoThroughRedaction(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	direct := regexp.MustCompile(`(^|[^.\w])publicError\(`)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			if !direct.MatchString(line) || strings.HasPrefix(strings.TrimSpace(line), "//") {
				continue
			}
			// The function itself, the method that wraps it, and the
			// audit outcome (a code, no message).
			if strings.Contains(line, "func publicError(") || strings.Contains(line, "func (h *Handler) publicError(") || strings.Contains(line, "status, code, msg = publicError(err)") ||
				strings.Contains(line, "_, code, _ := publicError(err)") {
				continue
			}
			t.Errorf("%s:%d calls publicError directly (use h.publicError): %s", f, i+1, strings.TrimSpace(line))
		}
	}
}
