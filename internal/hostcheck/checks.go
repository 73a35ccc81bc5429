package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// checkDef is one check: its name, whether it is mandatory, whether
// Refresh takes it again, and the function that runs it (which fills in
// Status, Found, Meaning and Fix).
type checkDef struct {
	name      string
	mandatory bool
	volatile  bool
	fn        func(ctx context.Context, e *env) Check
}

// run runs d: an optional check never fails, it warns.
func (d checkDef) run(ctx context.Context, e *env) Check {
	c := d.fn(ctx, e)
	c.Name, c.Mandatory = d.name, d.mandatory
	if !d.mandatory && c.Status == Fail {
		c.Status = Warn
	}
	if c.Status == OK {
		c.Fix = ""
	}
	return c
}

// checks is every check, in report order.
var checks = []checkDef{
	{name: "root", mandatory: true, fn: func(_ context.Context, e *env) Check { return checkRoot(e) }},
	{name: "kernel", mandatory: true, fn: func(_ context.Context, e *env) Check { return checkKernel(e) }},
	{name: "cgroups", mandatory: true, fn: func(_ context.Context, e *env) Check { return checkCgroups(e) }},
	{name: "cgroup_controllers", mandatory: true, fn: func(_ context.Context, e *env) Check { return checkControllers(e) }},
	{name: "cgroup_placement", mandatory: true, fn: func(_ context.Context, e *env) Check { return checkPlacement(e) }},
	{name: "swap_accounting", fn: func(_ context.Context, e *env) Check { return checkSwap(e) }},
	{name: "user_namespaces", mandatory: true, fn: checkUserNS},
	{name: "seccomp", mandatory: true, fn: checkSeccomp},
	{name: "overlay_userns", mandatory: true, fn: checkOverlay},
	{name: "idmapped_mounts", fn: checkIDMap},
	{name: "landlock", fn: func(_ context.Context, e *env) Check { return checkLandlock(e) }},
	{name: "kvm", fn: func(_ context.Context, e *env) Check { return checkKVM(e) }},
	{name: "data_dir", mandatory: true, volatile: true, fn: func(_ context.Context, e *env) Check { return checkDataDir(e) }},
	{name: "open_files", volatile: true, fn: func(_ context.Context, e *env) Check { return checkOpenFiles(e) }},
}

func checkRoot(e *env) Check {
	c := Check{Meaning: "the daemon creates namespaces, cgroups and id-mapped mounts, which need root; the doctor can probe them only as root"}
	if uid := e.probes.Euid(); uid != 0 {
		c.Status, c.Found = Fail, fmt.Sprintf("running as uid %d", uid)
		c.Fix = "run as root (sudo airlock doctor; deploy/airlock.service runs airlock serve as root)"
		return c
	}
	c.Status, c.Found = OK, "running as root"
	return c
}

// minKernel is the oldest kernel Airlock runs on: openat2 (5.6), pidfds
// (5.3), overlayfs in user namespaces (5.11), id-mapped mounts (5.12).
var minKernel = [2]int{5, 12}

func checkKernel(e *env) Check {
	c := Check{Meaning: "sandboxes need openat2 (5.6), pidfds (5.3), overlayfs in user namespaces (5.11) and id-mapped mounts (5.12)"}
	b, err := readSmall(e.fsys, "proc/sys/kernel/osrelease", 256)
	if err != nil {
		c.Status, c.Found = Fail, "cannot read the kernel release: "+err.Error()
		return c
	}
	rel := strings.TrimSpace(string(b))
	v, err := parseRelease(rel)
	if err != nil {
		c.Status, c.Found = Fail, err.Error()
		return c
	}
	c.Found = "Linux " + rel
	if v[0] < minKernel[0] || (v[0] == minKernel[0] && v[1] < minKernel[1]) {
		c.Status = Fail
		c.Found += fmt.Sprintf(", older than %d.%d", minKernel[0], minKernel[1])
		c.Fix = fmt.Sprintf("upgrade to Linux %d.%d or newer (Debian 12, Ubuntu 22.04, RHEL 9 and newer have it)", minKernel[0], minKernel[1])
		return c
	}
	c.Status = OK
	return c
}

// parseRelease returns the major and minor version of a kernel release
// string ("6.1.0-18-amd64").
func parseRelease(rel string) ([2]int, error) {
	bad := fmt.Errorf("kernel release %q: not MAJOR.MINOR...: %w", clip(rel), errdefs.ErrInvalidArgument)
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return [2]int{}, bad
	}
	major, err1 := strconv.Atoi(parts[0])
	minorStr := parts[1]
	if i := strings.IndexFunc(minorStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minorStr = minorStr[:i]
	}
	minor, err2 := strconv.Atoi(minorStr)
	if err1 != nil || err2 != nil || major < 0 || minor < 0 {
		return [2]int{}, bad
	}
	return [2]int{major, minor}, nil
}

// namespaceKinds are the namespaces each sandbox creates, by the name of
// their user.max_*_namespaces sysctl.
var namespaceKinds = []string{"user", "mnt", "pid", "net", "ipc", "uts", "cgroup"}

func checkUserNS(ctx context.Context, e *env) Check {
	c := Check{Meaning: "each sandbox's root is an unprivileged host uid range through its own user namespace, with its own mount, PID, network, IPC, UTS and cgroup namespaces"}
	var notes, zero, low []string
	for _, kind := range namespaceKinds {
		p := "proc/sys/user/max_" + kind + "_namespaces"
		b, err := readSmall(e.fsys, p, 64)
		if errors.Is(err, fs.ErrNotExist) && kind == "user" {
			c.Status, c.Found = Fail, "no user namespaces in this kernel (user.max_user_namespaces is missing)"
			c.Fix = "use a kernel built with CONFIG_USER_NS=y"
			return c
		}
		if err != nil {
			continue // older kernels lack some of these limits
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			continue
		}
		if kind == "user" {
			notes = append(notes, "user.max_user_namespaces="+strconv.FormatInt(n, 10))
		}
		switch {
		case n <= 0:
			zero = append(zero, kind)
		case e.opts.MaxSandboxes > 0 && n < int64(e.opts.MaxSandboxes):
			low = append(low, fmt.Sprintf("user.max_%s_namespaces=%d", kind, n))
		}
	}
	// These restrict only users without CAP_SYS_ADMIN; the daemon is
	// root. Shown because they explain what other programs see.
	for _, s := range []struct{ file, name string }{
		{"proc/sys/kernel/unprivileged_userns_clone", "kernel.unprivileged_userns_clone"},
		{"proc/sys/kernel/apparmor_restrict_unprivileged_userns", "kernel.apparmor_restrict_unprivileged_userns"},
	} {
		if b, err := readSmall(e.fsys, s.file, 64); err == nil {
			notes = append(notes, s.name+"="+strings.TrimSpace(string(b))+" (restricts unprivileged users only)")
		}
	}
	c.Found = strings.Join(notes, ", ")
	if len(zero) > 0 {
		c.Status = Fail
		c.Found = "namespaces disabled: " + strings.Join(zero, ", ") + "; " + c.Found
		var fix []string
		for _, k := range zero {
			fix = append(fix, "sysctl -w user.max_"+k+"_namespaces=15000")
		}
		c.Fix = strings.Join(fix, "; ") + " (and the same in /etc/sysctl.d/ to keep it)"
		return c
	}
	r := e.sandboxResult(ctx)
	if errors.Is(r.UserNS, errNeedsRoot) {
		return notTried(c)
	}
	if r.UserNS != nil {
		c.Status = Fail
		c.Found = "cannot create a user namespace: " + r.UserNS.Error() + "; " + c.Found
		c.Fix = "in a container, allow clone(CLONE_NEWUSER) and mounts (its seccomp and AppArmor profiles, or run it privileged); check the user.max_*_namespaces sysctls"
		return c
	}
	c.Status = OK
	c.Found = "created one; " + c.Found
	if len(low) > 0 {
		c.Status = Warn
		c.Found += "; below max_sandboxes (" + strconv.Itoa(e.opts.MaxSandboxes) + "): " + strings.Join(low, ", ")
		c.Fix = "raise them, e.g. sysctl -w user.max_user_namespaces=15000 (and in /etc/sysctl.d/)"
	}
	return c
}

func checkSeccomp(ctx context.Context, e *env) Check {
	c := Check{Meaning: "every sandboxed process runs under a seccomp allowlist that refuses namespaces, mounts, io_uring, bpf, keyrings, ptrace and more"}
	st, err := readSmall(e.fsys, "proc/self/status", 64<<10)
	if err != nil {
		c.Status, c.Found = Fail, "cannot read /proc/self/status: "+err.Error()
		return c
	}
	mode, ok := statusField(string(st), "Seccomp")
	if !ok {
		c.Status, c.Found = Fail, "no seccomp in this kernel"
		c.Fix = "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
		return c
	}
	acts, err := readSmall(e.fsys, "proc/sys/kernel/seccomp/actions_avail", 4096)
	if err != nil {
		c.Status, c.Found = Fail, "no seccomp filter mode (kernel.seccomp.actions_avail missing)"
		c.Fix = "use a kernel built with CONFIG_SECCOMP_FILTER=y"
		return c
	}
	have := strings.Fields(string(acts))
	for _, need := range []string{"allow", "errno"} {
		if !slices.Contains(have, need) {
			c.Status, c.Found = Fail, "the seccomp action "+need+" is not available ("+strings.Join(have, " ")+")"
			c.Fix = "use a kernel built with CONFIG_SECCOMP_FILTER=y"
			return c
		}
	}
	c.Found = "filter mode (actions: " + strings.Join(have, " ") + ")"
	if mode == "2" {
		c.Found += "; this process is itself filtered (a container's profile?)"
	}
	if r := e.sandboxResult(ctx); errors.Is(r.Seccomp, errNeedsRoot) {
		c.Status, c.Found = Warn, c.Found+"; installing one not tried (needs root)"
		return c
	} else if r.Seccomp != nil {
		c.Status = Fail
		c.Found += "; installing a filter in a user namespace failed: " + r.Seccomp.Error()
		c.Fix = "in a container, allow the seccomp system call (its seccomp profile)"
		return c
	}
	c.Found += "; installed one"
	c.Status = OK
	return c
}

func checkOverlay(ctx context.Context, e *env) Check {
	c := Check{Meaning: "a sandbox's root is an overlay, mounted inside its user namespace, of the template's layers and a size-capped writable tmpfs"}
	r := e.sandboxResult(ctx)
	if errors.Is(r.Overlay, errNeedsRoot) {
		return notTried(c)
	}
	if r.Overlay != nil {
		c.Status, c.Found = Fail, "cannot mount overlayfs in a user namespace: "+r.Overlay.Error()
		c.Fix = "use Linux 5.11 or newer with overlayfs (CONFIG_OVERLAY_FS); keep the data dir on a local filesystem (ext4, xfs, btrfs) that sandbox uids can traverse (mode 0711)"
		return c
	}
	c.Status, c.Found = OK, "mounted one (userxattr) over the data dir's filesystem and wrote through it"
	return c
}

func checkIDMap(ctx context.Context, e *env) Check {
	c := Check{Meaning: "template layers are id-mapped into each sandbox, so their files keep their owners (0..65535) whatever host uids the sandbox has; without it layers are used as they are and their files show as nobody inside"}
	r := e.sandboxResult(ctx)
	if errors.Is(r.IDMap, errNeedsRoot) {
		return notTried(c)
	}
	if r.IDMap != nil {
		c.Status, c.Found = Warn, "cannot id-map the data dir's filesystem: "+r.IDMap.Error()
		c.Fix = "keep the data dir on a filesystem that supports id-mapped mounts (ext4, xfs, btrfs; tmpfs from Linux 6.3) on Linux 5.12 or newer"
		return c
	}
	c.Status, c.Found = OK, "the data dir's filesystem can be id-mapped"
	return c
}

// notTried is c for a probe that only root can run: a warning (the root
// check fails).
func notTried(c Check) Check {
	c.Status = Warn
	if c.Found != "" {
		c.Found = "not tried (needs root); " + c.Found
	} else {
		c.Found = "not tried (needs root)"
	}
	return c
}

// maxLandlockABI is the newest ABI the sandboxes use (see internal/confine).
const maxLandlockABI = 7

func checkLandlock(e *env) Check {
	c := Check{Meaning: "Landlock keeps sandboxed writes to the sandbox's own files and scopes signals and abstract sockets (ABI 6) to the sandbox; without it, namespaces, permissions and seccomp still apply"}
	abi, err := e.probes.LandlockABI()
	switch {
	case err != nil:
		c.Status, c.Found = Warn, "cannot read the Landlock ABI: "+err.Error()
	case abi <= 0:
		c.Status, c.Found = Warn, "not available: sandboxes start without Landlock"
		c.Fix = "boot with landlock in the LSM list (lsm=landlock,... on a kernel with CONFIG_SECURITY_LANDLOCK=y)"
	case abi < 6:
		c.Status, c.Found = OK, fmt.Sprintf("ABI %d (no signal and abstract socket scoping before ABI 6; the sandbox's namespaces cover both)", abi)
	default:
		c.Status, c.Found = OK, fmt.Sprintf("ABI %d", abi)
		if abi > maxLandlockABI {
			c.Found += fmt.Sprintf(" (used at ABI %d)", maxLandlockABI)
		}
	}
	return c
}

func checkKVM(e *env) Check {
	c := Check{Status: OK, Meaning: "informational: the native backend does not use KVM"}
	fi, err := fs.Stat(e.fsys, "dev/kvm")
	switch {
	case err != nil:
		c.Found = "no /dev/kvm"
	case fi.Mode()&fs.ModeCharDevice == 0:
		c.Found = "/dev/kvm is not a character device"
	default:
		c.Found = "/dev/kvm present"
	}
	return c
}

// Thresholds of the data dir check.
const (
	minFreeBytes   = 256 << 20
	lowFreeBytes   = 2 << 30
	minFreeInodes  = 4096
	lowFreePercent = 5
)

func checkDataDir(e *env) Check {
	c := Check{Meaning: "the data dir holds the database, the audit log, template layers and sandbox state; a full disk fails audited requests and builds"}
	d, err := e.probes.Disk(e.opts.DataDir)
	if err != nil {
		c.Status, c.Found = Fail, "cannot measure the data dir's filesystem: "+err.Error()
		c.Fix = "choose a data dir on a local filesystem (--data-dir)"
		return c
	}
	c.Found = fmt.Sprintf("%s, %s free of %s", d.Type, humanBytes(d.FreeBytes), humanBytes(d.TotalBytes))
	if d.TotalInodes > 0 {
		c.Found += fmt.Sprintf(", %d of %d inodes free", d.FreeInodes, d.TotalInodes)
	}
	if d.Path != e.opts.DataDir {
		c.Found += " (the data dir does not exist yet: measured its parent)"
	}
	c.Status = OK
	switch {
	case d.FreeBytes < minFreeBytes || (d.TotalInodes > 0 && d.FreeInodes < minFreeInodes):
		c.Status = Fail
		c.Fix = "free space and inodes on the data dir's filesystem, or move the data dir (--data-dir)"
	case d.FreeBytes < lowFreeBytes || d.FreeBytes*100 < d.TotalBytes*lowFreePercent ||
		(d.TotalInodes > 0 && d.FreeInodes*100 < d.TotalInodes*lowFreePercent):
		c.Status = Warn
		c.Fix = "free space on the data dir's filesystem, or move the data dir (--data-dir)"
	case d.Type == "tmpfs" || d.Type == "ramfs":
		c.Status = Warn
		c.Found += "; keys, the audit log and templates are lost at reboot"
		c.Fix = "keep the data dir on a persistent filesystem"
	}
	return c
}

// lowOpenFiles is the open-file limit below which the daemon warns: it
// holds a few descriptors per sandbox and per API connection.
const lowOpenFiles = 8192

func checkOpenFiles(e *env) Check {
	c := Check{Meaning: "the daemon holds a few descriptors per sandbox, exec stream and API connection; at the limit, creates and requests fail"}
	soft, hard, err := e.probes.OpenFiles()
	if err != nil {
		c.Status, c.Found = Warn, "cannot read RLIMIT_NOFILE: "+err.Error()
		return c
	}
	c.Found = fmt.Sprintf("RLIMIT_NOFILE %d (hard %d)", soft, hard)
	if soft < lowOpenFiles {
		c.Status = Warn
		c.Fix = "raise it: LimitNOFILE=1048576 in the systemd unit (deploy/airlock.service has it), or ulimit -n before airlock serve"
		return c
	}
	c.Status = OK
	return c
}

// statusField returns the value of a "Key:\tvalue" line of a status file.
func statusField(s, key string) (string, bool) {
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok && k == key {
			return strings.TrimSpace(v), true
		}
	}
	return "", false
}

// readSmall reads a file of fsys, failing when it holds more than max
// bytes.
func readSmall(fsys fs.FS, name string, max int64) ([]byte, error) {
	f, err := fsys.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: larger than %d bytes: %w", name, max, errdefs.ErrResourceExhausted)
	}
	return b, nil
}

// exists reports whether name exists in fsys.
func exists(fsys fs.FS, name string) bool {
	_, err := fs.Stat(fsys, name)
	return err == nil
}

// fsPath turns an absolute host path and a relative part into a path of
// the host's fs.FS ("/sys/fs/cgroup", "/a" → "sys/fs/cgroup/a").
func fsPath(abs string, rel ...string) string {
	p := path.Join(append([]string{"/", abs}, rel...)...)
	if p == "/" {
		return "."
	}
	return strings.TrimPrefix(p, "/")
}

// humanBytes renders n in binary units ("76.3 GiB").
func humanBytes(n uint64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := uint64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// clip shortens s for a message.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}
