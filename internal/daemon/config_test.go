package daemon

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestLoadConfigPrecedence(t *testing.T) {
	file := filepath.Join(t.TempDir(), "airlock.json")
	if err := os.WriteFile(file, []byte(`{"listen":"127.0.0.1:1","pool_size":5,"default_timeout":"2m","data_dir":"/srv/file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig(
		[]string{"--config", file, "--listen", "127.0.0.1:3"},
		[]string{"AIRLOCK_LISTEN=127.0.0.1:2", "AIRLOCK_POOL_SIZE=7", "AIRLOCK_URL=ignored", "AIRLOCK_REGISTRY_PASSWORD=ignored", "PATH=/bin"},
		io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := Defaults()
	want.Listen = "127.0.0.1:3"                     // flag beats env and file
	want.PoolSize = 7                               // env beats file
	want.DefaultTimeout = Duration(2 * time.Minute) // file beats default
	want.DataDir = "/srv/file"
	if cfg != want {
		t.Fatalf("got %+v\nwant %+v", cfg, want)
	}
}

// TestLoadConfigExecCaps checks that the caps on execs in flight come
// from each source, with the usual precedence.
func TestLoadConfigExecCaps(t *testing.T) {
	file := filepath.Join(t.TempDir(), "airlock.json")
	if err := os.WriteFile(file, []byte(`{"max_execs_per_sandbox":3,"max_execs_per_key":4,"exec_memory_mb":100}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig([]string{"--config", file, "--max-execs-per-key", "9"},
		[]string{"AIRLOCK_EXEC_MEMORY_MB=200", "AIRLOCK_MAX_EXECS_PER_KEY=8"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.MaxExecsPerSandbox != 3 || cfg.MaxExecsPerKey != 9 || cfg.ExecMemoryMB != 200 {
		t.Fatalf("got per sandbox %d, per key %d, memory %d MiB; want 3 (file), 9 (flag), 200 (env)",
			cfg.MaxExecsPerSandbox, cfg.MaxExecsPerKey, cfg.ExecMemoryMB)
	}
	def := Defaults()
	if def.MaxExecsPerSandbox != 16 || def.MaxExecsPerKey != 64 || def.ExecMemoryMB != 512 {
		t.Fatalf("defaults changed: %+v (docs/ARCHITECTURE.md and SECURITY.md state them)", def)
	}
}

// TestLoadConfigEndedRetention checks the retention of ended sandboxes:
// an hour by default, set by the file, the environment or a flag.
func TestLoadConfigEndedRetention(t *testing.T) {
	if d := Defaults().EndedRetention; d != Duration(time.Hour) {
		t.Fatalf("default ended retention %v (docs/ARCHITECTURE.md states 1h)", time.Duration(d))
	}
	file := filepath.Join(t.TempDir(), "airlock.json")
	if err := os.WriteFile(file, []byte(`{"ended_retention":"10m"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args, env []string
		want      time.Duration
	}{
		{[]string{"--config", file}, nil, 10 * time.Minute},
		{[]string{"--config", file}, []string{"AIRLOCK_ENDED_RETENTION=2h"}, 2 * time.Hour},
		{[]string{"--config", file, "--ended-retention", "30s"}, []string{"AIRLOCK_ENDED_RETENTION=2h"}, 30 * time.Second},
	} {
		cfg, err := LoadConfig(tt.args, tt.env, io.Discard)
		if err != nil || time.Duration(cfg.EndedRetention) != tt.want {
			t.Errorf("%v %v: %v, %v; want %v", tt.args, tt.env, time.Duration(cfg.EndedRetention), err, tt.want)
		}
	}
}

func TestLoadConfigPortDomain(t *testing.T) {
	cfg, err := LoadConfig([]string{"--port-domain", "ports.example.com"}, nil, io.Discard)
	if err != nil || cfg.PortDomain != "ports.example.com" {
		t.Fatalf("port domain %q, %v", cfg.PortDomain, err)
	}
	if cfg, _ := LoadConfig(nil, nil, io.Discard); cfg.PortDomain != "" {
		t.Fatalf("default port domain %q, want none", cfg.PortDomain)
	}
}

func TestLoadConfigErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name      string
		args, env []string
		want      string
	}{
		{"unknown file key", []string{"--config", write("a.json", `{"listen":"127.0.0.1:1","colour":"red"}`)}, nil, "unknown field"},
		{"trailing data", []string{"--config", write("b.json", `{} {}`)}, nil, "trailing data"},
		{"bad duration", []string{"--config", write("c.json", `{"max_lifetime":5}`)}, nil, "duration"},
		{"missing file", []string{"--config", filepath.Join(dir, "none.json")}, nil, "config file"},
		{"unknown env", nil, []string{"AIRLOCK_LISTN=127.0.0.1:1"}, "unknown environment variable AIRLOCK_LISTN"},
		{"bad env number", nil, []string{"AIRLOCK_POOL_SIZE=many"}, "AIRLOCK_POOL_SIZE"},
		{"bad listen", []string{"--listen", "nowhere"}, nil, "listen address"},
		{"relative data dir", []string{"--data-dir", "data"}, nil, "absolute"},
		{"pool too big", []string{"--pool-size", "1000"}, nil, "pool size"},
		{"timeout above lifetime", []string{"--default-timeout", "2h", "--max-lifetime", "1h"}, nil, "default timeout"},
		{"bad level", []string{"--log-level", "loud"}, nil, "log level"},
		{"bad log format", []string{"--log-format", "xml"}, nil, "log format"},
		{"bad metrics listen", nil, []string{"AIRLOCK_METRICS_LISTEN=nowhere"}, "metrics listen address"},
		{"otlp endpoint without scheme", []string{"--otlp-endpoint", "collector:4318"}, nil, "otlp endpoint"},
		{"otlp endpoint with credentials", nil, []string{"AIRLOCK_OTLP_ENDPOINT=http://u:p@collector:4318"}, "otlp endpoint"},
		{"trace sample above 1", []string{"--trace-sample", "1.5"}, nil, "trace sample"},
		{"trace sample negative", nil, []string{"AIRLOCK_TRACE_SAMPLE=-0.1"}, "trace sample"},
		{"trace sample NaN", []string{"--trace-sample", "NaN"}, nil, "trace sample"},
		{"arguments", []string{"extra"}, nil, "no arguments"},
		{"unknown flag", []string{"--colour"}, nil, "flag provided but not defined"},
		{"no execs per sandbox", []string{"--max-execs-per-sandbox", "0"}, nil, "max execs per sandbox"},
		{"no execs per key", nil, []string{"AIRLOCK_MAX_EXECS_PER_KEY=0"}, "max execs per key"},
		{"exec memory too small", []string{"--config", write("d.json", `{"exec_memory_mb":16}`)}, nil, "exec memory"},
		{"bad exec memory env", nil, []string{"AIRLOCK_EXEC_MEMORY_MB=lots"}, "AIRLOCK_EXEC_MEMORY_MB"},
		{"ended retention too long", []string{"--ended-retention", "999h"}, nil, "ended retention"},
		{"ended retention zero", nil, []string{"AIRLOCK_ENDED_RETENTION=0s"}, "ended retention"},
		{"health interval too short", []string{"--health-interval", "10ms"}, nil, "health interval"},
		{"health interval too long", nil, []string{"AIRLOCK_HEALTH_INTERVAL=2h"}, "health interval"},
		{"health failures zero", []string{"--health-failures", "0"}, nil, "health failures"},
		{"port domain upper case", []string{"--port-domain", "Ports.Example"}, nil, "port domain"},
		{"port domain empty label", nil, []string{"AIRLOCK_PORT_DOMAIN=ports..example"}, "port domain"},
		{"port domain wildcard", []string{"--port-domain", "*.ports.example"}, nil, "port domain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := LoadConfig(tt.args, tt.env, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if !strings.Contains(tt.name, "flag") && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error %v is not invalid_argument", err)
			}
		})
	}
	if _, err := LoadConfig([]string{"--help"}, nil, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestLockFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "daemon.lock")
	unlock, err := lockFile(path, "test")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockFile(path, "test"); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "another airlock daemon") {
		t.Fatalf("second lock: %v", err)
	}
	unlock()
	unlock2, err := lockFile(path, "test")
	if err != nil {
		t.Fatalf("lock after unlock: %v", err)
	}
	unlock2()
}

// TestLoadConfigAuditCheckpoints checks the checkpoint export settings:
// their defaults, each source, and the values refused.
func TestLoadConfigAuditCheckpoints(t *testing.T) {
	def := Defaults()
	if def.AuditCheckpointInterval != Duration(5*time.Minute) || def.AuditCheckpointFile != "" ||
		checkpointFile(def) != "/var/lib/airlock/audit/checkpoints.jsonl" {
		t.Fatalf("defaults changed: %v %q (docs/SECURITY.md states them)", def.AuditCheckpointInterval, def.AuditCheckpointFile)
	}
	file := filepath.Join(t.TempDir(), "airlock.json")
	if err := os.WriteFile(file, []byte(`{"audit_checkpoint_interval":"1m","audit_checkpoint_file":"/srv/a.jsonl"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := LoadConfig([]string{"--config", file, "--audit-checkpoint-file", "/srv/b.jsonl"},
		[]string{"AIRLOCK_AUDIT_CHECKPOINT_INTERVAL=0s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.AuditCheckpointInterval != 0 || cfg.AuditCheckpointFile != "/srv/b.jsonl" || checkpointFile(cfg) != "/srv/b.jsonl" {
		t.Errorf("got interval %v (want 0 from env), file %q (want the flag's)", cfg.AuditCheckpointInterval, cfg.AuditCheckpointFile)
	}
	for _, args := range [][]string{
		{"--audit-checkpoint-interval", "500ms"},
		{"--audit-checkpoint-interval", "48h"},
		{"--audit-checkpoint-interval", "-1m"},
		{"--audit-checkpoint-file", "relative.jsonl"},
		{"--audit-checkpoint-file", "/srv/../etc/x"},
	} {
		if _, err := LoadConfig(args, nil, io.Discard); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "audit checkpoint") {
			t.Errorf("%v: %v, want an invalid audit checkpoint setting", args, err)
		}
	}
}

// TestSettingsTable: every Config field is a setting of the table, once,
// with a flag, an environment variable and a JSON key equal to the
// field's json tag; and each of the three sets the field. Issue 22,
// finding 5: a setting reachable one way and not another, or
// undocumented, is what the table prevents.
func TestSettingsTable(t *testing.T) {
	var c Config
	cv := reflect.ValueOf(&c).Elem()
	byField := map[uintptr]setting{}
	names := map[string]bool{}
	for _, s := range settings {
		p := reflect.ValueOf(s.field(&c))
		if p.Kind() != reflect.Pointer {
			t.Fatalf("setting %s: field is %T, want a pointer", s.name, s.field(&c))
		}
		if _, dup := byField[p.Pointer()]; dup {
			t.Errorf("two settings write the field of %s", s.name)
		}
		byField[p.Pointer()] = s
		if names[s.name] || s.name == configFlag {
			t.Errorf("setting %s twice", s.name)
		}
		names[s.name] = true
		if s.arg == "" || s.usage == "" {
			t.Errorf("setting %s: no argument name or usage for --help", s.name)
		}
	}
	for i := 0; i < cv.NumField(); i++ {
		f := cv.Type().Field(i)
		s, ok := byField[cv.Field(i).Addr().Pointer()]
		switch {
		case !ok:
			t.Errorf("Config.%s is not in the settings table", f.Name)
		case f.Tag.Get("json") != jsonKey(s.name):
			t.Errorf("Config.%s: json tag %q, setting %s has key %q", f.Name, f.Tag.Get("json"), s.name, jsonKey(s.name))
		}
	}
	if len(byField) != cv.NumField() {
		t.Errorf("%d settings for %d Config fields", len(byField), cv.NumField())
	}

	dir := t.TempDir()
	for _, s := range settings {
		var text, jsonText string
		var want any
		switch s.field(&c).(type) {
		case *string:
			text, jsonText, want = "/some/value", `"/some/value"`, "/some/value"
		case *int:
			text, jsonText, want = "7", "7", 7
		case *float64:
			text, jsonText, want = "2.5", "2.5", 2.5
		case *Duration:
			text, jsonText, want = "7s", `"7s"`, Duration(7*time.Second)
		}
		got := func(c *Config) any { return reflect.ValueOf(s.field(c)).Elem().Interface() }

		var byFlag Config
		if err := newFlagSet(&byFlag, new(string), io.Discard).Parse([]string{"--" + s.name, text}); err != nil || got(&byFlag) != want {
			t.Errorf("flag --%s %s: %v, %v; want %v", s.name, text, got(&byFlag), err, want)
		}
		var byEnv Config
		if err := applyEnv(map[string]string{envName(s.name): text}, &byEnv); err != nil || got(&byEnv) != want {
			t.Errorf("env %s=%s: %v, %v; want %v", envName(s.name), text, got(&byEnv), err, want)
		}
		var byFile Config
		file := filepath.Join(dir, s.name+".json")
		if err := os.WriteFile(file, []byte(`{"`+jsonKey(s.name)+`":`+jsonText+`}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := loadFile(file, &byFile); err != nil || got(&byFile) != want {
			t.Errorf("file key %q: %v, %v; want %v", jsonKey(s.name), got(&byFile), err, want)
		}
	}
}

// TestServeHelp: `airlock serve --help` shows every flag the parser
// defines, each with its environment variable, its JSON key and its
// default.
func TestServeHelp(t *testing.T) {
	var out strings.Builder
	if _, err := LoadConfig([]string{"--help"}, nil, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("--help: %v", err)
	}
	help := out.String()
	cfg := Defaults()
	fs := newFlagSet(&cfg, new(string), io.Discard)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(help, "\n  --"+f.Name+" ") {
			t.Errorf("--help does not show --%s", f.Name)
		}
	})
	if n != len(settings)+1 {
		t.Errorf("%d flags, want %d settings and --config", n, len(settings))
	}
	if !strings.Contains(help, "--config FILE\n        JSON config file\n        env AIRLOCK_CONFIG\n") {
		t.Errorf("--help does not give --config's variable:\n%s", help)
	}
	for _, s := range settings {
		line := fmt.Sprintf("env %s, JSON %q", envName(s.name), jsonKey(s.name))
		if d := defaultText(s, Defaults()); d != "" {
			line += ", default " + d
		}
		if !strings.Contains(help, "  --"+s.name+" "+s.arg+"\n        "+s.usage+"\n        "+line+"\n") {
			t.Errorf("--help lacks %q for --%s:\n%s", line, s.name, help)
		}
	}
	for _, want := range []string{`default "127.0.0.1:7070"`, "AIRLOCK_POOL_SIZE", `JSON "exec_memory_mb", default 512`, "default 24h0m0s"} {
		if !strings.Contains(help, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

// TestSettingsDocumented: docs/OPERATIONS.md's configuration table has a
// row for every setting, so that the config file's keys are documented.
func TestSettingsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/OPERATIONS.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range settings {
		if !strings.Contains(string(doc), "\n| `"+jsonKey(s.name)+"` |") {
			t.Errorf("docs/OPERATIONS.md has no row for the setting %q", jsonKey(s.name))
		}
	}
}

// TestEnvErrors: an unknown AIRLOCK_* variable and a bad value name the
// variable and point to the list.
func TestEnvErrors(t *testing.T) {
	var c Config
	err := applyEnv(map[string]string{"AIRLOCK_POOLSIZE": "3"}, &c)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "unknown environment variable AIRLOCK_POOLSIZE (airlock serve --help lists them)") {
		t.Errorf("unknown variable: %v", err)
	}
	err = applyEnv(map[string]string{"AIRLOCK_MAX_LIFETIME": "forever"}, &c)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), `AIRLOCK_MAX_LIFETIME="forever"`) {
		t.Errorf("bad duration: %v", err)
	}
}
