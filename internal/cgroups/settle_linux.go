//go:build linux

package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// On v2 the kernel enables controllers for the children of a non-root
// cgroup only while that cgroup holds no process (the "no internal
// processes" rule). The cgroups from the mount's root down to the parent
// must therefore be empty. On a host the mount's root is the hierarchy's
// root, which is exempt; in a container with its own cgroup namespace it is
// the container's cgroup, which holds the daemon and whatever else the
// container runs. There the daemon does what docker-in-docker's entrypoint
// and systemd in a container do: it moves every process of its own cgroup
// into a leaf below it, LeafName, and then enables the controllers. It
// never moves the processes of a cgroup that is not its own: that fails
// with an error naming the cgroup.

// LeafName is the child cgroup into which the daemon moves the processes of
// its own cgroup when controllers must be enabled there.
const LeafName = "init"

// settleRounds bounds how often the move is retried while processes of the
// cgroup fork.
const settleRounds = 16

// enableAt turns on the v2 controllers for the children of rel (relative to
// the mount), first settling the daemon's own cgroup into LeafName when the
// kernel refuses because rel holds processes.
func (m *Manager) enableAt(rel string) error {
	g, err := m.group(rel)
	if err != nil {
		return err
	}
	defer g.close()
	_, err = g.enable(v2Controllers)
	if !errors.Is(err, unix.EBUSY) {
		return err
	}
	where := "/" + rel
	own, oerr := ownCgroup(m.l.root)
	switch {
	case oerr != nil:
		return fmt.Errorf("cgroups: %s holds processes, so the kernel refuses to enable controllers for sandboxes below it, and the daemon's own cgroup is unknown: %w", where, oerr)
	case own != rel:
		return fmt.Errorf("cgroups: %s holds processes that are not the daemon's, so the kernel refuses to enable controllers for sandboxes below it; "+
			"start the daemon in that cgroup (it then moves itself and them into %s/%s) or in a cgroup of its own: %w",
			where, strings.TrimSuffix(where, "/"), LeafName, errdefs.ErrFailedPrecondition)
	}
	n, err := m.settle(g)
	if err != nil {
		return err
	}
	m.log.Info("cgroups: moved the processes of the daemon's cgroup into a leaf, so that controllers can be enabled for sandboxes",
		"cgroup", where, "leaf", path.Join(where, LeafName), "moved", n)
	_, err = g.enable(v2Controllers)
	return err
}

// settle moves every process of g into g/LeafName and reports how many it
// moved.
func (m *Manager) settle(g *group) (int, error) {
	if err := g.mkdir(LeafName); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		return 0, err
	}
	leaf, err := g.sub(LeafName)
	if err != nil {
		return 0, err
	}
	defer leaf.close()
	moved := 0
	for range settleRounds {
		b, err := g.read(g.tab.procs)
		if err != nil {
			return moved, err
		}
		pids, err := parseProcs(b)
		if err != nil {
			return moved, err
		}
		if len(pids) == 0 {
			return moved, nil
		}
		for _, pid := range pids {
			err := leaf.write(g.tab.procs, strconv.Itoa(pid))
			switch {
			case err == nil:
				moved++
			case !errors.Is(err, unix.ESRCH): // ESRCH: it exited meanwhile
				return moved, fmt.Errorf("cgroups: move process %d of the daemon's cgroup into its leaf %s: %w", pid, LeafName, err)
			}
		}
	}
	return moved, fmt.Errorf("cgroups: the daemon's cgroup %s still holds processes after %d rounds of moving them into %s: %w",
		g.rel, settleRounds, LeafName, errdefs.ErrUnavailable)
}

// ownCgroup returns the calling process's v2 cgroup relative to the cgroup
// mounted at the unified mount's root (root, as mountinfo names it): "" for
// that cgroup itself.
func ownCgroup(root string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("cgroups: read /proc/self/cgroup: %w: %w", err, errdefs.ErrUnavailable)
	}
	return relOwnCgroup(b, root)
}

// relOwnCgroup is ownCgroup on the contents of /proc/self/cgroup.
func relOwnCgroup(procSelfCgroup []byte, root string) (string, error) {
	for line := range bytes.Lines(procSelfCgroup) {
		p, ok := strings.CutPrefix(strings.TrimSuffix(string(line), "\n"), "0::")
		if !ok {
			continue
		}
		if !strings.HasPrefix(p, "/") || strings.Contains(p+"/", "/../") {
			return "", fmt.Errorf("cgroups: the daemon's cgroup %q is outside this cgroup namespace: %w", clip(p), errdefs.ErrFailedPrecondition)
		}
		rel, ok := strings.CutPrefix(p, strings.TrimSuffix(root, "/"))
		if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
			return "", fmt.Errorf("cgroups: the daemon's cgroup %q is outside the mounted part %q of the hierarchy: %w", clip(p), clip(root), errdefs.ErrFailedPrecondition)
		}
		return strings.Trim(rel, "/"), nil
	}
	return "", fmt.Errorf("cgroups: /proc/self/cgroup has no unified (0::) line: %w", errdefs.ErrNotSupported)
}
