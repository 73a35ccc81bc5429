package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The container shape (AIRLOCK_E2E_SHAPE=container, cgroup v2 only): each
// env's daemons start the way a container runtime starts a container's
// process, in a cgroup C of their own that another process (the keeper,
// standing for the container's init) also holds, in a cgroup namespace
// rooted at C, with a fresh cgroup2 mounted at /sys/fs/cgroup in a private
// mount namespace. The daemon sees C as "/" and puts its sandboxes under
// C/airlock, which no other daemon sees: no bind mount is needed.
//
// On the host, C is <v2 mount>/<cgroupName>-ctr/<env>/ctr: <env> is C's
// parent, whose cgroup.subtree_control gives C its controllers (an env may
// withhold some, to test that the daemon refuses such a host).
//
// A restarted daemon starts where the keeper is and joins the keeper's
// cgroup namespace, as a process the container's init starts would: at
// first that is C itself; once a daemon has moved C's processes into a leaf
// (the kernel lets C enable controllers for its children only while it
// holds no process), it is that leaf.

// Environment of the keeper (the test binary re-executed) and of the
// daemon wrapper in the container shape.
const (
	keeperEnv   = "E2E_KEEPER"        // set to 1: be the keeper
	wrapCgnsEnv = "E2E_WRAP_CGROUPNS" // the keeper's cgroup namespace, to join
)

// containerControllers are the controllers a container's parent gives it,
// when the kernel offers them.
var containerControllers = []string{"cpu", "memory", "pids", "io"}

// containerRoot is the host cgroup (relative to the v2 mount) under which
// each env of the container shape gets its own.
func containerRoot() string { return cgroupName + "-ctr" }

// keeperMain is the keeper: it holds its cgroup until its stdin closes
// (the test ends it, or the test binary died).
func keeperMain() int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	return 0
}

// v2Mount returns the cgroup2 mount point, failing on a host with cgroup
// v1 hierarchies: the container shape is a v2 one.
func v2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	var v1, v2 []string
	for _, l := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(l, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 1 {
			continue
		}
		switch g[0] {
		case "cgroup":
			v1 = append(v1, f[4])
		case "cgroup2":
			if f[3] == "/" {
				v2 = append(v2, f[4])
			}
		}
	}
	switch {
	case len(v1) > 0:
		return "", fmt.Errorf("this host mounts cgroup v1 hierarchies (%s); the container shape needs a cgroup v2-only host", strings.Join(v1, " "))
	case len(v2) == 0:
		return "", errors.New("no cgroup2 hierarchy is mounted at its root")
	}
	return v2[0], nil
}

// enableControllers turns on, in dir's cgroup.subtree_control, those of
// want that dir's cgroup.controllers offers.
func enableControllers(dir string, want []string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return err
	}
	avail := strings.Fields(string(b))
	for _, c := range want {
		if !slices.Contains(avail, c) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
			return fmt.Errorf("enable %s in %s: %w", c, dir, err)
		}
	}
	return nil
}

// container is an env's cgroup C and its keeper.
type container struct {
	parent string // C's parent on the host: its subtree_control gives C its controllers
	dir    string // C on the host
	keeper *exec.Cmd
	stdin  *os.File // the keeper's stdin; closing it ends the keeper
	done   chan struct{}
}

// newContainer makes C under a parent of its own that gives it the
// controllers in give, and starts the keeper in a new cgroup namespace
// rooted at C.
func newContainer(name string, give []string) (*container, error) {
	mnt, err := v2Mount()
	if err != nil {
		return nil, err
	}
	if err := setupContainerRoot(); err != nil {
		return nil, err
	}
	c := &container{parent: filepath.Join(mnt, containerRoot(), name)}
	c.dir = filepath.Join(c.parent, "ctr")
	if err := os.Mkdir(c.parent, 0o755); err != nil {
		return nil, err
	}
	if err := enableControllers(c.parent, give); err != nil {
		c.remove()
		return nil, err
	}
	if err := os.Mkdir(c.dir, 0o755); err != nil {
		c.remove()
		return nil, err
	}
	self, err := os.Executable()
	if err != nil {
		c.remove()
		return nil, err
	}
	fd, err := unix.Open(c.dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		c.remove()
		return nil, err
	}
	defer unix.Close(fd)
	pr, pw, err := os.Pipe()
	if err != nil {
		c.remove()
		return nil, err
	}
	defer pr.Close()
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), keeperEnv+"=1")
	cmd.Stdin = pr
	// Born in C (clone3 with CLONE_INTO_CGROUP), then a cgroup namespace
	// of its own, whose root is therefore C.
	cmd.SysProcAttr = &syscall.SysProcAttr{
		UseCgroupFD:  true,
		CgroupFD:     fd,
		Unshareflags: syscall.CLONE_NEWCGROUP,
		Setsid:       true,
		Pdeathsig:    syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		pw.Close()
		c.remove()
		return nil, fmt.Errorf("start the keeper in %s: %w", c.dir, err)
	}
	keepers.Store(cmd.Process.Pid, true)
	c.keeper, c.stdin, c.done = cmd, pw, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		keepers.Delete(cmd.Process.Pid)
		close(c.done)
	}()
	return c, nil
}

// keeperCgroup returns the keeper's cgroup directory on the host: where a
// daemon starts.
func (c *container) keeperCgroup() (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", c.keeper.Process.Pid))
	if err != nil {
		return "", fmt.Errorf("the keeper's cgroup: %w", err)
	}
	rel, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if !ok || !strings.HasPrefix(rel, "/") || strings.Contains(rel, "..") {
		return "", fmt.Errorf("the keeper's cgroup: unexpected %q", b)
	}
	mnt, err := v2Mount()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(mnt, rel)
	if dir != c.dir && !strings.HasPrefix(dir, c.dir+"/") {
		return "", fmt.Errorf("the keeper left its container: it is in %s", dir)
	}
	return dir, nil
}

// prepare sets cmd up to run the daemon wrapper in c: born in the keeper's
// cgroup, told to join the keeper's cgroup namespace. The returned func
// releases what cmd.Start needed.
func (c *container) prepare(cmd *exec.Cmd) (release func(), err error) {
	dir, err := c.keeperCgroup()
	if err != nil {
		return nil, err
	}
	fd, err := unix.Open(dir, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr.UseCgroupFD = true
	cmd.SysProcAttr.CgroupFD = fd
	cmd.Env = append(cmd.Env, fmt.Sprintf("%s=/proc/%d/ns/cgroup", wrapCgnsEnv, c.keeper.Process.Pid))
	return func() { unix.Close(fd) }, nil
}

// check verifies that the process pid (a daemon that serves) runs in c
// as promised: in the keeper's cgroup namespace, not the test's, and in C
// or a cgroup below it.
func (c *container) check(pid int) error {
	ns := func(p string) (string, error) { return os.Readlink(filepath.Join("/proc", p, "ns", "cgroup")) }
	mine, err := ns("self")
	if err != nil {
		return err
	}
	keeper, err := ns(strconv.Itoa(c.keeper.Process.Pid))
	if err != nil {
		return err
	}
	its, err := ns(strconv.Itoa(pid))
	if err != nil {
		return err
	}
	if its != keeper || its == mine {
		return fmt.Errorf("daemon %d is in cgroup namespace %s; the keeper's is %s, the test's %s", pid, its, keeper, mine)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	mnt, err := v2Mount()
	if err != nil {
		return err
	}
	rel, _ := strings.CutPrefix(strings.TrimSpace(string(b)), "0::")
	if dir := filepath.Join(mnt, rel); dir != c.dir && !strings.HasPrefix(dir, c.dir+"/") {
		return fmt.Errorf("daemon %d is in the cgroup %s, outside its container %s", pid, dir, c.dir)
	}
	return nil
}

// sandboxParent is the host directory of the daemons' cgroup parent.
func (c *container) sandboxParent() string { return filepath.Join(c.dir, cgroupParent) }

// remove ends the keeper, then removes C and its parent. It returns what
// it found left behind: a process in C's tree once the keeper is gone, or
// a cgroup it could not remove. What it finds it kills.
func (c *container) remove() []string {
	var problems []string
	if c.keeper != nil {
		c.stdin.Close()
		select {
		case <-c.done:
		case <-time.After(killTimeout):
			problems = append(problems, fmt.Sprintf("the keeper %d did not exit when its stdin closed", c.keeper.Process.Pid))
			_ = c.keeper.Process.Kill()
			<-c.done
		}
	}
	dirs := cgroupTree(c.parent)
	deadline := time.Now().Add(10 * time.Second)
	for first := true; ; first = false {
		var left []string
		for _, d := range dirs {
			b, _ := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			for _, f := range strings.Fields(string(b)) {
				pid, err := strconv.Atoi(f)
				if err != nil {
					continue
				}
				left = append(left, f)
				if first {
					cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
					problems = append(problems, fmt.Sprintf("process %d (%s) left in %s", pid,
						strings.TrimSpace(strings.ReplaceAll(string(cmdline), "\x00", " ")), d))
				}
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	slices.Reverse(dirs) // children first
	for _, d := range dirs {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			problems = append(problems, fmt.Sprintf("cgroup %s: %v", d, err))
		}
	}
	return problems
}

// cgroupTree lists root and the cgroups below it, parents first.
func cgroupTree(root string) []string {
	var dirs []string
	_ = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	return dirs
}

// wrapContainer is the daemon wrapper's part in the container shape, run
// in the fresh private mount namespace before the exec: it joins the
// keeper's cgroup namespace (nsPath) and mounts a cgroup2 of that
// namespace at /sys/fs/cgroup in place of the host's. Both act on the
// calling thread, which the exec then keeps: it stays locked.
func wrapContainer(nsPath string) error {
	runtime.LockOSThread()
	fd, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = unix.Setns(fd, unix.CLONE_NEWCGROUP)
	unix.Close(fd)
	if err != nil {
		return fmt.Errorf("join the cgroup namespace %s: %w", nsPath, err)
	}
	if err := unix.Unmount("/sys/fs/cgroup", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("unmount the host's /sys/fs/cgroup: %w", err)
	}
	if err := unix.Mount("cgroup2", "/sys/fs/cgroup", "cgroup2", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_RELATIME, ""); err != nil {
		return fmt.Errorf("mount cgroup2 at /sys/fs/cgroup: %w", err)
	}
	return nil
}
