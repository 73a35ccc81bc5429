package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// bootNow reads CLOCK_BOOTTIME: time since boot, suspends included. No
// process in a sandbox can set it (see deadline).
func bootNow() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		panic(fmt.Sprintf("clock_gettime(CLOCK_BOOTTIME): %v", err)) // cannot fail on Linux >= 2.6.39
	}
	return time.Duration(ts.Nano())
}

// alarm is a timerfd on CLOCK_BOOTTIME. Its descriptor is non-blocking,
// so a goroutine waiting for it is parked in the Go netpoller, not on an
// OS thread.
type alarm struct{ f *os.File }

func newAlarm() (*alarm, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_BOOTTIME, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	return &alarm{f: os.NewFile(uintptr(fd), "deadline")}, nil
}

// arm makes the alarm go off at at, a bootNow reading (at once if that has
// passed), replacing any earlier setting.
func (a *alarm) arm(at time.Duration) error {
	if at <= 0 {
		at = 1 // a zero it_value would disarm
	}
	return a.settime(unix.ItimerSpec{Value: unix.NsecToTimespec(int64(at))}, unix.TFD_TIMER_ABSTIME)
}

// disarm stops the alarm.
func (a *alarm) disarm() error { return a.settime(unix.ItimerSpec{}, 0) }

func (a *alarm) settime(v unix.ItimerSpec, flags int) error {
	rc, err := a.f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = unix.TimerfdSettime(int(fd), flags, &v, nil) }); err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("timerfd_settime: %w", serr)
	}
	return nil
}

// wait returns once the alarm has gone off, or with an error once it is
// closed.
func (a *alarm) wait() error {
	var b [8]byte
	for {
		n, err := a.f.Read(b[:])
		if err != nil {
			return err
		}
		if n == 8 && binary.NativeEndian.Uint64(b[:]) > 0 {
			return nil
		}
		if n != 8 {
			return fmt.Errorf("timerfd read of %d bytes: %w", n, io.ErrUnexpectedEOF)
		}
	}
}

// close releases the timer; a wait in progress returns an error.
func (a *alarm) close() error {
	if err := a.f.Close(); err != nil && !errors.Is(err, os.ErrClosed) {
		return err
	}
	return nil
}
