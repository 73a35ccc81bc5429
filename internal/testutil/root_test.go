package testutil

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
)

// recorder is a testing.TB that records a skip or a failure and, as the
// real ones do, ends the goroutine there.
type recorder struct {
	testing.TB
	skipped, failed string
}

func (r *recorder) Helper() {}

func (r *recorder) Skipf(format string, args ...any) {
	r.skipped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// run calls requireRoot on a recorder in its own goroutine.
func run(euid int, demand string) *recorder {
	r := &recorder{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		requireRoot(r, "needs root to mount", euid, demand)
	}()
	<-done
	return r
}

func TestRequireRootDecides(t *testing.T) {
	tests := []struct {
		euid   int
		demand string
		want   string // "run", "skip" or "fail"
		says   string
	}{
		{0, "", "run", ""},
		{0, "1", "run", ""},
		{0, "0", "run", ""},
		{1000, "", "skip", "needs root to mount (CI runs as root; AIRLOCK_TEST_ROOT=1 makes this a failure)"},
		{1000, "0", "skip", "needs root to mount"},
		{1000, "1", "fail", "needs root to mount, but the test runs as uid 1000 and AIRLOCK_TEST_ROOT=1 demands root"},
		{65534, "1", "fail", "uid 65534"},
		{1000, "yes", "fail", `AIRLOCK_TEST_ROOT="yes": want 1`},
		{0, "true", "fail", `AIRLOCK_TEST_ROOT="true": want 1`},
	}
	for _, tt := range tests {
		r := run(tt.euid, tt.demand)
		got, msg := "run", ""
		switch {
		case r.failed != "":
			got, msg = "fail", r.failed
		case r.skipped != "":
			got, msg = "skip", r.skipped
		}
		if got != tt.want || !strings.Contains(msg, tt.says) {
			t.Errorf("euid %d, %s=%q: %s (%q), want %s (%q)", tt.euid, RootEnv, tt.demand, got, msg, tt.want, tt.says)
		}
	}
}

// TestRequireRootLetsRootThrough is what every root-only test does
// first; TestRequireRootFailsLoudly runs it as another user.
func TestRequireRootLetsRootThrough(t *testing.T) {
	RequireRoot(t, "checks RequireRoot as root")
	if euid := os.Geteuid(); euid != 0 {
		t.Fatalf("RequireRoot let uid %d through", euid)
	}
}
