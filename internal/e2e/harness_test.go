package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/client"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// Package state set up by TestMain.
var (
	// binPath is the airlock binary under test.
	binPath string
	// rootDir holds the binary, every data directory and the daemon
	// logs. Its mode is 0711: sandbox uids must traverse it.
	rootDir string
	// seen holds every sandbox ID a test's data directory ever held, for
	// the final leak check.
	seen sync.Map
	// containerShape is set by AIRLOCK_E2E_SHAPE=container: every env's
	// daemons run in a container's cgroup (see container).
	containerShape bool
	// keepers holds the pids of the containers' keepers that run.
	keepers sync.Map
)

// Environment variables the tests read.
const (
	// envBin names a prebuilt airlock binary (an absolute path) to test
	// instead of building ./cmd/airlock: where there is no go tool, as in
	// a vmtest guest.
	envBin = "AIRLOCK_E2E_BIN"
	// envShape is how the daemons start: "service" (the default: as a
	// host's service, in the test's own cgroup) or "container" (cgroup v2
	// only: see container).
	envShape = "AIRLOCK_E2E_SHAPE"
)

// Bounds of the harness's waits.
const (
	startTimeout = 60 * time.Second // until the daemon serves
	stopTimeout  = 30 * time.Second // SIGTERM until exit (shutdown is 10 s + 10 s)
	killTimeout  = 10 * time.Second // SIGKILL until reaped
)

// cgroupParent is the cgroup under which the daemon's runtime puts every
// sandbox (linux.Config.CgroupParent's default; `airlock serve` does not
// change it).
//
// A daemon removes every sandbox cgroup under that parent that is not in
// its own data directory, so test daemons would destroy the sandboxes of
// any other daemon on the host, and another daemon starting would destroy
// the tests' sandboxes. Each test daemon therefore runs in its own mount
// namespace in which <hierarchy>/airlock is a bind mount of
// <hierarchy>/<cgroupName>: the daemon's code and paths are unchanged,
// but its sandboxes live in cgroups of their own on the host.
const cgroupParent = "airlock"

// cgroupName is the host cgroup, in every hierarchy, that the test
// daemons see as cgroupParent.
var cgroupName string

// Environment of the daemon wrapper (the test binary re-executed): the
// cgroup to bind (or, in the container shape, wrapCgnsEnv) and the binary
// to execute then. Every E2E_WRAP_ variable is removed before the exec.
const (
	wrapPrefix    = "E2E_WRAP_"
	wrapCgroupEnv = "E2E_WRAP_CGROUP"
	wrapBinEnv    = "E2E_WRAP_BIN"
)

// wrapDaemon runs in a fresh private mount namespace (see env.start).
// As a service, it binds <hierarchy>/name over <hierarchy>/airlock in
// every cgroup hierarchy; in a container, it takes the container's cgroup
// namespace and cgroup2 mount (wrapContainer). Then it executes the
// airlock binary with the remaining arguments.
func wrapDaemon() int {
	bin := os.Getenv(wrapBinEnv)
	if bin == "" {
		fmt.Fprintln(os.Stderr, "e2e wrapper: no", wrapBinEnv)
		return 1
	}
	if err := wrapHosts(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e wrapper:", err)
		return 1
	}
	if ns := os.Getenv(wrapCgnsEnv); ns != "" {
		if err := wrapContainer(ns); err != nil {
			fmt.Fprintln(os.Stderr, "e2e wrapper:", err)
			return 1
		}
		return execDaemon(bin)
	}
	name := os.Getenv(wrapCgroupEnv)
	points, err := cgroupMounts()
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e wrapper:", err)
		return 1
	}
	for _, p := range points {
		src, dst := filepath.Join(p, name), filepath.Join(p, cgroupParent)
		for _, d := range []string{src, dst} {
			if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
				fmt.Fprintln(os.Stderr, "e2e wrapper:", err)
				return 1
			}
		}
		if err := syscall.Mount(src, dst, "", syscall.MS_BIND, ""); err != nil {
			fmt.Fprintf(os.Stderr, "e2e wrapper: bind %s on %s: %v\n", src, dst, err)
			return 1
		}
	}
	return execDaemon(bin)
}

// execDaemon executes bin with the wrapper's arguments, without the
// wrapper's environment variables.
func execDaemon(bin string) int {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, wrapPrefix) {
			env = append(env, kv)
		}
	}
	err := syscall.Exec(bin, append([]string{"airlock"}, os.Args[1:]...), env)
	fmt.Fprintln(os.Stderr, "e2e wrapper: exec:", err)
	return 1
}

// cgroupMounts returns the mount points of the cgroup hierarchies the
// runtime uses: the v1 hierarchies with the memory, cpu, cpuacct, pids or
// freezer controller or, on a host without them, the cgroup2 hierarchy.
// Only hierarchies mounted at their root count.
func cgroupMounts() ([]string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var v1, v2 []string
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || f[3] != "/" {
			continue
		}
		switch point := f[4]; g[0] {
		case "cgroup2":
			v2 = append(v2, point)
		case "cgroup":
			for _, opt := range strings.Split(g[2], ",") {
				if slices.Contains([]string{"memory", "cpu", "cpuacct", "pids", "freezer"}, opt) && !slices.Contains(v1, point) {
					v1 = append(v1, point)
				}
			}
		}
	}
	switch {
	case len(v1) > 0:
		return v1, nil
	case len(v2) > 0:
		return v2[:1], nil
	}
	return nil, errors.New("no cgroup hierarchy is mounted")
}

// removeTestCgroups removes the (by then empty) test cgroups.
func removeTestCgroups() {
	points, _ := cgroupMounts()
	for _, p := range points {
		_ = os.Remove(filepath.Join(p, cgroupName))
		_ = os.Remove(filepath.Join(p, containerRoot()))
	}
}

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(keeperEnv) == "1":
		os.Exit(keeperMain())
	case os.Getenv(wrapBinEnv) != "":
		os.Exit(wrapDaemon())
	}
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	flag.Parse()
	if os.Geteuid() != 0 {
		return m.Run() // every test skips, or fails, in newEnvWith
	}
	var err error
	rootDir, err = os.MkdirTemp("", "airlock-e2e-")
	if err == nil {
		err = os.Chmod(rootDir, 0o711)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(rootDir)
	cgroupName = "airlock-e2e-" + strings.TrimPrefix(filepath.Base(rootDir), "airlock-e2e-")
	defer removeTestCgroups()
	switch shape := os.Getenv(envShape); shape {
	case "", "service":
	case "container":
		if err := setupContainerRoot(); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s=container: %v\n", envShape, err)
			return 1
		}
		containerShape = true
	default:
		fmt.Fprintf(os.Stderr, "e2e: %s=%q: want service or container\n", envShape, shape)
		return 1
	}
	if bin := os.Getenv(envBin); bin != "" {
		if binPath, err = prebuiltBinary(bin); err != nil {
			fmt.Fprintf(os.Stderr, "e2e: %s: %v\n", envBin, err)
			return 1
		}
	} else {
		binPath = filepath.Join(rootDir, "bin", "airlock")
		t0 := time.Now()
		if err := buildBinary(binPath); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: build airlock:", err)
			return 1
		}
		fmt.Printf("e2e: built %s in %v\n", filepath.Base(binPath), time.Since(t0).Round(time.Millisecond))
	}

	code := m.Run()
	if leaks := leftovers(); len(leaks) > 0 {
		fmt.Fprintln(os.Stderr, "e2e: FAIL: left behind after the tests:")
		for _, l := range leaks {
			fmt.Fprintln(os.Stderr, "   ", l)
		}
		code = 1
	}
	return code
}

// prebuiltBinary checks the binary AIRLOCK_E2E_BIN names and returns its
// path with symlinks resolved (the leak check compares it with each
// process's /proc/<pid>/exe).
func prebuiltBinary(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("%q is not an absolute path", p)
	}
	p, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return "", fmt.Errorf("%s is not an executable file", p)
	}
	return p, nil
}

// setupContainerRoot makes the cgroup under which each env of the
// container shape gets its own (see container), if missing, and gives it,
// from the root down, the controllers containers get. It fails on a host
// with cgroup v1 hierarchies.
func setupContainerRoot() error {
	mnt, err := v2Mount()
	if err != nil {
		return err
	}
	if err := enableControllers(mnt, containerControllers); err != nil {
		return err
	}
	dir := filepath.Join(mnt, containerRoot())
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	return enableControllers(dir, containerControllers)
}

// buildBinary builds ./cmd/airlock of this module into out.
func buildBinary(out string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return err
	}
	gomod, err := exec.Command(goBin, "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	root := filepath.Dir(strings.TrimSpace(string(gomod)))
	cmd := exec.Command(goBin, "build", "-o", out, "./cmd/airlock")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%w: %s", err, b)
	}
	return nil
}

// leftovers reports, and then kills, what the tests left running: daemons
// (processes of the test binary), sandbox processes (anything with a mount
// from rootDir) and sandbox cgroups of IDs the tests saw.
func leftovers() []string {
	var out []string
	pids, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	for _, p := range pids {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		exe, _ := os.Readlink(filepath.Join(p, "exe"))
		mi, _ := os.ReadFile(filepath.Join(p, "mountinfo"))
		switch {
		case exe == binPath:
			out = append(out, fmt.Sprintf("daemon process %d", pid))
		case bytes.Contains(mi, []byte(rootDir+"/")):
			cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
			out = append(out, fmt.Sprintf("sandbox process %d (%s)", pid, strings.ReplaceAll(strings.TrimSpace(string(cmdline)), "\x00", " ")))
		default:
			continue
		}
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	keepers.Range(func(k, _ any) bool {
		pid := k.(int)
		out = append(out, fmt.Sprintf("container keeper %d", pid))
		_ = syscall.Kill(pid, syscall.SIGKILL)
		return true
	})
	seen.Range(func(k, _ any) bool {
		id := k.(string)
		if dirs := sandboxCgroups(id); len(dirs) > 0 {
			out = append(out, fmt.Sprintf("sandbox %s cgroups %v", id, dirs))
			forceRemove(id)
		}
		return true
	})
	// Each env removes its container's cgroups: any left is a leak.
	ctrs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", containerRoot(), "*"))
	for _, d := range ctrs {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			out = append(out, "container cgroup "+d)
			(&container{parent: d}).remove()
		}
	}
	return out
}

// sandboxCgroups lists the cgroup directories of sandbox id that exist, on
// cgroup v1 (one hierarchy per controller) or v2, as a service's or a
// container's (below <containerRoot>/<env>/ctr, at most 3 levels down).
func sandboxCgroups(id string) []string {
	var dirs []string
	cands, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", cgroupName, id))
	cands = append(cands, filepath.Join("/sys/fs/cgroup", cgroupName, id))
	for _, pat := range []string{"*/ctr/" + id, "*/ctr/*/" + id, "*/ctr/*/*/" + id} {
		m, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", containerRoot(), pat))
		cands = append(cands, m...)
	}
	for _, d := range cands {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// forceRemove kills every process in sandbox id's cgroups and removes
// them (bounded); it is the last resort of the leak checks.
func forceRemove(id string) {
	deadline := time.Now().Add(10 * time.Second)
	for _, root := range sandboxCgroups(id) {
		var dirs []string
		_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for time.Now().Before(deadline) {
			alive := 0
			for _, d := range dirs {
				b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						alive++
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			if alive == 0 {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		slices.Reverse(dirs) // children first
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
}

// env is one data directory and the daemons run on it, one at a time.
type env struct {
	t    *testing.T
	dir  string   // the data directory
	args []string // extra flags of `airlock serve`
	d    *daemon  // the running daemon, if any
	n    int      // daemons started

	stopWatch context.CancelFunc
	watchDone chan struct{}

	// container says the daemons run in a container's cgroup: ctr, made
	// at the first start, whose parent gives it the controllers in give.
	container bool
	give      []string
	ctr       *container

	mu  sync.Mutex
	ids map[string]bool // every sandbox ID the data dir held
}

// envOptions are how an env's daemons run, beyond their flags.
type envOptions struct {
	// container runs them in a container's cgroup (cgroup v2 only),
	// whatever AIRLOCK_E2E_SHAPE says.
	container bool
	// withhold are controllers the container's parent does not give it
	// (with container).
	withhold []string
}

// newEnv makes a fresh data directory for t and registers its cleanup:
// every sandbox left is deleted through a daemon (started for that if
// none runs), the daemon is stopped, and the test fails if a sandbox or
// its cgroups outlive that. Its daemons run as AIRLOCK_E2E_SHAPE says.
func newEnv(t *testing.T, args ...string) *env {
	t.Helper()
	return newEnvWith(t, envOptions{container: containerShape}, args...)
}

// newEnvWith is newEnv with options.
func newEnvWith(t *testing.T, opts envOptions, args ...string) *env {
	t.Helper()
	testutil.RequireRoot(t, "the end-to-end tests run a real daemon, which must run as root (it creates namespaces, cgroups and mounts)")
	if opts.container && !containerShape {
		if _, err := v2Mount(); err != nil {
			t.Skipf("a daemon in a container's cgroup: %v", err)
		}
	}
	dir, err := os.MkdirTemp(rootDir, "data-"+strings.ReplaceAll(t.Name(), "/", "_")+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, args: args, ids: map[string]bool{}, container: opts.container}
	for _, c := range containerControllers {
		if !slices.Contains(opts.withhold, c) {
			e.give = append(e.give, c)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	e.stopWatch, e.watchDone = cancel, make(chan struct{})
	go e.watch(ctx)
	t.Cleanup(e.cleanup)
	return e
}

// watch records the sandbox IDs that appear in the data directory (pool
// members included, which the API never shows) for the leak checks.
func (e *env) watch(ctx context.Context) {
	defer close(e.watchDone)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		e.scanIDs()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// scanIDs records the sandbox directories present now and returns them.
func (e *env) scanIDs() []string {
	ents, _ := os.ReadDir(filepath.Join(e.dir, "sandboxes"))
	var ids []string
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, de := range ents {
		if strings.HasPrefix(de.Name(), "sb-") {
			seen.Store(de.Name(), true)
			e.ids[de.Name()] = true
			ids = append(ids, de.Name())
		}
	}
	return ids
}

// seenIDs returns every sandbox ID the data dir has held so far.
func (e *env) seenIDs() []string {
	e.scanIDs()
	e.mu.Lock()
	defer e.mu.Unlock()
	var ids []string
	for id := range e.ids {
		ids = append(ids, id)
	}
	return ids
}

// track records a sandbox ID that the API returned.
func track(id string) { seen.Store(id, true) }

func (e *env) cleanup() {
	t := e.t
	defer func() {
		e.stopWatch()
		<-e.watchDone
		if t.Failed() {
			e.dumpLogs()
		}
		if e.ctr != nil {
			for _, p := range e.ctr.remove() {
				t.Errorf("cleanup: container: %s", p)
			}
		}
		if err := os.RemoveAll(e.dir); err != nil {
			t.Errorf("remove data dir: %v", err)
		}
	}()
	if e.d == nil && len(e.scanIDs()) == 0 {
		return
	}
	if e.d == nil {
		e.start()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sbs, err := e.d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Errorf("cleanup: list sandboxes: %v", err)
	}
	for _, sb := range sbs {
		track(sb.ID)
		if sb.State == client.StateStopped {
			continue
		}
		if err := e.d.C.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, client.ErrNotFound) {
			t.Errorf("cleanup: delete %s: %v", sb.ID, err)
		}
	}
	e.d.Stop()
	if ids := e.scanIDs(); len(ids) > 0 {
		t.Errorf("cleanup: sandbox state left in the data dir after deleting everything and a graceful stop: %v", ids)
	}
	for _, id := range e.scanIDs() {
		forceRemove(id)
	}
}

// dumpLogs prints the warnings and errors of every daemon of e, and the
// last lines of each log.
func (e *env) dumpLogs() {
	for i := 1; i <= e.n; i++ {
		b, err := os.ReadFile(e.logPath(i))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		var keep []string
		for j, l := range lines {
			if j >= len(lines)-15 || strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
				keep = append(keep, l)
			}
		}
		if len(keep) > 80 {
			keep = keep[len(keep)-80:]
		}
		e.t.Logf("daemon %d log (warnings, errors, last lines):\n%s", i, strings.Join(keep, "\n"))
	}
}

// logLines returns the lines of every daemon log of e that contain s.
func (e *env) logLines(s string) string {
	var out []string
	for i := 1; i <= e.n; i++ {
		for _, l := range strings.Split(readLog(e, i), "\n") {
			if strings.Contains(l, s) {
				out = append(out, fmt.Sprintf("daemon %d: %s", i, l))
			}
		}
	}
	return strings.Join(out, "\n")
}

func (e *env) logPath(n int) string {
	return filepath.Join(rootDir, fmt.Sprintf("%s.daemon%d.log", filepath.Base(e.dir), n))
}

// daemon is one `airlock serve` process.
type daemon struct {
	e   *env
	cmd *exec.Cmd
	// URL is the API's base URL, Key the admin key.
	URL, Key string
	// C is a client with the admin key.
	C *client.Client
	// AnnouncedKey is the admin key the daemon printed ("" if none).
	AnnouncedKey string
	// StartedIn is how long the daemon took to serve.
	StartedIn time.Duration

	done    chan struct{} // closed when the process has exited
	waitErr error
	mu      sync.Mutex
	stdout  bytes.Buffer
}

// start starts a daemon on e's data directory and returns once it
// serves. e must have no running daemon.
func (e *env) start() *daemon {
	e.t.Helper()
	d, err := e.tryStart()
	if err != nil {
		e.dumpLogs()
		e.t.Fatal(err)
	}
	return d
}

// tryStart is start, returning why a daemon did not serve (it exited
// first, or did not serve in time and was killed) instead of failing.
func (e *env) tryStart() (*daemon, error) {
	t := e.t
	t.Helper()
	if e.d != nil {
		t.Fatal("harness: a daemon is already running on this data dir")
	}
	cmd, release, err := e.command(append([]string{"serve", "--data-dir", e.dir, "--listen", "127.0.0.1:0", "--log-level", "debug"}, e.args...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !slices.Contains(cmd.Args, "--pool-size") {
		cmd.Args = append(cmd.Args, "--pool-size", "0")
	}
	e.n++
	logf, err := os.Create(e.logPath(e.n))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout = pw
	cmd.Stderr = logf
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		t.Fatal(err)
	}
	pw.Close()
	d := &daemon{e: e, cmd: cmd, done: make(chan struct{})}
	go func() {
		d.waitErr = cmd.Wait()
		close(d.done)
	}()
	ready := make(chan string, 1)
	go d.readStdout(pr, ready)
	select {
	case addr := <-ready:
		d.StartedIn = time.Since(t0)
		d.URL = "http://" + addr
	case <-d.done:
		return nil, fmt.Errorf("daemon exited before serving: %v; stdout: %q", d.waitErr, d.Stdout())
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-d.done
		return nil, fmt.Errorf("daemon did not serve within %v", startTimeout)
	}
	if e.container {
		if err := e.ctr.check(d.Pid()); err != nil {
			d.Kill()
			t.Fatalf("harness: the container shape does not hold: %v", err)
		}
	}
	key, err := os.ReadFile(filepath.Join(e.dir, "admin.key"))
	if err != nil {
		d.Kill()
		t.Fatalf("admin key: %v", err)
	}
	d.Key = strings.TrimSpace(string(key))
	d.AnnouncedKey = announcedKey(d.Stdout())
	hc := &http.Client{Transport: &http.Transport{
		MaxIdleConns:        256,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     30 * time.Second,
	}}
	d.C, err = client.New(d.URL, d.Key, client.WithHTTPClient(hc))
	if err != nil {
		d.Kill()
		t.Fatal(err)
	}
	e.d = d
	t.Logf("daemon %d serving at %s after %v", e.n, d.URL, d.StartedIn.Round(time.Millisecond))
	return d, nil
}

// command returns the command that runs `airlock args...` the way e's
// daemons run: through the wrapper (the test binary re-executed), which
// in a private mount namespace binds the test cgroup as the cgroup parent
// (see cgroupParent) or, in the container shape, takes the container's
// cgroup namespace, and then executes airlock in its place (same pid).
// release frees what cmd.Start needs, once it ran.
func (e *env) command(args ...string) (cmd *exec.Cmd, release func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	cmd = exec.Command(self, args...)
	cmd.Env = append(daemonEnv(), wrapBinEnv+"="+binPath)
	// The daemon dies with the test binary; its sandboxes do not (they
	// are in their own sessions), and the final leak check finds them.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Unshareflags: syscall.CLONE_NEWNS}
	if !e.container {
		cmd.Env = append(cmd.Env, wrapCgroupEnv+"="+cgroupName)
		return cmd, func() {}, nil
	}
	if e.ctr == nil {
		name := strings.TrimPrefix(filepath.Base(e.dir), "data-")
		if e.ctr, err = newContainer(name, e.give); err != nil {
			return nil, nil, fmt.Errorf("container: %w", err)
		}
	}
	release, err = e.ctr.prepare(cmd)
	if err != nil {
		return nil, nil, fmt.Errorf("container: %w", err)
	}
	return cmd, release, nil
}

// cgroupParentDir is the host directory of e's daemons' cgroup parent on
// cgroup v2: the test cgroup bound as the parent, or the container's
// C/airlock.
func (e *env) cgroupParentDir() string {
	if e.container {
		return e.ctr.sandboxParent()
	}
	return filepath.Join("/sys/fs/cgroup", cgroupName)
}

// daemonEnv is the test's environment without AIRLOCK_* variables (the
// daemon refuses unknown ones, such as the harness's own).
func daemonEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AIRLOCK_") {
			env = append(env, kv)
		}
	}
	return env
}

// readStdout keeps the daemon's stdout and sends the listening address
// once announced.
func (d *daemon) readStdout(r io.ReadCloser, ready chan<- string) {
	defer r.Close()
	sc := bufio.NewScanner(r)
	sent := false
	for sc.Scan() {
		line := sc.Text()
		d.mu.Lock()
		d.stdout.WriteString(line + "\n")
		d.mu.Unlock()
		if rest, ok := strings.CutPrefix(line, "Airlock is listening on http://"); ok && !sent {
			addr, _, _ := strings.Cut(rest, " ")
			ready <- addr
			sent = true
		}
	}
}

// Stdout returns what the daemon printed so far.
func (d *daemon) Stdout() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stdout.String()
}

// announcedKey finds the admin key in the daemon's first-start banner: the
// first non-empty line after the one announcing it.
func announcedKey(stdout string) string {
	lines := strings.Split(stdout, "\n")
	for i, l := range lines {
		if !strings.HasPrefix(l, "Created the admin API key") {
			continue
		}
		for _, k := range lines[i+1:] {
			if k = strings.TrimSpace(k); k != "" {
				return k
			}
		}
	}
	return ""
}

// Pid is the daemon's process id.
func (d *daemon) Pid() int { return d.cmd.Process.Pid }

// Stop sends SIGTERM and waits for a clean exit (bounded); a daemon that
// does not exit in time is killed and the test fails.
func (d *daemon) Stop() {
	t := d.e.t
	t.Helper()
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	t0 := time.Now()
	select {
	case <-d.done:
		if d.waitErr != nil {
			t.Errorf("daemon exited with %v after SIGTERM", d.waitErr)
		}
		t.Logf("daemon %d stopped (SIGTERM) in %v", d.e.n, time.Since(t0).Round(time.Millisecond))
	case <-time.After(stopTimeout):
		t.Errorf("daemon did not exit within %v of SIGTERM; killing it", stopTimeout)
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.e.d = nil
}

// Kill sends SIGKILL and waits until the process is reaped.
func (d *daemon) Kill() {
	t := d.e.t
	t.Helper()
	_ = d.cmd.Process.Kill()
	select {
	case <-d.done:
	case <-time.After(killTimeout):
		t.Fatalf("daemon not reaped within %v of SIGKILL", killTimeout)
	}
	d.e.d = nil
}

// Alive reports whether the process still runs.
func (d *daemon) Alive() bool {
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// procStatusKB returns a "kB" field of /proc/pid/status, e.g. VmRSS.
func procStatusKB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// rssSampler samples a process's VmRSS until stopped and keeps the peak.
type rssSampler struct {
	stop chan struct{}
	done chan struct{}
	peak int64 // kB
	n    int
}

func sampleRSS(pid int, every time.Duration) *rssSampler {
	s := &rssSampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			if v, err := procStatusKB(pid, "VmRSS"); err == nil {
				s.peak = max(s.peak, v)
				s.n++
			}
			select {
			case <-s.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Stop ends sampling and returns the peak VmRSS in kB and the samples.
func (s *rssSampler) Stop() (peakKB int64, samples int) {
	close(s.stop)
	<-s.done
	return s.peak, s.n
}

// rawResponse is the status, error code and body of a raw request.
type rawResponse struct {
	Status int
	Code   string
	Body   []byte
}

// raw sends a request with the given key ("" for none) and returns the
// status and the error code of the body, if it is an API error.
func raw(t *testing.T, d *daemon, method, path, key, body string) rawResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, d.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	out := rawResponse{Status: resp.StatusCode, Body: b}
	var eb struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &eb) == nil {
		out.Code = eb.Error.Code
		if resp.StatusCode >= 400 && eb.Error.Message == "" {
			t.Errorf("%s %s: %d error without a message: %s", method, path, resp.StatusCode, b)
		}
	}
	return out
}

// percentile returns the p-th percentile (0-100) of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
}

// ctxT returns a context bounded by d and cancelled at the end of t.
func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
