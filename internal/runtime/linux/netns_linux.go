package linux

import (
	"fmt"
	"os"
	"strconv"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
	"github.com/airlock-sandbox/airlock/internal/runtime"
)

var _ runtime.NetNS = (*Instance)(nil)

// OpenNetNS implements runtime.NetNS: the network namespace of the
// sandbox's agent, its PID 1, opened through /proc and checked against
// the agent's pidfd afterwards, so that a pid reused after the agent
// exited cannot hand out another process's namespace.
func (i *Instance) OpenNetNS() (*os.File, error) {
	// Held throughout: Destroy closes the pidfd under it.
	i.destroyMu.Lock()
	defer i.destroyMu.Unlock()
	agent := i.agent
	gone := fmt.Errorf("sandbox %s has ended: %w", i.id, errdefs.ErrFailedPrecondition)
	if agent == nil || agent.hasExited() || i.state.Pid <= 0 {
		return nil, gone
	}
	f, err := os.Open("/proc/" + strconv.Itoa(i.state.Pid) + "/ns/net")
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: network namespace: %w", i.id, err)
	}
	exited := true
	_ = agent.rc.Control(func(fd uintptr) { exited = pidfdExited(int(fd)) })
	if exited {
		f.Close()
		return nil, gone
	}
	return f, nil
}
