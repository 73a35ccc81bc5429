//go:build linux

package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The tests that boot guests. Each guest costs about 5 s of boot under TCG.
// Kernels: EnvKernels lists the Debian suites whose kernels they boot
// (default defaultKernels).

// EnvKernels is the space-separated list of Debian suites whose kernels the
// VM tests boot.
const EnvKernels = "AIRLOCK_VM_KERNELS"

var defaultKernels = []string{Bookworm, TrixieBackports}

func kernels() []string {
	if v := strings.Fields(os.Getenv(EnvKernels)); len(v) > 0 {
		return v
	}
	return defaultKernels
}

// forEachKernel runs f as a subtest per kernel.
func forEachKernel(t *testing.T, f func(t *testing.T, vm VM)) {
	for _, suite := range kernels() {
		t.Run(suite, func(t *testing.T) {
			vm := Require(t, suite)
			t.Logf("kernel %s (%s)", vm.Kernel.Release, vm.Kernel.Package)
			f(t, vm)
		})
	}
}

func inGuest() bool { return os.Getenv("AIRLOCK_VM_GUEST") == "1" }

func run(t *testing.T, vm VM, g Guest) *Result {
	t.Helper()
	start := time.Now()
	attempt := func() (res *Result, timedOut bool, err error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		res, err = vm.Run(ctx, g)
		return res, ctx.Err() != nil, err
	}
	res, timedOut, err := attempt()
	// Under TCG with several vCPUs the guest kernel has been seen, rarely,
	// to oops on an int3 of its own live code patching (a jump label
	// being switched while another vCPU runs the old translation) and
	// panic (trixie-backports' 7.3 kernel also in __dequeue_task, twice
	// in a row in one CI run): an emulator artefact, not the test's. Such
	// a guest gets up to two more runs; a panic the test causes happens
	// every time and fails it. The same artefact without the panic (an
	// oops the guest's loglevel keeps off the console, leaving a vCPU
	// stuck) shows as a guest that stops printing and overruns its
	// limit: seen once in CI, in bookworm's TestCreateLimits/v2, which
	// takes a second here. Such a guest also gets one more run; a hang
	// the test causes happens again and fails it.
	hung := func() bool {
		return err != nil && errors.Is(err, errdefs.ErrTimeout) && strings.Contains(err.Error(), "did not finish within")
	}
	for retries, hangs := 0, 0; retries < 2 && err != nil && res != nil && !timedOut; retries++ {
		switch {
		case bytes.Contains(res.Console, []byte("Kernel panic")):
			t.Logf("the guest kernel panicked; running it once more. console:\n%s", tail(res.Console, 4<<10))
		case hung() && hangs == 0:
			hangs++
			t.Logf("the guest stopped printing and overran its limit; running it once more. console:\n%s", tail(res.Console, 4<<10))
		default:
			retries = 2
			continue
		}
		res, timedOut, err = attempt()
	}
	if err != nil {
		if res != nil {
			t.Logf("console:\n%s", res.Console)
		}
		t.Fatalf("Run: %v", err)
	}
	t.Logf("boot %.1fs, command %.1fs, total %.1fs (initramfs and qemu included)",
		res.Boot.Seconds(), res.Run.Seconds(), time.Since(start).Seconds())
	return res
}

// tail is the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// TestGuestShape runs inside the guest (TestVMShape boots it): the host
// shape the harness promises.
func TestGuestShape(t *testing.T) {
	if !inGuest() {
		t.Skip("runs inside a vmtest guest (see TestVMShape)")
	}
	if os.Geteuid() != 0 {
		t.Fatalf("euid %d, want root", os.Geteuid())
	}
	ctrls := strings.Fields(readFile(t, "/sys/fs/cgroup/cgroup.controllers"))
	for _, c := range []string{"cpu", "memory", "pids", "io"} {
		if !contains(ctrls, c) {
			t.Errorf("root cgroup.controllers = %v, want %s", ctrls, c)
		}
	}
	self := strings.TrimSpace(readFile(t, "/proc/self/cgroup"))
	want := "0::/" + os.Getenv("WANT_CGROUP")
	if self != want {
		t.Errorf("/proc/self/cgroup = %q, want %q (one v2 line, a non-root cgroup)", self, want)
	}
	dir := "/sys/fs/cgroup/" + os.Getenv("WANT_CGROUP")
	if got := strings.Fields(readFile(t, dir+"/cgroup.controllers")); !contains(got, "memory") || !contains(got, "pids") {
		t.Errorf("%s/cgroup.controllers = %v, want memory and pids delegated", dir, got)
	}
	procs := strings.Fields(readFile(t, dir+"/cgroup.procs"))
	if len(procs) < 2 {
		t.Errorf("%s holds %v, want this process and the keeper", dir, procs)
	}
	init := strings.TrimSpace(readFile(t, "/proc/1/cgroup"))
	if init != "0::/init.scope" {
		t.Errorf("init's cgroup = %q, want 0::/init.scope", init)
	}
	mounts := readFile(t, "/proc/self/mountinfo")
	sc := bufio.NewScanner(strings.NewReader(mounts))
	var cg2 []string
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		i := indexOf(f, "-")
		if i < 0 || i+1 >= len(f) {
			t.Fatalf("bad mountinfo line %q", sc.Text())
		}
		switch f[i+1] {
		case "cgroup":
			t.Errorf("a cgroup v1 hierarchy is mounted: %s", sc.Text())
		case "cgroup2":
			cg2 = append(cg2, f[4])
		}
	}
	if len(cg2) != 1 || cg2[0] != "/sys/fs/cgroup" {
		t.Errorf("cgroup2 mounted at %v, want /sys/fs/cgroup alone", cg2)
	}
	for _, fs := range []string{"overlay", "tmpfs", "devpts"} {
		if !regexp.MustCompile(`(?m)\t` + fs + `$`).MatchString(readFile(t, "/proc/filesystems")) {
			t.Errorf("/proc/filesystems has no %s", fs)
		}
	}
	// A user namespace made by an unprivileged user.
	cmd := exec.Command("unshare", "-U", "-m", "true")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}},
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("unprivileged user namespace: %v: %s", err, out)
	}
	if lo, err := net.InterfaceByName("lo"); err != nil || lo.Flags&net.FlagUp == 0 {
		t.Errorf("loopback: %+v, %v; want up", lo, err)
	}
	if err := os.WriteFile("/tmp/probe", []byte("x"), 0o600); err != nil {
		t.Errorf("/tmp: %v", err)
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func contains(s []string, v string) bool { return indexOf(s, v) >= 0 }

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

// TestVMShape boots each kernel and runs TestGuestShape in the guest, from
// a nested cgroup that the keeper shares.
func TestVMShape(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	forEachKernel(t, func(t *testing.T, vm VM) {
		bin := GoTest(t, ".")
		res := run(t, vm, Guest{
			Files:   []File{{Guest: "/opt/vmtest.test", Host: bin}},
			Env:     []string{"WANT_CGROUP=" + DefaultCgroup},
			Command: []string{"/opt/vmtest.test", "-test.run", "^TestGuestShape$", "-test.v"},
		})
		if res.ExitCode != 0 || !strings.Contains(string(res.Output), "--- PASS: TestGuestShape") {
			t.Fatalf("guest test exited %d:\n%s", res.ExitCode, res.Output)
		}
	})
}

// TestVMRun checks what comes back: output with stderr and a last line
// without newline, the exit status, files (data and host), setup, the
// working directory, the environment and a custom cgroup without keeper.
func TestVMRun(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	vm := Require(t, kernels()[0])
	host := t.TempDir() + "/tool"
	if err := os.WriteFile(host, []byte("#!/bin/sh\necho tool \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := `echo "out $GREETING $(pwd)"; echo err >&2
cat /opt/data.txt; /usr/local/bin/tool a; cat /run/setup-ran
cat /proc/self/cgroup; n=0; while read p; do n=$((n+1)); done < /sys/fs/cgroup/custom/leaf/cgroup.procs; echo $n
printf partial; exit 7`
	res := run(t, vm, Guest{
		Files: []File{
			{Guest: "/opt/data.txt", Data: []byte("data\n")},
			{Guest: "/usr/local/bin/tool", Host: host},
		},
		Env:      []string{"GREETING=it's me"},
		Dir:      "/opt",
		Setup:    `echo "setup in $VMTEST_LEAF" > /run/setup-ran`,
		Cgroup:   "custom/leaf",
		NoKeeper: true,
		Modules:  []string{},
		Command:  []string{"sh", "-c", script},
	})
	want := "out it's me /opt\nerr\ndata\ntool a\nsetup in /sys/fs/cgroup/custom/leaf\n0::/custom/leaf\n1\npartial"
	if got := string(res.Output); got != want || res.ExitCode != 7 {
		t.Errorf("got exit %d, output:\n%q\nwant exit 7, output:\n%q", res.ExitCode, got, want)
	}
	if res.Boot <= 0 || res.Run <= 0 {
		t.Errorf("times: boot %v, run %v", res.Boot, res.Run)
	}
}

// TestVMTimeout checks that a command past its limit is killed and reported
// as a timeout with its output so far.
func TestVMTimeout(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	vm := Require(t, kernels()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	res, err := vm.Run(ctx, Guest{Command: []string{"sh", "-c", "echo started; exec sleep 1000"}, Timeout: 2 * time.Second, Modules: []string{}})
	if !errors.Is(err, errdefs.ErrTimeout) {
		t.Fatalf("Run = %v, want timeout", err)
	}
	if res == nil || string(res.Output) != "started\n" {
		t.Errorf("result %+v, want the output so far", res)
	}
	if d := time.Since(start); d > time.Minute {
		t.Errorf("took %v", d)
	}
}

// TestVMGuestFailure checks that a guest that cannot run the command (here
// its setup fails) is an error naming why.
func TestVMGuestFailure(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	vm := Require(t, kernels()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, err := vm.Run(ctx, Guest{Command: []string{"true"}, Setup: "exit 3", Modules: []string{}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "setup exited 3") {
		t.Fatalf("Run = %v, want unavailable: setup exited 3", err)
	}
}

// TestVMBootRetried: a guest that ends while booting (here its kernel
// finds no init and panics) is booted a second time before Run fails, and
// the error says so; a guest whose command began is never booted again
// (TestVMGuestFailure's setup failure is reported after one boot).
func TestVMBootRetried(t *testing.T) {
	if inGuest() {
		t.Skip("on the host only")
	}
	vm := Require(t, kernels()[0])
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, err := vm.Run(ctx, Guest{Command: []string{"true"}, Cmdline: []string{"rdinit=/no-such-init"}, Modules: []string{}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "booted twice") {
		t.Fatalf("Run = %v, want unavailable after two boots", err)
	}
	_, err = vm.Run(ctx, Guest{Command: []string{"true"}, Setup: "exit 3", Modules: []string{}})
	if err == nil || strings.Contains(err.Error(), "booted twice") {
		t.Fatalf("Run of a failing setup = %v, want one boot's error", err)
	}
}
