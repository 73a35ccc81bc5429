package main

import (
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/hostcheck"
)

// The client's environment and defaults.
const (
	envURL         = "AIRLOCK_URL"
	envAPIKey      = "AIRLOCK_API_KEY"
	envDataDir     = "AIRLOCK_DATA_DIR"
	defaultURL     = "http://127.0.0.1:7070"
	defaultDataDir = "/var/lib/airlock"
	adminKeyFile   = "admin.key"
	// controlTimeout bounds one control-plane call (create, list, delete,
	// ...); exec, cp and shell are bounded by their own timeouts.
	controlTimeout = 5 * time.Minute
	// maxKeyFileBytes caps the admin.key read.
	maxKeyFileBytes = 4096
)

// cli is the command-line client: every verb other than serve, demo and
// agent. Its input, output and environment are fields, so that tests run
// it in-process.
type cli struct {
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	// hc is the HTTP client for the API; nil means http.DefaultClient.
	hc *http.Client
	// url is the API's base URL: --url, else AIRLOCK_URL, else
	// defaultURL.
	url string
	// help prints the help of the flag set that failed to parse last.
	help func()
	// hostCheck runs the host checks of doctor; nil means hostcheck.Run.
	hostCheck func(context.Context, hostcheck.Options) hostcheck.Report
	// mcpTransport, if set, replaces stdio for airlock mcp (tests).
	mcpTransport sdk.Transport
}

// cliMain runs the client verbs with the process's standard streams and
// environment.
func cliMain(ctx context.Context, args []string) (int, error) {
	c := &cli{stdin: os.Stdin, stdout: os.Stdout, stderr: os.Stderr, getenv: os.Getenv}
	return c.main(ctx, args)
}

// errHelp is returned by a verb that printed its help: exit code 0.
var errHelp = errors.New("help requested")

// usageError is a usage error (exit code 2) worded for people.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return errUsage }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// cliError is an error shown as its message alone (main adds "airlock: "),
// keeping the original for errors.Is.
type cliError struct {
	msg string
	err error
}

func (e *cliError) Error() string { return e.msg }
func (e *cliError) Unwrap() error { return e.err }

// friendly rewords err for people: an API error becomes the server's
// message, and the client's "airlock: " prefix goes (main adds its own).
func friendly(err error) error {
	var ue *usageError
	var ce *cliError
	if err == nil || errors.As(err, &ue) || errors.As(err, &ce) {
		return err
	}
	var ae *client.APIError
	if errors.As(err, &ae) {
		msg := ae.Message
		if msg == "" {
			msg = fmt.Sprintf("the server answered %d", ae.Status)
		}
		return &cliError{msg: msg, err: err}
	}
	msg := err.Error()
	for strings.HasPrefix(msg, "airlock: ") {
		msg = strings.TrimPrefix(msg, "airlock: ")
	}
	return &cliError{msg: msg, err: err}
}

// fail returns exit code 1 with err reworded, or 0 without an error.
func fail(err error) (int, error) {
	if err != nil {
		return 1, friendly(err)
	}
	return 0, nil
}

const cliUsage = `usage: airlock [--url URL] COMMAND [ARG...]

  sandbox create [-t TEMPLATE] [--timeout D] [--idle-timeout D] [--memory MB] [--cpus N]
                 [--pids N] [--disk MB] [-e K=V]... [-m K=V]... [--json]
  sandbox ls [--state S] [-m K=V]... [-q | --json]
  sandbox get ID [--json]
  sandbox rm ID... | --all [-m K=V]... --force
  sandbox extend ID DURATION [--json]
  prune [-m K=V]...                     remove your failed sandboxes
  exec [-e K=V]... [-w DIR] [-u USER] [--timeout D] [-n] [--json] ID -- CMD...
  run [-t TEMPLATE] [exec flags] -- CMD...
  program [-l LANG] [-c CODE | -f FILE] [--sandbox ID | --tool T... --toolset S...] [--trace] [--json]
                            a program that calls tools; its output and tool-call trace
  mcp                       serve the sandbox tools to an MCP client on stdin and stdout
  cp SRC DST                one side is ID:PATH; - is stdin or stdout
  files ls [-d N] [--json] ID [PATH] | mkdir ID PATH... | rm [-r] ID PATH...
  shell [-u USER] ID [-- CMD...]        a login shell, or CMD on a terminal
  ps [--json] ID                        every process of the sandbox
  stats [--no-stream] [--interval D] [--json] ID...   live CPU, memory, disk, network, pids
  kill [-s SIGNAL] ID PID...
  kill --all [--timeout D] [--json] ID  every process but the agent
  port [--sign [--ttl D]] [--json] ID PORT  the URL of a port of the sandbox
  code [-l python|javascript|bash] [-c CODE | -f FILE] [--context C] [-e K=V]...
       [--timeout D] [--json] ID      (a REPL when no -c/-f and stdin is a terminal)
  contexts ls [--json] ID | rm ID CONTEXT... | restart ID CONTEXT | interrupt ID CONTEXT
  template build NAME (--from IMAGE | --debian SUITE [--packages P,..] | -f AIRFILE [DIR])
                 [--replace] [--allow-setuid] [--no-cache] [-v] [--json]
                 [--shared]
  template import NAME FILE|DIR|- [--tag T] [--replace] [--shared] [--json]
                            a docker save archive or an OCI layout
  template ls|inspect NAME|rm NAME... [--shared] [--json]
  audit [--action A] [--target T] [--since T] [--until T] [--limit N | --tail N [-f]] [--json]
                            newest first; --tail N oldest first; -f follows
  audit verify [--checkpoint SEQ:HASH|FILE]... [--public-key PEM] [--offline] [--json]
  audit checkpoint [--public-key]
  net show ID | net set ID none|allowlist [--allow ENTRY]... | net log ID
                            a sandbox's network policy, counters, egress log
  keys create --name N --scope S... [--expires D] [--json]
  keys ls [--json]
  keys revoke ID...
  secrets set NAME [--from-file PATH] [-d DESC] [--json]   the value from stdin or the file
  secrets ls [--json] | rm NAME...
  tools create -f FILE [--replace] [--json]   register a tool from a JSON file
  tools ls [--json] | show NAME | rm NAME...
  toolsets create NAME [TOOL...] [--replace] [--json]
  toolsets ls [--json] | show NAME [--json] | rm NAME...
  approvals ls [--pending] [--json] | show ID | approve|deny ID [--reason R]
                            tool calls that wait for a person's decision
  policy set -f FILE [--json] | show [--json] | rm   the tenant's Cedar policy for tool calls
  tenants create [--id ID] [--max-sandboxes N] [--json] NAME    (the operator's)
  tenants ls [--json]
  tenants rm ID...
  doctor [--data-dir DIR] [-v] [--json]   check this host (no daemon needed; as root)
  completion bash|zsh                   print a shell completion script

Environment: AIRLOCK_URL (default http://127.0.0.1:7070), AIRLOCK_API_KEY;
without a key, <AIRLOCK_DATA_DIR>/admin.key is used if readable
(AIRLOCK_DATA_DIR defaults to /var/lib/airlock).
`

// main runs one client verb.
func (c *cli) main(ctx context.Context, args []string) (int, error) {
	if c.getenv == nil {
		c.getenv = func(string) string { return "" }
	}
	if c.stdout == nil {
		c.stdout = io.Discard
	}
	if c.stderr == nil {
		c.stderr = io.Discard
	}
	c.url = c.getenv(envURL)
	if c.url == "" {
		c.url = defaultURL
	}
	// Global flags before the verb.
	fs := c.flags("airlock", cliUsage)
	if err := fs.Parse(args); err != nil {
		return c.parseFailed(err)
	}
	args = fs.Args()
	if len(args) == 0 {
		return 2, usagef("a command is required (see airlock help)")
	}
	verb, ok := c.verbs()[args[0]]
	if !ok {
		return 2, usagef("unknown command %q (see airlock help)", args[0])
	}
	code, err := verb(ctx, args[1:])
	if errors.Is(err, errHelp) {
		return 0, nil
	}
	if err != nil && code == 0 {
		code = 1
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		err = &cliError{msg: fmt.Sprintf("no Airlock daemon answers at %s: is `airlock serve` running? (%s=%s)", c.url, envURL, c.url), err: err}
	}
	return code, friendly(err)
}

// verbs are the client verbs by name (aliases included).
func (c *cli) verbs() map[string]func(context.Context, []string) (int, error) {
	return map[string]func(context.Context, []string) (int, error){
		"sandbox":    c.sandboxCmd,
		"sandboxes":  c.sandboxCmd,
		"exec":       c.execCmd,
		"code":       c.codeCmd,
		"run":        c.runCmd,
		"program":    c.programCmd,
		"mcp":        c.mcpCmd,
		"cp":         c.cpCmd,
		"shell":      c.shellCmd,
		"ps":         c.psCmd,
		"stats":      c.statsCmd,
		"kill":       c.killCmd,
		"port":       c.portCmd,
		"audit":      c.auditCmd,
		"net":        c.netCmd,
		"keys":       c.keysCmd,
		"template":   c.templateCmd,
		"key":        c.keysCmd,
		"secrets":    c.secretsCmd,
		"secret":     c.secretsCmd,
		"tools":      c.toolsCmd,
		"tool":       c.toolsCmd,
		"toolsets":   c.toolsetsCmd,
		"toolset":    c.toolsetsCmd,
		"approvals":  c.approvalsCmd,
		"approval":   c.approvalsCmd,
		"policy":     c.policyCmd,
		"policies":   c.policyCmd,
		"tenants":    c.tenantsCmd,
		"tenant":     c.tenantsCmd,
		"doctor":     c.doctorCmd,
		"prune":      c.pruneCmd,
		"files":      c.filesCmd,
		"file":       c.filesCmd,
		"contexts":   c.contextsCmd,
		"context":    c.contextsCmd,
		"completion": c.completionCmd,
	}
}

// flags returns a flag set for a verb, with the global --url flag. Help
// goes to stdout; parse errors are returned, not printed.
func (c *cli) flags(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&c.url, "url", c.url, "the Airlock API `URL` (env AIRLOCK_URL)")
	// The flag package calls Usage on every parse error; only -h prints
	// it (see parseFailed).
	fs.Usage = func() {
		c.help = func() {
			fmt.Fprint(c.stdout, usage)
			fs.SetOutput(c.stdout)
			fmt.Fprintln(c.stdout, "\nFlags:")
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return fs
}

// parseFailed turns a flag parse error into help (code 0) or a usage
// error (code 2).
func (c *cli) parseFailed(err error) (int, error) {
	if errors.Is(err, flag.ErrHelp) {
		if c.help != nil {
			c.help()
		}
		return 0, errHelp
	}
	return 2, usagef("%v (see airlock help)", err)
}

// parse parses args with fs, allowing flags after positional arguments
// (as in `airlock sandbox rm ID --json`). "--" ends the flags; everything
// after it is positional.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			return append(pos, rest...), nil
		}
		if len(rest) == 0 {
			return pos, nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// client returns an API client for c.url with the API key from the
// environment or the admin key file.
func (c *cli) client() (*client.Client, error) {
	key, err := c.apiKey()
	if err != nil {
		return nil, err
	}
	opts := []client.Option{client.WithUserAgent("airlock-cli/1")}
	if c.hc != nil {
		opts = append(opts, client.WithHTTPClient(c.hc))
	}
	cl, err := client.New(c.url, key, opts...)
	if err != nil {
		return nil, usagef("%s", strings.TrimPrefix(err.Error(), "airlock: "))
	}
	return cl, nil
}

// apiKey is the key the client verbs use: AIRLOCK_API_KEY, else the
// admin key in the data directory.
func (c *cli) apiKey() (string, error) {
	key := strings.TrimSpace(c.getenv(envAPIKey))
	if key == "" {
		dir := c.getenv(envDataDir)
		if dir == "" {
			dir = defaultDataDir
		}
		b, err := readInput(filepath.Join(dir, adminKeyFile), nil, maxKeyFileBytes)
		if err != nil {
			return "", usagef("no API key: set %s (or run where %s is readable)", envAPIKey, filepath.Join(dir, adminKeyFile))
		}
		key = strings.TrimSpace(string(b))
	}
	return key, nil
}

// errInputTooLarge is readInput's error for input over its cap.
var errInputTooLarge = errors.New("input too large")

// readInput reads the file at path, or stdin (nothing when nil) if path
// is "-": at most max bytes, more is errInputTooLarge.
func readInput(path string, stdin io.Reader, max int64) ([]byte, error) {
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	if r == nil {
		return nil, nil
	}
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, errInputTooLarge
	}
	return b, nil
}

// printJSON writes v as indented JSON.
func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under header, aligned for people.
func (c *cli) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// kvFlag collects repeated K=V flags.
type kvFlag map[string]string

func (f kvFlag) String() string {
	keys := make([]string, 0, len(f))
	for k := range f {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		keys[i] = k + "=" + f[k]
	}
	return strings.Join(keys, ",")
}

func (f kvFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want KEY=VALUE, got %q", s)
	}
	f[k] = v
	return nil
}

// orNil returns nil for an empty map, so that JSON omits it.
func (f kvFlag) orNil() map[string]string {
	if len(f) == 0 {
		return nil
	}
	return f
}

// listFlag collects a repeated flag; commas also separate values.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(s string) error {
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			*f = append(*f, v)
		}
	}
	return nil
}

// durationFlag is a duration given as Go syntax (90s, 5m, 1h30m) or as
// whole seconds.
type durationFlag time.Duration

func (d *durationFlag) String() string { return time.Duration(*d).String() }

func (d *durationFlag) Set(s string) error {
	v, err := parseDuration(s)
	*d = durationFlag(v)
	return err
}

func parseDuration(s string) (time.Duration, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		if n < 0 || n > 10*365*24*3600 {
			return 0, fmt.Errorf("duration %q is out of range", s)
		}
		return time.Duration(n) * time.Second, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("want a duration such as 90s, 5m or 1h, got %q", s)
	}
	return d, nil
}

// formatTime shows t in local time for people ("-" when unset).
func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Local().Format("2006-01-02 15:04:05")
}

// optTime is t for JSON output, nil when unset.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
