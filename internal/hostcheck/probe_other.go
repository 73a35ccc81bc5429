//go:build !linux

package hostcheck

import (
	"context"
	"fmt"
	"os"
	"runtime"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// ProbeCommand is the hidden verb of the namespace probe's child side.
const ProbeCommand = "hostcheck-probe"

// RunProbe is only implemented on Linux.
func RunProbe() int {
	fmt.Fprintln(os.Stderr, "airlock: the host probe needs Linux")
	return 1
}

// realProbes on other systems report that Airlock cannot run there.
func realProbes() Probes {
	unsupported := fmt.Errorf("%s: %w", runtime.GOOS, errdefs.ErrNotSupported)
	return Probes{
		Euid:        os.Geteuid,
		Pid:         os.Getpid,
		LandlockABI: func() (int, error) { return 0, unsupported },
		Sandbox: func(context.Context, string) SandboxResult {
			return SandboxResult{UserNS: unsupported, Overlay: unsupported, Seccomp: unsupported, IDMap: unsupported}
		},
		Disk:      func(string) (Disk, error) { return Disk{}, unsupported },
		OpenFiles: func() (uint64, uint64, error) { return 0, 0, unsupported },
	}
}
