package debian

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/account"
	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestForwardLines(t *testing.T) {
	long := strings.Repeat("x", maxLineBytes+100)
	in := "I: creating /b/x/rootfs\n\nprogress 10%\rprogress 20%\r\n" + long + "\nE: Unable to locate package nope\ntab\there\x1b[0m\nlast without newline"
	var got []string
	last := forwardLines(strings.NewReader(in), "/b/x/rootfs", func(l string) { got = append(got, l) })
	if last != "E: Unable to locate package nope" {
		t.Errorf("last error = %q", last)
	}
	want := []string{"I: creating <rootfs>", "progress 10%", "progress 20%"}
	if len(got) != 7 || !slices.Equal(got[:3], want) {
		t.Fatalf("lines = %q", got)
	}
	if len(got[3]) > maxLineBytes+3 || !strings.HasSuffix(got[3], "...") {
		t.Errorf("long line not cut: %d bytes", len(got[3]))
	}
	if got[5] != "tab here[0m" || got[6] != "last without newline" {
		t.Errorf("lines = %q", got[4:])
	}
}

func TestUnescapeMountPath(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/x\134y`: `/x\y`, `/end\04`: `/end\04`} {
		if got := unescapeMountPath(in); got != want {
			t.Errorf("unescapeMountPath(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeScript is a stand-in for mmdebstrap: it finds the target directory
// after "--" and runs the body with it as $T.
const fakeScript = `#!/bin/sh
while [ "$1" != "--" ]; do shift; done
T="$3"
echo "I: target $T"
`

// fakeBuildable lays out the least Build's post-processing needs.
const fakeBuildable = `mkdir -p "$T/etc" "$T/bin" "$T/dev" "$T/var/lib/apt/lists/partial" "$T/var/cache/apt/archives"
printf 'root:x:0:0:root:/root:/bin/bash\n' > "$T/etc/passwd"
printf 'root:x:0:\n' > "$T/etc/group"
printf 'root:*:19000:0:99999:7:::\n' > "$T/etc/shadow"
echo hostname-of-the-host > "$T/etc/hostname"
echo "nameserver 10.1.2.3" > "$T/etc/resolv.conf"
cp /bin/sh "$T/bin/sh"
cp /bin/sh "$T/bin/bash"
echo pkg > "$T/var/cache/apt/archives/x.deb"
echo list > "$T/var/lib/apt/lists/deb_dists_x"
echo part > "$T/var/lib/apt/lists/partial/y"
touch "$T/var/lib/apt/lists/lock"
mknod "$T/dev/null" c 1 3
ln -s /proc/self/fd "$T/dev/fd"
`

func writeFake(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "mmdebstrap")
	if err := os.WriteFile(p, []byte(fakeScript+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func needRoot(t *testing.T) {
	t.Helper()
	testutil.RequireRoot(t, "needs root: Build runs mmdebstrap in --mode=root")
}

// assertClean checks that a failed build left nothing in dir.
func assertClean(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 0 {
		t.Errorf("build left %d entries behind, first %q", len(ents), ents[0].Name())
	}
}

func TestBuildFake(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "rootfs")
	var mu sync.Mutex
	var lines []string
	err := Build(context.Background(), Options{
		Suite: "bookworm", Packages: []string{"python3"}, Target: target,
		Binary: writeFake(t, fakeBuildable),
		Progress: func(l string) {
			mu.Lock()
			lines = append(lines, l)
			mu.Unlock()
		},
	})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(target, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if got := read("etc/passwd"); !strings.Contains(got, "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("passwd = %q", got)
	}
	if got := read("etc/group"); !strings.HasSuffix(got, "\nuser:x:1000:\n") {
		t.Errorf("group = %q", got)
	}
	if got := read("etc/shadow"); !strings.HasSuffix(got, "\n"+shadowLine()+"\n") {
		t.Errorf("shadow = %q", got)
	}
	if got := read("etc/hostname"); got != "sandbox\n" {
		t.Errorf("hostname = %q", got)
	}
	if got := read("etc/resolv.conf"); got != "" {
		t.Errorf("resolv.conf = %q", got)
	}
	fi, err := os.Stat(filepath.Join(target, "home/user"))
	if err != nil || !fi.IsDir() || fi.Sys().(*syscall.Stat_t).Uid != account.SandboxUID || fi.Sys().(*syscall.Stat_t).Gid != account.SandboxGID {
		t.Errorf("home: %v %v", fi, err)
	}
	for _, gone := range []string{"dev/null", "var/cache/apt/archives/x.deb", "var/lib/apt/lists/deb_dists_x", "var/lib/apt/lists/partial/y"} {
		if _, err := os.Lstat(filepath.Join(target, gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there (%v)", gone, err)
		}
	}
	for _, kept := range []string{"dev/fd", "var/lib/apt/lists/lock", "var/lib/apt/lists/partial", "bin/sh"} {
		if _, err := os.Lstat(filepath.Join(target, kept)); err != nil {
			t.Errorf("%s: %v", kept, err)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("build directory left behind: %v", ents)
	}
	mu.Lock()
	defer mu.Unlock()
	if !slices.Contains(lines, "I: target <rootfs>") {
		t.Errorf("progress lines %q lack the fake's output with the path hidden", lines)
	}
	for _, l := range lines {
		if strings.Contains(l, dir) {
			t.Errorf("progress line names a host path: %q", l)
		}
	}

	// A second build to the same target is refused.
	err = Build(context.Background(), Options{Suite: "bookworm", Target: target, Binary: writeFake(t, fakeBuildable)})
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Build = %v, want ErrAlreadyExists", err)
	}
}

func TestBuildFailures(t *testing.T) {
	needRoot(t)
	tests := []struct {
		name    string
		body    string
		timeout time.Duration
		want    error
		msg     string
	}{
		{"unknown package", `echo "E: Unable to locate package nope" >&2; exit 1`, 0, errdefs.ErrInvalidArgument, "Unable to locate package nope"},
		{"mirror down", `echo "E: Failed to fetch http://deb.debian.org/x" >&2; exit 1`, 0, errdefs.ErrUnavailable, "Failed to fetch"},
		{"timeout", fakeBuildable + `sleep 30`, 500 * time.Millisecond, errdefs.ErrTimeout, ""},
		{"timeout ignoring TERM", `trap '' TERM; sleep 60`, 500 * time.Millisecond, errdefs.ErrTimeout, ""},
		{"no passwd", `mkdir -p "$T/etc"; printf 'root:x:0:\n' > "$T/etc/group"`, 0, errdefs.ErrFailedPrecondition, "etc/passwd"},
		{"uid taken", fakeBuildable + `echo 'debian:x:1000:1000::/home/debian:/bin/sh' >> "$T/etc/passwd"`, 0, errdefs.ErrFailedPrecondition, "1000"},
		{"passwd symlink", fakeBuildable + `rm "$T/etc/passwd"; ln -s /etc/passwd "$T/etc/passwd"`, 0, errdefs.ErrFailedPrecondition, "not a regular file"},
		{"big uid", fakeBuildable + `touch "$T/bin/x"; chown 70000:0 "$T/bin/x"`, 0, errdefs.ErrFailedPrecondition, "bin/x"},
		{"device outside dev", fakeBuildable + `mknod "$T/bin/null" c 1 3`, 0, errdefs.ErrFailedPrecondition, "bin/null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if strings.Contains(tt.name, "TERM") {
				old := termGrace
				termGrace = time.Second
				defer func() { termGrace = old }()
			}
			dir := t.TempDir()
			start := time.Now()
			err := Build(context.Background(), Options{
				Suite: "bookworm", Target: filepath.Join(dir, "rootfs"),
				Binary: writeFake(t, tt.body), Timeout: tt.timeout,
			})
			if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Build = %v, want %v containing %q", err, tt.want, tt.msg)
			}
			if strings.Contains(err.Error(), dir) {
				t.Errorf("error names a host path: %v", err)
			}
			if d := time.Since(start); d > termGrace+10*time.Second {
				t.Errorf("Build took %s", d)
			}
			assertClean(t, dir)
		})
	}
}

func TestBuildCanceled(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	err := Build(ctx, Options{Suite: "bookworm", Target: filepath.Join(dir, "rootfs"), Binary: writeFake(t, "sleep 30")})
	if !errors.Is(err, errdefs.ErrCanceled) {
		t.Fatalf("Build = %v, want ErrCanceled", err)
	}
	assertClean(t, dir)
}

func TestBuildRejectsBadOptionsFirst(t *testing.T) {
	dir := t.TempDir()
	// The fake would create a marker if it ran.
	marker := filepath.Join(dir, "ran")
	bin := writeFake(t, "touch "+marker)
	for _, o := range []Options{
		{Suite: "--help", Target: filepath.Join(dir, "r")},
		{Suite: "bookworm", Packages: []string{"--hook-dir=/"}, Target: filepath.Join(dir, "r")},
		{Suite: "bookworm"},
	} {
		o.Binary = bin
		if err := Build(context.Background(), o); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Build(%+v) = %v, want ErrInvalidArgument", o, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("mmdebstrap ran for invalid options")
	}
}

// TestBuildReal builds the smallest real Debian tree (bookworm, variant
// essential, no extra packages) with mmdebstrap from the network. CI runs
// it as root with mmdebstrap installed.
func TestBuildReal(t *testing.T) {
	needRoot(t)
	if testing.Short() {
		t.Skip("downloads Debian packages; skipped with -short")
	}
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		t.Skip("mmdebstrap is not installed (apt-get install mmdebstrap)")
	}
	conn, err := net.DialTimeout("tcp", "deb.debian.org:80", 5*time.Second)
	if err != nil {
		t.Skipf("the Debian mirror is unreachable: %v", err)
	}
	conn.Close()

	target := filepath.Join(t.TempDir(), "rootfs")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var n int
	start := time.Now()
	err = Build(ctx, Options{
		Suite: "bookworm", Variant: "essential", Target: target,
		Progress: func(string) { n++ },
	})
	t.Logf("debian bookworm/essential built in %s (%d output lines)", time.Since(start).Round(time.Millisecond), n)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	fi, err := os.Stat(filepath.Join(target, "bin/sh"))
	if err != nil || fi.Mode()&0o111 == 0 {
		t.Errorf("bin/sh: %v %v", fi, err)
	}
	osr, err := os.ReadFile(filepath.Join(target, "etc/os-release"))
	if err != nil || !strings.Contains(string(osr), "VERSION_CODENAME=bookworm") {
		t.Errorf("os-release = %q, %v", osr, err)
	}
	pw, err := os.ReadFile(filepath.Join(target, "etc/passwd"))
	if err != nil || !strings.Contains(string(pw), "\nuser:x:1000:1000::/home/user:/bin/bash\n") {
		t.Errorf("passwd = %q, %v", pw, err)
	}
	gr, err := os.ReadFile(filepath.Join(target, "etc/group"))
	if err != nil || !strings.Contains(string(gr), "\nuser:x:1000:\n") {
		t.Errorf("group = %q, %v", gr, err)
	}
	// The tree works: its shell runs in it.
	out, err := exec.CommandContext(ctx, "chroot", "--userspec=1000:1000", target, "/bin/sh", "-c", "id -un; echo ok").CombinedOutput()
	if err != nil || string(out) != "user\nok\n" {
		t.Errorf("chroot sh: %q, %v", out, err)
	}
	var st du
	st.walk(t, target)
	t.Logf("tree: %d entries, %d MiB", st.n, st.bytes>>20)
}

type du struct {
	n     int
	bytes int64
}

func (d *du) walk(t *testing.T, root string) {
	t.Helper()
	err := filepath.Walk(root, func(_ string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		d.n++
		if fi.Mode().IsRegular() {
			d.bytes += fi.Size()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBuildTargetAppearsMeanwhile(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	target := filepath.Join(dir, "rootfs")
	// The fake creates an empty directory at the target while it runs.
	body := fakeBuildable + `mkdir "$(dirname "$(dirname "$T")")/rootfs"`
	err := Build(context.Background(), Options{Suite: "bookworm", Target: target, Binary: writeFake(t, body)})
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("Build = %v, want ErrAlreadyExists", err)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "rootfs" {
		t.Errorf("entries after the failed build: %v", ents)
	}
	if inner, _ := os.ReadDir(target); len(inner) != 0 {
		t.Errorf("the other directory was replaced: %d entries", len(inner))
	}
}
