package hostcheck

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/confine"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime/linux"
)

// ProbeCommand is the hidden verb (os.Args[1]) under which the binary runs
// the child side of the namespace probe: main calls RunProbe for it, as
// it calls the agent for linux.AgentCommand.
const ProbeCommand = "hostcheck-probe"

// probeUID is the host uid and gid that root in the probe's user
// namespace maps to: just below the sandboxes' ranges (which start at
// 1<<28), so the probe never runs as a sandbox's uid.
const probeUID = 1<<28 - 1

// probeTimeout bounds the whole namespace probe.
const probeTimeout = 10 * time.Second

// lowerContent is the file the probe's overlay reads through and copies up.
const lowerContent = "lower\n"

func realProbes() Probes {
	return Probes{
		Euid:        os.Geteuid,
		Pid:         os.Getpid,
		LandlockABI: confine.LandlockABI,
		Sandbox:     sandboxProbe,
		Disk:        diskOf,
		OpenFiles: func() (uint64, uint64, error) {
			var l unix.Rlimit
			if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &l); err != nil {
				return 0, 0, err
			}
			return l.Cur, l.Max, nil
		},
	}
}

// sandboxProbe starts this binary (ProbeCommand) in new user and mount
// namespaces with a scratch directory made under dir, reads what it could
// do there, id-maps the scratch directory through its user namespace, and
// removes everything.
func sandboxProbe(ctx context.Context, dir string) (res SandboxResult) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	all := func(err error) SandboxResult {
		return SandboxResult{UserNS: err, Overlay: ErrNotProbed, Seccomp: ErrNotProbed, IDMap: ErrNotProbed}
	}
	scratch, err := makeScratch(dir)
	if err != nil {
		return all(fmt.Errorf("scratch directory: %w", err))
	}
	defer os.RemoveAll(scratch)
	lower := filepath.Join(scratch, "lower")

	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{"airlock", ProbeCommand, scratch},
		Env:  []string{},
		Dir:  "/",
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: probeUID, Size: 1}},
			GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: probeUID, Size: 1}},
			GidMappingsEnableSetgroups: true,
			Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
			Pdeathsig:                  syscall.SIGKILL,
		},
	}
	var stderr capped
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return all(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return all(err)
	}
	if err := cmd.Start(); err != nil {
		return all(fmt.Errorf("start a process in new user and mount namespaces: %w", unwrapSyscall(err)))
	}
	exited := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		case <-exited:
		}
	}()
	defer func() {
		stdin.Close()
		werr := cmd.Wait()
		close(exited)
		if werr != nil && res.UserNS == nil && res.Overlay == nil && res.Seccomp == nil {
			res.Overlay = fmt.Errorf("the probe process failed: %v %s", werr, stderr.String())
		}
	}()

	steps := map[string]error{}
	sc := bufio.NewScanner(io.LimitReader(stdout, 64<<10))
	for sc.Scan() {
		name, msg, _ := strings.Cut(sc.Text(), " ")
		if name == "ready" {
			break
		}
		if msg != "ok" {
			steps[name] = fmt.Errorf("%s: %w", strings.TrimPrefix(msg, "err "), errdefs.ErrNotSupported)
		} else {
			steps[name] = nil
		}
	}
	if ctx.Err() != nil {
		return all(fmt.Errorf("the probe did not answer within %v: %w", probeTimeout, errdefs.ErrTimeout))
	}
	for _, s := range []string{"overlay", "seccomp"} {
		if _, ok := steps[s]; !ok {
			return all(fmt.Errorf("the probe process ended early: %s: %w", strings.TrimSpace(stderr.String()), errdefs.ErrInternal))
		}
	}
	res.Overlay, res.Seccomp = steps["overlay"], steps["seccomp"]
	if res.Overlay == nil {
		if b, err := os.ReadFile(filepath.Join(lower, "file")); err != nil || string(b) != lowerContent {
			res.Overlay = fmt.Errorf("a write through the overlay reached its lower layer: %w", errdefs.ErrInternal)
		}
	}
	ok, err := linux.CanIDMap(cmd.Process.Pid, lower)
	switch {
	case err != nil:
		res.IDMap = err
	case !ok:
		res.IDMap = fmt.Errorf("the kernel or the filesystem refuses: %w", errdefs.ErrNotSupported)
	}
	return res
}

// makeScratch makes the probe's scratch directory under dir, or under its
// nearest existing parent: lower/ (owned by the probe's root, holding
// "file") and mnt/ (where the probe mounts its tmpfs). Sandbox uids must
// traverse dir, as they traverse the data dir.
func makeScratch(dir string) (string, error) {
	base, err := existingDir(dir)
	if err != nil {
		return "", err
	}
	scratch, err := os.MkdirTemp(base, ".hostcheck-")
	if err != nil {
		return "", err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(scratch)
		}
	}()
	if err := os.Chmod(scratch, 0o755); err != nil {
		return "", err
	}
	lower := filepath.Join(scratch, "lower")
	for _, d := range []string{lower, filepath.Join(scratch, "mnt")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return "", err
		}
	}
	f := filepath.Join(lower, "file")
	if err := os.WriteFile(f, []byte(lowerContent), 0o644); err != nil {
		return "", err
	}
	for _, p := range []string{lower, f} {
		if err := os.Lchown(p, probeUID, probeUID); err != nil {
			return "", err
		}
	}
	ok = true
	return scratch, nil
}

// existingDir returns dir or its nearest existing parent.
func existingDir(dir string) (string, error) {
	if dir == "" || !filepath.IsAbs(dir) {
		return "", fmt.Errorf("data dir %q: not an absolute path: %w", dir, errdefs.ErrInvalidArgument)
	}
	for d := filepath.Clean(dir); ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return "", fmt.Errorf("%s: not a directory: %w", d, errdefs.ErrInvalidArgument)
			}
			return d, nil
		}
		if !errors.Is(err, os.ErrNotExist) || d == "/" {
			return "", err
		}
	}
}

// RunProbe is the probe's child side (ProbeCommand, os.Args[2] the scratch
// directory). It runs as root of a new user namespace, in a new mount
// namespace: it mounts a tmpfs and an overlay over the scratch directory's
// lower/, writes through it, installs a seccomp filter on one thread, and
// reports each step on stdout ("overlay ok", "seccomp err ..."); then it
// says "ready" and waits for stdin to close, so that the daemon can use
// its user namespace meanwhile. Its mounts vanish with it.
func RunProbe() int {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: airlock", ProbeCommand, "SCRATCH")
		return 2
	}
	report := func(step string, err error) {
		if err != nil {
			fmt.Printf("%s err %s\n", step, strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		fmt.Printf("%s ok\n", step)
	}
	report("overlay", probeOverlay(os.Args[2]))
	report("seccomp", probeSeccomp())
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, io.LimitReader(os.Stdin, 1<<20))
	return 0
}

// probeOverlay mounts what a sandbox's root is made of: a tmpfs holding
// the overlay's upper and work directories, and an overlay (userxattr)
// with scratch/lower below; then copies a lower file up and reads it back.
func probeOverlay(scratch string) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	mnt := filepath.Join(scratch, "mnt")
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=1m,mode=0755"); err != nil {
		return fmt.Errorf("mount tmpfs: %w", err)
	}
	upper, work, root := filepath.Join(mnt, "upper"), filepath.Join(mnt, "work"), filepath.Join(mnt, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	lower := filepath.Join(scratch, "lower")
	if strings.ContainsAny(lower, ":,\\") {
		return fmt.Errorf("the data dir's path holds a character overlayfs cannot take (: , \\)")
	}
	opts := "lowerdir=" + lower + ",upperdir=" + upper + ",workdir=" + work + ",userxattr"
	if err := unix.Mount("overlay", root, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	f := filepath.Join(root, "file")
	if b, err := os.ReadFile(f); err != nil || string(b) != lowerContent {
		return fmt.Errorf("read through the overlay: %q, %v", b, err)
	}
	if err := os.WriteFile(f, []byte("upper\n"), 0o644); err != nil {
		return fmt.Errorf("write through the overlay: %w", err)
	}
	if b, err := os.ReadFile(filepath.Join(upper, "file")); err != nil || string(b) != "upper\n" {
		return fmt.Errorf("the write did not reach the upper layer: %q, %v", b, err)
	}
	return nil
}

// probeSeccomp installs an allow-everything filter on the calling thread,
// which stays locked and ends with the process.
func probeSeccomp() error {
	runtime.LockOSThread()
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("no_new_privs: %w", err)
	}
	prog := []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}}
	fprog := unix.SockFprog{Len: 1, Filter: &prog[0]}
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog)))
	runtime.KeepAlive(prog)
	if e != 0 {
		return fmt.Errorf("seccomp(SET_MODE_FILTER): %w", e)
	}
	return nil
}

// diskOf measures the filesystem holding path (or its nearest existing
// parent).
func diskOf(path string) (Disk, error) {
	dir, err := existingDir(path)
	if err != nil {
		return Disk{}, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return Disk{}, fmt.Errorf("statfs: %w", err)
	}
	bs := uint64(st.Bsize)
	return Disk{
		Path:        dir,
		Type:        fsTypeName(int64(st.Type)),
		TotalBytes:  st.Blocks * bs,
		FreeBytes:   st.Bavail * bs,
		TotalInodes: st.Files,
		FreeInodes:  st.Ffree,
	}, nil
}

// fsTypeName names a statfs f_type magic number.
func fsTypeName(t int64) string {
	switch t {
	case unix.EXT4_SUPER_MAGIC:
		return "ext4"
	case unix.XFS_SUPER_MAGIC:
		return "xfs"
	case unix.BTRFS_SUPER_MAGIC:
		return "btrfs"
	case unix.TMPFS_MAGIC:
		return "tmpfs"
	case unix.RAMFS_MAGIC:
		return "ramfs"
	case unix.OVERLAYFS_SUPER_MAGIC:
		return "overlay"
	case unix.NFS_SUPER_MAGIC:
		return "nfs"
	case 0x2fc12fc1:
		return "zfs"
	case unix.F2FS_SUPER_MAGIC:
		return "f2fs"
	}
	return fmt.Sprintf("0x%x", t)
}

// unwrapSyscall keeps the errno of an exec error, which names the binary.
func unwrapSyscall(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// capped keeps the first 4 KiB written to it.
type capped struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (c *capped) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if room := 4096 - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.String()
}
