//go:build linux

package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Debian suites whose stock kernel (the linux-image-amd64 package) a guest
// can boot.
const (
	// Bookworm is Debian 12 with its security updates: Linux 6.1, the
	// oldest kernel Airlock supports (older landlock ABI, io_uring and
	// seccomp surface).
	Bookworm = "bookworm"
	// TrixieBackports is Debian 13's backports: the newest kernel Debian
	// ships for a stable release (7.x at the time of writing).
	TrixieBackports = "trixie-backports"
)

// Kernel is a guest kernel: a bzImage and, when it has loadable modules,
// its module tree.
type Kernel struct {
	// Image is the kernel (vmlinuz) qemu boots.
	Image string
	// Modules is the kernel's /lib/modules/<release> directory; empty
	// when the kernel has no loadable modules.
	Modules string
	// Release is the kernel release (uname -r), e.g. "6.1.0-56-amd64".
	Release string
	// Package names where it came from, e.g.
	// "linux-image-6.1.0-56-amd64 6.1.192-2 (bookworm)"; informational.
	Package string
}

// Environment variables the harness reads.
const (
	// EnvCache is the cache directory for kernels (default
	// $XDG_CACHE_HOME/airlock-vm, else $HOME/.cache/airlock-vm).
	EnvCache = "AIRLOCK_VM_CACHE"
	// EnvMirror is the Debian mirror kernels come from (default
	// http://deb.debian.org/debian); EnvSecurityMirror its security
	// archive (default http://deb.debian.org/debian-security).
	EnvMirror         = "AIRLOCK_VM_MIRROR"
	EnvSecurityMirror = "AIRLOCK_VM_SECURITY_MIRROR"
)

// CacheDir returns the directory kernels are cached in.
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCache); d != "" {
		if !filepath.IsAbs(d) {
			return "", fmt.Errorf("vmtest: %s=%q must be an absolute path: %w", EnvCache, d, errdefs.ErrInvalidArgument)
		}
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("vmtest: no cache directory (set %s): %w: %w", EnvCache, err, errdefs.ErrFailedPrecondition)
	}
	return filepath.Join(d, "airlock-vm"), nil
}

var suiteRE = regexp.MustCompile(`^[a-z]{2,20}(-[a-z]{2,20})?$`)

func checkSuite(suite string) error {
	if !suiteRE.MatchString(suite) {
		return fmt.Errorf("vmtest: %q is not a Debian suite name: %w", suite, errdefs.ErrInvalidArgument)
	}
	return nil
}

// CachedKernel returns the kernel of a Debian suite that FetchKernel put in
// cache, or an error wrapping errdefs.ErrNotFound when there is none.
func CachedKernel(cache, suite string) (Kernel, error) {
	if err := checkSuite(suite); err != nil {
		return Kernel{}, err
	}
	b, err := os.ReadFile(filepath.Join(cache, suite+".kernel"))
	if errors.Is(err, fs.ErrNotExist) {
		return Kernel{}, fmt.Errorf("vmtest: no %s kernel in %s: %w", suite, cache, errdefs.ErrNotFound)
	}
	if err != nil {
		return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	name := strings.TrimSpace(string(b))
	if name == "" || strings.ContainsAny(name, "/\n") || name[0] == '.' {
		return Kernel{}, fmt.Errorf("vmtest: %s.kernel in %s names %q: %w", suite, cache, name, errdefs.ErrInvalidArgument)
	}
	k, err := unpackedKernel(filepath.Join(cache, "kernels", name))
	if err != nil {
		return Kernel{}, err
	}
	k.Package = name + " (" + suite + ")"
	return k, nil
}

// unpackedKernel finds the kernel and module tree in an unpacked
// linux-image package.
func unpackedKernel(root string) (Kernel, error) {
	// boot/vmlinuz-<release> up to Linux 6; usr/lib/modules/<release>/vmlinuz
	// since.
	images, _ := filepath.Glob(filepath.Join(root, "boot", "vmlinuz-*"))
	moved, _ := filepath.Glob(filepath.Join(root, "usr", "lib", "modules", "*", "vmlinuz"))
	var k Kernel
	switch {
	case len(images) == 1 && len(moved) == 0:
		k = Kernel{Image: images[0], Release: strings.TrimPrefix(filepath.Base(images[0]), "vmlinuz-")}
	case len(images) == 0 && len(moved) == 1:
		k = Kernel{Image: moved[0], Release: filepath.Base(filepath.Dir(moved[0]))}
	default:
		return Kernel{}, fmt.Errorf("vmtest: %s: want one kernel image, found %d: %w", root, len(images)+len(moved), errdefs.ErrNotFound)
	}
	rel := k.Release
	for _, d := range []string{"lib/modules", "usr/lib/modules"} {
		p := filepath.Join(root, d, rel)
		if fi, err := os.Stat(p); err == nil && fi.IsDir() {
			k.Modules = p
		}
	}
	return k, nil
}

// FetchKernel returns the kernel of a Debian suite from cache, downloading
// the suite's linux-image-amd64 (its linux-image-<release>-amd64 package)
// with apt-get into cache and unpacking it there first when it is missing.
// apt runs with its own sources and state under cache: the host's own
// sources are not used or changed, so a Debian 12 host can fetch Debian 13's
// kernels. It needs apt-get, dpkg-deb and the debian-archive-keyring.
func FetchKernel(ctx context.Context, cache, suite string) (Kernel, error) {
	if err := checkSuite(suite); err != nil {
		return Kernel{}, err
	}
	if k, err := CachedKernel(cache, suite); err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return k, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	unlock, err := lockFile(ctx, filepath.Join(cache, "lock"))
	if err != nil {
		return Kernel{}, err
	}
	defer unlock()
	// Another process may have fetched it while this one waited.
	if k, err := CachedKernel(cache, suite); err == nil || !errors.Is(err, errdefs.ErrNotFound) {
		return k, err
	}
	const keyring = "/usr/share/keyrings/debian-archive-keyring.gpg"
	if _, err := os.Stat(keyring); err != nil {
		return Kernel{}, fmt.Errorf("vmtest: fetching a kernel needs %s (apt-get install debian-archive-keyring): %w", keyring, errdefs.ErrFailedPrecondition)
	}
	for _, tool := range []string{"apt-get", "apt-cache", "dpkg-deb"} {
		if _, err := exec.LookPath(tool); err != nil {
			return Kernel{}, fmt.Errorf("vmtest: fetching a kernel needs %s (a Debian host): %w", tool, errdefs.ErrFailedPrecondition)
		}
	}

	aptDir := filepath.Join(cache, "apt", suite)
	for _, d := range []string{"state/lists/partial", "cache/archives/partial"} {
		if err := os.MkdirAll(filepath.Join(aptDir, d), 0o755); err != nil {
			return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
		}
	}
	sources := filepath.Join(aptDir, "sources.list")
	if err := os.WriteFile(sources, []byte(sourcesList(suite, keyring)), 0o644); err != nil {
		return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	opts := []string{
		"-o", "Dir::Etc::SourceList=" + sources,
		"-o", "Dir::Etc::SourceParts=/dev/null",
		"-o", "Dir::Etc::Preferences=/dev/null",
		"-o", "Dir::Etc::PreferencesParts=/dev/null",
		"-o", "Dir::State=" + filepath.Join(aptDir, "state"),
		"-o", "Dir::Cache=" + filepath.Join(aptDir, "cache"),
		"-o", "APT::Sandbox::User=root",
		"-o", "Debug::NoLocking=1",
		"-o", "Acquire::Languages=none",
		"-o", "Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::CNF::DefaultEnabled=false",
		"-o", "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false",
		"-q",
	}
	// run runs a tool with args (after apt's options when withOpts).
	run := func(dir string, withOpts bool, name string, args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
		defer cancel()
		var out, stderr bytes.Buffer
		argv := args
		if withOpts {
			argv = append(append([]string{}, opts...), args...)
		}
		cmd := exec.CommandContext(ctx, name, argv...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive", "LC_ALL=C")
		cmd.Stdout = &limitedWriter{w: &out, n: 1 << 20}
		cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("vmtest: %s %s: %v: %s: %w", name, strings.Join(args, " "), err, lastLines(stderr.String(), 5), errdefs.ErrUnavailable)
		}
		return out.Bytes(), nil
	}
	if _, err := run(aptDir, true, "apt-get", "update"); err != nil {
		return Kernel{}, err
	}
	show, err := run(aptDir, true, "apt-cache", "show", "--no-all-versions", "linux-image-amd64")
	if err != nil {
		return Kernel{}, err
	}
	image := exactDepends(show, "linux-image-")
	if len(image) != 1 {
		return Kernel{}, fmt.Errorf("vmtest: %s's linux-image-amd64 depends on %d versioned linux-image-<release> packages, want 1: %w", suite, len(image), errdefs.ErrNotFound)
	}
	name := image[0].name + "_" + image[0].version
	dest := filepath.Join(cache, "kernels", name)
	if _, err := os.Stat(dest); errors.Is(err, fs.ErrNotExist) {
		// Since Linux 7, linux-image-<release> is itself a metapackage:
		// the kernel and its modules are in linux-binary-, linux-modules-
		// and linux-base-<release>.
		show, err := run(aptDir, true, "apt-cache", "show", "--no-all-versions", image[0].name)
		if err != nil {
			return Kernel{}, err
		}
		pkgs := append(image, exactDepends(show, "linux-binary-", "linux-modules-", "linux-base-")...)
		tmp, err := os.MkdirTemp(cache, ".fetch-")
		if err != nil {
			return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
		}
		defer os.RemoveAll(tmp)
		args := []string{"download"}
		for _, p := range pkgs {
			args = append(args, p.name+"="+p.version)
		}
		if _, err := run(tmp, true, "apt-get", args...); err != nil {
			return Kernel{}, err
		}
		debs, _ := filepath.Glob(filepath.Join(tmp, "*.deb"))
		if len(debs) != len(pkgs) {
			return Kernel{}, fmt.Errorf("vmtest: apt-get download of %d packages gave %d: %w", len(pkgs), len(debs), errdefs.ErrUnavailable)
		}
		unpacked := filepath.Join(tmp, "root")
		for _, deb := range debs {
			if _, err := run(tmp, false, "dpkg-deb", "-x", deb, unpacked); err != nil {
				return Kernel{}, err
			}
			if err := os.Remove(deb); err != nil {
				return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
			}
		}
		if _, err := unpackedKernel(unpacked); err != nil {
			return Kernel{}, err
		}
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
		}
		if err := os.Rename(unpacked, dest); err != nil {
			return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
		}
	} else if err != nil {
		return Kernel{}, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	if err := writeFileAtomic(filepath.Join(cache, suite+".kernel"), []byte(name+"\n")); err != nil {
		return Kernel{}, err
	}
	return CachedKernel(cache, suite)
}

// sourcesList is the apt sources of a suite: a stable release's security
// updates come with it.
func sourcesList(suite, keyring string) string {
	mirror := envOr(EnvMirror, "http://deb.debian.org/debian")
	security := envOr(EnvSecurityMirror, "http://deb.debian.org/debian-security")
	s := fmt.Sprintf("deb [signed-by=%s] %s %s main\n", keyring, mirror, suite)
	if !strings.Contains(suite, "-") && suite != "sid" && suite != "unstable" {
		s += fmt.Sprintf("deb [signed-by=%s] %s %s-security main\n", keyring, security, suite)
	}
	return s
}

// debPackage is a Debian package at an exact version.
type debPackage struct{ name, version string }

// exactDepends returns the dependencies pinned to one version ("name (=
// version)") whose names start with one of prefixes, from an apt-cache show
// record.
func exactDepends(show []byte, prefixes ...string) []debPackage {
	var out []debPackage
	for _, line := range strings.Split(string(show), "\n") {
		deps, ok := strings.CutPrefix(line, "Depends: ")
		if !ok {
			continue
		}
		for _, d := range strings.Split(deps, ",") {
			f := strings.Fields(strings.TrimSpace(d))
			if len(f) != 3 || f[1] != "(=" || !strings.HasSuffix(f[2], ")") {
				continue
			}
			for _, p := range prefixes {
				if strings.HasPrefix(f[0], p) {
					out = append(out, debPackage{f[0], strings.TrimSuffix(f[2], ")")})
					break
				}
			}
		}
		break
	}
	return out
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// lockFile takes an exclusive flock on path, waiting until ctx ends.
func lockFile(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("vmtest: lock %s: %w: %w", path, err, errdefs.ErrUnavailable)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("vmtest: waiting for %s: %w", path, errdefs.ErrTimeout)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	return nil
}

// lastLines returns the last n lines of s, trimmed.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
