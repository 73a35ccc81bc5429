package linux

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/account"
)

// Paths under /proc that are hidden or made read-only, as in Docker's
// default (moby daemon/pkg/oci/defaults.go).
var (
	maskedProcFiles = []string{"kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug", "interrupts", "kallsyms", "sysrq-trigger"}
	maskedProcDirs  = []string{"acpi", "asound", "scsi", "driver"}
	readonlyProc    = []string{"bus", "fs", "irq", "sys"}
	// Device nodes bound from the host into the sandbox's /dev.
	devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}
)

// setupRootfs builds the sandbox's root filesystem and pivots into it. It
// runs in the agent, inside the sandbox's new user and mount namespaces,
// so every mount it makes is private to the sandbox and disappears with
// it.
//
// Layout: a tmpfs capped at the disk limit holds the overlay's upper and
// work directories; the overlay stacks the template's read-only layers
// under it; read-only binds, a fresh /proc with masked paths, a minimal
// /dev and the agent binary go on top.
func setupRootfs(cfg *initConfig) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	mnt := cfg.MountDir
	inodes := max(cfg.Limits.DiskBytes/8192, 16384)
	if err := unix.Mount("tmpfs", mnt, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV,
		fmt.Sprintf("size=%d,nr_inodes=%d,mode=0755", cfg.Limits.DiskBytes, inodes)); err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	upper, work, root := filepath.Join(mnt, "upper"), filepath.Join(mnt, "work"), filepath.Join(mnt, "root")
	for _, d := range []string{upper, work, root} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	if err := seedUpper(upper); err != nil {
		return fmt.Errorf("seed writable layer: %w", err)
	}
	changes, err := unix.Open(upper, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("writable layer: %w", err)
	}
	cfg.ChangesFD = changes
	lowers, err := attachLayers(cfg, mnt)
	if err != nil {
		return err
	}
	slices.Reverse(lowers) // overlayfs lists the top layer first
	for _, l := range lowers {
		if strings.ContainsAny(l, ":,\\") {
			return fmt.Errorf("layer path contains a character overlayfs cannot take")
		}
	}
	// Paths relative to mnt keep the options short: they must fit in a
	// page whatever the number of layers.
	if err := unix.Chdir(mnt); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=upper,workdir=work,userxattr", strings.Join(lowers, ":"))
	if err := unix.Mount("overlay", root, "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	rootFD, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rootFD)

	if err := os.Mkdir(filepath.Join(mnt, viewBottom), 0o500); err != nil {
		return err
	}
	for _, b := range cfg.Rootfs.Binds {
		if err := viewReadOnly(rootFD, b.Source, b.Target); err != nil {
			return fmt.Errorf("bind %s: %w", b.Target, err)
		}
	}
	if err := applyDefaults(rootFD, cfg); err != nil {
		return err
	}
	// The agent binary's directory (it holds nothing else), named
	// relative to the mount dir: the view's options, which the sandbox
	// reads in /proc/self/mountinfo, then name no host path.
	binDir, err := filepath.Rel(mnt, filepath.Dir(cfg.AgentBinary))
	if err != nil || filepath.Base(cfg.AgentBinary) != filepath.Base(agentBinaryPath) {
		return fmt.Errorf("agent binary: %q is not a view-able path", cfg.AgentBinary)
	}
	if err := viewReadOnly(rootFD, binDir, filepath.Dir(agentBinaryPath)); err != nil {
		return fmt.Errorf("agent binary: %w", err)
	}
	if err := setupProc(rootFD); err != nil {
		return fmt.Errorf("/proc: %w", err)
	}
	if err := setupDev(rootFD); err != nil {
		return fmt.Errorf("/dev: %w", err)
	}
	if err := mkdirIn(rootFD, "/sys", 0o555); err != nil {
		return err
	}
	return pivotInto(root)
}

// applyDefaults applies the template's defaults to the root filesystem
// rootFD, before anything runs in it: it looks up the default account
// (cfg.Rootfs.User) in the template's /etc/passwd and /etc/group into
// cfg.Account, and makes the working directory, owned by root, when the
// layers lack it (as Docker does).
func applyDefaults(rootFD int, cfg *initConfig) error {
	var db account.DB
	if cfg.Rootfs.User != "" {
		var err error
		if db, err = readAccountDB(rootFD); err != nil {
			return fmt.Errorf("user %q: %w", cfg.Rootfs.User, err)
		}
	}
	acct, err := defaultAccount(cfg.Rootfs.User, db)
	if err != nil {
		return err
	}
	cfg.Account = acct
	w := cfg.Rootfs.Workdir
	if w == "" || isDirIn(rootFD, w) {
		return nil
	}
	if err := mkdirIn(rootFD, w, 0o755); err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if !isDirIn(rootFD, w) { // mkdirIn accepts an existing file
		return fmt.Errorf("working directory %q is not a directory", w)
	}
	return nil
}

// isDirIn reports whether path inside rootFD is a directory.
func isDirIn(rootFD int, path string) bool {
	fd, err := openIn(rootFD, path, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// attachLayers returns the overlay lower directories, lowest first, as
// paths relative to mnt: it attaches layer i at mnt/l/<i>, in the sandbox's
// mount namespace, either the id-mapped mount the daemon passed (see
// idmapLayers; overlayfs accepts it only once attached here) or, where the
// layers cannot be id-mapped, a bind of the layer directory. The attached
// mounts vanish with the old root at pivot_root.
func attachLayers(cfg *initConfig, mnt string) ([]string, error) {
	fds := cfg.layerFDs
	cfg.layerFDs = nil
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	layers := cfg.Rootfs.Layers
	switch {
	case !cfg.IDMappedLayers && len(fds) != 0:
		return nil, fmt.Errorf("unexpected layer mounts")
	case cfg.IDMappedLayers && len(fds) != len(layers):
		return nil, fmt.Errorf("%d layer mounts for %d layers", len(fds), len(layers))
	}
	if err := os.Mkdir(filepath.Join(mnt, "l"), 0o700); err != nil {
		return nil, err
	}
	// Layers the daemon could not id-map (their filesystem cannot be) are
	// bound at the same places: either way the overlay's options, which
	// the sandbox reads in /proc/self/mountinfo, name no host path.
	lowers := make([]string, len(layers))
	for i := range layers {
		rel := "l/" + strconv.Itoa(i)
		dst := filepath.Join(mnt, rel)
		if err := os.Mkdir(dst, 0o700); err != nil {
			return nil, err
		}
		var err error
		if cfg.IDMappedLayers {
			err = unix.MoveMount(fds[i], "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH)
		} else {
			err = unix.Mount(layers[i], dst, "", unix.MS_BIND, "")
		}
		if err != nil {
			return nil, fmt.Errorf("attach layer %d: %w", i, err)
		}
		lowers[i] = rel
	}
	return lowers, nil
}

// seedUpper creates the writable directories every sandbox starts with,
// owned by their in-sandbox users.
func seedUpper(upper string) error {
	dirs := []struct {
		path     string
		mode     os.FileMode
		uid, gid int
	}{
		{"home", 0o755, 0, 0},
		{"home/user", 0o750, account.SandboxUID, account.SandboxGID},
		{"root", 0o700, 0, 0},
		{"tmp", 0o777 | os.ModeSticky, 0, 0},
		{"var", 0o755, 0, 0},
		{"var/tmp", 0o777 | os.ModeSticky, 0, 0},
		{"run", 0o755, 0, 0},
	}
	for _, d := range dirs {
		p := filepath.Join(upper, d.path)
		if err := os.Mkdir(p, d.mode); err != nil {
			return err
		}
		// Mkdir applies the umask; set the mode exactly.
		if err := os.Chmod(p, d.mode); err != nil {
			return err
		}
		if err := os.Lchown(p, d.uid, d.gid); err != nil {
			return err
		}
	}
	return nil
}

// openIn resolves path inside the directory rootFD as if it were "/": no
// symlink or ".." in a template can point a mount outside the sandbox.
func openIn(rootFD int, path string, flags uint64) (int, error) {
	rel := strings.TrimPrefix(filepath.Clean("/"+path), "/")
	if rel == "" {
		rel = "."
	}
	return unix.Openat2(rootFD, rel, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS,
	})
}

// mkdirIn creates path and its parents inside rootFD.
func mkdirIn(rootFD int, path string, mode uint32) error {
	cur := ""
	for _, part := range strings.Split(strings.Trim(filepath.Clean("/"+path), "/"), "/") {
		if part == "" {
			continue
		}
		parent, err := openIn(rootFD, cur, unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return fmt.Errorf("mkdir %s: %w", path, err)
		}
		err = unix.Mkdirat(parent, part, mode)
		unix.Close(parent)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return fmt.Errorf("mkdir %s: %w", path, err)
		}
		cur += "/" + part
	}
	return nil
}

// mountPoint makes sure target exists inside rootFD as a directory (or an
// empty file when dir is false) and returns an O_PATH fd to it.
func mountPoint(rootFD int, target string, dir bool) (int, error) {
	if fd, err := openIn(rootFD, target, unix.O_PATH); err == nil {
		return fd, nil
	}
	if dir {
		if err := mkdirIn(rootFD, target, 0o755); err != nil {
			return -1, err
		}
		return openIn(rootFD, target, unix.O_PATH|unix.O_DIRECTORY)
	}
	if err := mkdirIn(rootFD, filepath.Dir(target), 0o755); err != nil {
		return -1, err
	}
	parent, err := openIn(rootFD, filepath.Dir(target), unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return -1, err
	}
	defer unix.Close(parent)
	f, err := unix.Openat(parent, filepath.Base(target), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return -1, err
	}
	unix.Close(f)
	return openIn(rootFD, target, unix.O_PATH)
}

func fdPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// viewBottom is an empty directory in the mount dir: the lowest layer of
// every read-only view (an overlay without an upper layer needs two).
const viewBottom = "v"

// viewReadOnly mounts at target a read-only overlay whose only content is
// the host directory source (absolute, or relative to the mount dir): the
// sandbox sees the same files as through a bind, but they are overlay inodes of the sandbox's own. inotify and
// fanotify marks sit on inodes, so through a bind a sandbox watching
// /usr/bin would see which files every other sandbox (any tenant's) and
// the host open; through its own view it sees only its own accesses. The
// caller's working directory is the mount dir, so the options name no
// host path but source.
func viewReadOnly(rootFD int, source, target string) error {
	if strings.ContainsAny(source, ":,\\") || source == "" {
		return fmt.Errorf("source %q: not a path overlayfs can take", source)
	}
	fd, err := mountPoint(rootFD, target, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	opts := "lowerdir=" + source + ":" + viewBottom
	if err := unix.Mount("overlay", fdPath(fd), "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("overlay view: %w", err)
	}
	return nil
}

// remountReadOnly makes the mount at target read-only, nosuid and nodev.
func remountReadOnly(rootFD int, target string) error {
	fd, err := openIn(rootFD, target, unix.O_PATH)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return err
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV)
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(st.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	return unix.Mount("", fdPath(fd), "", flags, "")
}

// setupProc mounts a fresh procfs for the sandbox's PID namespace and
// hides or freezes the paths that leak host information or allow host
// changes.
func setupProc(rootFD int) error {
	fd, err := mountPoint(rootFD, "/proc", true)
	if err != nil {
		return err
	}
	err = unix.Mount("proc", fdPath(fd), "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	unix.Close(fd)
	if err != nil {
		return err
	}
	for _, name := range maskedProcFiles {
		fd, err := openIn(rootFD, "/proc/"+name, unix.O_PATH|unix.O_NOFOLLOW)
		if err != nil {
			continue // absent on this kernel
		}
		err = unix.Mount("/dev/null", fdPath(fd), "", unix.MS_BIND, "")
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mask %s: %w", name, err)
		}
	}
	for _, name := range maskedProcDirs {
		fd, err := openIn(rootFD, "/proc/"+name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW)
		if err != nil {
			continue
		}
		err = unix.Mount("tmpfs", fdPath(fd), "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0555")
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("mask %s: %w", name, err)
		}
	}
	for _, name := range readonlyProc {
		fd, err := openIn(rootFD, "/proc/"+name, unix.O_PATH|unix.O_NOFOLLOW)
		if err != nil {
			continue
		}
		err = unix.Mount(fdPath(fd), fdPath(fd), "", unix.MS_BIND|unix.MS_REC, "")
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("read-only %s: %w", name, err)
		}
		if err := remountReadOnly(rootFD, "/proc/"+name); err != nil {
			return fmt.Errorf("read-only %s: %w", name, err)
		}
	}
	return nil
}

// setupDev builds a minimal /dev: a few host device nodes bound in
// (device nodes cannot be created in a user namespace), a private devpts
// instance, and /dev/shm.
func setupDev(rootFD int) error {
	fd, err := mountPoint(rootFD, "/dev", true)
	if err != nil {
		return err
	}
	err = unix.Mount("tmpfs", fdPath(fd), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "size=1m,nr_inodes=256,mode=0755")
	unix.Close(fd)
	if err != nil {
		return err
	}
	for _, name := range devNodes {
		fd, err := mountPoint(rootFD, "/dev/"+name, false)
		if err != nil {
			return err
		}
		err = unix.Mount("/dev/"+name, fdPath(fd), "", unix.MS_BIND, "")
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	dev, err := openIn(rootFD, "/dev", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	defer unix.Close(dev)
	links := [][2]string{
		{"pts/ptmx", "ptmx"}, {"/proc/self/fd", "fd"}, {"/proc/self/fd/0", "stdin"},
		{"/proc/self/fd/1", "stdout"}, {"/proc/self/fd/2", "stderr"},
	}
	for _, l := range links {
		if err := unix.Symlinkat(l[0], dev, l[1]); err != nil {
			return err
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := unix.Mkdirat(dev, d, 0o755); err != nil {
			return err
		}
	}
	pts, err := openIn(rootFD, "/dev/pts", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	err = unix.Mount("devpts", fdPath(pts), "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620")
	unix.Close(pts)
	if err != nil {
		return fmt.Errorf("devpts: %w", err)
	}
	shm, err := openIn(rootFD, "/dev/shm", unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	err = unix.Mount("tmpfs", fdPath(shm), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64m,mode=1777")
	unix.Close(shm)
	if err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	return nil
}

// pivotInto makes root the process's root directory and detaches the old
// root, so nothing of the host's mount tree stays reachable.
func pivotInto(root string) error {
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detach old root: %w", err)
	}
	return unix.Chdir("/")
}
