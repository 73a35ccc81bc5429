package confine

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// envDomain runs the test binary as a domain child: "split" restricts
// every thread and forks from two of them; "reexec" restricts, re-executes
// itself ("reexec2") and forks from two threads of the new image.
const envDomain = "AIRLOCK_CONFINE_TEST_DOMAIN"

// TestOneDomainAfterReexec shows why the sandbox agent re-executes itself
// between RestrictFiles and Apply: without it, processes forked from
// different threads sit in sibling Landlock domains and cannot signal each
// other (a command's timeout kill from the agent failed this way).
func TestOneDomainAfterReexec(t *testing.T) {
	testutil.RequireRoot(t, "needs root to set up Landlock without a user namespace helper")
	if abi, _ := landlockABI(); abi < 6 {
		t.Skipf("Landlock signal scoping needs ABI 6, the kernel has %d", abi)
	}
	for _, tt := range []struct{ mode, want string }{
		{"split", "EPERM"}, // the control: the problem exists
		{"reexec", "ok"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = []string{envDomain + "=" + tt.mode, "PATH=/usr/bin:/bin"}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			if got := strings.TrimSpace(string(out)); got != tt.want {
				t.Fatalf("signal across threads' children: got %q, want %q", got, tt.want)
			}
		})
	}
}

// runDomainChild is the child's side of TestOneDomainAfterReexec. It prints
// the outcome of kill(0) from a child forked on one thread to a child
// forked on another.
func runDomainChild(mode string) int {
	fail := func(err error) int { fmt.Println("error:", err); return 1 }
	// Threads that exist while RestrictFiles runs each get their own
	// domain; keep two of them to fork from.
	t1, t2 := newForker(), newForker()
	defer t1.stop()
	defer t2.stop()
	policy := Policy{ReadOnly: []string{"/"}, DevicePaths: []string{"/dev/null"}}
	switch mode {
	case "split", "reexec":
		if _, err := RestrictFiles(policy); err != nil {
			return fail(err)
		}
		if mode == "reexec" {
			runtime.LockOSThread()
			if err := NarrowBoundingForExec(0); err != nil {
				return fail(err)
			}
			err := syscall.Exec("/proc/self/exe", []string{os.Args[0], "-test.run=^$"}, []string{envDomain + "=reexec2", "PATH=/usr/bin:/bin"})
			return fail(fmt.Errorf("re-exec: %w", err))
		}
	case "reexec2":
		// The capabilities came through the exec in the inheritable set,
		// the bounding set stayed empty.
		st, err := Status()
		if err != nil {
			return fail(err)
		}
		if st.CapBnd != 0 || st.CapEff == 0 || st.CapInh != st.CapEff {
			return fail(fmt.Errorf("after exec: %+v", st))
		}
		if _, err := Apply(Policy{FilesRestricted: true}); err != nil {
			return fail(err)
		}
		if st, err = Status(); err != nil || st.CapBnd != 0 || st.CapInh != 0 || st.CapEff == 0 || !st.NoNewPrivs || st.SeccompMode != 2 {
			return fail(fmt.Errorf("after Apply: %+v %v", st, err))
		}
		// The Landlock domain survived the exec: writes stay refused.
		if f, err := os.CreateTemp("", "domain-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return fail(fmt.Errorf("write allowed after re-exec"))
		}
	default:
		return fail(fmt.Errorf("unknown mode %q", mode))
	}
	victim, err := t1.start("sleep", "30")
	if err != nil {
		return fail(err)
	}
	// Killed from its own thread: from another one it may be out of reach.
	defer func() { t1.do(func() { _ = victim.Process.Kill() }); _ = victim.Wait() }()
	probe, err := t2.start("sh", "-c", "kill -0 "+strconv.Itoa(victim.Process.Pid)+" 2>/dev/null && echo ok || echo EPERM")
	if err != nil {
		return fail(err)
	}
	_ = probe.Wait()
	fmt.Print(probe.Stdout.(*strings.Builder).String())
	return 0
}

// forker runs os/exec starts on one locked OS thread, so that the child is
// forked from that thread.
type forker struct{ work chan func() }

func newForker() *forker {
	f := &forker{work: make(chan func())}
	ready := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		_ = unix.Gettid()
		close(ready)
		for fn := range f.work {
			fn()
		}
	}()
	<-ready
	return f
}

func (f *forker) start(name string, args ...string) (*exec.Cmd, error) {
	cmd := exec.Command(name, args...)
	cmd.Stdout = &strings.Builder{}
	var err error
	if !f.do(func() { err = cmd.Start() }) {
		return nil, fmt.Errorf("forker thread stuck")
	}
	return cmd, err
}

// do runs fn on f's thread and reports whether it ran within 10 s.
func (f *forker) do(fn func()) bool {
	done := make(chan struct{})
	select {
	case f.work <- func() { fn(); close(done) }:
	case <-time.After(10 * time.Second):
		return false
	}
	<-done
	return true
}

func (f *forker) stop() { close(f.work) }
