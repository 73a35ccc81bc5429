package confine

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// Landlock access rights by the ABI version that introduced them.
const (
	llRightsABI1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG | unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	llRefer    = unix.LANDLOCK_ACCESS_FS_REFER                                         // ABI 2
	llTruncate = unix.LANDLOCK_ACCESS_FS_TRUNCATE                                      // ABI 3
	llIoctlDev = unix.LANDLOCK_ACCESS_FS_IOCTL_DEV                                     // ABI 5
	llScopes   = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL // ABI 6

	// llFileRights are the rights that apply to a file (as opposed to a
	// directory); a rule on a file may only carry these.
	llFileRights = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE | llTruncate | llIoctlDev

	// What each kind of Policy entry grants (before masking by ABI).
	llReadOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR
	llWritable = (llRightsABI1 | llRefer | llTruncate) &^
		(unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK)
	llDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | llTruncate | llIoctlDev
)

// llHandled returns the filesystem rights a ruleset for abi handles (denies
// unless a rule grants them). Network rights are never handled: the sandbox
// has its own network namespace.
func llHandled(abi int) uint64 {
	h := uint64(llRightsABI1)
	if abi >= 2 {
		h |= llRefer
	}
	if abi >= 3 {
		h |= llTruncate
	}
	if abi >= 5 {
		h |= llIoctlDev
	}
	return h
}

// LandlockABI reports the kernel's Landlock ABI version, 0 when Landlock is
// not built in or disabled at boot. Apply uses at most ABI 7; a newer
// kernel is used at that level. It changes nothing: host checks call it.
func LandlockABI() (int, error) { return landlockABI() }

// landlockABI returns the kernel's Landlock ABI version, 0 when Landlock is
// not built in or disabled at boot.
func landlockABI() (int, error) {
	r, _, e := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch e {
	case 0:
		return int(r), nil
	case syscall.ENOSYS, syscall.EOPNOTSUPP:
		return 0, nil
	}
	return 0, fmt.Errorf("confine: landlock ABI version: %v: %w", e, errdefs.ErrInternal)
}

// landlockRuleset is a prepared, not yet enforced, ruleset.
type landlockRuleset struct {
	fd      int // -1 when Landlock is unavailable
	abi     int
	missing []string
}

// close releases the ruleset descriptor. Safe to call twice.
func (r *landlockRuleset) close() {
	if r.fd >= 0 {
		_ = syscall.Close(r.fd)
		r.fd = -1
	}
}

// prepareLandlock builds the ruleset for p without enforcing it.
func prepareLandlock(p Policy) (*landlockRuleset, error) {
	abi, err := landlockABI()
	if err != nil {
		return nil, err
	}
	if abi < p.MinLandlockABI {
		return nil, fmt.Errorf("confine: kernel Landlock ABI %d, need %d: %w", abi, p.MinLandlockABI, errdefs.ErrNotSupported)
	}
	rs := &landlockRuleset{fd: -1, abi: min(abi, maxLandlockABI)}
	if rs.abi == 0 {
		return rs, nil
	}
	handled := llHandled(rs.abi)
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handled}
	if rs.abi >= 6 {
		attr.Scoped = llScopes
	}
	fd, _, e := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr), 0)
	if e != 0 {
		return nil, fmt.Errorf("confine: create landlock ruleset: %v: %w", e, errdefs.ErrInternal)
	}
	rs.fd = int(fd)
	ok := false
	defer func() {
		if !ok {
			rs.close()
		}
	}()

	add := func(paths []string, rights uint64) error {
		for _, path := range paths {
			pfd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
			if errors.Is(err, unix.ENOENT) {
				rs.missing = append(rs.missing, path)
				continue
			}
			if err != nil {
				return fmt.Errorf("confine: open %s: %v: %w", path, err, errdefs.ErrInvalidArgument)
			}
			err = rs.addRule(pfd, rights&handled)
			_ = unix.Close(pfd)
			if err != nil {
				return fmt.Errorf("confine: landlock rule for %s: %w", path, err)
			}
		}
		return nil
	}
	if err := add(p.ReadOnly, llReadOnly); err != nil {
		return nil, err
	}
	if err := add(p.Writable, llWritable); err != nil {
		return nil, err
	}
	if err := add(p.DevicePaths, llDevice); err != nil {
		return nil, err
	}
	for _, wfd := range p.WritableFDs {
		var st unix.Stat_t
		if err := unix.Fstat(wfd, &st); err != nil {
			return nil, fmt.Errorf("confine: writable fd %d: %v: %w", wfd, err, errdefs.ErrInvalidArgument)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, fmt.Errorf("confine: writable fd %d is not a directory: %w", wfd, errdefs.ErrInvalidArgument)
		}
		if err := rs.addRule(wfd, llWritable&handled); err != nil {
			return nil, fmt.Errorf("confine: landlock rule for fd %d: %w", wfd, err)
		}
	}
	ok = true
	return rs, nil
}

// addRule grants rights beneath the file or directory fd refers to; rights
// that only make sense for directories are dropped for other files.
func (r *landlockRuleset) addRule(fd int, rights uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		rights &= llFileRights
	}
	if rights == 0 {
		return nil
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: rights, Parent_fd: int32(fd)}
	_, _, e := syscall.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(r.fd), unix.LANDLOCK_RULE_PATH_BENEATH,
		uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if e != 0 {
		return fmt.Errorf("landlock_add_rule: %v: %w", e, errdefs.ErrInvalidArgument)
	}
	return nil
}

// enforce restricts every thread of the process to the ruleset. The caller
// must have set no_new_privs on every thread.
func (r *landlockRuleset) enforce() error {
	if r.fd < 0 {
		return nil
	}
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(r.fd), 0, 0); e != 0 {
		return fmt.Errorf("confine: landlock_restrict_self: %v: %w", e, errdefs.ErrInternal)
	}
	return nil
}
