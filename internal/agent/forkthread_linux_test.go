package agent

import (
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestDropToUser checks the forking thread's credentials: while dropped,
// the effective capabilities are forkCaps and the filesystem ids and groups
// the user's; after restore, exactly what they were.
func TestDropToUser(t *testing.T) {
	testutil.RequireRoot(t, "needs root")
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
	c, err := dropToUser(u, true, forkCaps)
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

// readThreadCaps returns the calling thread's capabilities.
func readThreadCaps(t *testing.T) [2]unix.CapUserData {
	t.Helper()
	var caps [2]unix.CapUserData
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	if err := unix.Capget(&hdr, &caps[0]); err != nil {
		t.Fatal(err)
	}
	return caps
}

// TestFSUIDCapabilities checks what the kernel does to the effective
// capabilities when the filesystem uid changes, which dropToUser and
// restoreIDs are written around: leaving 0 clears the filesystem
// capabilities, returning to 0 raises them again from the permitted set
// (so the forking thread must narrow them once more).
func TestFSUIDCapabilities(t *testing.T) {
	testutil.RequireRoot(t, "needs root")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	fsCaps := capsOf(unix.CAP_CHOWN, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_FOWNER, unix.CAP_FSETID)
	caps0 := readThreadCaps(t)
	if caps0[0].Effective&fsCaps[0] != fsCaps[0] {
		t.Skipf("the test process lacks the filesystem capabilities (effective %#x)", caps0[0].Effective)
	}
	if err := setFSIDs(1234, 2345); err != nil {
		t.Fatal(err)
	}
	dropped := readThreadCaps(t)
	if err := setFSIDs(0, 0); err != nil {
		t.Fatal(err)
	}
	back := readThreadCaps(t)
	if dropped[0].Effective&fsCaps[0] != 0 {
		t.Errorf("fsuid 1234 kept filesystem capabilities: effective %#x", dropped[0].Effective)
	}
	if dropped[0].Effective&(1<<unix.CAP_SETUID) == 0 {
		t.Errorf("fsuid 1234 cleared CAP_SETUID too: effective %#x", dropped[0].Effective)
	}
	if back != caps0 {
		t.Errorf("after fsuid 0 again: %+v, was %+v", back, caps0)
	}

	// restoreIDs (the forking thread's ids back, capabilities narrowed)
	// undoes that raise.
	c, err := dropToUser(User{Name: "probe", UID: 1234, GID: 2345}, true, forkCaps)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.restoreIDs(); err != nil {
		t.Fatal(err)
	}
	mid := readThreadCaps(t)
	if err := c.restore(); err != nil {
		t.Fatal(err)
	}
	if mid[0].Effective != forkCaps[0]&caps0[0].Effective || mid[1].Effective != 0 {
		t.Errorf("effective after restoreIDs: %#x %#x, want only CAP_SETUID|CAP_SETGID", mid[0].Effective, mid[1].Effective)
	}
	if got := readThreadCaps(t); got != caps0 {
		t.Errorf("after restore: %+v, was %+v", got, caps0)
	}

	// A file operation's thread keeps nothing for a user, the bounding
	// set for root.
	for _, tc := range []struct {
		u    User
		keep capMask
	}{{User{Name: "user", UID: 1000, GID: 1000}, capMask{}}, {User{Name: "root"}, boundingCaps()}} {
		c, err := dropToUser(tc.u, true, tc.keep)
		if err != nil {
			t.Fatal(err)
		}
		got := readThreadCaps(t)
		fsuid, _ := unix.SetfsuidRetUid(-1)
		if err := c.restore(); err != nil {
			t.Fatal(err)
		}
		if got[0].Effective != tc.keep[0]&caps0[0].Effective || got[1].Effective != tc.keep[1]&caps0[1].Effective || fsuid != int(tc.u.UID) {
			t.Errorf("%s: effective %#x %#x fsuid %d, want %#x %#x fsuid %d", tc.u.Name, got[0].Effective, got[1].Effective, fsuid,
				tc.keep[0]&caps0[0].Effective, tc.keep[1]&caps0[1].Effective, tc.u.UID)
		}
		if back := readThreadCaps(t); back != caps0 {
			t.Errorf("%s: after restore %+v, was %+v", tc.u.Name, back, caps0)
		}
	}
}
