//go:build linux

package agent

import (
	"errors"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// TestFsErrDiskFull: a full disk is a failed precondition (409), which
// clients do not retry on their own, and says what to do; errors that may
// pass keep resource exhausted (429). Issue 22, finding 3.
func TestFsErrDiskFull(t *testing.T) {
	for _, tc := range []struct {
		errno unix.Errno
		class error
		text  string
	}{
		{unix.ENOSPC, errdefs.ErrFailedPrecondition, "write /tmp/f: no space left on device: the sandbox's disk is full; delete files"},
		{unix.EDQUOT, errdefs.ErrFailedPrecondition, "the sandbox's disk is full"},
		{unix.EFBIG, errdefs.ErrFailedPrecondition, "write /tmp/f: file too large"},
		{unix.EMFILE, errdefs.ErrResourceExhausted, "write /tmp/f: too many open files"},
		{unix.ENOMEM, errdefs.ErrResourceExhausted, "write /tmp/f: cannot allocate memory"},
	} {
		err := fsErr("write", "/tmp/f", tc.errno)
		if errdefs.Class(err) != tc.class || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%v: %q (class %v), want class %v and %q", tc.errno, err, errdefs.Class(err), tc.class, tc.text)
		}
		if !errors.Is(err, tc.errno) {
			t.Errorf("%v: the errno is lost from %q", tc.errno, err)
		}
	}
}
