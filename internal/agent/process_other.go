//go:build !linux

package agent

import (
	"fmt"
	"os"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// The process service needs Linux (pidfds, sessions, PTYs, cgroups); on
// other systems the agent serves it with "not supported" errors.

var errNoProcesses = fmt.Errorf("processes on this system: %w", errdefs.ErrNotSupported)

type reaper struct{}

func newReaper(bool) (*reaper, error) { return &reaper{}, nil }

func (r *reaper) start(func() (int, error), chan<- exitInfo) (int, error) {
	return 0, errNoProcesses
}

func (r *reaper) close() {}

func (t *processTable) spawn(*procSpec, *process) error { return errNoProcesses }

func (p *process) signal(syscall.Signal) error { return errNoProcesses }

func (p *process) killGroup() error { return errNoProcesses }

func (p *process) closePidfdLocked() {}

func pendingBytes(*os.File) uint64 { return 0 }

func resizePty(*os.File, ptySize) error { return errNoProcesses }

func resourceSignal(int) bool { return false }

func limitReason(ExecUsage, int) string { return "a resource limit of the sandbox" }

func cloexecInherited() error { return nil }

// fsResolver resolves paths inside Root; not supported off Linux.
type fsResolver struct{}

func newFSResolver(string) (*fsResolver, error) { return &fsResolver{}, nil }

func (*fsResolver) close() error { return nil }
