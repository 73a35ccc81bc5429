package cgroups

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestParseUint(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"123\n", 123, false},
		{"0", 0, false},
		{"18446744073709551615\n", math.MaxUint64, false},
		{"18446744073709551616\n", 0, true},
		{"", 0, true},
		{"-1\n", 0, true},
		{"max\n", 0, true},
		{"1 2\n", 0, true},
	}
	for _, tt := range tests {
		got, err := parseUint([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseUint(%q) = %d, %v; want %d, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseUint(%q) error %v is not invalid argument", tt.in, err)
		}
	}
}

func TestParseLimit(t *testing.T) {
	tests := []struct {
		in      string
		want    uint64
		wantErr bool
	}{
		{"max\n", 0, false},
		{"536870912\n", 512 << 20, false},
		{"256\n", 256, false},
		{"9223372036854771712\n", 0, false}, // v1's "no limit" on 4 KiB pages
		{"4611686018427387903\n", 4611686018427387903, false},
		{"maximum\n", 0, true},
		{"", 0, true},
		{"-1\n", 0, true},
	}
	for _, tt := range tests {
		got, err := parseLimit([]byte(tt.in))
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseLimit(%q) = %d, %v; want %d, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseKeyed(t *testing.T) {
	const oomControl = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"
	const memEvents = "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n"
	const cpuStat = "usage_usec 2837465\nuser_usec 2000000\nsystem_usec 837465\nnr_periods 0\nnr_throttled 0\nthrottled_usec 0\nnr_bursts 0\nburst_usec 0\n"
	tests := []struct {
		name, in, key string
		want          uint64
		found         bool
		wantErr       bool
	}{
		{"v1 oom_control", oomControl, "oom_kill", 3, true, false},
		{"v1 oom_kill_disable is another key", oomControl, "oom_kill_disable", 0, true, false},
		{"v2 memory.events", memEvents, "oom_kill", 2, true, false},
		{"v2 oom_group_kill is another key", memEvents, "oom_group_kill", 0, true, false},
		{"v2 cpu.stat", cpuStat, "usage_usec", 2837465, true, false},
		{"cgroup.events", "populated 1\nfrozen 0\n", "populated", 1, true, false},
		{"missing key", "populated 1\n", "frozen", 0, false, false},
		{"empty", "", "oom_kill", 0, false, false},
		{"no trailing newline", "oom_kill 7", "oom_kill", 7, true, false},
		{"key prefix only", "oom_kills 7\n", "oom_kill", 0, false, false},
		{"bad value", "oom_kill x\n", "oom_kill", 0, false, true},
		{"negative", "oom_kill -1\n", "oom_kill", 0, false, true},
		{"duplicate", "oom_kill 1\noom_kill 2\n", "oom_kill", 0, false, true},
		{"other malformed lines ignored", "garbage\n\noom_kill 4\n", "oom_kill", 4, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, found, err := parseKeyed([]byte(tt.in), tt.key)
			if (err != nil) != tt.wantErr || got != tt.want || found != tt.found {
				t.Errorf("parseKeyed(%q, %q) = %d, %v, %v; want %d, %v, err %v", tt.in, tt.key, got, found, err, tt.want, tt.found, tt.wantErr)
			}
		})
	}
}

func TestParseProcs(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{"", nil, false},
		{"1\n22\n333\n", []int{1, 22, 333}, false},
		{"0\n5\n", []int{5}, false}, // 0: outside our pid namespace
		{"5\n\n6", []int{5, 6}, false},
		{"x\n", nil, true},
		{"-3\n", nil, true},
		{"99999999999\n", nil, true},
	}
	for _, tt := range tests {
		got, err := parseProcs([]byte(tt.in))
		if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
			t.Errorf("parseProcs(%q) = %v, %v; want %v, err %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// hostV1 is this development host's mountinfo (v1, separate cpu and cpuacct,
// a cgroup2 mount without controllers).
const hostV1 = `31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

// coMounted is a typical systemd v1 host: cpu,cpuacct together, optional
// fields, and a bind mount of memory into a container subtree listed first.
const coMounted = `25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
90 25 0:31 /docker/abc /mnt/memory rw,nosuid shared:15 - cgroup cgroup rw,memory
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
29 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,cpu,cpuacct
30 25 0:27 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,pids
31 25 0:31 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,memory
32 25 0:28 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,freezer
`

// pureV2 is a modern systemd host, with an escaped space in an unrelated
// mount point.
const pureV2 = `22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
23 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
27 23 0:24 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
50 22 0:40 / /mnt/my\040disk rw - ext4 /dev/sdb1 rw
`

func TestParseMountinfo(t *testing.T) {
	ms, err := parseMountinfo(strings.NewReader(pureV2))
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) != 4 {
		t.Fatalf("got %d mounts, want 4", len(ms))
	}
	if got := ms[2]; got.point != "/sys/fs/cgroup" || got.fstype != "cgroup2" || got.root != "/" || !slices.Equal(got.super, []string{"rw", "nsdelegate", "memory_recursiveprot"}) {
		t.Errorf("cgroup2 mount = %+v", got)
	}
	if got := ms[3].point; got != "/mnt/my disk" {
		t.Errorf("escaped mount point = %q, want %q", got, "/mnt/my disk")
	}
	ms, err = parseMountinfo(strings.NewReader(coMounted))
	if err != nil {
		t.Fatal(err)
	}
	if got := ms[1]; got.root != "/docker/abc" || !slices.Equal(got.super, []string{"rw", "memory"}) {
		t.Errorf("mount with optional field = %+v", got)
	}

	for _, bad := range []string{
		"1 2 3\n",
		"31 23 0:28 / /sys/fs/cgroup rw,relatime tmpfs tmpfs rw\n", // no separator
		"31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs\n",        // too short after separator
		`31 23 0:28 / /a\04 rw - tmpfs tmpfs rw` + "\n",            // truncated escape
		`31 23 0:28 / /a\9zz rw - tmpfs tmpfs rw` + "\n",           // bad escape
		"1 - a b c d e\n", // separator too early
	} {
		if _, err := parseMountinfo(strings.NewReader(bad)); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseMountinfo(%q) error = %v, want invalid argument", bad, err)
		}
	}
}

func TestDetectLayout(t *testing.T) {
	ctrls := func(list string) func(string) ([]string, error) {
		return func(string) ([]string, error) { return strings.Fields(list), nil }
	}
	tests := []struct {
		name      string
		mountinfo string
		v2ctrls   string
		wantV     Version
		want      []mountedHier // nil with wantV 0: error
	}{
		{"this host", hostV1, "hugetlb", V1, []mountedHier{
			{hier{"memory", []string{"memory"}}, "/sys/fs/cgroup/memory"},
			{hier{"pids", []string{"pids"}}, "/sys/fs/cgroup/pids"},
			{hier{"cpu", []string{"cpu"}}, "/sys/fs/cgroup/cpu"},
			{hier{"cpuacct", []string{"cpuacct"}}, "/sys/fs/cgroup/cpuacct"},
			{hier{"freezer", []string{"freezer"}}, "/sys/fs/cgroup/freezer"},
		}},
		{"co-mounted, whole hierarchy preferred", coMounted, "", V1, []mountedHier{
			{hier{"memory", []string{"memory"}}, "/sys/fs/cgroup/memory"},
			{hier{"pids", []string{"pids"}}, "/sys/fs/cgroup/pids"},
			{hier{"cpu,cpuacct", []string{"cpu", "cpuacct"}}, "/sys/fs/cgroup/cpu,cpuacct"},
			{hier{"freezer", []string{"freezer"}}, "/sys/fs/cgroup/freezer"},
		}},
		{"pure v2", pureV2, "cpuset cpu io memory hugetlb pids rdma misc", V2, []mountedHier{
			{hier{name: v2Name}, "/sys/fs/cgroup"},
		}},
		{"v2 without memory", pureV2, "cpu pids", 0, nil},
		{"v1 without freezer, v2 without controllers", strings.ReplaceAll(hostV1, "rw,freezer", "rw,net_cls"), "", 0, nil},
		{"nothing", "22 1 259:2 / / rw - ext4 /dev/x rw\n", "", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms, err := parseMountinfo(strings.NewReader(tt.mountinfo))
			if err != nil {
				t.Fatal(err)
			}
			l, err := detectLayout(ms, ctrls(tt.v2ctrls))
			if tt.wantV == 0 {
				if !errors.Is(err, errdefs.ErrNotSupported) {
					t.Fatalf("detectLayout = %+v, %v; want not supported", l, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.v != tt.wantV || fmt.Sprint(l.hiers) != fmt.Sprint(tt.want) {
				t.Errorf("detectLayout = %v %+v\nwant %v %+v", l.v, l.hiers, tt.wantV, tt.want)
			}
			var names []string
			for _, h := range l.hiers {
				names = append(names, h.name)
			}
			if err := checkHierNames(l.v, names); err != nil {
				t.Errorf("detected hierarchies fail checkHierNames: %v", err)
			}
		})
	}
}

func TestSpec(t *testing.T) {
	es := []specEntry{{"cpu", 3, 4}, {"cpuacct", 5, 6}, {"freezer", 7, 8}, {"memory", 9, 10}, {"pids", 11, 12}}
	s := formatSpec(V1, es, 0)
	if want := "v1 cpu:3:4 cpuacct:5:6 freezer:7:8 memory:9:10 pids:11:12"; s != want {
		t.Errorf("formatSpec = %q, want %q", s, want)
	}
	v, got, budget, err := parseSpec(s)
	if err != nil || v != V1 || !slices.Equal(got, es) || budget != 0 {
		t.Errorf("parseSpec(%q) = %v %v %v %v", s, v, got, budget, err)
	}
	s = formatSpec(V2, []specEntry{{"cgroup2", 3, 4}}, 384<<20)
	if want := "v2 cgroup2:3:4 mem=402653184"; s != want {
		t.Errorf("formatSpec with a budget = %q, want %q", s, want)
	}
	if _, _, budget, err := parseSpec(s); err != nil || budget != 384<<20 {
		t.Errorf("parseSpec(%q) budget = %d, %v", s, budget, err)
	}
	for _, good := range []string{
		"v2 cgroup2:3:4",
		"v1 cpu,cpuacct:3:4 freezer:5:6 memory:7:8 pids:9:10",
	} {
		if _, _, _, err := parseSpec(good); err != nil {
			t.Errorf("parseSpec(%q): %v", good, err)
		}
	}
	for _, bad := range []string{
		"",
		"v2",
		"v3 cgroup2:3:4",
		"v2 cgroup2:3",
		"v2 cgroup2:3:3",             // repeated fd
		"v2 cgroup2:-1:4",            // negative fd
		"v2 cgroup2:3:99999999",      // fd out of range
		"v2 memory:3:4",              // wrong name for v2
		"v2 cgroup2:3:4 cgroup2:5:6", // two v2 hierarchies
		"v1 cpu:3:4 memory:5:6",      // missing controllers
		"v1 cpuacct,cpu:3:4 freezer:5:6 memory:7:8 pids:9:10",           // unsorted
		"v1 cpu,cpuacct:3:4 cpu:11:12 freezer:5:6 memory:7:8 pids:9:10", // repeated controller
		"v1 cpu,cpuacct:3:4 freezer:5:6 memory:7:8 pids:9:10 devices:11:12",
		"v2 cgroup2:3:4 " + strings.Repeat("x", maxSpecLen),
		"v2 cgroup2:3:4 mem=x",                 // bad budget
		"v2 cgroup2:3:4 mem=-5",                // negative budget
		"v2 cgroup2:3:4 mem=1",                 // below the minimum
		"v2 mem=100000000 cgroup2:3:4",         // budget not last
		"v2 mem=100000000",                     // no entries
		"v2 cgroup2:3:4 mem=99999999999999999", // above the maximum
	} {
		if _, _, _, err := parseSpec(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("parseSpec(%q) error = %v, want invalid argument", clip(bad), err)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	tests := []struct {
		l  Limits
		ok bool
	}{
		{Limits{}, true},
		{Limits{MemoryBytes: 64 << 20, CPUs: 1.5, Pids: 100, AgentMemoryBytes: 256 << 20, AgentPids: 64}, true},
		{Limits{MemoryBytes: -1}, false},
		{Limits{MemoryBytes: 1000}, false},
		{Limits{AgentMemoryBytes: 1 << 60}, false},
		{Limits{CPUs: -1}, false},
		{Limits{CPUs: 0.001}, false},
		{Limits{CPUs: math.NaN()}, false},
		{Limits{CPUs: math.Inf(1)}, false},
		{Limits{Pids: -5}, false},
		{Limits{AgentPids: 1 << 23}, false},
	}
	for _, tt := range tests {
		err := tt.l.Validate()
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, errdefs.ErrInvalidArgument)) {
			t.Errorf("%+v.Validate() = %v, want ok=%v", tt.l, err, tt.ok)
		}
	}
}

func TestValidName(t *testing.T) {
	for _, s := range []string{"a", "sb-1", "exec_42", "A9", strings.Repeat("x", 128)} {
		if !validName(s) {
			t.Errorf("validName(%q) = false", s)
		}
	}
	for _, s := range []string{"", ".", "..", "-a", "_a", "a.b", "a/b", "memory.max", "a b", "é", strings.Repeat("x", 129)} {
		if validName(s) {
			t.Errorf("validName(%q) = true", s)
		}
	}
}

func FuzzParseKeyed(f *testing.F) {
	f.Add([]byte("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n"), "oom_kill")
	f.Add([]byte("usage_usec 1\n"), "usage_usec")
	f.Add([]byte("oom_kill 1\noom_kill 2"), "oom_kill")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		v, found, err := parseKeyed(b, key)
		if err != nil && (found || v != 0) {
			t.Errorf("error %v with value %d found %v", err, v, found)
		}
		if !found && v != 0 {
			t.Errorf("not found but value %d", v)
		}
		_, _ = parseUint(b)
		if pids, err := parseProcs(b); err == nil && slices.Contains(pids, 0) {
			t.Errorf("parseProcs returned pid 0")
		}
	})
}

func FuzzParseMountinfo(f *testing.F) {
	f.Add(hostV1)
	f.Add(coMounted)
	f.Add(pureV2)
	f.Fuzz(func(t *testing.T, s string) {
		ms, err := parseMountinfo(strings.NewReader(s))
		if err != nil {
			return
		}
		l, err := detectLayout(ms, func(string) ([]string, error) { return v2Controllers, nil })
		if err != nil {
			return
		}
		var names []string
		for _, h := range l.hiers {
			names = append(names, h.name)
		}
		if err := checkHierNames(l.v, names); err != nil {
			t.Errorf("detected layout %+v fails checkHierNames: %v", l, err)
		}
	})
}

func FuzzParseSpec(f *testing.F) {
	f.Add("v1 cpu:3:4 cpuacct:5:6 freezer:7:8 memory:9:10 pids:11:12")
	f.Add("v2 cgroup2:3:4")
	f.Add("v2 cgroup2:3:4 mem=402653184")
	f.Fuzz(func(t *testing.T, s string) {
		v, es, budget, err := parseSpec(s)
		if err != nil {
			return
		}
		// What parses must render back to something that parses the same.
		v2, es2, budget2, err := parseSpec(formatSpec(v, es, budget))
		if err != nil || v2 != v || !slices.Equal(es, es2) || budget2 != budget {
			t.Errorf("round trip of %q: %v %v %v", s, v2, es2, err)
		}
	})
}
