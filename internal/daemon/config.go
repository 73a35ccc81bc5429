// Package daemon assembles `airlock serve`: the store, the audit log, API
// keys, the native runtime, the sandbox manager and the REST API, and runs
// them until its context ends. On shutdown the sandboxes keep running; the
// next daemon over the same data directory adopts them.
package daemon

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Config is the daemon's configuration. It comes from, in increasing
// precedence: the defaults, a JSON config file (--config or
// AIRLOCK_CONFIG), AIRLOCK_* environment variables and flags.
type Config struct {
	// Listen is the API's TCP address.
	Listen string `json:"listen"`
	// DataDir holds the database, the admin key, templates and sandbox
	// state.
	DataDir string `json:"data_dir"`
	// DefaultTemplate is used when a create names none.
	DefaultTemplate string `json:"default_template"`
	// PoolSize is how many ready sandboxes of the default template to keep.
	PoolSize int `json:"pool_size"`
	// MaxSandboxes caps the sandboxes of all tenants together.
	MaxSandboxes int `json:"max_sandboxes"`
	// DefaultTimeout is a sandbox's lifetime when a create gives none;
	// MaxLifetime caps every sandbox's lifetime.
	DefaultTimeout Duration `json:"default_timeout"`
	MaxLifetime    Duration `json:"max_lifetime"`
	// RateLimit is the sustained requests per second of one API key and
	// RateBurst the requests it may make at once.
	RateLimit float64 `json:"rate_limit"`
	RateBurst int     `json:"rate_burst"`
	// LogLevel is debug, info, warn or error.
	LogLevel string `json:"log_level"`
	// AuditCheckpointInterval is how often the daemon appends a signed
	// checkpoint of the audit chain's head to AuditCheckpointFile (only
	// when the head moved; also at start and shutdown); 0 exports none.
	// It bounds how many of the latest records a truncation of the log
	// could remove without a shipped checkpoint noticing.
	AuditCheckpointInterval Duration `json:"audit_checkpoint_interval"`
	// AuditCheckpointFile is the export file, JSON lines; default
	// <data-dir>/audit/checkpoints.jsonl. Its directory must exist.
	AuditCheckpointFile string `json:"audit_checkpoint_file"`
	// MaxExecsPerSandbox and MaxExecsPerKey cap the execs (buffered and
	// streamed), PTY sessions and code cells in flight on one sandbox and
	// for one API key; ExecMemoryMB caps, daemon-wide, the memory in MiB
	// those may hold, each reserving its worst case when admitted. Past
	// any of them a request gets 429 resource_exhausted.
	MaxExecsPerSandbox int `json:"max_execs_per_sandbox"`
	MaxExecsPerKey     int `json:"max_execs_per_key"`
	ExecMemoryMB       int `json:"exec_memory_mb"`
	// EndedRetention is how long an ended sandbox (deleted, expired,
	// idle, its agent dead, ended by a restart) stays visible through
	// GET and list, stopped or failed with its end reason and time; the
	// daemon keeps at most the latest 1000 either way. The audit log is
	// the lasting record of every end.
	EndedRetention Duration `json:"ended_retention"`
}

// Defaults returns the built-in configuration.
func Defaults() Config {
	return Config{
		Listen:          "127.0.0.1:7070",
		DataDir:         "/var/lib/airlock",
		DefaultTemplate: "host",
		PoolSize:        2,
		MaxSandboxes:    500,
		DefaultTimeout:  Duration(5 * time.Minute),
		MaxLifetime:     Duration(24 * time.Hour),
		RateLimit:       1000,
		RateBurst:       2000,
		LogLevel:        "info",

		AuditCheckpointInterval: Duration(5 * time.Minute),

		MaxExecsPerSandbox: 16,
		MaxExecsPerKey:     64,
		ExecMemoryMB:       512,

		EndedRetention: Duration(time.Hour),
	}
}

// Duration is a time.Duration written as "90s" or "5m" in config files
// and the environment.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"90s\"")
	}
	return d.Set(s)
}

// String implements flag.Value.
func (d *Duration) String() string { return time.Duration(*d).String() }

// Set implements flag.Value.
func (d *Duration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// minExecMemoryMB is the least ExecMemoryMB: room for a code cell, the
// largest reservation (20 MiB), and a few execs besides.
const minExecMemoryMB = 64

// baseMemoryMB is what the daemon needs besides the output of requests in
// flight (ExecMemoryMB): the manager, the store, the idle connections and
// goroutines of a thousand clients.
const baseMemoryMB = 128

// softMemoryLimit is the daemon's soft limit on the Go runtime's memory
// (runtime/debug.SetMemoryLimit): ExecMemoryMB plus baseMemoryMB.
func (c Config) softMemoryLimit() int64 {
	return int64(c.ExecMemoryMB+baseMemoryMB) << 20
}

// maxConfigFileBytes caps the config file.
const maxConfigFileBytes = 1 << 20

// LoadConfig builds the configuration from args (the flags after
// `serve`) and env (os.Environ()). It reports --help as flag.ErrHelp after
// printing the usage to usageOut.
func LoadConfig(args, env []string, usageOut io.Writer) (Config, error) {
	// The flags are parsed twice: once to find --config (and to report
	// bad flags and --help), and once more over the file and environment
	// settings, so that they win.
	first := Defaults()
	var configPath string
	fs := newFlagSet(&first, &configPath, usageOut)
	if err := fs.Parse(args); err != nil {
		return first, err
	}
	if fs.NArg() > 0 {
		return first, fmt.Errorf("serve takes no arguments, got %q: %w", fs.Arg(0), errdefs.ErrInvalidArgument)
	}
	envMap := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "AIRLOCK_") {
			envMap[k] = v
		}
	}
	if configPath == "" {
		configPath = envMap["AIRLOCK_CONFIG"]
	}
	cfg := Defaults()
	if configPath != "" {
		if err := loadFile(configPath, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := applyEnv(envMap, &cfg); err != nil {
		return cfg, err
	}
	if err := newFlagSet(&cfg, new(string), io.Discard).Parse(args); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// newFlagSet returns the flags of `airlock serve`, writing into cfg and
// configPath; the values in cfg are the defaults shown by --help.
func newFlagSet(cfg *Config, configPath *string, usageOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.StringVar(configPath, "config", "", "JSON config file (env AIRLOCK_CONFIG)")
	fs.StringVar(&cfg.Listen, "listen", cfg.Listen, "API address (env AIRLOCK_LISTEN)")
	fs.StringVar(&cfg.DataDir, "data-dir", cfg.DataDir, "state directory (env AIRLOCK_DATA_DIR)")
	fs.StringVar(&cfg.DefaultTemplate, "default-template", cfg.DefaultTemplate, "template of creates that name none")
	fs.IntVar(&cfg.PoolSize, "pool-size", cfg.PoolSize, "ready sandboxes kept for the default template")
	fs.IntVar(&cfg.MaxSandboxes, "max-sandboxes", cfg.MaxSandboxes, "sandboxes of all tenants together")
	fs.Var(&cfg.DefaultTimeout, "default-timeout", "sandbox lifetime when a create gives none")
	fs.Var(&cfg.MaxLifetime, "max-lifetime", "longest sandbox lifetime")
	fs.Float64Var(&cfg.RateLimit, "rate-limit", cfg.RateLimit, "requests per second per API key")
	fs.IntVar(&cfg.RateBurst, "rate-burst", cfg.RateBurst, "request burst per API key")
	fs.StringVar(&cfg.LogLevel, "log-level", cfg.LogLevel, "debug, info, warn or error")
	fs.Var(&cfg.AuditCheckpointInterval, "audit-checkpoint-interval", "how often to export a signed audit checkpoint (0: never)")
	fs.StringVar(&cfg.AuditCheckpointFile, "audit-checkpoint-file", cfg.AuditCheckpointFile,
		"file the signed audit checkpoints are appended to (default <data-dir>/audit/checkpoints.jsonl)")
	fs.IntVar(&cfg.MaxExecsPerSandbox, "max-execs-per-sandbox", cfg.MaxExecsPerSandbox, "execs, PTY sessions and code cells in flight per sandbox")
	fs.IntVar(&cfg.MaxExecsPerKey, "max-execs-per-key", cfg.MaxExecsPerKey, "execs, PTY sessions and code cells in flight per API key")
	fs.IntVar(&cfg.ExecMemoryMB, "exec-memory-mb", cfg.ExecMemoryMB, "MiB the execs, PTY sessions and code cells in flight may hold, daemon-wide")
	fs.Var(&cfg.EndedRetention, "ended-retention", "how long ended sandboxes stay visible (stopped or failed, with why)")
	return fs
}

// loadFile reads a JSON config file over cfg; unknown keys are an error.
func loadFile(path string, cfg *Config) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("config file: %w: %v", errdefs.ErrInvalidArgument, err)
	}
	defer f.Close()
	dec := json.NewDecoder(io.LimitReader(f, maxConfigFileBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("config file %s: %w: %v", path, errdefs.ErrInvalidArgument, err)
	}
	if dec.More() {
		return fmt.Errorf("config file %s: %w: trailing data", path, errdefs.ErrInvalidArgument)
	}
	return nil
}

// envKeys maps every AIRLOCK_* variable the daemon reads to its setter.
// AIRLOCK_URL, AIRLOCK_API_KEY and AIRLOCK_REGISTRY_PASSWORD belong to
// the client and are ignored here; any other unknown AIRLOCK_* variable is an error, like an unknown
// config key.
func envKeys(cfg *Config) map[string]func(string) error {
	str := func(p *string) func(string) error { return func(v string) error { *p = v; return nil } }
	num := func(p *int) func(string) error {
		return func(v string) error {
			n, err := strconv.Atoi(v)
			*p = n
			return err
		}
	}
	return map[string]func(string) error{
		"AIRLOCK_LISTEN":           str(&cfg.Listen),
		"AIRLOCK_DATA_DIR":         str(&cfg.DataDir),
		"AIRLOCK_DEFAULT_TEMPLATE": str(&cfg.DefaultTemplate),
		"AIRLOCK_POOL_SIZE":        num(&cfg.PoolSize),
		"AIRLOCK_MAX_SANDBOXES":    num(&cfg.MaxSandboxes),
		"AIRLOCK_DEFAULT_TIMEOUT":  cfg.DefaultTimeout.Set,
		"AIRLOCK_MAX_LIFETIME":     cfg.MaxLifetime.Set,
		"AIRLOCK_RATE_LIMIT": func(v string) error {
			f, err := strconv.ParseFloat(v, 64)
			cfg.RateLimit = f
			return err
		},
		"AIRLOCK_RATE_BURST":                num(&cfg.RateBurst),
		"AIRLOCK_LOG_LEVEL":                 str(&cfg.LogLevel),
		"AIRLOCK_AUDIT_CHECKPOINT_INTERVAL": cfg.AuditCheckpointInterval.Set,
		"AIRLOCK_AUDIT_CHECKPOINT_FILE":     str(&cfg.AuditCheckpointFile),
		"AIRLOCK_MAX_EXECS_PER_SANDBOX":     num(&cfg.MaxExecsPerSandbox),
		"AIRLOCK_MAX_EXECS_PER_KEY":         num(&cfg.MaxExecsPerKey),
		"AIRLOCK_EXEC_MEMORY_MB":            num(&cfg.ExecMemoryMB),
		"AIRLOCK_ENDED_RETENTION":           cfg.EndedRetention.Set,
	}
}

var clientEnv = map[string]bool{"AIRLOCK_URL": true, "AIRLOCK_API_KEY": true, "AIRLOCK_CONFIG": true,
	"AIRLOCK_REGISTRY_PASSWORD": true, // airlock template build
}

func applyEnv(env map[string]string, cfg *Config) error {
	setters := envKeys(cfg)
	for k, v := range env {
		if clientEnv[k] {
			continue
		}
		set, ok := setters[k]
		if !ok {
			return fmt.Errorf("unknown environment variable %s: %w", k, errdefs.ErrInvalidArgument)
		}
		if err := set(v); err != nil {
			return fmt.Errorf("%s: %w: %v", k, errdefs.ErrInvalidArgument, err)
		}
	}
	return nil
}

// Validate reports the first setting that makes no sense.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return bad("listen address %q: %v", c.Listen, err)
	}
	switch {
	case c.DataDir == "" || !strings.HasPrefix(c.DataDir, "/"):
		return bad("data dir must be an absolute path")
	case c.PoolSize < 0 || c.PoolSize > 64:
		return bad("pool size must be between 0 and 64")
	case c.MaxSandboxes < 1 || c.MaxSandboxes > 4096:
		return bad("max sandboxes must be between 1 and 4096")
	case c.DefaultTimeout <= 0 || c.MaxLifetime <= 0 || c.DefaultTimeout > c.MaxLifetime:
		return bad("default timeout must be positive and at most the max lifetime")
	case c.RateLimit <= 0 || c.RateBurst < 1:
		return bad("rate limit and burst must be positive")
	case c.AuditCheckpointInterval != 0 && (c.AuditCheckpointInterval < Duration(time.Second) || c.AuditCheckpointInterval > Duration(24*time.Hour)):
		return bad("audit checkpoint interval must be 0 (no export) or between 1s and 24h")
	case c.AuditCheckpointFile != "" && (!filepath.IsAbs(c.AuditCheckpointFile) || filepath.Clean(c.AuditCheckpointFile) != c.AuditCheckpointFile):
		return bad("audit checkpoint file must be a clean absolute path")
	case c.MaxExecsPerSandbox < 1 || c.MaxExecsPerSandbox > 4096:
		return bad("max execs per sandbox must be between 1 and 4096")
	case c.MaxExecsPerKey < 1 || c.MaxExecsPerKey > 65536:
		return bad("max execs per key must be between 1 and 65536")
	case c.ExecMemoryMB < minExecMemoryMB || c.ExecMemoryMB > 1<<20:
		return bad("exec memory must be between %d and %d MiB", minExecMemoryMB, 1<<20)
	case c.EndedRetention < Duration(time.Second) || c.EndedRetention > Duration(7*24*time.Hour):
		return bad("ended retention must be between 1s and 168h")
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	return nil
}

var errLevel = errors.New("log level must be debug, info, warn or error")
