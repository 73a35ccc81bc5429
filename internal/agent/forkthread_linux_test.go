package agent

import (
	"os"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestDropToUser checks the forking thread's credentials: while dropped,
// the effective capabilities are forkCaps and the filesystem ids and groups
// the user's; after restore, exactly what they were.
func TestDropToUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	read := func() (caps [2]unix.CapUserData, fsuid, fsgid int, groups []int) {
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		if err := unix.Capget(&hdr, &caps[0]); err != nil {
			t.Fatal(err)
		}
		fsuid, _ = unix.SetfsuidRetUid(-1)
		fsgid, _ = unix.SetfsgidRetGid(-1)
		groups, err := unix.Getgroups()
		if err != nil {
			t.Fatal(err)
		}
		return caps, fsuid, fsgid, groups
	}
	caps0, uid0, gid0, groups0 := read()
	u := User{Name: "probe", UID: 1234, GID: 2345, Groups: []uint32{50, 60}}
	c, err := dropToUser(u, true)
	if err != nil {
		t.Fatal(err)
	}
	caps, fsuid, fsgid, groups := read()
	want := uint32(1<<unix.CAP_SETGID | 1<<unix.CAP_SETUID)
	if caps[0].Effective != want&caps0[0].Effective || caps[1].Effective != 0 {
		t.Errorf("effective capabilities while dropped: %#x %#x, want %#x", caps[0].Effective, caps[1].Effective, want)
	}
	if caps[0].Permitted != caps0[0].Permitted {
		t.Errorf("permitted set changed: %#x, was %#x", caps[0].Permitted, caps0[0].Permitted)
	}
	if fsuid != 1234 || fsgid != 2345 || !slices.Equal(groups, []int{50, 60}) {
		t.Errorf("while dropped: fsuid %d fsgid %d groups %v", fsuid, fsgid, groups)
	}
	// Another thread keeps its credentials.
	done := make(chan []int)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		_, u, g, _ := read()
		done <- []int{u, g}
	}()
	if other := <-done; other[0] != uid0 || other[1] != gid0 {
		t.Errorf("another thread has fsuid/fsgid %v", other)
	}
	if err := c.restore(); err != nil {
		t.Fatal(err)
	}
	caps1, uid1, gid1, groups1 := read()
	if caps1 != caps0 || uid1 != uid0 || gid1 != gid0 || !slices.Equal(groups1, groups0) {
		t.Errorf("after restore: %+v %d %d %v, was %+v %d %d %v", caps1, uid1, gid1, groups1, caps0, uid0, gid0, groups0)
	}
}
