//go:build linux

package cgroups

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

func TestRelOwnCgroup(t *testing.T) {
	for _, c := range []struct {
		file, root, want string
		class            error
	}{
		{"0::/\n", "/", "", nil},
		{"0::/system.slice/airlock.service\n", "/", "system.slice/airlock.service", nil},
		{"12:pids:/x\n0::/a/b\n", "/a", "b", nil},
		{"0::/a\n", "/a", "", nil},
		{"0::/ab\n", "/a", "", errdefs.ErrFailedPrecondition},         // not below /a
		{"0::/../../other\n", "/", "", errdefs.ErrFailedPrecondition}, // outside the namespace
		{"0::relative\n", "/", "", errdefs.ErrFailedPrecondition},
		{"3:memory:/x\n", "/", "", errdefs.ErrNotSupported},
	} {
		got, err := relOwnCgroup([]byte(c.file), c.root)
		if c.class != nil {
			if !errors.Is(err, c.class) {
				t.Errorf("relOwnCgroup(%q, %q) = %q, %v; want %v", c.file, c.root, got, err, c.class)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("relOwnCgroup(%q, %q) = %q, %v; want %q", c.file, c.root, got, err, c.want)
		}
	}
}

// The container shape: the daemon in a cgroup namespace whose root, the
// container's cgroup, also holds other processes. The test re-executes
// itself: "init" (started into the container's cgroup) starts a "keeper"
// and then the "daemon" in a new cgroup and mount namespace, which mounts
// its own cgroup2 and calls NewManager.
const (
	containerEnv  = "AIRLOCK_CGROUPS_TEST_CONTAINER"
	keeperPidEnv  = "AIRLOCK_CGROUPS_TEST_KEEPER"
	containerMark = "container-daemon-ok"
)

// TestNewManagerSettlesOwnCgroup: on v2, a daemon whose cgroup namespace
// root holds it and another process moves both into the leaf "init" and
// enables the controllers there, so sandboxes get their limits; a cgroup on
// the way to the parent that holds processes of others is refused with an
// error naming it, and nothing of theirs is moved.
func TestNewManagerSettlesOwnCgroup(t *testing.T) {
	requireRoot(t)
	l, err := hostLayout()
	if err != nil || l.v != V2 {
		t.Skip("needs a cgroup v2 host with the memory, pids and cpu controllers (internal/vmtest runs this suite on one)")
	}
	ct := filepath.Join(l.hiers[0].mount, fmt.Sprintf("airlock-cgtest-ct-%d", os.Getpid()))
	if err := os.Mkdir(ct, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeContainer(t, ct) })
	dir, err := os.Open(ct)
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), containerEnv+"=init")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd()), Pdeathsig: syscall.SIGKILL}
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		t.Fatalf("the container's processes did not finish in 60 s:\n%s", out)
	}
	if err != nil || !strings.Contains(string(out), containerMark) {
		t.Fatalf("container: %v\n%s", err, out)
	}
	keeper, _ := strconv.Atoi(lastField(string(out), "keeper "))
	if keeper <= 0 {
		t.Fatalf("no keeper pid in:\n%s", out)
	}
	if got := readTrim(t, filepath.Join(ct, "cgroup.procs")); got != "" {
		t.Errorf("the container's cgroup still holds %q", got)
	}
	if got := strings.Fields(readTrim(t, filepath.Join(ct, LeafName, "cgroup.procs"))); !slices.Contains(got, strconv.Itoa(keeper)) {
		t.Errorf("%s/cgroup.procs = %v, want the keeper %d moved there", LeafName, got, keeper)
	}
	sub := strings.Fields(readTrim(t, filepath.Join(ct, "cgroup.subtree_control")))
	for _, c := range v2Controllers {
		if !slices.Contains(sub, c) {
			t.Errorf("the container's cgroup.subtree_control = %v, want %s enabled", sub, c)
		}
	}
}

// containerMain runs a role of TestNewManagerSettlesOwnCgroup.
func containerMain(role string) int {
	switch role {
	case "keeper":
		time.Sleep(2 * time.Minute)
		return 0
	case "init":
		keeper := exec.Command(os.Args[0], "-test.run=^$")
		keeper.Env = append(os.Environ(), containerEnv+"=keeper")
		if err := keeper.Start(); err != nil {
			fmt.Println("keeper:", err)
			return 1
		}
		fmt.Printf("keeper %d\n", keeper.Process.Pid)
		d := exec.Command(os.Args[0], "-test.run=^$")
		d.Env = append(os.Environ(), containerEnv+"=daemon", keeperPidEnv+"="+strconv.Itoa(keeper.Process.Pid))
		d.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWCGROUP | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
		d.Stdout, d.Stderr = os.Stdout, os.Stderr
		if err := d.Run(); err != nil {
			fmt.Println("daemon:", err)
			return 1
		}
		return 0
	case "daemon":
		if err := containerDaemon(); err != nil {
			fmt.Println("daemon:", err)
			return 1
		}
		fmt.Println(containerMark)
		return 0
	}
	fmt.Println("unknown role", role)
	return 1
}

func containerDaemon() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	// The same file system cannot be mounted on its own root: replace it.
	if err := unix.Unmount("/sys/fs/cgroup", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the host's cgroup2: %w", err)
	}
	if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", 0, ""); err != nil {
		return fmt.Errorf("mount cgroup2: %w", err)
	}
	self, _ := os.ReadFile("/proc/self/cgroup")
	if strings.TrimSpace(string(self)) != "0::/" {
		return fmt.Errorf("/proc/self/cgroup = %q, want the namespace's root", self)
	}
	keeper := os.Getenv(keeperPidEnv)

	m, err := NewManager(testParent, nil)
	if err != nil {
		return fmt.Errorf("NewManager: %w", err)
	}
	if self, _ := os.ReadFile("/proc/self/cgroup"); strings.TrimSpace(string(self)) != "0::/"+LeafName {
		return fmt.Errorf("after NewManager /proc/self/cgroup = %q, want /%s", self, LeafName)
	}
	sb, err := m.Create("settled", Limits{MemoryBytes: 64 << 20, Pids: 32, CPUs: 0.5}, testOwner)
	if err != nil {
		return fmt.Errorf("Create: %w", err)
	}
	if err := sb.Arm(); err != nil {
		return fmt.Errorf("Arm: %w", err)
	}
	for file, want := range map[string]string{"work/memory.max": "67108864", "work/pids.max": "32", "cpu.max": "50000 100000"} {
		got, _ := os.ReadFile(filepath.Join("/sys/fs/cgroup", testParent, "settled", file))
		if strings.TrimSpace(string(got)) != want {
			return fmt.Errorf("%s = %q, want %s", file, got, want)
		}
	}
	if got, _ := os.ReadFile("/sys/fs/cgroup/" + LeafName + "/cgroup.procs"); !slices.Contains(strings.Fields(string(got)), keeper) {
		return fmt.Errorf("%s/cgroup.procs = %q, want the keeper %s moved there", LeafName, got, keeper)
	}
	// A cgroup on the way that holds a process of others is refused, and
	// that process stays where it is.
	if err := os.Mkdir("/sys/fs/cgroup/busy", 0o755); err != nil {
		return err
	}
	if err := os.WriteFile("/sys/fs/cgroup/busy/cgroup.procs", []byte(keeper), 0); err != nil {
		return fmt.Errorf("move the keeper into busy: %w", err)
	}
	_, err = NewManager("busy/"+testParent, nil)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "/busy holds processes that are not the daemon's") {
		return fmt.Errorf("NewManager below a busy cgroup: %v, want a precondition error naming /busy", err)
	}
	if got, _ := os.ReadFile("/sys/fs/cgroup/busy/cgroup.procs"); strings.TrimSpace(string(got)) != keeper {
		return fmt.Errorf("busy/cgroup.procs = %q, want the keeper %s left alone", got, keeper)
	}
	if err := os.WriteFile("/sys/fs/cgroup/"+LeafName+"/cgroup.procs", []byte(keeper), 0); err != nil {
		return fmt.Errorf("move the keeper back: %w", err)
	}
	_ = os.Remove("/sys/fs/cgroup/busy/" + testParent) // NewManager made the parent before it failed
	if err := os.Remove("/sys/fs/cgroup/busy"); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return sb.Remove(ctx)
}

func lastField(out, prefix string) string {
	v := ""
	for _, line := range strings.Split(out, "\n") {
		if s, ok := strings.CutPrefix(line, prefix); ok {
			v = strings.TrimSpace(s)
		}
	}
	return v
}

// removeContainer kills what is left in the container's cgroup and removes
// it, deepest first.
func removeContainer(t *testing.T, ct string) {
	_ = os.WriteFile(filepath.Join(ct, "cgroup.kill"), []byte("1"), 0)
	var dirs []string
	_ = filepath.WalkDir(ct, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	deadline := time.Now().Add(10 * time.Second)
	for i := len(dirs) - 1; i >= 0; i-- {
		for {
			err := syscall.Rmdir(dirs[i])
			if err == nil || errors.Is(err, syscall.ENOENT) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("remove %s: %v", dirs[i], err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
