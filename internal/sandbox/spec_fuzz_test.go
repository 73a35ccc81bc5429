package sandbox

import (
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/template"
)

// FuzzResolve feeds untrusted request fields through Spec validation:
// it must never panic, and whatever it accepts must respect the caps.
func FuzzResolve(f *testing.F) {
	f.Add("host", "PATH", "/bin", "owner", "alice", int64(0), int64(0), 1.0, int64(60))
	f.Add("", "A=B", "x", "", "v", int64(-1), int64(1<<40), -2.0, int64(-5))
	f.Add("other", "_x1", strings.Repeat("v", 5000), "k\x00", "\xff", int64(512<<20), int64(100), 0.5, int64(1<<40))
	f.Add("host", "A", "b", "k", "v", int64(0), int64(0), math.NaN(), int64(0))
	f.Add("host", "A", "b", "k", "v", int64(0), int64(0), math.Inf(1), int64(0))
	reg, err := template.NewRegistry(staticSource{"host"}, staticSource{"other"})
	if err != nil {
		f.Fatal(err)
	}
	cfg := Config{StateDir: "/x"}.withDefaults()
	f.Fuzz(func(t *testing.T, tmpl, envK, envV, metaK, metaV string, mem, pids int64, cpus float64, timeoutS int64) {
		spec := Spec{
			Template: tmpl,
			Env:      map[string]string{envK: envV},
			Metadata: map[string]string{metaK: metaV},
			Limits:   runtime.Limits{MemoryBytes: mem, Pids: pids, CPUs: cpus},
			Timeout:  time.Duration(timeoutS) * time.Second,
		}
		rs, err := cfg.resolve(spec, reg)
		if err != nil {
			return
		}
		l := rs.limits
		if l.MemoryBytes <= 0 || l.MemoryBytes > cfg.MaxLimits.MemoryBytes || l.Pids <= 0 || l.Pids > cfg.MaxLimits.Pids ||
			!(l.CPUs > 0 && l.CPUs <= cfg.MaxLimits.CPUs) {
			t.Fatalf("accepted limits %+v", l)
		}
		if rs.timeout <= 0 || rs.timeout > cfg.MaxLifetime {
			t.Fatalf("accepted timeout %v", rs.timeout)
		}
		for k, v := range rs.env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") || len(k) > MaxKeyBytes || len(v) > MaxValueBytes {
				t.Fatalf("accepted env %q=%q", k, v)
			}
		}
		for k, v := range rs.metadata {
			if k == "" || !utf8.ValidString(k) || !utf8.ValidString(v) || len(v) > MaxValueBytes {
				t.Fatalf("accepted metadata %q=%q", k, v)
			}
		}
	})
}
