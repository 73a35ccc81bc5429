package cgroups

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestInspect(t *testing.T) {
	const hybrid = `32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 /sub /sys/fs/cgroup/pids ro,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate
50 23 0:40 / /tmp rw - tmpfs tmpfs rw
`
	noV2 := func(string) ([]string, error) { t.Fatal("v2 controllers read on a v1 host"); return nil, nil }
	l, err := Inspect(strings.NewReader(hybrid), noV2)
	if err != nil || l.Version != V1 || l.Unusable != nil {
		t.Fatalf("Inspect = %+v, %v", l, err)
	}
	if len(l.Mounts) != 6 || len(l.Used) != 4 {
		t.Fatalf("mounts %+v used %+v", l.Mounts, l.Used)
	}
	pids := l.Used[1]
	if pids.Point != "/sys/fs/cgroup/pids" || pids.Root != "/sub" || !pids.ReadOnly || !slices.Equal(pids.Controllers, []string{"pids"}) {
		t.Errorf("pids mount %+v", pids)
	}
	if c := l.Mounts[4].Controllers; c != nil {
		t.Errorf("name=systemd hierarchy has controllers %v", c)
	}
	if m := l.Mounts[5]; m.Version != V2 || m.Controllers != nil || m.ReadOnly {
		t.Errorf("cgroup2 mount %+v", m)
	}

	// Without freezer, v1 is unusable and v2 lacks its controllers.
	noFreezer := strings.Replace(hybrid, "rw,freezer", "rw,devices", 1)
	l, err = Inspect(strings.NewReader(noFreezer), func(string) ([]string, error) { return []string{"memory"}, nil })
	if err != nil || l.Version != 0 || !errors.Is(l.Unusable, errdefs.ErrNotSupported) || l.Used != nil {
		t.Fatalf("Inspect = %+v, %v", l, err)
	}
	// With them on v2, v2 it is.
	l, err = Inspect(strings.NewReader(noFreezer), func(string) ([]string, error) { return []string{"cpu", "memory", "pids"}, nil })
	if err != nil || l.Version != V2 || len(l.Used) != 1 || l.Used[0].Point != "/sys/fs/cgroup/unified" {
		t.Fatalf("Inspect = %+v, %v", l, err)
	}
	if _, err := Inspect(strings.NewReader("garbage\n"), noV2); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("garbage mountinfo: %v", err)
	}
}
