package agent

import (
	"errors"
	"os"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// openPty opens a pseudo-terminal of size sz. The terminal (tty) is for the
// child. The master (ptmx) is returned non-blocking so that the poller can
// interrupt its reads and writes: pty.Open leaves it blocking, so it is
// replaced by a close-on-exec duplicate.
func openPty(sz ptySize) (ptmx, tty *os.File, err error) {
	m, s, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()
	if err := pty.Setsize(s, &pty.Winsize{Rows: sz.rows, Cols: sz.cols}); err != nil {
		_ = m.Close()
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	_ = m.Close()
	if err != nil {
		return nil, nil, err
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "ptmx"), s, nil
}

// resizePty sets the size of the terminal whose master is ptmx; the kernel
// sends SIGWINCH to its foreground process group.
func resizePty(ptmx *os.File, sz ptySize) error {
	rc, err := ptmx.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	err = rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: sz.rows, Col: sz.cols})
	})
	return errors.Join(err, ierr)
}
