//go:build linux

package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strings"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The guest's fixed files.
const (
	etcPasswd = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
	etcGroup  = "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n"
	etcHosts  = "127.0.0.1\tlocalhost vmtest\n::1\tlocalhost ip6-localhost ip6-loopback\n"
	etcNSS    = "passwd: files\ngroup: files\nhosts: files\n"
)

// usrPath maps a guest path to where the merged-/usr guest stores it (/bin,
// /sbin, /lib and /lib64 are links into /usr), so that archive entries never
// go through a link.
func usrPath(p string) string {
	for _, d := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return "/usr" + p
		}
	}
	return p
}

// shQuote quotes s for sh.
func shQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// buildInitramfs writes the guest's initramfs (an uncompressed newc cpio:
// qemu loads it into guest memory and the kernel unpacks it faster than it
// would inflate it under TCG) to dst.
func (vm VM) buildInitramfs(ctx context.Context, dst string, g Guest, nonce string) error {
	if err := staticELF(vm.Busybox); err != nil {
		return fmt.Errorf("%w (busybox)", err)
	}
	mods, err := kernelModules(ctx, vm.Kernel.Modules, vm.Busybox, g.Modules)
	if err != nil {
		return err
	}
	applets, err := busyboxApplets(ctx, vm.Busybox)
	if err != nil {
		return err
	}
	fromHost, err := hostClosure(g.FromHost)
	if err != nil {
		return err
	}
	// The test's files take the place of busybox's applets.
	provided := map[string]bool{}
	for _, p := range fromHost {
		provided[usrPath(p)] = true
	}
	for _, f := range g.Files {
		provided[usrPath(f.Guest)] = true
	}
	f, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	defer f.Close()
	bw := bufio.NewWriterSize(f, 1<<20)
	c := newCpioWriter(bw)

	for _, d := range []struct {
		name string
		perm os.FileMode
	}{
		{"usr/bin", 0o755}, {"usr/sbin", 0o755}, {"usr/lib", 0o755}, {"usr/lib64", 0o755},
		{"usr/local/bin", 0o755}, {"etc", 0o755}, {"root", 0o700}, {"tmp", 0o1777},
		{"var/tmp", 0o1777}, {"run", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"dev", 0o755},
		{"vmtest", 0o755}, {"usr/lib/modules/vmtest", 0o755},
	} {
		c.Dir(d.name, d.perm)
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} {
		c.Symlink(l, "usr/"+l)
	}
	c.CharDev("dev/console", 0o600, 5, 1)
	if err := copyFile(c, "usr/bin/busybox", vm.Busybox, -1); err != nil {
		return err
	}
	for _, a := range applets {
		if !provided["/"+a] {
			c.Symlink(a, "/usr/bin/busybox")
		}
	}
	text := func(name string, perm os.FileMode, s []byte) {
		c.File(name, perm, int64(len(s)), bytes.NewReader(s))
	}
	text("init", 0o755, initScript)
	text("etc/passwd", 0o644, []byte(etcPasswd))
	text("etc/group", 0o644, []byte(etcGroup))
	text("etc/hosts", 0o644, []byte(etcHosts))
	text("etc/hostname", 0o644, []byte("vmtest\n"))
	text("etc/nsswitch.conf", 0o644, []byte(etcNSS))
	for i, m := range mods {
		text(fmt.Sprintf("usr/lib/modules/vmtest/%02d-%s.ko", i, m.name), 0o644, m.obj)
	}
	text("vmtest/env", 0o644, []byte(guestEnv(g, nonce)))
	text("vmtest/command", 0o644, []byte(guestCommand(g)))
	if g.Setup != "" {
		text("vmtest/setup", 0o644, []byte(g.Setup))
	}

	budget := int64(g.MemoryMB) << 20 / 4
	for _, p := range fromHost {
		name, _ := cpioName(usrPath(p))
		if err := copyFile(c, name, p, budget); err != nil {
			return err
		}
		fi, _ := os.Stat(p)
		budget -= fi.Size()
	}
	for _, file := range g.Files {
		name, _ := cpioName(usrPath(file.Guest))
		if file.Host != "" {
			if err := copyFile(c, name, file.Host, budget); err != nil {
				return err
			}
			fi, _ := os.Stat(file.Host)
			budget -= fi.Size()
			continue
		}
		mode := file.Mode
		if mode == 0 {
			mode = 0o644
		}
		if int64(len(file.Data)) > budget {
			return fmt.Errorf("vmtest: the guest's files are over a quarter of its memory: %w", errdefs.ErrResourceExhausted)
		}
		budget -= int64(len(file.Data))
		text(name, mode, file.Data)
	}
	if err := c.Close(); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("vmtest: write initramfs: %w: %w", err, errdefs.ErrUnavailable)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("vmtest: write initramfs: %w: %w", err, errdefs.ErrUnavailable)
	}
	return nil
}

// copyFile writes the regular file at host into the archive, refusing one
// larger than budget (when budget >= 0).
func copyFile(c *cpioWriter, name, host string, budget int64) error {
	f, err := os.Open(host)
	if err != nil {
		return fmt.Errorf("vmtest: guest file: %w: %w", err, errdefs.ErrNotFound)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("vmtest: %s is not a regular file: %w", host, errdefs.ErrInvalidArgument)
	}
	if budget >= 0 && fi.Size() > budget {
		return fmt.Errorf("vmtest: the guest's files are over a quarter of its memory (at %s): %w", host, errdefs.ErrResourceExhausted)
	}
	return c.File(name, fi.Mode(), fi.Size(), f)
}

// busyboxApplets lists the archive names of busybox's applet links, in the
// merged-/usr layout, busybox itself left out.
func busyboxApplets(ctx context.Context, busybox string) ([]string, error) {
	var out, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, busybox, "--list-full")
	cmd.Stdout = &limitedWriter{w: &out, n: 1 << 20}
	cmd.Stderr = &limitedWriter{w: &stderr, n: 4096}
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("vmtest: %s --list-full: %v: %s: %w", busybox, err, strings.TrimSpace(stderr.String()), errdefs.ErrUnavailable)
	}
	seen := map[string]bool{}
	var names []string
	for _, l := range strings.Fields(out.String()) {
		if !strings.Contains(l, "/") {
			continue // e.g. linuxrc, at the root
		}
		name, err := cpioName(usrPath("/" + l))
		if err != nil || seen[name] || path.Base(name) == "busybox" {
			continue
		}
		seen[name] = true
		names = append(names, name)
	}
	if len(names) < 10 {
		return nil, fmt.Errorf("vmtest: %s lists %d applets: %w", busybox, len(names), errdefs.ErrInvalidArgument)
	}
	return names, nil
}

// guestEnv is /vmtest/env, which the guest's init sources.
func guestEnv(g Guest, nonce string) string {
	keeper := "1"
	if g.NoKeeper {
		keeper = "0"
	}
	secs := int64((g.Timeout + 999_999_999) / 1_000_000_000)
	var b strings.Builder
	fmt.Fprintf(&b, "VMTEST_NONCE=%s\n", nonce)
	fmt.Fprintf(&b, "VMTEST_CGROUP=%s\n", shQuote(g.Cgroup))
	fmt.Fprintf(&b, "VMTEST_CONTROLLERS=%s\n", shQuote(strings.Join(g.Controllers, " ")))
	fmt.Fprintf(&b, "VMTEST_CGROUP_OPTS=%s\n", shQuote(g.CgroupMountOptions))
	fmt.Fprintf(&b, "VMTEST_KEEPER=%s\n", keeper)
	fmt.Fprintf(&b, "VMTEST_TIMEOUT=%d\n", secs)
	return b.String()
}

// guestCommand is /vmtest/command, the script the guest runs as the command.
func guestCommand(g Guest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cd %s || exit 125\n", shQuote(g.Dir))
	b.WriteString("export AIRLOCK_VM_GUEST=1\n")
	for _, e := range g.Env {
		fmt.Fprintf(&b, "export %s\n", shQuote(e))
	}
	b.WriteString("exec")
	for _, a := range g.Command {
		b.WriteString(" " + shQuote(a))
	}
	b.WriteString("\n")
	return b.String()
}
