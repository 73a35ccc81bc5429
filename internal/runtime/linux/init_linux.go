package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroups"
	"github.com/airlock-sandbox/airlock/internal/confine"
)

const (
	// agentBinaryPath is where the agent binary is bound, read-only,
	// inside every sandbox.
	agentBinaryPath = "/.airlock/bin/airlock"
)

// RunAgent is the body of `airlock agent`: the sandbox's PID 1, started by
// Runtime.Create in fresh namespaces. It returns an exit code.
//
// It runs in two stages, two images of the same process. The setup stage
// reads the configuration from the daemon, builds and enters the root
// filesystem and restricts the filesystem with Landlock; then it
// re-executes the agent binary inside the sandbox. The serve stage confines
// itself further (capabilities, seccomp), opens the delegated cgroups and
// serves the agent protocol until it is killed. The re-exec is what puts
// every sandboxed process in one Landlock domain: landlock_restrict_self
// gives each thread of the setup stage a domain of its own, and children
// forked from different threads could not signal one another (nor could the
// agent kill them on a timeout). The serve stage's threads all descend from
// the one thread that called execve.
func RunAgent() int {
	if os.Getenv(stageEnv) == stageServe {
		return serveStage()
	}
	return setupStage()
}

// stageEnv, set to stageServe, is the whole environment of the serve stage.
const (
	stageEnv   = "AIRLOCK_AGENT_STAGE"
	stageServe = "serve"
)

// exitDeadline is the agent's exit status when it ended its sandbox at
// the sandbox's deadline (agent.Options.End).
const exitDeadline = 3

// maxConfigBytes caps the configuration the agent reads.
const maxConfigBytes = 16 << 20

// agentStart does what both stages do first: it opens the status pipe and
// the log, checks that the agent is PID 1, swallows signals and reads the
// configuration. On failure it has reported the error and returns ok false.
func agentStart() (status *os.File, log *slog.Logger, cfg initConfig, fail func(error) int, ok bool) {
	status = os.NewFile(fdStatus, "status")
	log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	fail = func(err error) int {
		log.Error("agent setup failed", "err", err)
		// The daemon shows this line to the caller: keep it free of host
		// paths beyond what the daemon already knows.
		fmt.Fprintf(status, "%s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	if os.Getpid() != 1 {
		fail(errors.New("agent must run as PID 1 of a new sandbox"))
		return status, log, cfg, fail, false
	}
	// Swallow every catchable signal: as PID 1 an unhandled SIGTERM from a
	// process with the same uid would otherwise end the sandbox. SIGKILL
	// from inside the PID namespace is ignored by the kernel.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	// fdConfig is read with raw system calls and never closed here: the
	// setup stage replaces it with the copy it hands to the serve stage.
	b, fds, err := readConfigFD(fdConfig, maxConfigBytes)
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		fail(fmt.Errorf("read config: %w", err))
		return status, log, cfg, fail, false
	}
	cfg.layerFDs = fds
	return status, log.With("sandbox", cfg.ID), cfg, fail, true
}

// setupStage builds the sandbox around the agent and re-executes it.
func setupStage() int {
	status, log, cfg, fail, ok := agentStart()
	if !ok {
		return 1
	}
	// Opened now, while /proc/sys is writable; written once the agent
	// has made the last namespace it needs (its cgroup namespace, below).
	nsLimits, err := openNamespaceLimits()
	if err != nil {
		return fail(fmt.Errorf("namespace limits: %w", err))
	}
	defer closeAll(nsLimits)
	// Every sandbox starts with Docker's umask, whatever the daemon's.
	unix.Umask(0o022)
	if err := setupRootfs(&cfg); err != nil {
		return fail(fmt.Errorf("root filesystem: %w", err))
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return fail(fmt.Errorf("hostname: %w", err))
	}
	if err := loopbackUp(); err != nil {
		return fail(fmt.Errorf("loopback: %w", err))
	}
	if err := setRlimits(&cfg); err != nil {
		return fail(fmt.Errorf("rlimits: %w", err))
	}
	// Non-dumpable: sandboxed code, even root inside, cannot ptrace the
	// agent or open /proc/1/{exe,fd,mem,environ}. The serve stage sets it
	// again (execve resets it).
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("dumpable: %w", err))
	}
	// The writable layer's descriptor is a writable tree for Landlock
	// too, or ExportChanges could not read it: it lies outside the
	// sandbox's root, where no sandboxed process can reach it.
	policy, err := agentPolicy(append(slices.Clone(cfg.CgroupFDs), cfg.ChangesFD), cfg.Build)
	if err != nil {
		return fail(fmt.Errorf("confine: %w", err))
	}
	res, err := confine.RestrictFiles(policy)
	if err != nil {
		return fail(fmt.Errorf("confine: %w", err))
	}
	log.Debug("filesystem restricted", "result", res)
	if err := passConfig(&cfg); err != nil {
		return fail(fmt.Errorf("pass config: %w", err))
	}
	// A cgroup namespace rooted at the agent's cgroup, so that sandboxed
	// code sees /proc/self/cgroup as "/../work/c1" instead of the host's
	// path with the sandbox id. unshare applies to the calling thread
	// only; that thread then execs, and the serve stage is all in it.
	runtime.LockOSThread() // never unlocked: this thread becomes the serve stage
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fail(fmt.Errorf("cgroup namespace: %w", err))
	}
	if err := closeNamespaces(nsLimits); err != nil {
		return fail(fmt.Errorf("namespace limits: %w", err))
	}
	// On cgroup v2 the daemon started the agent in <id> itself, so that
	// the namespace just made is rooted there and holds work/ as well;
	// the agent now moves into <id>/agent (a no-op on v1).
	if cfg.CgroupSpec != "" {
		if err := cgroups.EnterHome(cfg.CgroupSpec); err != nil {
			return fail(fmt.Errorf("cgroups: %w", err))
		}
	}
	// Emptying the bounding set on this one thread is much cheaper than
	// on every thread of the serve stage; the capabilities the agent
	// needs survive the exec in its inheritable set.
	if err := confine.NarrowBoundingForExec(keptCapabilities(cfg.Build)); err != nil {
		return fail(fmt.Errorf("confine: %w", err))
	}
	if _, err := unix.FcntlInt(uintptr(cfg.ChangesFD), unix.F_SETFD, 0); err != nil {
		return fail(fmt.Errorf("writable layer: %w", err))
	}
	err = syscall.Exec(agentBinaryPath, os.Args, []string{stageEnv + "=" + stageServe})
	runtime.KeepAlive(status) // its finalizer must not close fdStatus before the exec
	return fail(fmt.Errorf("re-execute agent: %w", err))
}

// serveStage finishes confinement and serves the daemon.
func serveStage() int {
	status, log, cfg, fail, ok := agentStart()
	if !ok {
		return 1
	}
	// The configuration is read: its memfd (executable, like every
	// memfd) has nothing more to give anyone.
	unix.Close(fdConfig)
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("dumpable: %w", err))
	}
	execCgroups, err := delegatedCgroups(&cfg)
	if err != nil {
		return fail(fmt.Errorf("cgroups: %w", err))
	}
	var changes *os.File
	if cfg.ChangesFD > 0 {
		unix.CloseOnExec(cfg.ChangesFD)
		changes = os.NewFile(uintptr(cfg.ChangesFD), "changes")
	}
	// clone3 is allowed (the agent places children with
	// CLONE_INTO_CGROUP on cgroup v2): no namespace can be made in the
	// sandbox any more (see closeNamespaces), which Apply checks.
	res, err := confine.Apply(confine.Policy{FilesRestricted: true, KeepBounding: keptCapabilities(cfg.Build), Clone3: true})
	if err != nil {
		return fail(fmt.Errorf("confine: %w", err))
	}
	log.Info("confined", "result", res)

	if err := startEgressBridge(&cfg, log); err != nil {
		return fail(fmt.Errorf("egress bridge: %w", err))
	}

	lnFile := os.NewFile(fdListener, "control")
	ln, err := net.FileListener(lnFile)
	lnFile.Close()
	if err != nil {
		return fail(fmt.Errorf("control socket: %w", err))
	}

	users, defaultUser := agentUsers(cfg.Account)
	a, err := agent.New(agent.Options{
		Root:        "/",
		Users:       users,
		DefaultUser: defaultUser,
		Workdir:     cfg.Rootfs.Workdir,
		BaseEnv:     cfg.Env,
		SwitchUser:  true,
		ReapAll:     true,
		Cgroups:     execCgroups,
		Changes:     changes,
		// The deadline has passed and the agent has killed every
		// process: as PID 1 its exit ends the PID namespace (the kernel
		// kills whatever is left), and the next daemon records the end.
		End:      func() { os.Exit(exitDeadline) },
		Deadline: cfg.Deadline,
		Logger:   log,
	})
	if err != nil {
		return fail(err)
	}
	fmt.Fprintln(status, "ok")
	status.Close()
	log.Info("agent ready")
	if err := a.Serve(context.Background(), ln); err != nil {
		log.Error("agent stopped", "err", err)
		return 1
	}
	return 0
}

// passConfig puts cfg in a memfd at fdConfig (replacing the daemon's pipe,
// without close-on-exec) for the serve stage to read.
func passConfig(cfg *initConfig) error {
	b, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	fd, err := unix.MemfdCreate("airlock-config", unix.MFD_CLOEXEC)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for off := 0; off < len(b); {
		n, err := unix.Write(fd, b[off:])
		if err != nil {
			return err
		}
		off += n
	}
	if _, err := unix.Seek(fd, 0, 0); err != nil {
		return err
	}
	return unix.Dup3(fd, fdConfig, 0)
}

// debugAgent makes agents log at debug level; the package's tests set it.
var debugAgent = false

func logLevel() slog.Level {
	if debugAgent {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// loopbackUp brings up lo, the only interface of the sandbox's network
// namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP | unix.IFF_RUNNING)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// setRlimits sets the per-process limits every sandboxed process
// inherits. syscall.Setrlimit (not unix.) so that the Go runtime does not
// restore its saved RLIMIT_NOFILE in children.
func setRlimits(cfg *initConfig) error {
	lim := []struct {
		res int
		v   uint64
	}{
		{unix.RLIMIT_NOFILE, cfg.Limits.NoFile},
		// No file may be larger than the disk, not even a sparse one
		// (tmpfs would allow that); real data hits ENOSPC first.
		{unix.RLIMIT_FSIZE, uint64(cfg.Limits.DiskBytes) + 1<<20},
		{unix.RLIMIT_CORE, 0},
	}
	for _, l := range lim {
		if err := syscall.Setrlimit(l.res, &syscall.Rlimit{Cur: l.v, Max: l.v}); err != nil {
			return fmt.Errorf("rlimit %d: %w", l.res, err)
		}
	}
	return nil
}

// namespaceLimits are the per-user-namespace limits on namespaces the
// sandbox may create. The user namespace one must exist (Linux 4.9); the
// others (time: Linux 5.6) are closed where the kernel has them.
var namespaceLimits = []struct {
	name     string
	required bool
}{
	{"user", true}, {"mnt", false}, {"pid", false}, {"net", false}, {"ipc", false},
	{"uts", false}, {"cgroup", false}, {"time", false},
}

// openNamespaceLimits opens /proc/sys/user/max_<ns>_namespaces for
// writing. These limits are the agent's user namespace's own (the kernel
// picks the table of the opener's user namespace); the agent, root of it
// with CAP_SYS_RESOURCE, may set them, sandboxed code may not.
func openNamespaceLimits() ([]*os.File, error) {
	var files []*os.File
	for _, l := range namespaceLimits {
		f, err := os.OpenFile("/proc/sys/user/max_"+l.name+"_namespaces", os.O_WRONLY, 0)
		if err != nil {
			if !l.required && errors.Is(err, fs.ErrNotExist) {
				continue
			}
			closeAll(files)
			return nil, err
		}
		files = append(files, f)
	}
	return files, nil
}

// closeNamespaces sets each limit to 0: nothing in the sandbox can make a
// namespace from now on, whatever system call it uses (clone3 included,
// whose flags seccomp cannot read). Every namespace but a user namespace
// needs CAP_SYS_ADMIN, which no sandboxed process has; the user namespace
// limit is the one that matters.
func closeNamespaces(files []*os.File) error {
	for _, f := range files {
		if _, err := f.WriteString("0"); err != nil {
			return fmt.Errorf("%s: %w", f.Name(), err)
		}
	}
	return nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}
