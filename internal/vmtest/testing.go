//go:build linux

package vmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Environment variables Require reads.
const (
	// EnvRequired set to 1 turns Require's skips into failures and lets
	// it download a missing kernel (CI sets it).
	EnvRequired = "AIRLOCK_VM_REQUIRED"
	// EnvQemu and EnvBusybox override where qemu-system-x86_64 and a
	// static busybox are found (default: PATH).
	EnvQemu    = "AIRLOCK_VM_QEMU"
	EnvBusybox = "AIRLOCK_VM_BUSYBOX"
	// EnvAccel sets VM.Accel (e.g. kvm where it works).
	EnvAccel = "AIRLOCK_VM_ACCEL"
	// EnvConsole set to 1 copies every guest's console to stderr.
	EnvConsole = "AIRLOCK_VM_CONSOLE"
)

// Required reports whether EnvRequired is set to 1.
func Required() bool { return os.Getenv(EnvRequired) == "1" }

// Require returns a VM that boots the stock kernel of a Debian suite
// (Bookworm, TrixieBackports, ...). When qemu, a static busybox or the
// kernel is missing it skips the test, saying what to install, or fails it
// when EnvRequired=1; with EnvRequired=1 a kernel missing from CacheDir is
// downloaded first (FetchKernel).
func Require(t testing.TB, suite string) VM {
	t.Helper()
	vm, err := find(suite, Required())
	if err != nil {
		if Required() {
			t.Fatalf("%v (%s=1: the VM tests must run)", err, EnvRequired)
		}
		t.Skipf("%v (set %s=1 to fetch a missing kernel and require the VM tests)", err, EnvRequired)
	}
	return vm
}

func find(suite string, fetch bool) (VM, error) {
	qemu, err := exec.LookPath(envOr(EnvQemu, "qemu-system-x86_64"))
	if err != nil {
		return VM{}, fmt.Errorf("vmtest: no qemu (apt-get install qemu-system-x86): %w: %w", err, errdefs.ErrNotFound)
	}
	busybox, err := exec.LookPath(envOr(EnvBusybox, "busybox"))
	if err != nil {
		return VM{}, fmt.Errorf("vmtest: no busybox (apt-get install busybox-static): %w: %w", err, errdefs.ErrNotFound)
	}
	if err := staticELF(busybox); err != nil {
		return VM{}, fmt.Errorf("%w (apt-get install busybox-static)", err)
	}
	cache, err := CacheDir()
	if err != nil {
		return VM{}, err
	}
	k, err := CachedKernel(cache, suite)
	if errors.Is(err, errdefs.ErrNotFound) && fetch {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		k, err = FetchKernel(ctx, cache, suite)
	}
	if err != nil {
		return VM{}, err
	}
	vm := VM{Qemu: qemu, Busybox: busybox, Kernel: k, Accel: os.Getenv(EnvAccel)}
	if os.Getenv(EnvConsole) == "1" {
		vm.Console = os.Stderr
	}
	return vm, nil
}

// GoTest builds the test binary of a package of this module (an import path
// or a directory relative to the calling test's package) for the guest:
// static (CGO_ENABLED=0), linux/amd64. It returns the binary's path, in a
// directory removed at the test's end.
func GoTest(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg)+".test")
	goTool(t, "test", "-c", "-o", out, pkg)
	return out
}

// GoBuild builds a command of this module (e.g.
// "github.com/airlock-sandbox/airlock/cmd/airlock") for the guest, like
// GoTest.
func GoBuild(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	goTool(t, "build", "-o", out, pkg)
	return out
}

func goTool(t testing.TB, args ...string) {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("vmtest: building for the guest needs the go tool on PATH: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, gobin, args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	var out bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &out, n: 64 << 10}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Run(); err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}
