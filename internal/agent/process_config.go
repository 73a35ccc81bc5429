package agent

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	agentv1 "github.com/airlock-sandbox/airlock/gen/airlock/agent/v1"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Caps on a ProcessConfig. They bound what one request can make the agent
// hold in memory and pass to execve.
const (
	maxArgs        = 4096
	maxArgBytes    = 128 << 10 // one argument, env value or shell line
	maxArgvEnv     = 1 << 20   // argv and env together
	maxTagLen      = 128
	maxCwdLen      = 4096
	maxInputChunk  = 1 << 20 // one SendInput/StreamInput message
	maxPtyDim      = 65535
	defaultPtyCols = 80
	defaultPtyRows = 24
)

// defaultPath is the PATH of a child whose environment names none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// procSpec is a ProcessConfig that passed validation, resolved against the
// agent's options: everything the platform code needs to fork.
type procSpec struct {
	cfg  *agentv1.ProcessConfig
	argv []string
	// path is the executable to exec: argv[0] when it holds a slash,
	// otherwise the PATH match, or "" when there is none.
	path string
	env  []string
	// dirs are the candidate working directories, sandbox paths tried in
	// order at fork time (see childDir): the request's cwd alone, or the
	// agent's Workdir, the user's home and "/".
	dirs       []string
	user       User
	tag        string
	timeout    time.Duration
	stdin      bool
	pty        *ptySize
	background bool
	// limit is the number of bytes forwarded per output stream.
	limit uint64
}

// ptySize is a validated terminal size.
type ptySize struct{ cols, rows uint16 }

func invalidf(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// validateConfig checks the fields of cfg that do not depend on the agent's
// options. It never looks at the filesystem.
func validateConfig(cfg *agentv1.ProcessConfig) error {
	if cfg == nil {
		return invalidf("config is required")
	}
	argv, shell := cfg.GetArgv(), cfg.GetShell()
	switch {
	case len(argv) == 0 && shell == "":
		return invalidf("one of argv and shell is required")
	case len(argv) > 0 && shell != "":
		return invalidf("argv and shell are mutually exclusive")
	case len(argv) > maxArgs:
		return invalidf("argv has %d entries, the limit is %d", len(argv), maxArgs)
	case len(argv) > 0 && argv[0] == "":
		return invalidf("argv[0] is empty")
	}
	total := 0
	for i, a := range argv {
		if err := checkValue(fmt.Sprintf("argv[%d]", i), a); err != nil {
			return err
		}
		total += len(a) + 1
	}
	if shell != "" {
		if err := checkValue("shell", shell); err != nil {
			return err
		}
		total += len(shell) + len("/bin/sh -c ")
	}
	for k, v := range cfg.GetEnv() {
		if err := checkEnvKey(k); err != nil {
			return err
		}
		if err := checkValue("env "+k, v); err != nil {
			return err
		}
		total += len(k) + len(v) + 2
	}
	if total > maxArgvEnv {
		return invalidf("argv and env total %d bytes, the limit is %d", total, maxArgvEnv)
	}
	if len(cfg.GetCwd()) > maxCwdLen {
		return invalidf("cwd is longer than %d bytes", maxCwdLen)
	}
	if strings.IndexByte(cfg.GetCwd(), 0) >= 0 {
		return invalidf("cwd contains a NUL byte")
	}
	if len(cfg.GetTag()) > maxTagLen {
		return invalidf("tag is longer than %d bytes", maxTagLen)
	}
	if sz := cfg.GetPty(); sz != nil && (sz.GetCols() > maxPtyDim || sz.GetRows() > maxPtyDim) {
		return invalidf("pty size %dx%d is out of range", sz.GetCols(), sz.GetRows())
	}
	return nil
}

func checkValue(what, v string) error {
	if len(v) > maxArgBytes {
		return invalidf("%s is longer than %d bytes", what, maxArgBytes)
	}
	if strings.IndexByte(v, 0) >= 0 {
		return invalidf("%s contains a NUL byte", what)
	}
	return nil
}

func checkEnvKey(k string) error {
	if k == "" {
		return invalidf("env has an empty name")
	}
	if len(k) > maxArgBytes {
		return invalidf("env name is longer than %d bytes", maxArgBytes)
	}
	if strings.ContainsAny(k, "=\x00") {
		return invalidf("env name %q contains '=' or NUL", k)
	}
	return nil
}

// checkPtySize validates a size for Resize; zero fields are invalid there.
func checkPtySize(sz *agentv1.PtySize) (ptySize, error) {
	c, r := sz.GetCols(), sz.GetRows()
	if c == 0 || r == 0 || c > maxPtyDim || r > maxPtyDim {
		return ptySize{}, invalidf("pty size %dx%d is out of range", c, r)
	}
	return ptySize{cols: uint16(c), rows: uint16(r)}, nil
}

// defaultDirs returns the working directories tried, in order, for a
// process that names none: the agent's Workdir, else home, else "/".
func (t *processTable) defaultDirs(home string) []string {
	dirs := make([]string, 0, 3)
	for _, d := range []string{t.opts.Workdir, home} {
		if d != "" {
			dirs = append(dirs, path.Clean("/"+d))
		}
	}
	return append(dirs, "/")
}

// resolve validates cfg and resolves it against the agent's options: user,
// environment, working directory and executable.
func (t *processTable) resolve(cfg *agentv1.ProcessConfig) (*procSpec, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	name := cfg.GetUser()
	if name == "" {
		name = t.opts.DefaultUser
	}
	u, ok := t.opts.Users[name]
	if !ok {
		return nil, invalidf("unknown user %q", name)
	}
	if u.Name == "" {
		u.Name = name
	}
	spec := &procSpec{
		cfg:        cfg,
		user:       u,
		tag:        cfg.GetTag(),
		timeout:    time.Duration(cfg.GetTimeoutMs()) * time.Millisecond,
		stdin:      cfg.GetStdin(),
		background: cfg.GetBackground(),
		limit:      t.opts.MaxOutputBytes,
	}
	if l := cfg.GetOutputLimitBytes(); l > 0 && l < spec.limit {
		spec.limit = l
	}
	if sz := cfg.GetPty(); sz != nil {
		spec.pty = &ptySize{cols: defaultPtyCols, rows: defaultPtyRows}
		if sz.GetCols() > 0 {
			spec.pty.cols = uint16(sz.GetCols())
		}
		if sz.GetRows() > 0 {
			spec.pty.rows = uint16(sz.GetRows())
		}
	}
	if cfg.GetShell() != "" {
		spec.argv = []string{"/bin/sh", "-c", cfg.GetShell()}
	} else {
		spec.argv = slices.Clone(cfg.GetArgv())
	}

	home := u.Home
	if home == "" {
		home = "/"
	}
	// The working directory is only named here: it is resolved inside Root,
	// as the process's user, on the thread that forks (childDir), so that
	// nothing the sandbox changes in between can redirect it.
	if cwd := cfg.GetCwd(); cwd != "" {
		if !path.IsAbs(cwd) {
			cwd = path.Join(home, cwd)
		}
		spec.dirs = []string{path.Clean(cwd)}
	} else {
		spec.dirs = t.defaultDirs(home)
	}

	env := make(map[string]string, len(t.opts.BaseEnv)+len(cfg.GetEnv())+4)
	for k, v := range t.opts.BaseEnv {
		env[k] = v
	}
	if _, ok := env["PATH"]; !ok {
		env["PATH"] = defaultPath
	}
	// Like the working directory, HOME is where the child finds its home
	// on the agent's filesystem: the same path inside a sandbox, inside
	// Root under the fake runtime.
	env["HOME"] = t.hostPath(home)
	env["USER"] = u.Name
	env["LOGNAME"] = u.Name
	if spec.pty != nil {
		if _, ok := env["TERM"]; !ok {
			env["TERM"] = "xterm-256color"
		}
	}
	for k, v := range cfg.GetEnv() {
		env[k] = v
	}
	spec.env = make([]string, 0, len(env))
	for k, v := range env {
		spec.env = append(spec.env, k+"="+v)
	}
	slices.Sort(spec.env)

	if strings.Contains(spec.argv[0], "/") {
		spec.path = spec.argv[0]
	} else {
		spec.path = lookPath(spec.argv[0], env["PATH"])
	}
	return spec, nil
}

// hostPath maps a clean absolute sandbox path onto the agent's filesystem.
// Inside a sandbox Root is "/" and this is the identity.
func (t *processTable) hostPath(p string) string {
	return filepath.Join(t.opts.Root, filepath.Clean("/"+p))
}

// lookPath finds file in the directories of pathEnv like exec.LookPath,
// but against the child's PATH rather than the agent's. Relative entries
// (including the empty one) are skipped: they would resolve against a
// directory the caller may not expect. It returns "" when nothing matches.
func lookPath(file, pathEnv string) string {
	for _, dir := range filepath.SplitList(pathEnv) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0 {
			return p
		}
	}
	return ""
}
