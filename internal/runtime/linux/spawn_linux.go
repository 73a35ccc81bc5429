package linux

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/internal/cgroups"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
	"github.com/airlock-sandbox/airlock/internal/tracing"
)

// AgentCommand is the argument that makes the airlock binary run as a
// sandbox's PID 1 (see RunAgent).
const AgentCommand = "agent"

// File descriptors the agent inherits, in this order.
const (
	fdListener = 3 + iota // the control socket's listening fd
	fdConfig              // read end of the pipe carrying initConfig
	fdStatus              // write end of the pipe for "ok" or an error
	fdCgroups             // first delegated cgroup directory
)

// initConfig is what the daemon tells the agent at start, over fdConfig.
type initConfig struct {
	ID       string            `json:"id"`
	Hostname string            `json:"hostname"`
	Rootfs   runtime.Rootfs    `json:"rootfs"`
	Env      map[string]string `json:"env"`
	Limits   runtime.Limits    `json:"limits"`
	// MountDir is an empty host directory, owned by the sandbox's root,
	// on which the agent mounts its writable layer and root filesystem
	// inside its private mount namespace.
	MountDir string `json:"mount_dir"`
	// AgentBinary is the host path of the binary bound read-only into the
	// sandbox at agentBinaryPath.
	AgentBinary string `json:"agent_binary"`
	// CgroupSpec describes the inherited fds of the delegated cgroup
	// directories (cgroups.OpenSpec); CgroupFDs lists those fds.
	CgroupSpec string `json:"cgroup_spec"`
	CgroupFDs  []int  `json:"cgroup_fds"`
	// IDMappedLayers says that the daemon passed, with the configuration,
	// one id-mapped mount per layer (see idmapLayers), in layer order.
	IDMappedLayers bool `json:"idmapped_layers,omitempty"`
	// Build makes a build sandbox (runtime.Spec.Build).
	Build bool `json:"build,omitempty"`
	// Deadline is when the agent ends the sandbox by itself
	// (runtime.Spec.Deadline); zero for none.
	Deadline time.Time `json:"deadline,omitzero"`
	// EgressFD is the inherited descriptor of the sandbox's egress
	// directory, on a detached bind mount (see egressDir); the agent
	// bridges runtime.EgressBridgeAddr to the socket the daemon binds
	// there. 0 for none (a build sandbox).
	EgressFD int `json:"egress_fd,omitempty"`

	// ChangesFD is set by the setup stage for the serve stage: a
	// descriptor of the overlay's upper directory (the writable layer),
	// which ExportChanges reads. The old root, where it lives, is gone
	// from the mount tree after pivot_root.
	ChangesFD int `json:"changes_fd,omitempty"`
	// Account is set by the setup stage for the serve stage: the default
	// account, Rootfs.User looked up in the template's /etc/passwd.
	Account agent.User `json:"account"`

	// layerFDs are the descriptors that came with the configuration.
	layerFDs []int
}

// Create implements runtime.Runtime.
func (r *Runtime) Create(ctx context.Context, spec runtime.Spec) (_ runtime.Instance, retErr error) {
	if err := validateSpec(&spec); err != nil {
		return nil, err
	}
	limits, err := r.fillLimits(spec.Limits)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	spec.Limits = limits
	slot, err := r.allocSlot(spec.ID)
	if err != nil {
		return nil, err
	}
	base := r.uidBase(slot)
	dir := filepath.Join(r.cfg.StateDir, spec.ID)

	var cg *cgroups.Sandbox
	var cmd *exec.Cmd
	var agent *agentProc
	defer func() {
		if retErr == nil {
			return
		}
		cleanupCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cg != nil || agent != nil {
			err := r.killSandbox(cleanupCtx, spec.ID, cg, agent, nil)
			if agent != nil {
				agent.close()
			}
			if err != nil {
				// Fail closed: the slot and the state dir stay.
				return
			}
			if cg != nil {
				_ = cg.Remove(cleanupCtx)
			}
		} else if cmd != nil && cmd.Process != nil {
			_ = cmd.Process.Kill()
		}
		_ = removeStateDir(dir)
		r.freeSlot(slot, spec.ID)
	}()

	if err := os.Mkdir(dir, 0o711); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("sandbox %s: %w", spec.ID, errdefs.ErrAlreadyExists)
		}
		return nil, fmt.Errorf("sandbox %s: state dir: %w", spec.ID, err)
	}
	// Exactly 0711 whatever the daemon's umask: the agent, an
	// unprivileged host uid, must traverse it to reach its mount dir.
	if err := os.Chmod(dir, 0o711); err != nil {
		return nil, fmt.Errorf("sandbox %s: state dir: %w", spec.ID, err)
	}
	mnt := filepath.Join(dir, mntDir)
	if err := os.Mkdir(mnt, 0o700); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	if err := os.Chown(mnt, int(base), int(base)); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}

	_, cgSpan := tracing.Start(ctx, "runtime.cgroup")
	cg, err = r.cg.Create(spec.ID, cgroups.Limits{
		MemoryBytes:      limits.MemoryBytes,
		CPUs:             limits.CPUs,
		Pids:             limits.Pids,
		AgentMemoryBytes: AgentMemoryAllowance,
		AgentPids:        AgentPidsAllowance,
	}, cgroups.Owner{UID: int(base), GID: int(base)})
	tracing.End(cgSpan, err)
	if err != nil {
		cg = nil
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}

	ln, err := listenControl(filepath.Join(dir, socketFile))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: control socket: %w", spec.ID, err)
	}
	lnFile, err := ln.File()
	ln.Close() // the agent owns the socket from now on; lnFile keeps it open
	if err != nil {
		return nil, err
	}
	defer lnFile.Close()

	// A socket, not a pipe: the layers' id-mapped mounts travel with the
	// configuration.
	cfgR, cfgW, err := socketPair()
	if err != nil {
		return nil, err
	}
	defer cfgR.Close()
	defer cfgW.Close()
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer statusR.Close()
	defer statusW.Close()

	logf, err := os.OpenFile(filepath.Join(dir, logFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	defer logf.Close()

	deleg, err := cg.Delegate()
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	defer deleg.Close()

	ic := initConfig{
		ID:          spec.ID,
		Hostname:    spec.Hostname,
		Rootfs:      spec.Rootfs,
		Env:         spec.BaseEnv(),
		Limits:      limits,
		MountDir:    mnt,
		AgentBinary: r.bin,
		Build:       spec.Build,
		Deadline:    spec.Deadline,
	}
	extra := []*os.File{lnFile, cfgR, statusW}
	cgFiles, cgSpec := deleg.ExtraFiles(fdListener + len(extra))
	ic.CgroupSpec = cgSpec
	for i := range cgFiles {
		ic.CgroupFDs = append(ic.CgroupFDs, fdListener+len(extra)+i)
	}
	extra = append(extra, cgFiles...)
	if !spec.Build {
		egress, err := egressDir(dir, int(base))
		if err != nil {
			return nil, fmt.Errorf("sandbox %s: egress: %w", spec.ID, err)
		}
		defer egress.Close()
		ic.EgressFD = fdListener + len(extra)
		extra = append(extra, egress)
	}

	cmd = &exec.Cmd{
		Path:       r.cfg.AgentPath,
		Args:       r.cfg.AgentArgs,
		Env:        []string{}, // nothing of the daemon's environment
		Dir:        "/",
		Stderr:     logf,
		ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
				syscall.CLONE_NEWNET | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(r.cfg.UIDRangeSize)}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: int(r.cfg.UIDRangeSize)}},
			GidMappingsEnableSetgroups: true,
			// Become root of the new user namespace (host uid base) before
			// exec, so the agent has capabilities over its namespaces.
			Credential: &syscall.Credential{Uid: 0, Gid: 0},
			Setsid:     true,
		},
	}
	// The agent's start: spawned into its namespaces, handed the layers
	// (runtime.layers), it mounts the overlay rootfs, pivots into it and
	// reports ready; then the limits are armed.
	startCtx, startSpan := tracing.Start(ctx, "runtime.agent_start")
	defer func() { tracing.End(startSpan, retErr) }()
	started := false
	pid, err := cg.StartInAgent(cmd.SysProcAttr, func() (int, error) {
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		started = true
		return cmd.Process.Pid, nil
	})
	if !started {
		cmd = nil
		return nil, fmt.Errorf("sandbox %s: start agent: %w", spec.ID, err)
	}
	// Our child, not yet waited for: its pid cannot have been reused. The
	// pidfd is how Destroy kills it (and with it the PID namespace)
	// whatever its cgroups say, and how the daemon sees it exit, at once
	// and without a thread blocked per sandbox (see agentProc), and
	// reaps it while this daemon runs; after a restart it is no longer
	// our child and init reaps it.
	pidfd, perr := unix.PidfdOpen(pid, 0)
	if perr == nil {
		agent, perr = newAgentProc(pidfd, true)
	}
	if perr != nil {
		// Never seen (the host check requires pidfds): kill and reap
		// it the old way; the deferred cleanup removes the rest.
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("sandbox %s: pidfd of the agent: %w", spec.ID, errdefs.ErrNotSupported)
	}
	// The agentProc reaps it: the os.Process's own pidfd (Go keeps one
	// per started process until Wait) is a descriptor too many.
	_ = cmd.Process.Release()
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	cfgR.Close()
	statusW.Close()
	_, layerSpan := tracing.Start(startCtx, "runtime.layers", tracing.KeyLayers.Int(len(spec.Rootfs.Layers)))
	layerFiles, idmapped, err := idmapLayers(pid, spec.Rootfs.Layers)
	tracing.End(layerSpan, err)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	if !idmapped {
		r.warnNoIDMap.Do(func() {
			r.log.Warn("template layers are on a filesystem that cannot be id-mapped: their files show as owned by nobody inside sandboxes")
		})
	}
	ic.IDMappedLayers = idmapped
	b, err := json.Marshal(&ic)
	if err == nil {
		err = sendConfig(cfgW, b, layerFiles)
	}
	for _, f := range layerFiles {
		f.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: send config: %w", spec.ID, err)
	}
	cfgW.Close()

	readyCtx, cancel := context.WithTimeout(startCtx, r.cfg.StartTimeout)
	defer cancel()
	if err := waitReady(readyCtx, statusR); err != nil {
		return nil, fmt.Errorf("sandbox %s: agent: %w", spec.ID, err)
	}
	// v2: the agent has left <id> for <id>/agent (cgroups.EnterHome in
	// its setup stage), so <id> may now enable controllers for work/ and
	// take its limits. Nothing has run in the sandbox yet; a sandbox whose
	// limits do not take is not created.
	if err := cg.Arm(); err != nil {
		return nil, fmt.Errorf("sandbox %s: limits: %w", spec.ID, err)
	}
	startSpan.End() // the deferred End is then a no-op
	pidStart, err := procStartTime(pid)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: agent exited during start: %w", spec.ID, errdefs.ErrInternal)
	}
	st := &state{
		Spec:      spec,
		Slot:      slot,
		UIDBase:   base,
		Pid:       pid,
		PidStart:  pidStart,
		CreatedAt: time.Now().UTC(),
	}
	if err := writeState(dir, st); err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", spec.ID, err)
	}
	inst := newInstance(r, dir, st, cg, agent)
	r.mu.Lock()
	r.live[spec.ID] = inst
	r.mu.Unlock()
	return inst, nil
}

// listenControl creates the agent's control socket, readable only by root.
func listenControl(path string) (*net.UnixListener, error) {
	if len(path) > maxSocketPath {
		return nil, fmt.Errorf("%s is %d bytes, more than a unix socket address holds (%d): give the daemon a shorter data directory: %w",
			path, len(path), maxSocketPath, errdefs.ErrFailedPrecondition)
	}
	_ = os.Remove(path)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(false)
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// maxSocketPath is the longest path a unix socket address holds
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// waitReady reads the agent's one-line start status: "ok" or an error.
func waitReady(ctx context.Context, statusR *os.File) error {
	type result struct {
		line string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		line, err := bufio.NewReader(statusR).ReadString('\n')
		done <- result{strings.TrimSpace(line), err}
	}()
	select {
	case res := <-done:
		if res.line == "ok" {
			return nil
		}
		if res.line != "" {
			return fmt.Errorf("%s: %w", res.line, errdefs.ErrInternal)
		}
		return fmt.Errorf("exited during setup: %w", errdefs.ErrInternal)
	case <-ctx.Done():
		statusR.Close() // unblocks the reader
		return fmt.Errorf("not ready in time: %w", errdefs.ErrTimeout)
	}
}

// procStartTime returns a process's start time in clock ticks since boot
// (field 22 of /proc/<pid>/stat), which tells a live process from a later
// one that reused its pid.
func procStartTime(pid int) (uint64, error) {
	fields, err := statFields("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, errors.New("process is a zombie")
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// statFields returns the fields of a /proc/<pid>[/task/<tid>]/stat file
// from field 3 (state) on; it has at least 20 of them (to starttime,
// field 22). comm (field 2) may contain spaces and parentheses; the
// fields after the last ')' are well-formed.
func statFields(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return nil, errors.New("malformed stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return nil, errors.New("malformed stat")
	}
	return fields, nil
}
