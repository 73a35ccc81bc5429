package agent

import (
	"errors"
	"strings"
	"testing"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestValidateConfig(t *testing.T) {
	big := strings.Repeat("x", maxArgBytes)
	tests := []struct {
		name string
		cfg  *agentv1.ProcessConfig
		ok   bool
	}{
		{"nil", nil, false},
		{"argv", &agentv1.ProcessConfig{Argv: []string{"ls", "-l"}}, true},
		{"shell", &agentv1.ProcessConfig{Shell: "ls | wc"}, true},
		{"neither", &agentv1.ProcessConfig{}, false},
		{"both", &agentv1.ProcessConfig{Argv: []string{"ls"}, Shell: "ls"}, false},
		{"empty argv0", &agentv1.ProcessConfig{Argv: []string{""}}, false},
		{"max args", &agentv1.ProcessConfig{Argv: append([]string{"x"}, make([]string, maxArgs-1)...)}, true},
		{"too many args", &agentv1.ProcessConfig{Argv: append([]string{"x"}, make([]string, maxArgs)...)}, false},
		{"arg at cap", &agentv1.ProcessConfig{Argv: []string{"echo", big}}, true},
		{"arg over cap", &agentv1.ProcessConfig{Argv: []string{"echo", big + "x"}}, false},
		{"shell over cap", &agentv1.ProcessConfig{Shell: big + "x"}, false},
		{"NUL in shell", &agentv1.ProcessConfig{Shell: "a\x00"}, false},
		{"total over cap", &agentv1.ProcessConfig{Argv: []string{"echo", big, big, big, big, big, big, big, big}}, false},
		{"env over total", &agentv1.ProcessConfig{Argv: []string{"echo", big, big, big, big},
			Env: map[string]string{"A": big, "B": big, "C": big, "D": big}}, false},
		{"env ok", &agentv1.ProcessConfig{Argv: []string{"x"}, Env: map[string]string{"A_B": "=c="}}, true},
		{"env empty key", &agentv1.ProcessConfig{Argv: []string{"x"}, Env: map[string]string{"": "v"}}, false},
		{"env = in key", &agentv1.ProcessConfig{Argv: []string{"x"}, Env: map[string]string{"A=B": "v"}}, false},
		{"env NUL in key", &agentv1.ProcessConfig{Argv: []string{"x"}, Env: map[string]string{"A\x00": "v"}}, false},
		{"env NUL in value", &agentv1.ProcessConfig{Argv: []string{"x"}, Env: map[string]string{"A": "v\x00"}}, false},
		{"env value over cap", &agentv1.ProcessConfig{Argv: []string{"x"}, Env: map[string]string{"A": big + "x"}}, false},
		{"tag at cap", &agentv1.ProcessConfig{Argv: []string{"x"}, Tag: strings.Repeat("t", maxTagLen)}, true},
		{"tag over cap", &agentv1.ProcessConfig{Argv: []string{"x"}, Tag: strings.Repeat("t", maxTagLen+1)}, false},
		{"cwd over cap", &agentv1.ProcessConfig{Argv: []string{"x"}, Cwd: "/" + strings.Repeat("d", maxCwdLen)}, false},
		{"cwd NUL", &agentv1.ProcessConfig{Argv: []string{"x"}, Cwd: "/a\x00"}, false},
		{"pty default", &agentv1.ProcessConfig{Argv: []string{"x"}, Pty: &agentv1.PtySize{}}, true},
		{"pty too wide", &agentv1.ProcessConfig{Argv: []string{"x"}, Pty: &agentv1.PtySize{Cols: 70000, Rows: 1}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := validateConfig(tt.cfg)
			if tt.ok && err != nil {
				t.Errorf("validateConfig: %v, want ok", err)
			}
			if !tt.ok && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("validateConfig: %v, want invalid argument", err)
			}
		})
	}
}

func TestLookPath(t *testing.T) {
	if got := lookPath("sh", "relative:/nonexistent:/bin"); got != "/bin/sh" {
		t.Errorf("lookPath(sh) = %q, want /bin/sh", got)
	}
	if got := lookPath("sh", ".:"); got != "" {
		t.Errorf("lookPath with only relative entries = %q, want none", got)
	}
	if got := lookPath("passwd", "/etc"); got != "" {
		t.Errorf("lookPath of a non-executable file = %q, want none", got)
	}
	if got := lookPath("bin", "/"); got != "" {
		t.Errorf("lookPath of a directory = %q, want none", got)
	}
}

func FuzzValidateConfig(f *testing.F) {
	f.Add("ls", "", "k", "v", "/tmp", "tag", uint32(80))
	f.Add("", "echo hi", "A=B", "x\x00", "", "", uint32(0))
	f.Fuzz(func(t *testing.T, arg, shell, key, val, cwd, tag string, cols uint32) {
		cfg := &agentv1.ProcessConfig{Shell: shell, Env: map[string]string{key: val}, Cwd: cwd, Tag: tag,
			Pty: &agentv1.PtySize{Cols: cols, Rows: 24}}
		if arg != "" {
			cfg.Argv = []string{arg, val}
		}
		err := validateConfig(cfg)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not invalid argument", err)
			}
			return
		}
		if (len(cfg.Argv) == 0) == (cfg.Shell == "") {
			t.Fatal("accepted a config without exactly one of argv and shell")
		}
		for _, s := range append(cfg.Argv, shell, key, val, cwd) {
			if strings.IndexByte(s, 0) >= 0 {
				t.Fatalf("accepted a NUL byte in %q", s)
			}
		}
		if strings.Contains(key, "=") || key == "" || len(tag) > maxTagLen || cols > maxPtyDim {
			t.Fatalf("accepted env key %q, tag %q, cols %d", key, tag, cols)
		}
	})
}
