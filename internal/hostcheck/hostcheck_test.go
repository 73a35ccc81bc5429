package hostcheck

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Mount tables of the host shapes the tests use.
const (
	mountsV1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
`
	mountsHybrid = mountsV1 + "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	mountsV2     = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n"
	mountsV2RO   = "30 23 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
)

// hostFS returns the /proc and /sys of a healthy host with the given
// mounts; tests change entries.
func hostFS(mounts string) fstest.MapFS {
	f := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	m := fstest.MapFS{
		"proc/self/mountinfo":                   f(mounts),
		"proc/self/cgroup":                      f("0::/system.slice/airlock.service\n"),
		"proc/self/status":                      f("Name:\tairlock\nSeccomp:\t0\nSeccomp_filters:\t0\n"),
		"proc/sys/kernel/osrelease":             f("6.1.0-18-amd64\n"),
		"proc/sys/kernel/seccomp/actions_avail": f("kill_process kill_thread trap errno user_notif trace log allow\n"),
		"proc/swaps":                            f("Filename\tType\tSize\tUsed\tPriority\n/swap\tfile\t1048572\t0\t-2\n"),
		"dev/kvm":                               &fstest.MapFile{Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666},
		// v1
		"sys/fs/cgroup/memory/memory.memsw.limit_in_bytes": f("9223372036854771712\n"),
		// v2: the root, and the daemon's cgroup below it
		"sys/fs/cgroup/cgroup.controllers":                                  f("cpuset cpu io memory hugetlb pids rdma misc\n"),
		"sys/fs/cgroup/system.slice/memory.max":                             f("max\n"),
		"sys/fs/cgroup/system.slice/memory.swap.max":                        f("max\n"),
		"sys/fs/cgroup/cgroup.subtree_control":                              f("cpu io memory pids\n"),
		"sys/fs/cgroup/cgroup.procs":                                        f("1\n4242\n"),
		"sys/fs/cgroup/system.slice/airlock.service/cgroup.type":            f("domain\n"),
		"sys/fs/cgroup/system.slice/airlock.service/cgroup.controllers":     f("cpuset cpu io memory pids\n"),
		"sys/fs/cgroup/system.slice/airlock.service/cgroup.subtree_control": f(""),
		"sys/fs/cgroup/system.slice/airlock.service/cgroup.procs":           f("4242\n"),
		"sys/fs/cgroup/system.slice/airlock.service/memory.max":             f("max\n"),
		"sys/fs/cgroup/system.slice/airlock.service/memory.swap.max":        f("max\n"),
	}
	for _, k := range namespaceKinds {
		m["proc/sys/user/max_"+k+"_namespaces"] = f("63432\n")
	}
	return m
}

// inContainer makes m a container's view: cgroup2 mounted in the
// container's own cgroup namespace, whose root (a non-root cgroup) holds
// the daemon (pid 4242) and procs more.
func inContainer(m fstest.MapFS, procs string) {
	f := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	m["proc/self/cgroup"] = f("0::/\n")
	m["sys/fs/cgroup/cgroup.type"] = f("domain\n")
	m["sys/fs/cgroup/cgroup.controllers"] = f("cpuset cpu io memory pids\n")
	m["sys/fs/cgroup/cgroup.subtree_control"] = f("")
	m["sys/fs/cgroup/cgroup.procs"] = f(procs)
	m["sys/fs/cgroup/memory.max"] = f("1073741824\n")
	m["sys/fs/cgroup/memory.swap.max"] = f("0\n")
}

// goodProbes are the probes of a healthy host.
func goodProbes() Probes {
	return Probes{
		Euid:        func() int { return 0 },
		Pid:         func() int { return 4242 },
		LandlockABI: func() (int, error) { return 3, nil },
		Sandbox:     func(context.Context, string) SandboxResult { return SandboxResult{} },
		Disk: func(p string) (Disk, error) {
			return Disk{Path: p, Type: "ext4", TotalBytes: 100 << 30, FreeBytes: 50 << 30, TotalInodes: 1 << 20, FreeInodes: 1 << 19}, nil
		},
		OpenFiles: func() (uint64, uint64, error) { return 1 << 20, 1 << 20, nil },
	}
}

func run(t *testing.T, fsys fstest.MapFS, p Probes) Report {
	t.Helper()
	return Run(context.Background(), Options{DataDir: "/var/lib/airlock", MaxSandboxes: 500, Root: fsys, Probes: p})
}

func find(t *testing.T, r Report, name string) Check {
	t.Helper()
	for _, c := range r.Checks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %s in %+v", name, r)
	return Check{}
}

func TestHealthyHosts(t *testing.T) {
	for _, mounts := range []string{mountsV1, mountsHybrid, mountsV2} {
		r := run(t, hostFS(mounts), goodProbes())
		if !r.OK || len(r.Failed()) > 0 || len(r.Warnings()) > 0 {
			t.Errorf("healthy host reported %+v", r)
		}
		if err := r.Err(); err != nil {
			t.Errorf("Err() = %v", err)
		}
		if got, want := len(r.Checks), len(Names()); got != want {
			t.Errorf("%d checks, want %d", got, want)
		}
		for i, c := range r.Checks {
			if c.Name != Names()[i] || c.Found == "" || c.Meaning == "" || c.Fix != "" {
				t.Errorf("check %d: %+v", i, c)
			}
		}
	}
}

func TestCgroupsMode(t *testing.T) {
	for _, tt := range []struct {
		mounts, want string
	}{
		{mountsV1, "v1"},
		{mountsHybrid, "v1 (hybrid: the controllers on v1 hierarchies, cgroup2 at /sys/fs/cgroup/unified unused)"},
		{mountsV2, "v2 (unified, at /sys/fs/cgroup)"},
	} {
		c := find(t, run(t, hostFS(tt.mounts), goodProbes()), "cgroups")
		if c.Status != OK || c.Found != tt.want {
			t.Errorf("cgroups on %q: %+v, want found %q", tt.mounts[:20], c, tt.want)
		}
	}
}

// check runs the checks on a host changed by change and returns the one
// named.
func check(t *testing.T, mounts string, change func(fstest.MapFS, *Probes), name string) Check {
	t.Helper()
	fsys, p := hostFS(mounts), goodProbes()
	if change != nil {
		change(fsys, &p)
	}
	r := run(t, fsys, p)
	c := find(t, r, name)
	if r.OK != (len(r.Failed()) == 0) {
		t.Errorf("OK = %v with failures %+v", r.OK, r.Failed())
	}
	return c
}

func TestChecks(t *testing.T) {
	data := func(s string) *fstest.MapFile { return &fstest.MapFile{Data: []byte(s)} }
	for _, tt := range []struct {
		name   string
		mounts string
		change func(fstest.MapFS, *Probes)
		check  string
		status Status
		found  string // a part of Found
		fix    string // a part of Fix
	}{
		{"not root", mountsV2, func(_ fstest.MapFS, p *Probes) { p.Euid = func() int { return 1000 } },
			"root", Fail, "uid 1000", "run as root"},
		{"probes need root", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Euid = func() int { return 1000 }
			p.Sandbox = func(context.Context, string) SandboxResult { panic("probed without root") }
		}, "overlay_userns", Warn, "not tried (needs root)", ""},
		{"old kernel", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/kernel/osrelease"] = data("5.10.0-28-amd64\n") },
			"kernel", Fail, "older than 5.12", "Linux 5.12"},
		{"kernel with suffix", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/kernel/osrelease"] = data("5.15rc1\n") },
			"kernel", OK, "Linux 5.15rc1", ""},
		{"garbage kernel", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/kernel/osrelease"] = data("linux\n") },
			"kernel", Fail, "not MAJOR.MINOR", ""},
		{"no cgroups", "30 23 0:26 / /proc rw - proc proc rw\n", nil,
			"cgroups", Fail, "no usable hierarchy", "systemd.unified_cgroup_hierarchy=1"},
		{"v1 without freezer", strings.Replace(mountsV1, "rw,freezer", "rw,devices", 1), nil,
			"cgroups", Fail, "v1 lacks freezer", "freezer"},
		{"v1 without freezer: controllers", strings.Replace(mountsV1, "rw,freezer", "rw,devices", 1), nil,
			"cgroup_controllers", Fail, "no usable cgroup hierarchy", ""},
		{"read-only cgroupfs", mountsV2RO, nil,
			"cgroups", Fail, "mounted read-only", "read-write"},
		{"v1 controllers", mountsV1, nil,
			"cgroup_controllers", OK, "memory pids cpu cpuacct freezer; optional: blkio yes, cpuset yes", ""},
		{"v2 controllers", mountsV2, nil,
			"cgroup_controllers", OK, "available to the root cgroup: memory pids cpu (enabled for its children: cpu io memory pids); optional: io yes, cpuset yes", ""},
		{"v2 container controllers", mountsV2, func(m fstest.MapFS, _ *Probes) { inContainer(m, "4242\n") },
			"cgroup_controllers", OK, "available to the root of this cgroup namespace (a container's cgroup): memory pids cpu", ""},
		{"v2 container without pids", mountsV2, func(m fstest.MapFS, _ *Probes) {
			inContainer(m, "4242\n")
			m["sys/fs/cgroup/cgroup.controllers"] = data("cpu io memory\n")
		}, "cgroups", Fail, "v2 lacks pids", "delegate memory, pids and cpu to its cgroup"},
		{"v2 container without pids: controllers", mountsV2, func(m fstest.MapFS, _ *Probes) {
			inContainer(m, "4242\n")
			m["sys/fs/cgroup/cgroup.controllers"] = data("cpu io memory\n")
		}, "cgroup_controllers", Fail, "no usable cgroup hierarchy", "see cgroups"},
		{"v2 root placement", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/self/cgroup"] = data("0::/\n") },
			"cgroup_placement", OK, "the root cgroup", ""},
		{"v2 service on a host", mountsV2, nil,
			"cgroup_placement", OK, "the root cgroup (exempt from the no-internal-process rule); the daemon runs in /system.slice/airlock.service", ""},
		{"v2 container alone", mountsV2, func(m fstest.MapFS, _ *Probes) { inContainer(m, "4242\n") },
			"cgroup_placement", OK, "holds 1 process(es), this one and 0 other(s): the daemon moves them into init/", ""},
		{"v2 container sharing", mountsV2, func(m fstest.MapFS, _ *Probes) { inContainer(m, "1\n4242\n99\n") },
			"cgroup_placement", OK, "holds 3 process(es), this one and 2 other(s)", ""},
		{"v2 container settled", mountsV2, func(m fstest.MapFS, _ *Probes) {
			inContainer(m, "")
			m["proc/self/cgroup"] = data("0::/init\n")
		}, "cgroup_placement", OK, "holds 0 process(es)", ""},
		{"v2 container, daemon elsewhere", mountsV2, func(m fstest.MapFS, _ *Probes) {
			inContainer(m, "1\n99\n")
			m["proc/self/cgroup"] = data("0::/sub\n")
		}, "cgroup_placement", Fail, "none of them the daemon (in /sub)", "start the daemon in that cgroup"},
		{"v2 threaded top", mountsV2, func(m fstest.MapFS, _ *Probes) {
			inContainer(m, "4242\n")
			m["sys/fs/cgroup/cgroup.type"] = data("threaded\n")
		}, "cgroup_placement", Fail, `is a "threaded" cgroup`, "domain cgroup"},
		{"v2 cgroup outside the namespace", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/self/cgroup"] = data("0::/../../x\n") },
			"cgroup_placement", Fail, "outside this cgroup namespace", "own cgroup namespace"},
		{"v2 garbage self cgroup", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/self/cgroup"] = data("1:name=systemd:/\n") },
			"cgroup_placement", Fail, "no unified hierarchy line", ""},
		{"v2 garbage procs", mountsV2, func(m fstest.MapFS, _ *Probes) { inContainer(m, "12\nabc\n") },
			"cgroup_placement", Fail, "malformed pid", ""},
		{"v1 swap not accounted", mountsV1, func(m fstest.MapFS, _ *Probes) { delete(m, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes") },
			"swap_accounting", Warn, "swap in use and not accounted", "swapaccount=1"},
		{"v1 no swap", mountsV1, func(m fstest.MapFS, _ *Probes) {
			delete(m, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
			m["proc/swaps"] = data("Filename\tType\tSize\tUsed\tPriority\n")
		}, "swap_accounting", OK, "no swap in use (not accounted", ""},
		{"v2 swap not accounted", mountsV2, func(m fstest.MapFS, _ *Probes) { delete(m, "sys/fs/cgroup/system.slice/memory.swap.max") },
			"swap_accounting", Warn, "not accounted", "swapaccount=1"},
		{"v2 container swap accounted", mountsV2, func(m fstest.MapFS, _ *Probes) { inContainer(m, "4242\n") },
			"swap_accounting", OK, "accounted", ""},
		{"v2 root: swap from a child", mountsV2, func(m fstest.MapFS, _ *Probes) {
			m["proc/self/cgroup"] = data("0::/\n")
			m["sys/fs/cgroup/init.scope/memory.max"] = data("max\n")
			m["sys/fs/cgroup/init.scope/memory.swap.max"] = data("max\n")
		}, "swap_accounting", OK, "accounted", ""},
		{"v2 root: swap unknown", mountsV2, func(m fstest.MapFS, _ *Probes) {
			delete(m, "sys/fs/cgroup/system.slice/memory.max")
			delete(m, "sys/fs/cgroup/system.slice/memory.swap.max")
		},
			"swap_accounting", Warn, "swap in use; accounting unknown", "swapaccount=1"},
		{"user namespaces off", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/user/max_user_namespaces"] = data("0\n") },
			"user_namespaces", Fail, "namespaces disabled: user", "sysctl -w user.max_user_namespaces=15000"},
		{"mount namespaces off", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/user/max_mnt_namespaces"] = data("0\n") },
			"user_namespaces", Fail, "namespaces disabled: mnt", "sysctl -w user.max_mnt_namespaces=15000"},
		{"no user namespaces", mountsV2, func(m fstest.MapFS, _ *Probes) { delete(m, "proc/sys/user/max_user_namespaces") },
			"user_namespaces", Fail, "no user namespaces in this kernel", "CONFIG_USER_NS"},
		{"few user namespaces", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/user/max_user_namespaces"] = data("100\n") },
			"user_namespaces", Warn, "below max_sandboxes (500): user.max_user_namespaces=100", "sysctl -w"},
		{"ubuntu restrictions", mountsV2, func(m fstest.MapFS, _ *Probes) {
			m["proc/sys/kernel/apparmor_restrict_unprivileged_userns"] = data("1\n")
			m["proc/sys/kernel/unprivileged_userns_clone"] = data("0\n")
		}, "user_namespaces", OK, "kernel.unprivileged_userns_clone=0 (restricts unprivileged users only), kernel.apparmor_restrict_unprivileged_userns=1", ""},
		{"user namespace refused", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Sandbox = func(context.Context, string) SandboxResult {
				err := fmt.Errorf("start: operation not permitted")
				return SandboxResult{UserNS: err, Overlay: ErrNotProbed, Seccomp: ErrNotProbed, IDMap: ErrNotProbed}
			}
		}, "user_namespaces", Fail, "cannot create a user namespace: start: operation not permitted", "clone(CLONE_NEWUSER)"},
		{"no seccomp", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/self/status"] = data("Name:\tairlock\n") },
			"seccomp", Fail, "no seccomp in this kernel", "CONFIG_SECCOMP"},
		{"no seccomp filter", mountsV2, func(m fstest.MapFS, _ *Probes) { delete(m, "proc/sys/kernel/seccomp/actions_avail") },
			"seccomp", Fail, "no seccomp filter mode", "CONFIG_SECCOMP_FILTER"},
		{"seccomp without errno", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/sys/kernel/seccomp/actions_avail"] = data("kill allow\n") },
			"seccomp", Fail, "errno is not available", ""},
		{"filtered already", mountsV2, func(m fstest.MapFS, _ *Probes) { m["proc/self/status"] = data("Seccomp:\t2\n") },
			"seccomp", OK, "this process is itself filtered", ""},
		{"seccomp refused in the probe", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Sandbox = func(context.Context, string) SandboxResult { return SandboxResult{Seccomp: errors.New("EPERM")} }
		}, "seccomp", Fail, "installing a filter in a user namespace failed: EPERM", "seccomp profile"},
		{"overlay refused", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Sandbox = func(context.Context, string) SandboxResult {
				return SandboxResult{Overlay: errors.New("mount overlay: operation not permitted")}
			}
		}, "overlay_userns", Fail, "mount overlay: operation not permitted", "5.11"},
		{"id-mapping refused", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Sandbox = func(context.Context, string) SandboxResult {
				return SandboxResult{IDMap: fmt.Errorf("the kernel or the filesystem refuses: %w", errdefs.ErrNotSupported)}
			}
		}, "idmapped_mounts", Warn, "cannot id-map", "id-mapped mounts"},
		{"no landlock", mountsV2, func(_ fstest.MapFS, p *Probes) { p.LandlockABI = func() (int, error) { return 0, nil } },
			"landlock", Warn, "not available", "lsm=landlock"},
		{"landlock 7", mountsV2, func(_ fstest.MapFS, p *Probes) { p.LandlockABI = func() (int, error) { return 7, nil } },
			"landlock", OK, "ABI 7", ""},
		{"landlock 9", mountsV2, func(_ fstest.MapFS, p *Probes) { p.LandlockABI = func() (int, error) { return 9, nil } },
			"landlock", OK, "ABI 9 (used at ABI 7)", ""},
		{"no kvm", mountsV2, func(m fstest.MapFS, _ *Probes) { delete(m, "dev/kvm") },
			"kvm", OK, "no /dev/kvm", ""},
		{"disk full", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Disk = func(string) (Disk, error) {
				return Disk{Path: "/var/lib/airlock", Type: "xfs", TotalBytes: 100 << 30, FreeBytes: 10 << 20}, nil
			}
		}, "data_dir", Fail, "xfs, 10.0 MiB free of 100.0 GiB", "--data-dir"},
		{"no inodes", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Disk = func(string) (Disk, error) {
				return Disk{Path: "/var/lib/airlock", Type: "ext4", TotalBytes: 100 << 30, FreeBytes: 50 << 30, TotalInodes: 1 << 20, FreeInodes: 100}, nil
			}
		}, "data_dir", Fail, "100 of 1048576 inodes free", "inodes"},
		{"disk low", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Disk = func(string) (Disk, error) {
				return Disk{Path: "/var/lib", Type: "btrfs", TotalBytes: 1 << 40, FreeBytes: 20 << 30}, nil
			}
		}, "data_dir", Warn, "btrfs, 20.0 GiB free of 1.0 TiB (the data dir does not exist yet: measured its parent)", "free space"},
		{"data dir on tmpfs", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Disk = func(string) (Disk, error) {
				return Disk{Path: "/var/lib/airlock", Type: "tmpfs", TotalBytes: 8 << 30, FreeBytes: 8 << 30}, nil
			}
		}, "data_dir", Warn, "lost at reboot", "persistent"},
		{"disk unreadable", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.Disk = func(string) (Disk, error) { return Disk{}, errors.New("statfs: input/output error") }
		}, "data_dir", Fail, "statfs: input/output error", ""},
		{"few open files", mountsV2, func(_ fstest.MapFS, p *Probes) {
			p.OpenFiles = func() (uint64, uint64, error) { return 1024, 4096, nil }
		}, "open_files", Warn, "RLIMIT_NOFILE 1024 (hard 4096)", "LimitNOFILE"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := check(t, tt.mounts, tt.change, tt.check)
			if c.Status != tt.status || !strings.Contains(c.Found, tt.found) || !strings.Contains(c.Fix, tt.fix) {
				t.Errorf("%s: %+v\nwant status %s, found containing %q, fix containing %q", tt.check, c, tt.status, tt.found, tt.fix)
			}
			if c.Status == Fail && (!c.Mandatory || c.Fix == "" && tt.fix != "") {
				t.Errorf("a failed check must be mandatory with a fix: %+v", c)
			}
		})
	}
}

func TestOptionalNeverFails(t *testing.T) {
	p := goodProbes()
	p.LandlockABI = func() (int, error) { return 0, errors.New("boom") }
	p.OpenFiles = func() (uint64, uint64, error) { return 0, 0, errors.New("boom") }
	p.Sandbox = func(context.Context, string) SandboxResult { return SandboxResult{IDMap: errors.New("boom")} }
	fsys := hostFS(mountsV1)
	delete(fsys, "sys/fs/cgroup/memory/memory.memsw.limit_in_bytes")
	r := run(t, fsys, p)
	if !r.OK || len(r.Failed()) != 0 {
		t.Errorf("optional checks failed the report: %+v", r.Failed())
	}
	var warned []string
	for _, c := range r.Warnings() {
		warned = append(warned, c.Name)
	}
	if got := strings.Join(warned, " "); got != "swap_accounting idmapped_mounts landlock open_files" {
		t.Errorf("warnings %s", got)
	}
}

func TestReportErr(t *testing.T) {
	fsys := hostFS(mountsV2)
	fsys["proc/sys/user/max_user_namespaces"] = &fstest.MapFile{Data: []byte("0\n")}
	inContainer(fsys, "4242\n")
	fsys["sys/fs/cgroup/cgroup.procs"] = &fstest.MapFile{Data: []byte("1\n")}
	fsys["proc/self/cgroup"] = &fstest.MapFile{Data: []byte("0::/sub\n")}
	r := run(t, fsys, goodProbes())
	err := r.Err()
	if r.OK || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Err() = %v, OK %v", err, r.OK)
	}
	for _, want := range []string{
		"this host cannot run Airlock safely", "2 mandatory check(s) failed",
		"\n  - cgroup_placement: the root of this cgroup namespace (a container's cgroup) holds 1 process(es), none of them the daemon",
		"fix: start the daemon in that cgroup",
		"\n  - user_namespaces: namespaces disabled: user", "fix: sysctl -w user.max_user_namespaces=15000",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Err() lacks %q:\n%v", want, err)
		}
	}
}

func TestRefresh(t *testing.T) {
	p := goodProbes()
	sandboxRuns := 0
	p.Sandbox = func(context.Context, string) SandboxResult { sandboxRuns++; return SandboxResult{} }
	opts := Options{DataDir: "/var/lib/airlock", Root: hostFS(mountsV2), Probes: p}
	first := Run(context.Background(), opts)
	if sandboxRuns != 1 {
		t.Fatalf("the namespace probe ran %d times in one report", sandboxRuns)
	}
	// The disk fills, Landlock "changes": only the disk is taken again.
	opts.Probes.Disk = func(string) (Disk, error) {
		return Disk{Path: "/var/lib/airlock", Type: "ext4", TotalBytes: 100 << 30, FreeBytes: 1 << 20}, nil
	}
	opts.Probes.LandlockABI = func() (int, error) { return 0, nil }
	time.Sleep(time.Millisecond)
	r := Refresh(context.Background(), first, opts)
	if sandboxRuns != 1 {
		t.Errorf("Refresh ran the namespace probe")
	}
	if r.OK || find(t, r, "data_dir").Status != Fail || find(t, r, "landlock") != find(t, first, "landlock") {
		t.Errorf("refreshed report %+v", r)
	}
	if !r.ProbedAt.Equal(first.ProbedAt) || !r.CheckedAt.After(first.CheckedAt) {
		t.Errorf("times: probed %v checked %v, first %v", r.ProbedAt, r.CheckedAt, first.ProbedAt)
	}
	if len(r.Checks) != len(first.Checks) {
		t.Errorf("refresh changed the checks")
	}
}

func TestParsers(t *testing.T) {
	for in, want := range map[string][2]int{"6.1.0-18-amd64": {6, 1}, "5.12": {5, 12}, "6.18.44-fc-v669": {6, 18}, "4.19rc3": {4, 19}} {
		if got, err := parseRelease(in); err != nil || got != want {
			t.Errorf("parseRelease(%q) = %v, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "6", "a.b", "-1.2", "6.x"} {
		if _, err := parseRelease(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseRelease(%q) = %v", bad, err)
		}
	}
	for in, want := range map[string]string{
		"0::/\n": "/", "12:pids:/x\n0::/a/b\n": "/a/b", "0::/a/../b": "/b", "0::/../x": "/../x",
	} {
		if got, err := parseSelfCgroup([]byte(in)); err != nil || got != want {
			t.Errorf("parseSelfCgroup(%q) = %q, %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "1:name=systemd:/", "0::/\n0::/x\n", "0::relative"} {
		if _, err := parseSelfCgroup([]byte(bad)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseSelfCgroup(%q) = %v", bad, err)
		}
	}
	if got := humanBytes(1536); got != "1.5 KiB" {
		t.Errorf("humanBytes(1536) = %q", got)
	}
	if got := fsPath("/sys/fs/cgroup", "/a/b"); got != "sys/fs/cgroup/a/b" {
		t.Errorf("fsPath = %q", got)
	}
	// Oversized proc files are refused, not read whole.
	big := fstest.MapFS{"proc/self/mountinfo": &fstest.MapFile{Data: []byte(strings.Repeat("x", 5<<20))}}
	if _, err := readSmall(big, "proc/self/mountinfo", 1<<22); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("readSmall of an oversized file: %v", err)
	}
}
