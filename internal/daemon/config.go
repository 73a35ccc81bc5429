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
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/egress"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/secrets"
	"github.com/airlock-sandbox/airlock/internal/tracing"
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
	// LogFormat is text (slog's key=value lines) or json (one JSON
	// object a line); either way each API request gets one line.
	LogFormat string `json:"log_format"`
	// MetricsListen, if set, is a TCP address serving GET /metrics
	// without a key, for a Prometheus on a private network; the API
	// listener serves it to operator keys either way.
	MetricsListen string `json:"metrics_listen"`
	// OTLPEndpoint, if set, is the OTLP/HTTP collector URL the daemon
	// exports its trace spans to (see tracing.Config.Endpoint); empty:
	// the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or
	// OTEL_EXPORTER_OTLP_ENDPOINT, and without them no tracing.
	OTLPEndpoint string `json:"otlp_endpoint"`
	// TraceSample is the share of the traces started here that are
	// sampled, 0 to 1; a trace a caller started follows the caller's
	// sampled flag.
	TraceSample float64 `json:"trace_sample"`
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
	// HealthInterval is how often the agent of each running sandbox is
	// probed (0: never); HealthFailures how many probes missed in a row
	// end a sandbox (agent_unhealthy). The first missed probe marks it
	// unhealthy (see sandbox's health.go for the policy).
	HealthInterval Duration `json:"health_interval"`
	HealthFailures int      `json:"health_failures"`
	// PortDomain, if set, is the wildcard domain of sandbox ports: the
	// API listener serves {port}-{id}.{PortDomain} as that port of that
	// sandbox (see api.Config.PortDomain). Pointing *.PortDomain at the
	// daemon, and TLS in front of it, is the operator's.
	PortDomain string `json:"port_domain"`
	// EgressRoots is a PEM file of CA certificates the egress proxies
	// trust, besides the host's roots, when they verify a destination
	// they add a credential for (an internal CA; the end-to-end tests'
	// server). Empty: the host's roots only.
	EgressRoots string `json:"egress_roots"`
	// EgressMaxConns, EgressBandwidth (bytes per second each way, 0: no
	// cap) and EgressIdleTimeout bound each allowlist sandbox's egress
	// proxy, and are the ceilings of a sandbox's own network.limits.
	EgressMaxConns    int      `json:"egress_max_conns"`
	EgressBandwidth   int      `json:"egress_bandwidth"`
	EgressIdleTimeout Duration `json:"egress_idle_timeout"`
	// GatewayAllow lists the address ranges (comma-separated CIDRs or
	// addresses) that tools' HTTP upstreams may be at although they are
	// not public (loopback, private, link-local...): the tool gateway
	// refuses every other such address, so that a tenant's tool cannot
	// reach the host's own services or the cloud's metadata.
	GatewayAllow string `json:"gateway_allow"`
	// ApprovalWebhook, if set, is an http(s) URL told of each new
	// approval a tool call waits for (id, tenant, sandbox, tool, expiry;
	// never the arguments).
	ApprovalWebhook string `json:"approval_webhook"`
	// OpenUplink is the interface through which sandboxes in the open
	// network mode reach out, masqueraded (see internal/opennet). Empty:
	// that mode is refused; the daemon never guesses it from the
	// default route.
	OpenUplink string `json:"open_uplink"`
	// OpenPool is the IPv4 prefix their addresses come from, a /30 each
	// (default 100.96.0.0/16).
	OpenPool string `json:"open_pool"`
	// OpenNetNS, if set, is the network namespace (a path such as
	// /run/netns/airlock) holding the uplink, the sandboxes' host ends
	// and the nftables table; the daemon's own if empty.
	OpenNetNS string `json:"open_netns"`
	// E2BListen, if set, is the TCP address of the E2B-compatible
	// listener (internal/e2b): E2B's control plane and sandbox traffic,
	// for E2B_API_URL and E2B_SANDBOX_URL. Empty: none.
	E2BListen string `json:"e2b_listen"`
	// E2BDomain, if set, is the wildcard domain of E2B sandbox traffic
	// by host name ({port}-{id}.{E2BDomain}).
	E2BDomain string `json:"e2b_domain"`
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
		LogFormat:       "text",
		TraceSample:     1,

		AuditCheckpointInterval: Duration(5 * time.Minute),

		MaxExecsPerSandbox: 16,
		MaxExecsPerKey:     64,
		ExecMemoryMB:       512,

		EndedRetention: Duration(time.Hour),
		HealthInterval: Duration(30 * time.Second),
		HealthFailures: 3,

		EgressMaxConns:    egress.DefaultMaxConns,
		EgressIdleTimeout: Duration(egress.DefaultIdleTimeout),
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

// setting is one setting of `airlock serve`: its flag, and the AIRLOCK_*
// environment variable and JSON config key derived from the flag's name
// (see envName and jsonKey), with the Config field all three set. The
// table below is the one list of them: --help, the environment and the
// config file (through Config's json tags, which a test keeps equal to
// jsonKey) all follow it.
type setting struct {
	name  string // the flag, e.g. "pool-size"
	arg   string // what the value is, for --help
	usage string
	// field returns the Config field the setting writes: a *string,
	// *int, *float64 or *Duration.
	field func(c *Config) any
}

var settings = []setting{
	{"listen", "ADDR", "API address, host:port; a non-loopback address exposes the API to the network",
		func(c *Config) any { return &c.Listen }},
	{"data-dir", "DIR", "absolute path of the state directory: database, admin key, templates, sandbox state",
		func(c *Config) any { return &c.DataDir }},
	{"default-template", "NAME", "template of creates that name none",
		func(c *Config) any { return &c.DefaultTemplate }},
	{"pool-size", "N", "ready sandboxes kept for the default template, 0 to 64",
		func(c *Config) any { return &c.PoolSize }},
	{"max-sandboxes", "N", "sandboxes of all tenants together, 1 to 4096",
		func(c *Config) any { return &c.MaxSandboxes }},
	{"default-timeout", "DURATION", "sandbox lifetime when a create gives none, at most max-lifetime",
		func(c *Config) any { return &c.DefaultTimeout }},
	{"max-lifetime", "DURATION", "longest sandbox lifetime, extensions included",
		func(c *Config) any { return &c.MaxLifetime }},
	{"rate-limit", "N", "sustained requests per second per API key",
		func(c *Config) any { return &c.RateLimit }},
	{"rate-burst", "N", "requests an API key may make at once",
		func(c *Config) any { return &c.RateBurst }},
	{"log-level", "LEVEL", "debug, info, warn or error",
		func(c *Config) any { return &c.LogLevel }},
	{"log-format", "FORMAT", "text or json (one JSON object a line; each API request is one line with its trace or request ID)",
		func(c *Config) any { return &c.LogFormat }},
	{"metrics-listen", "ADDR", "address serving GET /metrics (Prometheus) without a key; keep it private (empty: none; the API serves /metrics to operator keys)",
		func(c *Config) any { return &c.MetricsListen }},
	{"otlp-endpoint", "URL", "OTLP/HTTP collector the trace spans are exported to, e.g. http://127.0.0.1:4318 (empty: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing)",
		func(c *Config) any { return &c.OTLPEndpoint }},
	{"trace-sample", "RATIO", "share of the traces started here that are sampled, 0 to 1; a caller's trace follows its own sampled flag",
		func(c *Config) any { return &c.TraceSample }},
	{"audit-checkpoint-interval", "DURATION", "how often to append a signed audit checkpoint to the export file: 0 (never) or 1s to 24h",
		func(c *Config) any { return &c.AuditCheckpointInterval }},
	{"audit-checkpoint-file", "FILE", "clean absolute path the signed audit checkpoints are appended to (default <data-dir>/audit/checkpoints.jsonl); its directory must exist",
		func(c *Config) any { return &c.AuditCheckpointFile }},
	{"max-execs-per-sandbox", "N", "execs, PTY sessions and code cells in flight per sandbox, 1 to 4096",
		func(c *Config) any { return &c.MaxExecsPerSandbox }},
	{"max-execs-per-key", "N", "execs, PTY sessions and code cells in flight per API key, 1 to 65536",
		func(c *Config) any { return &c.MaxExecsPerKey }},
	{"exec-memory-mb", "MIB", "MiB the execs, PTY sessions and code cells in flight may hold, daemon-wide, at least 64",
		func(c *Config) any { return &c.ExecMemoryMB }},
	{"ended-retention", "DURATION", "how long ended sandboxes stay visible (stopped or failed, with why), 1s to 168h",
		func(c *Config) any { return &c.EndedRetention }},
	{"health-interval", "DURATION", "how often each running sandbox's agent is probed: 0 (never) or 100ms to 1h; the first missed probe marks it unhealthy",
		func(c *Config) any { return &c.HealthInterval }},
	{"health-failures", "N", "health probes missed in a row that end a sandbox (agent_unhealthy), 1 to 100",
		func(c *Config) any { return &c.HealthFailures }},
	{"port-domain", "DOMAIN", "wildcard domain of sandbox ports: {port}-{id}.DOMAIN reaches that port (empty: none)",
		func(c *Config) any { return &c.PortDomain }},
	{"egress-roots", "FILE", "PEM file of CA certificates trusted, besides the host's, for destinations the egress proxy adds credentials to",
		func(c *Config) any { return &c.EgressRoots }},
	{"egress-max-conns", "N", "connections each allowlist sandbox may have open through its egress proxy, 1 to 65536; the ceiling of a sandbox's network.limits",
		func(c *Config) any { return &c.EgressMaxConns }},
	{"egress-bandwidth", "BYTES", "bytes per second each allowlist sandbox's egress proxy moves each way, 0 for no cap; the ceiling of a sandbox's network.limits",
		func(c *Config) any { return &c.EgressBandwidth }},
	{"egress-idle-timeout", "DURATION", "how long an egress connection may move no byte before it is closed, 1s to 24h; the ceiling of a sandbox's network.limits",
		func(c *Config) any { return &c.EgressIdleTimeout }},
	{"gateway-allow", "CIDRS", "comma-separated address ranges that tools' HTTP upstreams may be at although not public (loopback, private...); empty: none",
		func(c *Config) any { return &c.GatewayAllow }},
	{"approval-webhook", "URL", "http(s) URL POSTed {id, tenant, sandbox, tool, expires_at} of each new approval a tool call waits for (empty: none)",
		func(c *Config) any { return &c.ApprovalWebhook }},
	{"open-uplink", "IFACE", "interface through which sandboxes in network mode open reach out, masqueraded (empty: mode open is refused)",
		func(c *Config) any { return &c.OpenUplink }},
	{"open-pool", "CIDR", "IPv4 prefix the addresses of open sandboxes come from, a /30 each (default 100.96.0.0/16)",
		func(c *Config) any { return &c.OpenPool }},
	{"e2b-listen", "ADDR", "address of the E2B-compatible listener (E2B_API_URL and E2B_SANDBOX_URL point at it); empty: none",
		func(c *Config) any { return &c.E2BListen }},
	{"e2b-domain", "DOMAIN", "wildcard domain of E2B sandbox traffic by host name, {port}-{id}.DOMAIN (empty: headers only)",
		func(c *Config) any { return &c.E2BDomain }},
	{"open-netns", "PATH", "network namespace holding the open network's uplink, interfaces and nftables table (empty: the daemon's)",
		func(c *Config) any { return &c.OpenNetNS }},
}

// envName is the environment variable of the setting called name:
// AIRLOCK_ and the name in capitals, dashes as underscores.
func envName(name string) string {
	return "AIRLOCK_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// jsonKey is the config file key of the setting called name: the name
// with dashes as underscores.
func jsonKey(name string) string { return strings.ReplaceAll(name, "-", "_") }

// The --config flag, which names the file rather than being a key in it.
const (
	configFlag = "config"
	configEnv  = "AIRLOCK_CONFIG"
)

// define adds the setting's flag to fs, writing into cfg; cfg's value is
// the default --help shows.
func (s setting) define(fs *flag.FlagSet, cfg *Config) {
	switch p := s.field(cfg).(type) {
	case *string:
		fs.StringVar(p, s.name, *p, s.usage)
	case *int:
		fs.IntVar(p, s.name, *p, s.usage)
	case *float64:
		fs.Float64Var(p, s.name, *p, s.usage)
	case *Duration:
		fs.Var(p, s.name, s.usage)
	default:
		panic(fmt.Sprintf("daemon: setting %s has a field of type %T", s.name, p))
	}
}

// newFlagSet returns the flags of `airlock serve`, writing into cfg and
// configPath; the values in cfg are the defaults shown by --help, which
// goes to usageOut.
func newFlagSet(cfg *Config, configPath *string, usageOut io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(usageOut)
	fs.StringVar(configPath, configFlag, "", "JSON config file")
	for _, s := range settings {
		s.define(fs, cfg)
	}
	defaults := *cfg
	fs.Usage = func() { writeUsage(usageOut, defaults) }
	return fs
}

// writeUsage writes `airlock serve --help`: every setting with its flag,
// environment variable, JSON key and default.
func writeUsage(w io.Writer, defaults Config) {
	fmt.Fprint(w, `Usage: airlock serve [flags]

Runs the Airlock daemon. Each setting comes from, in increasing precedence:
its default, the JSON config file (--config FILE or AIRLOCK_CONFIG), its
AIRLOCK_* environment variable, its flag. The file is one JSON object of
the keys below; durations are strings such as "90s" or "5m". An unknown
key or AIRLOCK_* variable is an error (AIRLOCK_URL, AIRLOCK_API_KEY and
AIRLOCK_REGISTRY_PASSWORD belong to the client and are ignored).
docs/OPERATIONS.md describes each setting.

`)
	fmt.Fprintf(w, "  --%s FILE\n        JSON config file\n        env %s\n", configFlag, configEnv)
	for _, s := range settings {
		fmt.Fprintf(w, "  --%s %s\n        %s\n        env %s, JSON %q", s.name, s.arg, s.usage, envName(s.name), jsonKey(s.name))
		if d := defaultText(s, defaults); d != "" {
			fmt.Fprintf(w, ", default %s", d)
		}
		fmt.Fprintln(w)
	}
}

// defaultText is the setting's value in defaults as --help shows it, or ""
// when it is empty.
func defaultText(s setting, defaults Config) string {
	switch p := s.field(&defaults).(type) {
	case *string:
		if *p == "" {
			return ""
		}
		return strconv.Quote(*p)
	case *int:
		return strconv.Itoa(*p)
	case *float64:
		return strconv.FormatFloat(*p, 'g', -1, 64)
	case *Duration:
		return p.String()
	}
	return ""
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

// clientEnv are the AIRLOCK_* variables that are not settings of the
// daemon and are ignored here: the client's, the config file's (read
// before the others) and the secrets key's (read by openState; never a
// setting, which --help and config errors would show). Any other unknown
// AIRLOCK_* variable is an error, like an unknown config key.
var clientEnv = map[string]bool{"AIRLOCK_URL": true, "AIRLOCK_API_KEY": true, configEnv: true,
	"AIRLOCK_REGISTRY_PASSWORD": true, // airlock template build
	secrets.KeyEnv:              true,
}

// applyEnv sets cfg from the AIRLOCK_* variables of env, each as its flag
// would.
func applyEnv(env map[string]string, cfg *Config) error {
	fs := flag.NewFlagSet("env", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	flags := make(map[string]string, len(settings))
	for _, s := range settings {
		s.define(fs, cfg)
		flags[envName(s.name)] = s.name
	}
	for k, v := range env {
		if clientEnv[k] {
			continue
		}
		name, ok := flags[k]
		if !ok {
			return fmt.Errorf("unknown environment variable %s (airlock serve --help lists them): %w", k, errdefs.ErrInvalidArgument)
		}
		if err := fs.Set(name, v); err != nil {
			return fmt.Errorf("%s=%q: %w: %v", k, v, errdefs.ErrInvalidArgument, err)
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
	case c.HealthInterval != 0 && (c.HealthInterval < Duration(100*time.Millisecond) || c.HealthInterval > Duration(time.Hour)):
		return bad("health interval must be 0 (never) or between 100ms and 1h")
	case c.HealthFailures < 1 || c.HealthFailures > 100:
		return bad("health failures must be between 1 and 100")
	case c.EgressRoots != "" && (!filepath.IsAbs(c.EgressRoots) || filepath.Clean(c.EgressRoots) != c.EgressRoots):
		return bad("egress roots %q must be a clean absolute path", c.EgressRoots)
	case c.EgressMaxConns < 1 || c.EgressMaxConns > 65536:
		return bad("egress max conns must be between 1 and 65536")
	case c.EgressBandwidth < 0:
		return bad("egress bandwidth must be 0 (no cap) or a number of bytes per second")
	case c.EgressIdleTimeout < Duration(time.Second) || c.EgressIdleTimeout > Duration(24*time.Hour):
		return bad("egress idle timeout must be between 1s and 24h")
	case c.GatewayAllow != "" && parseGatewayAllow(c.GatewayAllow) == nil:
		return bad("gateway allow %q must be comma-separated IP addresses or CIDRs", c.GatewayAllow)
	case c.ApprovalWebhook != "" && !validWebhookURL(c.ApprovalWebhook):
		return bad("approval webhook %q must be an absolute http or https URL without credentials", c.ApprovalWebhook)
	case c.OpenUplink == "" && (c.OpenPool != "" || c.OpenNetNS != ""):
		return bad("open pool and open netns need an open uplink")
	case c.OpenPool != "" && !validPool(c.OpenPool):
		return bad("open pool %q is not an IPv4 prefix of /8 to /30", c.OpenPool)
	case c.OpenNetNS != "" && (!filepath.IsAbs(c.OpenNetNS) || filepath.Clean(c.OpenNetNS) != c.OpenNetNS):
		return bad("open netns %q must be a clean absolute path", c.OpenNetNS)
	case c.E2BDomain != "" && !validDomain(c.E2BDomain):
		return bad("e2b domain %q is not a DNS name (lowercase letters, digits and dashes in dot-separated labels)", c.E2BDomain)
	case c.E2BDomain != "" && c.E2BListen == "":
		return bad("e2b domain needs an e2b listen address")
	case c.PortDomain != "" && !validDomain(c.PortDomain):
		return bad("port domain %q is not a DNS name (lowercase letters, digits and dashes in dot-separated labels)", c.PortDomain)
	}
	if _, err := parseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.LogFormat != "text" && c.LogFormat != "json" {
		return bad("log format %q must be text or json", c.LogFormat)
	}
	if c.MetricsListen != "" {
		if _, _, err := net.SplitHostPort(c.MetricsListen); err != nil {
			return bad("metrics listen address %q: %v", c.MetricsListen, err)
		}
	}
	if c.OTLPEndpoint != "" {
		if _, err := tracing.EndpointURL(c.OTLPEndpoint); err != nil {
			return bad("otlp endpoint %q must be an http or https URL with a host and no credentials, query or fragment", c.OTLPEndpoint)
		}
	}
	if !(c.TraceSample >= 0 && c.TraceSample <= 1) {
		return bad("trace sample %g must be between 0 and 1", c.TraceSample)
	}
	return nil
}

var errLevel = errors.New("log level must be debug, info, warn or error")

// validDomain reports whether d is a lowercase DNS name: labels of 1 to
// 63 characters [a-z0-9-], not starting or ending with a dash, at most
// 253 characters in all.
func validDomain(d string) bool {
	if len(d) > 253 {
		return false
	}
	for label := range strings.SplitSeq(d, ".") {
		if len(label) < 1 || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if (r < 'a' || r > 'z') && (r < '0' || r > '9') && r != '-' {
				return false
			}
		}
	}
	return true
}

// parseGatewayAllow parses Config.GatewayAllow; nil when it is empty or
// malformed.
func parseGatewayAllow(s string) []netip.Prefix {
	var out []netip.Prefix
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
		} else if a, err := netip.ParseAddr(f); err == nil {
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
		} else {
			return nil
		}
	}
	return out
}
