package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
)

// In-sandbox identities. Root inside the sandbox maps to the sandbox's
// host uid base; "user" is uid 1000 as in E2B.
const (
	sandboxUserUID = 1000
	sandboxUserGID = 1000
	sandboxHome    = "/home/user"
	// agentBinaryPath is where the agent binary is bound, read-only,
	// inside every sandbox.
	agentBinaryPath = "/.airlock/bin/airlock"
)

// RunAgent is the body of `airlock agent`: the sandbox's PID 1, started by
// Runtime.Create in fresh namespaces. It reads its configuration from the
// daemon, builds and enters the root filesystem, confines itself and
// serves the agent protocol until it is killed. It returns an exit code.
func RunAgent() int {
	status := os.NewFile(fdStatus, "status")
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	fail := func(err error) int {
		log.Error("agent setup failed", "err", err)
		// The daemon shows this line to the caller: keep it free of host
		// paths beyond what the daemon already knows.
		fmt.Fprintf(status, "%s\n", strings.ReplaceAll(err.Error(), "\n", " "))
		return 1
	}
	if os.Getpid() != 1 {
		return fail(errors.New("agent must run as PID 1 of a new sandbox"))
	}
	cfgFile := os.NewFile(fdConfig, "config")
	var cfg initConfig
	if err := json.NewDecoder(cfgFile).Decode(&cfg); err != nil {
		return fail(fmt.Errorf("read config: %w", err))
	}
	cfgFile.Close()
	log = log.With("sandbox", cfg.ID)

	// Swallow every catchable signal: as PID 1 an unhandled SIGTERM from a
	// process with the same uid would otherwise end the sandbox. SIGKILL
	// from inside the PID namespace is ignored by the kernel.
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()

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
	// agent or open /proc/1/{exe,fd,mem,environ}.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("dumpable: %w", err))
	}

	execCgroups, err := delegatedCgroups(&cfg)
	if err != nil {
		return fail(fmt.Errorf("cgroups: %w", err))
	}
	if err := confineAgent(cfg.CgroupFDs, log); err != nil {
		return fail(fmt.Errorf("confine: %w", err))
	}

	lnFile := os.NewFile(fdListener, "control")
	ln, err := net.FileListener(lnFile)
	lnFile.Close()
	if err != nil {
		return fail(fmt.Errorf("control socket: %w", err))
	}

	a, err := agent.New(agent.Options{
		Root: "/",
		Users: map[string]agent.User{
			"user": {Name: "user", UID: sandboxUserUID, GID: sandboxUserGID, Home: sandboxHome},
			"root": {Name: "root", UID: 0, GID: 0, Home: "/root"},
		},
		DefaultUser: "user",
		BaseEnv:     cfg.Env,
		SwitchUser:  true,
		ReapAll:     true,
		Cgroups:     execCgroups,
		Logger:      log,
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
