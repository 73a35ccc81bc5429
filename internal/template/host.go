package template

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

// HostName is the name of the host template.
const HostName = "host"

// hostRecipeVersion identifies what buildSkeleton produces. Bump it whenever
// the skeleton's content changes: the next Resolve builds a fresh skeleton
// next to the old one (old ones are left for sandboxes that still use them;
// see Host.Prune). Skeleton directories are named v<recipe>-<fingerprint>.
const hostRecipeVersion = 1

// systemDirs are the host directories a host-template sandbox sees,
// read-only. Each that exists on the host becomes either the same symlink
// in the skeleton (merged-/usr systems: /bin -> usr/bin) or an empty mount
// point plus a bind mount.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// mountPoint is an empty directory created in the skeleton.
type mountPoint struct {
	path string
	mode fs.FileMode
}

// mountPoints are the empty directories of the skeleton. Like every file
// of the skeleton they belong to the daemon's user (layers are not
// id-mapped); the runtime creates the writable ones (/home/user, /tmp,
// /root, ...) again in each sandbox's writable layer with in-sandbox
// owners, so these only give the tree its shape.
var mountPoints = []mountPoint{
	{"proc", 0o555},
	{"dev", 0o755},
	{"sys", 0o555},
	{"tmp", 0o777 | fs.ModeSticky},
	{"home", 0o755},
	{"home/user", 0o755},
	{"root", 0o700},
	{"var", 0o755},
	{"var/tmp", 0o777 | fs.ModeSticky},
	{"run", 0o755},
	{"mnt", 0o755},
	{"opt", 0o755},
	{"srv", 0o755},
}

// HostOptions configure a Host template.
type HostOptions struct {
	// CacheDir holds the built skeletons, e.g. <data-dir>/templates/host.
	// Required, absolute. It is created if missing.
	CacheDir string
	// Root is the host root whose system directories are bound; "/" when
	// empty. Tests point it at a fixture.
	Root string
	// Etc is the directory the curated /etc is copied from;
	// Root + "/etc" when empty.
	Etc string
	// Logger receives build progress and skipped-file details.
	Logger *slog.Logger

	// recipe overrides hostRecipeVersion in tests.
	recipe int
}

// Host is the "host" template: the host's system directories, read-only,
// over a skeleton layer with a curated /etc. A skeleton is built per recipe
// version and per state of the host's /etc (its fingerprint: the names,
// modes, sizes, times and inodes of what copyEtc would copy) under
// CacheDir, atomically (built in a temporary directory and renamed into
// place), so concurrent daemons and restarts share it.
//
// The system directories are bound live, but /etc is a copy, so a host
// package install (a new /etc/alternatives link, a new ld.so.cache) would
// leave it stale. Host watches the host's /etc with inotify once Resolve
// has run: the first Resolve after a change fingerprints /etc again (a few
// milliseconds) and, when it differs, builds a new skeleton, which
// sandboxes created from then on use. Every hostRecheck it fingerprints
// /etc anyway, in case the watch missed something (or inotify is not
// available). Close stops the watch.
type Host struct {
	opts HostOptions
	log  *slog.Logger

	mu        sync.Mutex
	rootfs    *runtime.Rootfs // cached after the first successful Resolve
	fp        string          // fingerprint of /etc the skeleton was built from
	checked   time.Time       // when fp was last compared with /etc
	changed   atomic.Bool     // the watch saw /etc change since checked
	watch     *etcWatch
	watchOnce sync.Once
}

// hostRecheck is how often Resolve fingerprints /etc even when the watch
// saw no change.
const hostRecheck = 30 * time.Second

var _ Source = (*Host)(nil)

// NewHost validates opts and returns the host template. It does no I/O;
// the skeleton is built by the first Resolve.
func NewHost(opts HostOptions) (*Host, error) {
	if opts.CacheDir == "" || !filepath.IsAbs(opts.CacheDir) {
		return nil, fmt.Errorf("template host: cache dir must be an absolute path: %w", errdefs.ErrInvalidArgument)
	}
	opts.CacheDir = filepath.Clean(opts.CacheDir)
	if opts.Root == "" {
		opts.Root = "/"
	}
	if !filepath.IsAbs(opts.Root) {
		return nil, fmt.Errorf("template host: root must be an absolute path: %w", errdefs.ErrInvalidArgument)
	}
	opts.Root = filepath.Clean(opts.Root)
	if opts.Etc == "" {
		opts.Etc = filepath.Join(opts.Root, "etc")
	}
	if !filepath.IsAbs(opts.Etc) {
		return nil, fmt.Errorf("template host: etc must be an absolute path: %w", errdefs.ErrInvalidArgument)
	}
	opts.Etc = filepath.Clean(opts.Etc)
	if opts.recipe == 0 {
		opts.recipe = hostRecipeVersion
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Host{opts: opts, log: log.With("template", HostName)}, nil
}

// Name returns "host".
func (h *Host) Name() string { return HostName }

// Resolve returns the skeleton layer and the bind mounts of the host's
// system directories, building the skeleton first if this recipe version
// and state of /etc have none yet.
func (h *Host) Resolve(ctx context.Context) (runtime.Rootfs, error) {
	h.watchOnce.Do(h.startWatch)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.rootfs == nil || h.changed.Load() || time.Since(h.checked) > hostRecheck {
		if err := h.refresh(ctx); err != nil {
			h.log.Error("building skeleton failed", "err", err)
			return runtime.Rootfs{}, fmt.Errorf("template %s: cannot prepare the root filesystem: %w", HostName, errdefs.Class(err))
		}
	}
	// The skeleton was built against the host layout; check that the bind
	// sources are still directories (cheap: one lstat each).
	for _, b := range h.rootfs.Binds {
		fi, err := os.Lstat(b.Source)
		if err != nil || !fi.IsDir() {
			h.log.Error("host system directory changed since the skeleton was built", "dir", b.Source)
			return runtime.Rootfs{}, fmt.Errorf("template %s: host layout changed: %w", HostName, errdefs.ErrFailedPrecondition)
		}
	}
	return cloneRootfs(*h.rootfs), nil
}

// refresh fingerprints /etc and, when it differs from the skeleton's,
// switches to the skeleton of the new state, building it if needed.
// Called with h.mu held.
func (h *Host) refresh(ctx context.Context) error {
	h.changed.Store(false) // a change from here on is seen next time
	fp, err := etcFingerprint(ctx, h.opts.Etc)
	if err != nil {
		h.changed.Store(true)
		return err
	}
	h.checked = time.Now()
	if h.rootfs != nil && fp == h.fp {
		return nil
	}
	skel, err := h.ensureSkeleton(ctx, fp)
	if err != nil {
		h.changed.Store(true)
		return err
	}
	rfs := runtime.Rootfs{Layers: []string{skel}, Workdir: "/home/user"}
	for _, dir := range systemDirs {
		fi, err := os.Lstat(filepath.Join(skel, dir))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return fmt.Errorf("template %s: %w", HostName, errdefs.ErrInternal)
		}
		if fi.IsDir() {
			rfs.Binds = append(rfs.Binds, runtime.Bind{Source: filepath.Join(h.opts.Root, dir), Target: dir})
		}
	}
	if h.rootfs != nil {
		h.log.Info("the host's /etc changed: new sandboxes use a fresh skeleton", "dir", skel)
	}
	h.rootfs, h.fp = &rfs, fp
	return nil
}

// Provenance says what the template is made of and when its current
// skeleton was built (zero before the first Resolve).
func (h *Host) Provenance() (source string, built time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	source = "this host's " + strings.Join(systemDirs, ", ") + " (read-only, live) and a curated copy of " + h.opts.Etc
	if h.rootfs == nil {
		return source + " (not built yet)", time.Time{}
	}
	if fi, err := os.Stat(h.rootfs.Layers[0]); err == nil {
		built = fi.ModTime().UTC()
	}
	return source + " (fingerprint " + h.fp[:12] + ", rebuilt when " + h.opts.Etc + " changes)", built
}

// Close stops watching the host's /etc. Resolve still works, fingerprinting
// /etc every hostRecheck.
func (h *Host) Close() error {
	h.watchOnce.Do(func() {}) // no watch after Close
	h.mu.Lock()
	w := h.watch
	h.watch = nil
	h.mu.Unlock()
	if w != nil {
		return w.close()
	}
	return nil
}

// startWatch starts the inotify watch of /etc, or logs why it cannot.
func (h *Host) startWatch() {
	w, err := watchEtc(h.opts.Etc, func() { h.changed.Store(true) }, h.log)
	if err != nil {
		h.log.Warn("cannot watch the host's /etc; changes are picked up within "+hostRecheck.String(), "err", err)
		return
	}
	h.mu.Lock()
	h.watch = w
	h.mu.Unlock()
}

// skeletonDir is where the skeleton of the current recipe version and the
// /etc fingerprint fp lives (it may not exist yet).
func (h *Host) skeletonDir(fp string) string {
	return filepath.Join(h.opts.CacheDir, "v"+strconv.Itoa(h.opts.recipe)+"-"+fp[:16])
}

// Prune removes skeletons other than the current one (of other recipe
// versions, or of an earlier /etc) and leftovers of interrupted builds.
// Call it only when no sandbox uses an old skeleton.
func (h *Host) Prune() error {
	entries, err := os.ReadDir(h.opts.CacheDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("template host: prune: %w", err)
	}
	h.mu.Lock()
	current := ""
	if h.rootfs != nil {
		current = filepath.Base(h.rootfs.Layers[0])
	}
	h.mu.Unlock()
	var errs []error
	for _, e := range entries {
		name := e.Name()
		if name == current || !(strings.HasPrefix(name, "v") || strings.HasPrefix(name, ".build-")) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(h.opts.CacheDir, name)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ensureSkeleton returns the skeleton of /etc's state fp, building it if
// needed.
func (h *Host) ensureSkeleton(ctx context.Context, fp string) (string, error) {
	final := h.skeletonDir(fp)
	if fi, err := os.Lstat(final); err == nil && fi.IsDir() {
		return final, nil
	}
	if err := os.MkdirAll(h.opts.CacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create cache dir: %w", err)
	}
	h.removeStaleBuilds()
	tmp, err := os.MkdirTemp(h.opts.CacheDir, ".build-")
	if err != nil {
		return "", fmt.Errorf("create build dir: %w", err)
	}
	start := time.Now()
	st, err := h.buildSkeleton(ctx, tmp)
	if err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		_ = os.RemoveAll(tmp)
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		_ = os.RemoveAll(tmp)
		// Another builder (a concurrent daemon or Host value) won the race.
		if fi, serr := os.Lstat(final); serr == nil && fi.IsDir() {
			return final, nil
		}
		return "", fmt.Errorf("install skeleton: %w", err)
	}
	if d, err := os.Open(h.opts.CacheDir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	h.log.Info("built host skeleton", "dir", final, "files", st.files, "bytes", st.bytes,
		"skipped", st.skipped, "took", time.Since(start).Round(time.Millisecond))
	return final, nil
}

// removeStaleBuilds deletes temporary build directories that an
// interrupted build left behind. Recent ones may belong to a concurrent
// builder and are kept.
func (h *Host) removeStaleBuilds() {
	entries, err := os.ReadDir(h.opts.CacheDir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".build-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > 10*time.Minute {
			_ = os.RemoveAll(filepath.Join(h.opts.CacheDir, e.Name()))
		}
	}
}

// buildSkeleton fills dir with the skeleton: system dir symlinks and mount
// points, the empty mount points of mountPoints and the curated /etc.
func (h *Host) buildSkeleton(ctx context.Context, dir string) (copyStats, error) {
	for _, sd := range systemDirs {
		fi, err := os.Lstat(filepath.Join(h.opts.Root, sd))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return copyStats{}, err
		}
		dst := filepath.Join(dir, sd)
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(filepath.Join(h.opts.Root, sd))
			if err != nil {
				return copyStats{}, err
			}
			if err := os.Symlink(target, dst); err != nil {
				return copyStats{}, err
			}
		case fi.IsDir():
			if err := mkdirMode(dst, 0o755); err != nil {
				return copyStats{}, err
			}
		}
	}
	for _, mp := range mountPoints {
		if err := mkdirMode(filepath.Join(dir, mp.path), mp.mode); err != nil {
			return copyStats{}, err
		}
	}
	st, err := copyEtc(ctx, h.opts.Etc, filepath.Join(dir, "etc"), h.log)
	if err != nil {
		return st, err
	}
	if err := writeEtcOverrides(filepath.Join(dir, "etc")); err != nil {
		return st, err
	}
	return st, nil
}

// mkdirMode creates dir with exactly mode: the umask does not apply and
// the sticky bit is kept (pass fs.ModeSticky, not 0o1000).
func mkdirMode(dir string, mode fs.FileMode) error {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// cloneRootfs deep-copies r so callers cannot modify the cached value.
func cloneRootfs(r runtime.Rootfs) runtime.Rootfs {
	r.Layers = append([]string(nil), r.Layers...)
	r.Binds = append([]runtime.Bind(nil), r.Binds...)
	return r
}
