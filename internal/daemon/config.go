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

// maxConfigFileBytes caps the config file.
const maxConfigFileBytes = 1 << 20

// LoadConfig builds the configuration from args (the flags after
// `serve`) and env (os.Environ()). It reports --help as flag.ErrHelp after
// printing the usage to usageOut.
func LoadConfig(args, env []string, usageOut io.Writer) (Config, error) {
	cfg := Defaults()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	configPath := fs.String("config", "", "JSON config file (env AIRLOCK_CONFIG)")
	// Flags write into a second copy so that they can be applied last.
	var fl Config
	fs.StringVar(&fl.Listen, "listen", "", "API address (default "+cfg.Listen+"; env AIRLOCK_LISTEN)")
	fs.StringVar(&fl.DataDir, "data-dir", "", "state directory (default "+cfg.DataDir+"; env AIRLOCK_DATA_DIR)")
	fs.StringVar(&fl.DefaultTemplate, "default-template", "", "template of creates that name none (default host)")
	fs.IntVar(&fl.PoolSize, "pool-size", -1, "ready sandboxes kept for the default template (default 2)")
	fs.IntVar(&fl.MaxSandboxes, "max-sandboxes", 0, "sandboxes of all tenants together (default 500)")
	fs.Var(&fl.DefaultTimeout, "default-timeout", "sandbox lifetime when a create gives none (default 5m)")
	fs.Var(&fl.MaxLifetime, "max-lifetime", "longest sandbox lifetime (default 24h)")
	fs.Float64Var(&fl.RateLimit, "rate-limit", 0, "requests per second per API key (default 1000)")
	fs.IntVar(&fl.RateBurst, "rate-burst", 0, "request burst per API key (default 2000)")
	fs.StringVar(&fl.LogLevel, "log-level", "", "debug, info, warn or error (default info)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("serve takes no arguments, got %q: %w", fs.Arg(0), errdefs.ErrInvalidArgument)
	}
	envMap := map[string]string{}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasPrefix(k, "AIRLOCK_") {
			envMap[k] = v
		}
	}
	path := *configPath
	if path == "" {
		path = envMap["AIRLOCK_CONFIG"]
	}
	if path != "" {
		if err := loadFile(path, &cfg); err != nil {
			return cfg, err
		}
	}
	if err := applyEnv(envMap, &cfg); err != nil {
		return cfg, err
	}
	applyFlags(fs, fl, &cfg)
	return cfg, cfg.Validate()
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
// AIRLOCK_URL and AIRLOCK_API_KEY belong to the client and are ignored
// here; any other unknown AIRLOCK_* variable is an error, like an unknown
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
		"AIRLOCK_RATE_BURST": num(&cfg.RateBurst),
		"AIRLOCK_LOG_LEVEL":  str(&cfg.LogLevel),
	}
}

var clientEnv = map[string]bool{"AIRLOCK_URL": true, "AIRLOCK_API_KEY": true, "AIRLOCK_CONFIG": true}

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

func applyFlags(fs *flag.FlagSet, fl Config, cfg *Config) {
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "listen":
			cfg.Listen = fl.Listen
		case "data-dir":
			cfg.DataDir = fl.DataDir
		case "default-template":
			cfg.DefaultTemplate = fl.DefaultTemplate
		case "pool-size":
			cfg.PoolSize = fl.PoolSize
		case "max-sandboxes":
			cfg.MaxSandboxes = fl.MaxSandboxes
		case "default-timeout":
			cfg.DefaultTimeout = fl.DefaultTimeout
		case "max-lifetime":
			cfg.MaxLifetime = fl.MaxLifetime
		case "rate-limit":
			cfg.RateLimit = fl.RateLimit
		case "rate-burst":
			cfg.RateBurst = fl.RateBurst
		case "log-level":
			cfg.LogLevel = fl.LogLevel
		}
	})
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
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	return nil
}

var errLevel = errors.New("log level must be debug, info, warn or error")
