//go:build linux

package vmtest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

//go:embed init.sh
var initScript []byte

// VM is what boots a guest: qemu, a static busybox (the guest's userland)
// and a kernel. Its zero value is not usable; get one from Require in tests
// or fill it in.
type VM struct {
	// Qemu is qemu-system-x86_64.
	Qemu string
	// Busybox is a statically linked x86-64 busybox.
	Busybox string
	// Kernel is the kernel booted.
	Kernel Kernel
	// Accel is qemu's accelerator: "tcg" (the default; it works where
	// KVM does not) or "kvm".
	Accel string
	// Console, when set, gets each guest's serial console as it comes.
	Console io.Writer
}

// File is one file placed in the guest.
type File struct {
	// Guest is the absolute path in the guest. Parents are created.
	Guest string
	// Host is the file copied in; or Data is the content when Host is
	// empty.
	Host string
	Data []byte
	// Mode is the guest file's mode for Data (0o644 when zero); a Host
	// file keeps its own.
	Mode os.FileMode
}

// Guest is one boot: what the guest holds and the command it runs.
//
// The guest is a cgroup v2-only host (the kernel's command line has
// cgroup_no_v1=all; cgroup2 is mounted at /sys/fs/cgroup as systemd mounts
// it), with /proc, /sys, /dev (devtmpfs, devpts, /dev/shm), tmpfs /tmp and
// /run, loopback up, unprivileged user namespaces allowed, a merged-/usr
// busybox userland with /etc/passwd and /etc/group, and the modules loaded.
// Its init moves itself to /init.scope, enables Controllers down to Cgroup,
// puts a sleeping process in Cgroup (unless NoKeeper), runs Setup and then
// Command as root from Cgroup: the shape of a daemon started by an init as
// one of its services.
type Guest struct {
	// Command is the argv run in the guest (PATH is searched); required.
	Command []string
	// Env is added to the command's environment (KEY=VALUE). The guest
	// sets PATH, HOME=/root, TMPDIR=/tmp and AIRLOCK_VM_GUEST=1.
	Env []string
	// Dir is the command's working directory (default /tmp).
	Dir string
	// Files are placed in the guest (payload: static binaries, data).
	Files []File
	// FromHost are host files copied to the same path in the guest; an
	// ELF executable brings its loader and shared libraries. Use it for
	// tools a test expects of a Debian host that busybox lacks or does
	// differently (e.g. /usr/bin/bash, coreutils' tail); they replace
	// busybox's applet of that name.
	FromHost []string
	// Modules are kernel modules loaded at boot, with what they depend
	// on; those built into the kernel are skipped. Default: overlay.
	Modules []string
	// Cgroup is the command's cgroup, relative to /sys/fs/cgroup (default
	// "system.slice/airlock-test.service"). Every ancestor delegates
	// Controllers to its children.
	Cgroup string
	// NoKeeper leaves Cgroup without the extra process that otherwise
	// holds it (so by default the command's cgroup is not a leaf it can
	// enable controllers below).
	NoKeeper bool
	// Controllers are enabled from the root down to Cgroup where the kernel
	// offers them (default cpu, memory, pids and io).
	Controllers []string
	// CgroupMountOptions are cgroup2's mount options (default
	// "nsdelegate,memory_recursiveprot", as systemd mounts it).
	CgroupMountOptions string
	// Setup is a shell script run as root (in /init.scope) before the
	// command; the guest fails the run if it exits non-zero. It sees
	// VMTEST_LEAF, the command's cgroup directory.
	Setup string
	// MemoryMB is the guest's memory (default 2048); CPUs its vCPUs
	// (default 2).
	MemoryMB int
	CPUs     int
	// Cmdline is added to the kernel's command line (e.g. "loglevel=7"
	// to see the kernel's messages, which the guest keeps off the console
	// by default so that they do not mix with the command's output).
	Cmdline []string
	// Timeout bounds the command (default 2 minutes); the whole boot is
	// bounded by Timeout plus BootTimeout (default 1 minute).
	Timeout     time.Duration
	BootTimeout time.Duration
}

// Result is what a boot gave.
type Result struct {
	// ExitCode is the command's exit status (128+n when signal n ended
	// it).
	ExitCode int
	// Output is what the command wrote to stdout and stderr, interleaved
	// as on the console, capped at maxOutput.
	Output []byte
	// Console is the whole serial console, capped at maxConsole.
	Console []byte
	// Boot is from qemu's start to the command's; Run the command's time.
	Boot, Run time.Duration
}

// Caps on what a run keeps.
const (
	maxOutput  = 8 << 20
	maxConsole = 16 << 20
	maxLine    = 1 << 20
)

// Defaults of a Guest.
const (
	DefaultCgroup      = "system.slice/airlock-test.service"
	defaultMemoryMB    = 2048
	defaultCPUs        = 2
	defaultTimeout     = 2 * time.Minute
	defaultBootTimeout = time.Minute
	defaultCgroupOpts  = "nsdelegate,memory_recursiveprot"
)

var (
	// DefaultModules are loaded when Guest.Modules is nil.
	DefaultModules = []string{"overlay"}
	// HostTools are tools of a Debian host that tests expect and busybox
	// lacks or does differently, for Guest.FromHost: dash as /bin/sh
	// (busybox's static shell runs its own applets even where PATH has the
	// real tool), bash (its loops retry a fork refused at a pids limit),
	// and coreutils' head and tail (size suffixes; tail keeps a
	// newline-free input in memory, what memory hogs use).
	HostTools = []string{"/bin/sh", "/bin/bash", "/usr/bin/head", "/usr/bin/tail"}
	// DefaultControllers are enabled when Guest.Controllers is nil.
	DefaultControllers = []string{"cpu", "memory", "pids", "io"}

	cgroupRE = regexp.MustCompile(`^[A-Za-z0-9_.@-]+(/[A-Za-z0-9_.@-]+)*$`)
	wordRE   = regexp.MustCompile(`^[A-Za-z0-9_.,=-]+$`)
	envRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)
)

// reserved are guest paths a File may not replace.
var reserved = []string{"/init", "/vmtest", "/usr/bin/busybox", "/usr/lib/modules/vmtest", "/proc", "/sys", "/dev", "/newroot"}

func (g *Guest) withDefaults() Guest {
	c := *g
	if c.Modules == nil {
		c.Modules = DefaultModules
	}
	if c.Controllers == nil {
		c.Controllers = DefaultControllers
	}
	if c.Cgroup == "" {
		c.Cgroup = DefaultCgroup
	}
	if c.CgroupMountOptions == "" {
		c.CgroupMountOptions = defaultCgroupOpts
	}
	if c.Dir == "" {
		c.Dir = "/tmp"
	}
	if c.MemoryMB == 0 {
		c.MemoryMB = defaultMemoryMB
	}
	if c.CPUs == 0 {
		c.CPUs = defaultCPUs
	}
	if c.Timeout == 0 {
		c.Timeout = defaultTimeout
	}
	if c.BootTimeout == 0 {
		c.BootTimeout = defaultBootTimeout
	}
	return c
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("vmtest: "+format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}

// validate checks a Guest with its defaults filled in.
func (g *Guest) validate() error {
	if len(g.Command) == 0 || g.Command[0] == "" {
		return invalid("a guest needs a command")
	}
	for _, e := range g.Env {
		if !envRE.MatchString(e) {
			return invalid("environment entry %q is not KEY=VALUE", e)
		}
	}
	if !path.IsAbs(g.Dir) {
		return invalid("working directory %q must be absolute", g.Dir)
	}
	if !cgroupRE.MatchString(g.Cgroup) || strings.Contains("/"+g.Cgroup+"/", "/../") || strings.Contains("/"+g.Cgroup+"/", "/./") {
		return invalid("cgroup %q must be a relative path of plain names", g.Cgroup)
	}
	if first := strings.SplitN(g.Cgroup, "/", 2)[0]; first == "init.scope" {
		return invalid("cgroup %q: init.scope holds the guest's init", g.Cgroup)
	}
	for _, w := range append(append([]string{}, g.Modules...), g.Controllers...) {
		if !wordRE.MatchString(w) {
			return invalid("%q is not a module or controller name", w)
		}
	}
	if !wordRE.MatchString(g.CgroupMountOptions) {
		return invalid("cgroup mount options %q", g.CgroupMountOptions)
	}
	for _, c := range g.Cmdline {
		if c == "" || strings.ContainsAny(c, " \t\n\"") {
			return invalid("kernel command line word %q", c)
		}
	}
	if g.MemoryMB < 256 || g.MemoryMB > 64<<10 {
		return invalid("memory %d MB out of [256, 65536]", g.MemoryMB)
	}
	if g.CPUs < 1 || g.CPUs > 64 {
		return invalid("%d CPUs out of [1, 64]", g.CPUs)
	}
	if g.Timeout < time.Second || g.BootTimeout < time.Second {
		return invalid("timeouts must be at least a second")
	}
	for _, f := range g.Files {
		if err := checkGuestPath(f.Guest); err != nil {
			return err
		}
		if f.Host != "" && f.Data != nil {
			return invalid("file %s has both Host and Data", f.Guest)
		}
	}
	for _, p := range g.FromHost {
		if err := checkGuestPath(p); err != nil {
			return err
		}
	}
	return nil
}

// checkGuestPath checks where a file of the test's may go in the guest.
func checkGuestPath(p string) error {
	if _, err := cpioName(p); err != nil {
		return err
	}
	for _, r := range reserved {
		if u := usrPath(p); u == r || strings.HasPrefix(u, r+"/") {
			return invalid("file %s would replace the harness's %s", p, r)
		}
	}
	return nil
}

// errBootEnded marks a guest that ended before its command began, having
// said nothing of the harness's protocol.
var errBootEnded = errors.New("before the command began")

// Run boots the guest, runs its command and returns what it gave. A command
// that exits non-zero is not an error: see Result.ExitCode. Errors wrap
// errdefs.ErrInvalidArgument (a bad Guest), ErrTimeout (the command or the
// boot ran past its bound; the Result so far comes with it), ErrUnavailable
// (qemu or the guest failed before the command ended, e.g. a kernel panic:
// the console is in the error and the Result) or ErrCanceled.
//
// A guest that ends while still booting — before its command began, with
// no line of the harness's protocol, so nothing of the command ran — is
// booted once more: under TCG on a loaded host a boot has ended so in its
// init (a CI run, the console's last line "mounting"), and a boot that
// fails for a reason of its own fails again.
func (vm VM) Run(ctx context.Context, g Guest) (*Result, error) {
	res, err := vm.run(ctx, g)
	if errors.Is(err, errBootEnded) && ctx.Err() == nil {
		res2, err2 := vm.run(ctx, g)
		if err2 == nil {
			return res2, nil
		}
		return res2, fmt.Errorf("%w (booted twice; the first: %v)", err2, err)
	}
	return res, err
}

func (vm VM) run(ctx context.Context, g Guest) (*Result, error) {
	g = g.withDefaults()
	if err := g.validate(); err != nil {
		return nil, err
	}
	if vm.Qemu == "" || vm.Busybox == "" || vm.Kernel.Image == "" {
		return nil, invalid("a VM needs qemu, busybox and a kernel image")
	}
	accel := vm.Accel
	if accel == "" {
		accel = "tcg"
	}
	if accel != "tcg" && accel != "kvm" {
		return nil, invalid("accelerator %q (want tcg or kvm)", accel)
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "airlock-vmtest-")
	if err != nil {
		return nil, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	defer os.RemoveAll(dir)
	initrd := filepath.Join(dir, "initramfs.cpio")
	if err := vm.buildInitramfs(ctx, initrd, g, nonce); err != nil {
		return nil, err
	}

	cmdline := []string{
		"console=ttyS0", "loglevel=1", "edd=off", "reboot=t", "panic=-1",
		"cgroup_no_v1=all", "systemd.unified_cgroup_hierarchy=1", "rdinit=/init",
	}
	cmdline = append(cmdline, g.Cmdline...)
	args := []string{
		// The pc machine, not microvm: microvm has no HPET or ACPI PM
		// timer, and under TCG on a busy host the kernel's PIT calibration
		// of the TSC then fails now and then and the boot hangs. pc
		// boots as fast.
		"-M", "pc", "-accel", accel, "-cpu", "max",
		"-m", strconv.Itoa(g.MemoryMB), "-smp", strconv.Itoa(g.CPUs),
		"-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
		"-serial", "stdio", "-monitor", "none",
		"-kernel", vm.Kernel.Image, "-initrd", initrd,
		"-append", strings.Join(cmdline, " "),
	}
	limit := g.BootTimeout + g.Timeout
	rctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(rctx, vm.Qemu, args...)
	cmd.WaitDelay = 5 * time.Second
	// qemu dies with the test process, whatever ends it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("vmtest: start %s: %w: %w", vm.Qemu, err, errdefs.ErrUnavailable)
	}
	p := &consoleParser{nonce: nonce, start: start, live: vm.Console}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.read(stdout)
	}()
	// Once the guest reported, give it a moment to power off by itself.
	go func() {
		select {
		case <-p.ended():
			select {
			case <-time.After(10 * time.Second):
				cancel()
			case <-rctx.Done():
			}
		case <-rctx.Done():
		}
	}()
	<-done
	waitErr := cmd.Wait()
	res := p.result()
	tail := lastLines(string(res.Console), 30)
	switch {
	case p.state == stateExited:
		return res, nil
	case p.state == stateTimedOut:
		return res, fmt.Errorf("vmtest: the command ran past %v and was killed: %w", g.Timeout, errdefs.ErrTimeout)
	case p.state == stateFailed:
		return res, fmt.Errorf("vmtest: guest: %s: %w", p.failure, errdefs.ErrUnavailable)
	case ctx.Err() != nil:
		return res, fmt.Errorf("vmtest: %w: %w", ctx.Err(), errdefs.ErrCanceled)
	case rctx.Err() != nil:
		return res, fmt.Errorf("vmtest: the guest did not finish within %v (%s); console: %s: %w", limit, p.state, tail, errdefs.ErrTimeout)
	}
	if p.state == stateBooting {
		return res, fmt.Errorf("vmtest: qemu ended (%v) %w; stderr: %s; console: %s: %w",
			waitErr, errBootEnded, strings.TrimSpace(stderr.String()), tail, errdefs.ErrUnavailable)
	}
	return res, fmt.Errorf("vmtest: qemu ended (%v) before the command did; stderr: %s; console: %s: %w",
		waitErr, strings.TrimSpace(stderr.String()), tail, errdefs.ErrUnavailable)
}

func newNonce() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("vmtest: %w: %w", err, errdefs.ErrUnavailable)
	}
	return hex.EncodeToString(b), nil
}

// The console parser's states.
type consoleState int

const (
	stateBooting consoleState = iota
	stateRunning
	stateExited
	stateTimedOut
	stateFailed
)

func (s consoleState) String() string {
	return [...]string{"booting", "running", "exited", "timed out", "failed"}[s]
}

// consoleParser follows the serial console: the boot, then the command's
// output between the guest's markers.
type consoleParser struct {
	nonce string
	start time.Time
	live  io.Writer

	mu       sync.Mutex
	state    consoleState
	console  cappedBuffer
	output   cappedBuffer
	code     int
	failure  string
	boot     time.Duration
	run      time.Duration
	endedCh  chan struct{}
	liveFail bool
}

func (p *consoleParser) ended() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.endedCh == nil {
		p.endedCh = make(chan struct{})
	}
	return p.endedCh
}

func (p *consoleParser) read(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := readLine(br)
		if len(line) > 0 {
			p.line(line)
		}
		if err != nil {
			return
		}
	}
}

// readLine reads up to and including '\n', at most maxLine bytes.
func readLine(br *bufio.Reader) ([]byte, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if err == bufio.ErrBufferFull && len(line) < maxLine {
			continue
		}
		if err == bufio.ErrBufferFull {
			return line, nil
		}
		return line, err
	}
}

// line takes one console line (ending in "\n" unless it is the last).
func (p *consoleParser) line(raw []byte) {
	line := bytes.ReplaceAll(raw, []byte("\r\n"), []byte("\n"))
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live != nil && !p.liveFail {
		if _, err := p.live.Write(line); err != nil {
			p.liveFail = true
		}
	}
	p.console.write(line, maxConsole)
	text := strings.TrimRight(string(line), "\n")
	// A marker may follow output that did not end its line.
	marker := func(word string) (rest string, ok bool) {
		i := strings.Index(text, "AIRLOCK-VM-"+word+" "+p.nonce)
		if i < 0 {
			return "", false
		}
		if i > 0 && p.state == stateRunning {
			p.output.write([]byte(text[:i]), maxOutput)
		}
		return strings.TrimSpace(text[i+len("AIRLOCK-VM-"+word+" "+p.nonce):]), true
	}
	switch p.state {
	case stateBooting:
		if _, ok := marker("BEGIN"); ok {
			p.state = stateRunning
			p.boot = time.Since(p.start)
		} else if why, ok := marker("ERROR"); ok {
			p.end(stateFailed)
			p.failure = why
		}
	case stateRunning:
		if rest, ok := marker("EXIT"); ok {
			p.code, _ = strconv.Atoi(rest)
			p.end(stateExited)
		} else if _, ok := marker("TIMEOUT"); ok {
			p.end(stateTimedOut)
		} else if why, ok := marker("ERROR"); ok {
			p.failure = why
			p.end(stateFailed)
		} else {
			p.output.write(line, maxOutput)
		}
	}
}

func (p *consoleParser) end(s consoleState) {
	if p.state == stateRunning {
		p.run = time.Since(p.start) - p.boot
		// The guest ends the command's output with a newline of its own.
		p.output.b = bytes.TrimSuffix(p.output.b, []byte("\n"))
	}
	p.state = s
	if p.endedCh == nil {
		p.endedCh = make(chan struct{})
	}
	close(p.endedCh)
}

func (p *consoleParser) result() *Result {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := &Result{ExitCode: p.code, Output: p.output.bytes(), Console: p.console.bytes(), Boot: p.boot, Run: p.run}
	if p.state == stateRunning {
		r.Run = time.Since(p.start) - p.boot
	}
	return r
}

// cappedBuffer keeps the first bytes written up to a cap and notes what it
// dropped.
type cappedBuffer struct {
	b       []byte
	dropped int
}

func (c *cappedBuffer) write(p []byte, limit int) {
	room := limit - len(c.b)
	if room >= len(p) {
		c.b = append(c.b, p...)
		return
	}
	c.b = append(c.b, p[:max(room, 0)]...)
	c.dropped += len(p) - max(room, 0)
}

func (c *cappedBuffer) bytes() []byte {
	if c.dropped == 0 {
		return c.b
	}
	return append(c.b[:len(c.b):len(c.b)], fmt.Sprintf("\n[vmtest: %d more bytes dropped]\n", c.dropped)...)
}

// staticELF checks that path is a statically linked x86-64 executable: the
// guest has no dynamic loader or libc.
func staticELF(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("vmtest: %s: not an ELF executable: %w: %w", path, err, errdefs.ErrInvalidArgument)
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("vmtest: %s is for %v, the guest is x86-64: %w", path, f.Machine, errdefs.ErrInvalidArgument)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("vmtest: %s is dynamically linked (build it with CGO_ENABLED=0): %w", path, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
