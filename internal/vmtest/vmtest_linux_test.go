//go:build linux

package vmtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Tests of the harness's parts that need no VM.

type cpioEntry struct {
	name      string
	mode      uint32
	data      string
	rdevMajor uint32
	rdevMinor uint32
}

// readCpio parses a newc archive the way the kernel does, checking the
// alignment of every header and body.
func readCpio(t *testing.T, b []byte) []cpioEntry {
	t.Helper()
	var out []cpioEntry
	off := 0
	field := func(i int) uint32 {
		v, err := strconv.ParseUint(string(b[off+6+8*i:off+14+8*i]), 16, 32)
		if err != nil {
			t.Fatalf("header field %d at %d: %v", i, off, err)
		}
		return uint32(v)
	}
	for {
		if off%4 != 0 || off+110 > len(b) || string(b[off:off+6]) != "070701" {
			t.Fatalf("bad header at %d", off)
		}
		mode, size, namesize := field(1), field(6), field(11)
		name := string(b[off+110 : off+110+int(namesize)-1])
		if b[off+110+int(namesize)-1] != 0 {
			t.Fatalf("%s: name not NUL-terminated", name)
		}
		data := off + 110 + int(namesize)
		data += pad4(data)
		if name == "TRAILER!!!" {
			return out
		}
		out = append(out, cpioEntry{name: name, mode: mode, data: string(b[data : data+int(size)]), rdevMajor: field(9), rdevMinor: field(10)})
		off = data + int(size)
		off += pad4(off)
	}
}

func TestCpio(t *testing.T) {
	var buf bytes.Buffer
	c := newCpioWriter(&buf)
	c.Dir("usr/bin", 0o755)
	c.Symlink("bin", "usr/bin")
	c.File("usr/bin/tool", 0o755|os.ModeSetuid, 3, strings.NewReader("abc"))
	c.File("etc/a/b", 0o600, 5, strings.NewReader("hello"))
	c.CharDev("dev/console", 0o600, 5, 1)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	got := readCpio(t, buf.Bytes())
	want := []cpioEntry{
		{name: "usr", mode: cpioDir | 0o755},
		{name: "usr/bin", mode: cpioDir | 0o755},
		{name: "bin", mode: cpioSymlink | 0o777, data: "usr/bin"},
		{name: "usr/bin/tool", mode: cpioFile | 0o4755, data: "abc"},
		{name: "etc", mode: cpioDir | 0o755},
		{name: "etc/a", mode: cpioDir | 0o755},
		{name: "etc/a/b", mode: cpioFile | 0o600, data: "hello"},
		{name: "dev", mode: cpioDir | 0o755},
		{name: "dev/console", mode: cpioChar | 0o600, rdevMajor: 5, rdevMinor: 1},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("archive:\n%v\nwant:\n%v", got, want)
	}
	// The system's cpio reads it too, where there is one.
	if cpio, err := exec.LookPath("cpio"); err == nil {
		cmd := exec.Command(cpio, "-t", "--quiet")
		cmd.Stdin = bytes.NewReader(buf.Bytes())
		out, err := cmd.Output()
		if err != nil || !strings.Contains(string(out), "etc/a/b") {
			t.Errorf("cpio -t: %v: %s", err, out)
		}
	}

	// A second entry of one name, and a short body, fail the archive.
	c = newCpioWriter(io.Discard)
	c.File("x", 0o644, 1, strings.NewReader("a"))
	c.File("x", 0o644, 1, strings.NewReader("b"))
	if err := c.Close(); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate: Close = %v, want already exists", err)
	}
	c = newCpioWriter(io.Discard)
	c.File("x", 0o644, 10, strings.NewReader("short"))
	if err := c.Close(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("short body: Close = %v, want unavailable", err)
	}
}

func TestCpioName(t *testing.T) {
	for p, want := range map[string]string{"/a/b": "a/b", "/x": "x"} {
		if got, err := cpioName(p); err != nil || got != want {
			t.Errorf("cpioName(%q) = %q, %v", p, got, err)
		}
	}
	for _, p := range []string{"", "/", "a/b", "/a/../b", "/a/", "/a//b"} {
		if _, err := cpioName(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("cpioName(%q) = %v, want invalid argument", p, err)
		}
	}
}

func TestParseModinfoDepends(t *testing.T) {
	for _, c := range []struct {
		info string
		want []string
	}{
		{"license=GPL\x00depends=9pnet,fscache,netfs\x00name=9p\x00", []string{"9pnet", "fscache", "netfs"}},
		{"depends=\x00name=overlay\x00", nil},
		{"name=x\x00", nil},
		{"depends=nf-conntrack, nf_defrag_ipv4\x00", []string{"nf_conntrack", "nf_defrag_ipv4"}},
		{"", nil},
	} {
		if got := parseModinfoDepends([]byte(c.info)); !slices.Equal(got, c.want) {
			t.Errorf("parseModinfoDepends(%q) = %v, want %v", c.info, got, c.want)
		}
	}
}

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"overlay":                           "overlay",
		"/lib/modules/x/kernel/9pnet.ko":    "9pnet",
		"nf-conntrack.ko.xz":                "nf_conntrack",
		"a/b/virtio_mmio.ko.zst":            "virtio_mmio",
		"kernel/fs/fuse/virtiofs.ko":        "virtiofs",
		"kernel/drivers/x/some-thing.ko.gz": "some_thing",
	} {
		if got := moduleName(in); got != want {
			t.Errorf("moduleName(%q) = %q, want %q", in, got, want)
		}
	}
}

// fakeModule is a minimal ELF object with a .modinfo section.
func fakeModule(t *testing.T, depends string) []byte {
	t.Helper()
	// An ELF64 header, one .modinfo section, and .shstrtab.
	info := []byte("depends=" + depends + "\x00")
	shstr := []byte("\x00.modinfo\x00.shstrtab\x00")
	var b bytes.Buffer
	hdr := make([]byte, 64)
	copy(hdr, "\x7fELF\x02\x01\x01")
	le := func(p []byte, v uint64) {
		for i := range p {
			p[i] = byte(v >> (8 * i))
		}
	}
	le(hdr[16:18], 1)  // ET_REL
	le(hdr[18:20], 62) // EM_X86_64
	le(hdr[20:24], 1)
	infoOff := uint64(64)
	strOff := infoOff + uint64(len(info))
	shOff := (strOff + uint64(len(shstr)) + 7) &^ 7
	le(hdr[40:48], shOff)
	le(hdr[52:54], 64)
	le(hdr[58:60], 64)
	le(hdr[60:62], 3)
	le(hdr[62:64], 2)
	b.Write(hdr)
	b.Write(info)
	b.Write(shstr)
	b.Write(make([]byte, int(shOff)-b.Len()))
	sh := func(name uint32, typ uint32, off, size uint64) {
		s := make([]byte, 64)
		le(s[0:4], uint64(name))
		le(s[4:8], uint64(typ))
		le(s[24:32], off)
		le(s[32:40], size)
		le(s[48:56], 1)
		b.Write(s)
	}
	b.Write(make([]byte, 64))
	sh(1, 1, infoOff, uint64(len(info)))
	sh(10, 3, strOff, uint64(len(shstr)))
	return b.Bytes()
}

func TestResolveModules(t *testing.T) {
	objs := map[string][]byte{
		"9p":      fakeModule(t, "9pnet,netfs"),
		"9pnet":   fakeModule(t, ""),
		"netfs":   fakeModule(t, "fscache"),
		"fscache": fakeModule(t, ""),
		"overlay": fakeModule(t, ""),
		"loop_a":  fakeModule(t, "loop_b"),
		"loop_b":  fakeModule(t, "loop-a"),
	}
	load := func(name string) ([]byte, error) {
		if b, ok := objs[name]; ok {
			return b, nil
		}
		return nil, fmt.Errorf("%s: %w", name, errdefs.ErrNotFound)
	}
	names := func(ms []module) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.name)
		}
		return out
	}
	got, err := resolveModules([]string{"overlay", "9p", "9pnet"}, map[string]bool{"fscache": true}, load)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"overlay", "9pnet", "netfs", "9p"}; !slices.Equal(names(got), want) {
		t.Errorf("order = %v, want %v (dependencies first, built-ins left out, each once)", names(got), want)
	}
	if _, err := resolveModules([]string{"loop_a"}, nil, load); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("cycle: %v, want invalid argument", err)
	}
	if _, err := resolveModules([]string{"9p"}, nil, func(n string) ([]byte, error) {
		if n == "netfs" {
			return nil, fmt.Errorf("%s: %w", n, errdefs.ErrNotFound)
		}
		return load(n)
	}); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "needed by 9p") {
		t.Errorf("missing dependency: %v, want not found, needed by 9p", err)
	}
	if _, err := moduleDepends([]byte("not elf")); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("moduleDepends(not elf) = %v", err)
	}
}

func TestKernelModulesTree(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "kernel/fs/overlayfs"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "kernel/net"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "kernel/fs/overlayfs/overlay.ko"), fakeModule(t, "dep-one"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "kernel/net/dep_one.ko"), fakeModule(t, ""), 0o644))
	must(os.WriteFile(filepath.Join(dir, "modules.builtin"), []byte("kernel/fs/ext4/ext4.ko\n"), 0o644))
	ms, err := kernelModules(t.Context(), dir, "busybox", []string{"ext4", "overlay"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 2 || ms[0].name != "dep_one" || ms[1].name != "overlay" {
		t.Errorf("modules = %v", ms)
	}
	if _, err := kernelModules(t.Context(), dir, "busybox", []string{"nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing module: %v, want not found", err)
	}
	if _, err := kernelModules(t.Context(), "", "busybox", []string{"overlay"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("no module tree: %v, want invalid argument", err)
	}
}

func TestExactDepends(t *testing.T) {
	show := "Package: linux-image-amd64\nVersion: 7.3.4-1~bpo13+1\n" +
		"Depends: linux-base-amd64 (= 7.3.4-1~bpo13+1), linux-image-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-modules-amd64 (>= 7)\n" +
		"Description: x\n\nPackage: linux-image-amd64\nDepends: linux-image-old (= 1)\n"
	got := exactDepends([]byte(show), "linux-image-")
	if want := []debPackage{{"linux-image-7.3.4+deb13-amd64", "7.3.4-1~bpo13+1"}}; !slices.Equal(got, want) {
		t.Errorf("exactDepends = %v, want %v (the first record only)", got, want)
	}
	meta := "Depends: dracut | initramfs-tools (>= 0.120+deb8u2) | linux-initramfs-tool, linux-base-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-binary-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1), linux-modules-7.3.4+deb13-amd64 (= 7.3.4-1~bpo13+1)\n"
	got = exactDepends([]byte(meta), "linux-binary-", "linux-modules-", "linux-base-")
	if len(got) != 3 || got[0].name != "linux-base-7.3.4+deb13-amd64" {
		t.Errorf("exactDepends(split kernel) = %v", got)
	}
}

func TestUnpackedKernel(t *testing.T) {
	old := t.TempDir()
	os.MkdirAll(filepath.Join(old, "boot"), 0o755)
	os.MkdirAll(filepath.Join(old, "lib/modules/6.1.0-9-amd64/kernel"), 0o755)
	os.WriteFile(filepath.Join(old, "boot/vmlinuz-6.1.0-9-amd64"), []byte("k"), 0o644)
	k, err := unpackedKernel(old)
	if err != nil || k.Release != "6.1.0-9-amd64" || k.Modules != filepath.Join(old, "lib/modules/6.1.0-9-amd64") {
		t.Errorf("Linux 6 layout: %+v, %v", k, err)
	}
	split := t.TempDir()
	os.MkdirAll(filepath.Join(split, "usr/lib/modules/7.3.4+deb13-amd64"), 0o755)
	os.WriteFile(filepath.Join(split, "usr/lib/modules/7.3.4+deb13-amd64/vmlinuz"), []byte("k"), 0o644)
	k, err = unpackedKernel(split)
	if err != nil || k.Release != "7.3.4+deb13-amd64" || k.Modules != filepath.Join(split, "usr/lib/modules/7.3.4+deb13-amd64") {
		t.Errorf("Linux 7 layout: %+v, %v", k, err)
	}
	if _, err := unpackedKernel(t.TempDir()); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("empty: %v, want not found", err)
	}
}

func TestCachedKernel(t *testing.T) {
	cache := t.TempDir()
	if _, err := CachedKernel(cache, Bookworm); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("empty cache: %v, want not found", err)
	}
	for _, s := range []string{"", "../x", "Bookworm", "a/b"} {
		if _, err := CachedKernel(cache, s); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("suite %q: %v, want invalid argument", s, err)
		}
	}
	os.WriteFile(filepath.Join(cache, "bookworm.kernel"), []byte("../../etc\n"), 0o644)
	if _, err := CachedKernel(cache, Bookworm); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("escaping name: %v, want invalid argument", err)
	}
	dir := filepath.Join(cache, "kernels", "linux-image-x_1")
	os.MkdirAll(filepath.Join(dir, "boot"), 0o755)
	os.WriteFile(filepath.Join(dir, "boot/vmlinuz-x"), []byte("k"), 0o644)
	os.WriteFile(filepath.Join(cache, "bookworm.kernel"), []byte("linux-image-x_1\n"), 0o644)
	if k, err := CachedKernel(cache, Bookworm); err != nil || k.Release != "x" || k.Modules != "" {
		t.Errorf("CachedKernel = %+v, %v", k, err)
	}
}

func TestSourcesList(t *testing.T) {
	t.Setenv(EnvMirror, "http://m/debian")
	t.Setenv(EnvSecurityMirror, "http://m/security")
	got := sourcesList("bookworm", "/k.gpg")
	want := "deb [signed-by=/k.gpg] http://m/debian bookworm main\ndeb [signed-by=/k.gpg] http://m/security bookworm-security main\n"
	if got != want {
		t.Errorf("bookworm:\n%s\nwant:\n%s", got, want)
	}
	if got := sourcesList("trixie-backports", "/k.gpg"); strings.Count(got, "\n") != 1 {
		t.Errorf("backports has no security suite: %q", got)
	}
}

func TestGuestValidate(t *testing.T) {
	ok := Guest{Command: []string{"true"}}
	for _, c := range []struct {
		name string
		edit func(g *Guest)
	}{
		{"no command", func(g *Guest) { g.Command = nil }},
		{"empty argv0", func(g *Guest) { g.Command = []string{""} }},
		{"bad env", func(g *Guest) { g.Env = []string{"NOEQUALS"} }},
		{"relative dir", func(g *Guest) { g.Dir = "tmp" }},
		{"cgroup escape", func(g *Guest) { g.Cgroup = "a/../../x" }},
		{"absolute cgroup", func(g *Guest) { g.Cgroup = "/a" }},
		{"init.scope", func(g *Guest) { g.Cgroup = "init.scope/x" }},
		{"module with space", func(g *Guest) { g.Modules = []string{"a b"} }},
		{"controller injection", func(g *Guest) { g.Controllers = []string{"memory;reboot"} }},
		{"mount options", func(g *Guest) { g.CgroupMountOptions = "a b" }},
		{"cmdline quote", func(g *Guest) { g.Cmdline = []string{`x="y z"`} }},
		{"memory", func(g *Guest) { g.MemoryMB = 100 }},
		{"cpus", func(g *Guest) { g.CPUs = 1000 }},
		{"timeout", func(g *Guest) { g.Timeout = time.Millisecond }},
		{"relative file", func(g *Guest) { g.Files = []File{{Guest: "opt/x", Data: []byte{}}} }},
		{"replaces init", func(g *Guest) { g.Files = []File{{Guest: "/init", Data: []byte{}}} }},
		{"replaces busybox", func(g *Guest) { g.FromHost = []string{"/bin/busybox"} }},
		{"into the modules", func(g *Guest) { g.Files = []File{{Guest: "/lib/modules/vmtest/x.ko", Data: []byte{}}} }},
		{"host and data", func(g *Guest) { g.Files = []File{{Guest: "/x", Host: "/etc/hostname", Data: []byte{}}} }},
	} {
		g := ok
		c.edit(&g)
		g = g.withDefaults()
		if err := g.validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: validate = %v, want invalid argument", c.name, err)
		}
	}
	g := ok.withDefaults()
	if err := g.validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if _, err := (VM{}).Run(t.Context(), ok); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("zero VM: %v, want invalid argument", err)
	}
}

// The command script quotes every argument and variable: sh gets back
// exactly the argv and environment given.
func TestGuestCommand(t *testing.T) {
	dir := t.TempDir()
	g := Guest{
		Command: []string{"sh", "-c", `printf '%s|' "$@" "$V" "$W"; pwd`, "zero", "a b", "it's", "$HOME", "`x`", ""},
		Env:     []string{"V=x y'z", "W=$(reboot)"},
		Dir:     dir,
	}
	out, err := exec.Command("sh", "-c", guestCommand(g)).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	want := "a b|it's|$HOME|`x`||x y'z|$(reboot)|" + dir + "\n"
	if string(out) != want {
		t.Errorf("got %q, want %q", out, want)
	}
}

func TestConsoleParser(t *testing.T) {
	const nonce = "abc123"
	feed := func(lines ...string) *consoleParser {
		p := &consoleParser{nonce: nonce, start: time.Now()}
		for _, l := range lines {
			p.line([]byte(l))
		}
		return p
	}
	p := feed("[ 0.1] kernel\r\n", "AIRLOCK-VM-BEGIN abc123\r\n", "out 1\r\n", "AIRLOCK-VM-EXIT other 0\r\n",
		"partial", "\r\n", "AIRLOCK-VM-EXIT abc123 3\r\n", "[ 2.0] reboot\r\n")
	r := p.result()
	if p.state != stateExited || r.ExitCode != 3 {
		t.Errorf("state %v, code %d", p.state, r.ExitCode)
	}
	if want := "out 1\nAIRLOCK-VM-EXIT other 0\npartial"; string(r.Output) != want {
		t.Errorf("output %q, want %q (a marker of another nonce is output)", r.Output, want)
	}
	if !strings.HasPrefix(string(r.Console), "[ 0.1] kernel\n") || !strings.HasSuffix(string(r.Console), "reboot\n") {
		t.Errorf("console %q", r.Console)
	}
	// A marker after output that did not end its line.
	p = feed("AIRLOCK-VM-BEGIN abc123\n", "no newlineAIRLOCK-VM-EXIT abc123 0\n")
	if r := p.result(); string(r.Output) != "no newline" || p.state != stateExited {
		t.Errorf("output %q, state %v", r.Output, p.state)
	}
	p = feed("AIRLOCK-VM-ERROR abc123 mount proc\n")
	if p.state != stateFailed || p.failure != "mount proc" {
		t.Errorf("error: state %v, failure %q", p.state, p.failure)
	}
	p = feed("AIRLOCK-VM-BEGIN abc123\n", "so far\n", "\n", "AIRLOCK-VM-TIMEOUT abc123\n")
	if r := p.result(); p.state != stateTimedOut || string(r.Output) != "so far\n" {
		t.Errorf("timeout: state %v, output %q", p.state, r.Output)
	}
	select {
	case <-p.ended():
	default:
		t.Error("ended not closed")
	}
}

func TestCappedBuffer(t *testing.T) {
	var c cappedBuffer
	c.write([]byte("abcd"), 6)
	c.write([]byte("efgh"), 6)
	c.write([]byte("ij"), 6)
	if got := string(c.bytes()); got != "abcdef\n[vmtest: 4 more bytes dropped]\n" {
		t.Errorf("got %q", got)
	}
}

func TestHostClosure(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	real, err := filepath.EvalSymlinks(sh)
	if err != nil {
		t.Fatal(err)
	}
	files, err := hostClosure([]string{real})
	if err != nil {
		t.Fatal(err)
	}
	if files[0] != real {
		t.Errorf("closure %v does not start with %s", files, real)
	}
	interp, libs, err := elfNeeds(real)
	if err != nil {
		t.Fatal(err)
	}
	if interp != "" && len(files) < 2+len(libs) {
		t.Errorf("closure of dynamic %s = %v, want its loader %s and %v", real, files, interp, libs)
	}
	// A script is copied alone; a missing file is an error.
	script := filepath.Join(t.TempDir(), "s")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if files, err := hostClosure([]string{script}); err != nil || len(files) != 1 {
		t.Errorf("script: %v, %v", files, err)
	}
	if _, err := hostClosure([]string{"/nonexistent/x"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("missing: %v, want not found", err)
	}
}

func TestStaticELF(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	_, libs, err := elfNeeds(self)
	if err != nil {
		t.Fatal(err)
	}
	err = staticELF(self)
	if len(libs) == 0 && err != nil {
		t.Errorf("static test binary: %v", err)
	}
	if bash, lerr := exec.LookPath("bash"); lerr == nil {
		if _, l, _ := elfNeeds(bash); len(l) > 0 {
			if err := staticELF(bash); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("dynamic bash: %v, want invalid argument", err)
			}
		}
	}
	script := filepath.Join(t.TempDir(), "s")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if err := staticELF(script); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("script: %v, want invalid argument", err)
	}
}

// Require skips without qemu unless the VM tests are required.
func TestRequireSkips(t *testing.T) {
	if Required() {
		t.Skip("AIRLOCK_VM_REQUIRED=1: the skip path is not taken")
	}
	t.Setenv(EnvQemu, "/nonexistent/qemu")
	var skipped bool
	t.Run("inner", func(t *testing.T) {
		defer func() { skipped = t.Skipped() }()
		Require(t, Bookworm)
		t.Error("Require did not skip")
	})
	if !skipped {
		t.Error("Require without qemu did not skip")
	}
	if _, err := find(Bookworm, false); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "qemu-system-x86") {
		t.Errorf("find = %v, want not found naming the package", err)
	}
}
