package template

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

const secretContent = "TOP-SECRET-CONTENT"

// fixtureHost builds a fake host root: merged-/usr layout, a /etc full of
// things that must not leak, and user data that must not appear.
func fixtureHost(t *testing.T) (root string) {
	t.Helper()
	root = t.TempDir()
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "secret"), secretContent, 0o644)

	mustMkdir(t, filepath.Join(root, "usr/bin"), 0o755)
	mustMkdir(t, filepath.Join(root, "usr/lib64"), 0o755)
	mustWrite(t, filepath.Join(root, "usr/bin/sh"), "#!fake", 0o755)
	mustSymlink(t, "usr/bin", filepath.Join(root, "bin"))
	mustSymlink(t, "usr/lib64", filepath.Join(root, "lib64"))
	mustMkdir(t, filepath.Join(root, "lib"), 0o755) // a real dir: bound
	mustMkdir(t, filepath.Join(root, "home/alice"), 0o755)
	mustWrite(t, filepath.Join(root, "home/alice/notes"), secretContent, 0o644)
	mustMkdir(t, filepath.Join(root, "root"), 0o700)
	mustWrite(t, filepath.Join(root, "root/.bash_history"), secretContent, 0o644)

	etc := filepath.Join(root, "etc")
	files := []struct {
		path, content string
		mode          fs.FileMode
	}{
		{"passwd", "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:Alice:/home/alice:/bin/bash\n", 0o644},
		{"passwd-", "alice-backup\n" + secretContent, 0o644},
		{"group", "root:x:0:\nalice:x:1000:\n", 0o644},
		{"group-", secretContent, 0o644},
		{"shadow", secretContent, 0o640},
		{"shadow-", secretContent, 0o644},
		{"gshadow", secretContent, 0o644},
		{"sudoers", secretContent, 0o644},
		{"sudoers.d/alice", secretContent, 0o644},
		{"ssh/ssh_host_ed25519_key", secretContent, 0o600},
		{"ssh/ssh_host_ed25519_key.pub", secretContent, 0o644},
		{"ssh/ssh_config", secretContent, 0o644},
		{"ssl/private/server.pem", secretContent, 0o644},
		{"ssl/certs/ca.pem", "CERT", 0o644},
		{"docker/daemon.json", secretContent, 0o644},
		{"machine-id", secretContent, 0o644},
		{"krb5.keytab", secretContent, 0o644},
		{"app/tls.key", secretContent, 0o644},
		{"NetworkManager/system-connections/wifi", secretContent, 0o644},
		{"NetworkManager/NetworkManager.conf", "ok", 0o644},
		{"secret.conf", secretContent, 0o600},
		{"groupreadable.conf", secretContent, 0o640},
		{"closed/inner.conf", secretContent, 0o644},
		{"hostname", "real-host-name\n", 0o644},
		{"hosts", "10.1.2.3 db.internal\n", 0o644},
		{"resolv.conf", "nameserver 10.0.0.53\n", 0o644},
		{"bash.bashrc", "# bashrc\n", 0o644},
		{"profile.d/a.sh", "export A=1\n", 0o755},
		{"setuid-odd", "x", 0o644 | 0o4000},
	}
	for _, f := range files {
		p := filepath.Join(etc, f.path)
		mustMkdir(t, filepath.Dir(p), 0o755)
		mustWrite(t, p, f.content, f.mode)
	}
	if err := os.Chmod(filepath.Join(etc, "closed"), 0o750); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, filepath.Join(outside, "secret"), filepath.Join(etc, "link-to-secret"))
	mustSymlink(t, "../usr/lib/os-release", filepath.Join(etc, "os-release"))
	mustSymlink(t, "ca.pem", filepath.Join(etc, "ssl/certs/abcd.0"))
	mustSymlink(t, "/proc/self/mounts", filepath.Join(etc, "mtab"))
	if err := syscall.Mkfifo(filepath.Join(etc, "fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func mustWrite(t *testing.T, p, content string, mode fs.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode&fs.ModePerm|modeSetuid(mode)); err != nil {
		t.Fatal(err)
	}
}

func modeSetuid(m fs.FileMode) fs.FileMode {
	if m&0o4000 != 0 {
		return fs.ModeSetuid
	}
	return 0
}

func mustMkdir(t *testing.T, p string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, p string) {
	t.Helper()
	if err := os.Symlink(target, p); err != nil {
		t.Fatal(err)
	}
}

func newFixtureHost(t *testing.T, root, cache string) *Host {
	t.Helper()
	h, err := NewHost(HostOptions{CacheDir: cache, Root: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestHostSkeleton(t *testing.T) {
	root := fixtureHost(t)
	cache := filepath.Join(t.TempDir(), "templates", "host")
	h := newFixtureHost(t, root, cache)
	rfs, err := h.Resolve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(rfs.Layers) != 1 || filepath.Dir(rfs.Layers[0]) != cache || !strings.HasPrefix(filepath.Base(rfs.Layers[0]), "v1-") {
		t.Fatalf("layers = %v, want [%s/v1-<fingerprint>]", rfs.Layers, cache)
	}
	if rfs.Workdir != "/home/user" {
		t.Errorf("workdir = %q", rfs.Workdir)
	}
	wantBinds := []runtime.Bind{
		{Source: filepath.Join(root, "usr"), Target: "/usr"},
		{Source: filepath.Join(root, "lib"), Target: "/lib"},
	}
	if len(rfs.Binds) != len(wantBinds) {
		t.Fatalf("binds = %v, want %v", rfs.Binds, wantBinds)
	}
	for i := range wantBinds {
		if rfs.Binds[i] != wantBinds[i] {
			t.Errorf("bind %d = %v, want %v", i, rfs.Binds[i], wantBinds[i])
		}
	}
	skel := rfs.Layers[0]

	// System dirs: symlinks recreated, real dirs as empty mount points,
	// absent ones absent.
	for name, want := range map[string]string{"bin": "usr/bin", "lib64": "usr/lib64"} {
		got, err := os.Readlink(filepath.Join(skel, name))
		if err != nil || got != want {
			t.Errorf("%s -> %q (%v), want symlink to %q", name, got, err, want)
		}
	}
	for _, name := range []string{"usr", "lib"} {
		assertEmptyDir(t, filepath.Join(skel, name))
	}
	for _, name := range []string{"sbin", "lib32", "libx32"} {
		if _, err := os.Lstat(filepath.Join(skel, name)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s exists in skeleton, host has none", name)
		}
	}

	// Mount points with their modes; no host user data.
	for _, mp := range []struct {
		path string
		perm fs.FileMode
		mode fs.FileMode
	}{
		{"tmp", 0o777, fs.ModeSticky}, {"var/tmp", 0o777, fs.ModeSticky},
		{"root", 0o700, 0}, {"proc", 0o555, 0}, {"dev", 0o755, 0}, {"sys", 0o555, 0},
		{"run", 0o755, 0}, {"mnt", 0o755, 0}, {"opt", 0o755, 0}, {"srv", 0o755, 0},
	} {
		fi, err := os.Lstat(filepath.Join(skel, mp.path))
		if err != nil {
			t.Errorf("mount point %s: %v", mp.path, err)
			continue
		}
		if !fi.IsDir() || fi.Mode().Perm() != mp.perm || fi.Mode()&fs.ModeSticky != mp.mode {
			t.Errorf("mount point %s mode = %v, want dir %v|%v", mp.path, fi.Mode(), mp.perm, mp.mode)
		}
		if mp.path != "var/tmp" && mp.path != "var" {
			assertEmptyDir(t, filepath.Join(skel, mp.path))
		}
	}
	assertEmptyDir(t, filepath.Join(skel, "home/user"))
	if entries, _ := os.ReadDir(filepath.Join(skel, "home")); len(entries) != 1 {
		t.Errorf("home has %d entries, want only user", len(entries))
	}

	// Nothing secret anywhere in the skeleton, and only world-readable
	// files in /etc.
	assertNoSecrets(t, skel)

	etc := filepath.Join(skel, "etc")
	for _, denied := range []string{
		"shadow", "shadow-", "gshadow", "passwd-", "group-", "sudoers", "sudoers.d", "ssh",
		"ssl/private", "docker", "machine-id", "krb5.keytab", "app/tls.key",
		"NetworkManager/system-connections", "secret.conf", "groupreadable.conf", "closed",
		"mtab", "fifo",
	} {
		if _, err := os.Lstat(filepath.Join(etc, denied)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("etc/%s was copied", denied)
		}
	}
	for _, kept := range []string{"bash.bashrc", "profile.d/a.sh", "ssl/certs/ca.pem", "NetworkManager/NetworkManager.conf"} {
		if _, err := os.Lstat(filepath.Join(etc, kept)); err != nil {
			t.Errorf("etc/%s missing: %v", kept, err)
		}
	}
	if fi, err := os.Lstat(filepath.Join(etc, "profile.d/a.sh")); err == nil && fi.Mode().Perm() != 0o755 {
		t.Errorf("profile.d/a.sh mode %v, want 0755 preserved", fi.Mode())
	}
	if fi, err := os.Lstat(filepath.Join(etc, "setuid-odd")); err != nil || fi.Mode()&fs.ModeSetuid != 0 {
		t.Errorf("setuid-odd: %v mode %v, want copied without setuid", err, fi.Mode())
	}
	// Symlinks are preserved, never followed.
	for name, want := range map[string]string{
		"os-release":       "../usr/lib/os-release",
		"ssl/certs/abcd.0": "ca.pem",
	} {
		if got, err := os.Readlink(filepath.Join(etc, name)); err != nil || got != want {
			t.Errorf("etc/%s -> %q (%v), want %q", name, got, err, want)
		}
	}
	if got, err := os.Readlink(filepath.Join(etc, "link-to-secret")); err != nil || !filepath.IsAbs(got) {
		t.Errorf("link-to-secret -> %q (%v), want the original absolute symlink", got, err)
	}

	// Overrides.
	for name, want := range map[string]string{
		"passwd":      "user:x:1000:1000::/home/user:/bin/bash\n",
		"group":       "user:x:1000:\n",
		"hostname":    "sandbox\n",
		"hosts":       "127.0.0.1\tlocalhost\n",
		"resolv.conf": "",
	} {
		b, err := os.ReadFile(filepath.Join(etc, name))
		if err != nil {
			t.Errorf("etc/%s: %v", name, err)
			continue
		}
		if !strings.Contains(string(b), want) {
			t.Errorf("etc/%s = %q, want it to contain %q", name, b, want)
		}
	}
	for name, leaked := range map[string]string{"passwd": "alice", "group": "alice", "hostname": "real-host", "hosts": "10.1.2.3", "resolv.conf": "10.0.0.53"} {
		if b, _ := os.ReadFile(filepath.Join(etc, name)); strings.Contains(string(b), leaked) {
			t.Errorf("etc/%s leaks %q", name, leaked)
		}
	}
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Errorf("%s: %v", dir, err)
		return
	}
	if len(entries) != 0 {
		t.Errorf("%s has %d entries, want empty", dir, len(entries))
	}
}

// assertNoSecrets walks skel without following symlinks and fails on any
// file holding secretContent, on any /etc regular file or directory that
// others cannot read, and on any file name from the deny list.
func assertNoSecrets(t *testing.T, skel string) {
	t.Helper()
	err := filepath.WalkDir(skel, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(skel, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		inEtc := rel == "etc" || strings.HasPrefix(rel, "etc/")
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if bytes.Contains(b, []byte(secretContent)) {
				t.Errorf("%s holds a secret", rel)
			}
			if inEtc && fi.Mode().Perm()&0o004 == 0 {
				t.Errorf("%s is not world-readable (%v)", rel, fi.Mode())
			}
		case fi.IsDir():
			if inEtc && fi.Mode().Perm()&0o005 != 0o005 {
				t.Errorf("%s is not world-readable (%v)", rel, fi.Mode())
			}
		}
		base := d.Name()
		if strings.HasPrefix(base, "shadow") || strings.HasPrefix(base, "gshadow") || strings.HasPrefix(base, "ssh_host_") {
			t.Errorf("%s copied", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestHostIdempotentAndVersioned(t *testing.T) {
	root := fixtureHost(t)
	cache := t.TempDir()
	ctx := context.Background()

	h1 := newFixtureHost(t, root, cache)
	r1, err := h1.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(r1.Layers[0], "etc", "marker")
	mustWrite(t, marker, "x", 0o644)

	// Same Host again, and a fresh Host (a restarted daemon) on the same
	// cache: the skeleton is reused, not rebuilt.
	r2, err := h1.Resolve(ctx)
	if err != nil || r2.Layers[0] != r1.Layers[0] {
		t.Fatalf("second Resolve = %v, %v", r2, err)
	}
	r2.Binds[0].Source = "/mutated" // callers get a copy
	h2 := newFixtureHost(t, root, cache)
	r3, err := h2.Resolve(ctx)
	if err != nil || r3.Layers[0] != r1.Layers[0] {
		t.Fatalf("Resolve of new Host = %v, %v", r3, err)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("skeleton was rebuilt: %v", err)
	}
	if r4, _ := h1.Resolve(ctx); r4.Binds[0].Source == "/mutated" {
		t.Fatal("Resolve returned the cached slice, not a copy")
	}

	// A new recipe version builds a fresh skeleton beside the old one.
	h3, err := NewHost(HostOptions{CacheDir: cache, Root: root, recipe: hostRecipeVersion + 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h3.Close()
	r5, err := h3.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r5.Layers[0] == r1.Layers[0] {
		t.Fatal("recipe change reused the old skeleton")
	}
	if _, err := os.Stat(filepath.Join(r5.Layers[0], "etc", "marker")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("new skeleton carries the old one's content")
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatal("old skeleton removed while sandboxes may use it")
	}
	if err := h3.Prune(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r1.Layers[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("Prune kept the old version")
	}
	if _, err := os.Stat(r5.Layers[0]); err != nil {
		t.Fatal("Prune removed the current version")
	}
}

func TestHostConcurrentBuilds(t *testing.T) {
	root := fixtureHost(t)
	cache := t.TempDir()
	const n = 8
	var wg sync.WaitGroup
	layers := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			h := newFixtureHost(t, root, cache) // separate values: no shared mutex
			r, err := h.Resolve(context.Background())
			errs[i] = err
			if err == nil {
				layers[i] = r.Layers[0]
			}
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("builder %d: %v", i, errs[i])
		}
		if layers[i] != layers[0] {
			t.Fatalf("builders disagree: %s vs %s", layers[i], layers[0])
		}
	}
	entries, err := os.ReadDir(cache)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Fatalf("cache holds %v, want only the skeleton (no leftover build dirs)", names)
	}
	assertNoSecrets(t, layers[0])
}

func TestHostCanceledBuildLeavesNothing(t *testing.T) {
	root := fixtureHost(t)
	cache := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	h := newFixtureHost(t, root, cache)
	_, err := h.Resolve(ctx)
	if !errors.Is(err, errdefs.ErrCanceled) {
		t.Fatalf("Resolve with canceled ctx = %v, want ErrCanceled", err)
	}
	if strings.Contains(err.Error(), cache) {
		t.Errorf("error %q reveals a host path", err)
	}
	if entries, _ := os.ReadDir(cache); len(entries) != 0 {
		t.Fatalf("canceled build left %d entries", len(entries))
	}
	// A later Resolve succeeds.
	if _, err := h.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestHostLayoutChanged(t *testing.T) {
	root := fixtureHost(t)
	h := newFixtureHost(t, root, t.TempDir())
	if _, err := h.Resolve(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(root, "lib")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Resolve(context.Background()); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Resolve after a bind source vanished = %v, want ErrFailedPrecondition", err)
	}
}

func TestNewHostValidation(t *testing.T) {
	for _, opts := range []HostOptions{
		{},
		{CacheDir: "relative"},
		{CacheDir: "/abs", Root: "rel"},
		{CacheDir: "/abs", Etc: "rel"},
	} {
		if _, err := NewHost(opts); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("NewHost(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
}

// TestHostRealEtc builds the skeleton from this machine's real /etc and
// system directories and checks the same invariants; it reports the
// skeleton's size.
func TestHostRealEtc(t *testing.T) {
	if _, err := os.Stat("/usr/bin"); err != nil {
		t.Skip("no /usr/bin on this host")
	}
	h, err := NewHost(HostOptions{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rfs, err := h.Resolve(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	skel := rfs.Layers[0]
	var size int64
	var files int
	_ = filepath.WalkDir(skel, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				size += fi.Size()
				files++
			}
		}
		return nil
	})
	t.Logf("host skeleton: %d files, %d KiB, binds %v", files, size>>10, rfs.Binds)
	if size > 64<<20 {
		t.Errorf("skeleton is %d bytes, expected a small layer", size)
	}
	for _, b := range rfs.Binds {
		if b.Target == "/home" || b.Target == "/root" || b.Target == "/var" || b.Target == "/etc" {
			t.Errorf("bind of %s", b.Target)
		}
	}
	for _, denied := range []string{"etc/shadow", "etc/gshadow", "etc/ssh", "etc/machine-id", "etc/sudoers"} {
		if _, err := os.Lstat(filepath.Join(skel, denied)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s copied from the real host", denied)
		}
	}
	err = filepath.WalkDir(filepath.Join(skel, "etc"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if (fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 == 0) || (fi.IsDir() && fi.Mode().Perm()&0o005 != 0o005) {
			t.Errorf("%s is not world-readable", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestEtcDenied(t *testing.T) {
	tests := []struct {
		rel  string
		want bool
	}{
		{"shadow", true}, {"gshadow-", true}, {"passwd-", true}, {"passwd", false},
		{"ssh", true}, {"ssh/sshd_config", true}, {"sshguard.conf", false},
		{"ssl/private", true}, {"ssl/private/a.pem", true}, {"ssl/certs/a.pem", false},
		{"pki/tls/private/k", true}, {"x/private", true},
		{"docker", true}, {"docker/daemon.json", true}, {"dockerfile.conf", false},
		{"sudoers.d/x", true}, {"security/opasswd", true}, {"security/limits.conf", false},
		{"krb5.keytab", true}, {"a/b/server.key", true}, {"systemd/credstore.encrypted", true},
		{"NetworkManager/system-connections/home.nmconnection", true},
		{"NetworkManager/NetworkManager.conf", false}, {"machine-id", true},
		{"airlock/config.json", true}, {"apt/auth.conf.d/x", true}, {"apt/sources.list", false},
		{"wireguard/wg0.conf", true}, {"bash.bashrc", false}, {"mtab", true},
	}
	for _, tt := range tests {
		if got := etcDenied(tt.rel); got != tt.want {
			t.Errorf("etcDenied(%q) = %v, want %v", tt.rel, got, tt.want)
		}
	}
}

// TestHostEtcChanges: a change to the host's /etc (a package install adds
// an alternatives link and rewrites ld.so.cache) reaches the sandboxes
// created after it: the watch notices at once, the next Resolve builds a
// fresh skeleton, the old one stays for the sandboxes that use it. A change
// to a denied file (a credential) costs nothing.
func TestHostEtcChanges(t *testing.T) {
	root := fixtureHost(t)
	cache := t.TempDir()
	h := newFixtureHost(t, root, cache)
	ctx := context.Background()
	r1, err := h.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, built1 := h.Provenance()
	etc := filepath.Join(root, "etc")

	// A credential changes: same skeleton.
	mustWrite(t, filepath.Join(etc, "shadow"), secretContent+"2", 0o640)
	if r, err := h.Resolve(ctx); err != nil || r.Layers[0] != r1.Layers[0] {
		t.Fatalf("Resolve after a shadow change = %v, %v; want the same skeleton", r.Layers, err)
	}

	// A package install: a new directory with a link in it, a rewritten
	// cache file.
	mustMkdir(t, filepath.Join(etc, "alternatives"), 0o755)
	mustSymlink(t, "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3", filepath.Join(etc, "alternatives", "libblas.so.3"))
	mustWrite(t, filepath.Join(etc, "ld.so.cache"), "new cache", 0o644)
	waitChanged(t, h)
	r2, err := h.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Layers[0] == r1.Layers[0] {
		t.Fatal("the skeleton was not rebuilt after /etc changed")
	}
	if got, err := os.Readlink(filepath.Join(r2.Layers[0], "etc", "alternatives", "libblas.so.3")); err != nil || got != "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3" {
		t.Errorf("new skeleton's alternatives link = %q, %v", got, err)
	}
	if b, _ := os.ReadFile(filepath.Join(r2.Layers[0], "etc", "ld.so.cache")); string(b) != "new cache" {
		t.Errorf("new skeleton's ld.so.cache = %q", b)
	}
	if _, err := os.Stat(r1.Layers[0]); err != nil {
		t.Errorf("the old skeleton, which sandboxes may use, is gone: %v", err)
	}
	assertNoSecrets(t, r2.Layers[0])
	src, built2 := h.Provenance()
	if !strings.Contains(src, etc) || built2.IsZero() || built2.Before(built1) {
		t.Errorf("Provenance = %q, %v (first build %v)", src, built2, built1)
	}

	// A file in a directory made after the watch began.
	mustWrite(t, filepath.Join(etc, "alternatives", "note"), "x", 0o644)
	waitChanged(t, h)
	if r3, err := h.Resolve(ctx); err != nil || r3.Layers[0] == r2.Layers[0] {
		t.Fatalf("Resolve after a change in a new directory = %v, %v; want a fresh skeleton", r3.Layers, err)
	}

	// A restarted daemon on the same cache and /etc reuses the skeleton.
	h2 := newFixtureHost(t, root, cache)
	r4, err := h2.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r5, _ := h.Resolve(ctx); r4.Layers[0] != r5.Layers[0] {
		t.Errorf("a new Host built %s, want the current %s", r4.Layers[0], r5.Layers[0])
	}
}

// waitChanged waits until h's watch has seen a change.
func waitChanged(t *testing.T, h *Host) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !h.changed.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the watch did not see the change of /etc within 5 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHostEtcRecheck: without a watch (Close), a change is still picked up
// by the periodic fingerprint.
func TestHostEtcRecheck(t *testing.T) {
	root := fixtureHost(t)
	h := newFixtureHost(t, root, t.TempDir())
	ctx := context.Background()
	r1, err := h.Resolve(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.Close()
	mustWrite(t, filepath.Join(root, "etc", "hostname"), "renamed", 0o644)
	if r, _ := h.Resolve(ctx); r.Layers[0] != r1.Layers[0] {
		t.Fatal("rebuilt before the recheck interval without a watch")
	}
	h.mu.Lock()
	h.checked = time.Now().Add(-hostRecheck - time.Second)
	h.mu.Unlock()
	r2, err := h.Resolve(ctx)
	if err != nil || r2.Layers[0] == r1.Layers[0] {
		t.Fatalf("Resolve after the recheck interval = %v, %v; want a fresh skeleton", r2.Layers, err)
	}
}

func BenchmarkEtcFingerprint(b *testing.B) {
	for b.Loop() {
		if _, err := etcFingerprint(context.Background(), "/etc"); err != nil {
			b.Fatal(err)
		}
	}
}
