//go:build linux

package agent

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fsError is a failed file operation on a sandbox path. Its message names
// the operation and the sandbox path (never the host path of Root) and its
// class is one of errdefs, so toConnect maps it onto an RPC code.
type fsError struct {
	op    string // "stat", "write", ...
	path  string // absolute sandbox path
	err   error  // usually a unix.Errno
	class error  // an errdefs class
}

func (e *fsError) Error() string {
	return e.op + " " + e.path + ": " + e.err.Error()
}

// Unwrap exposes both the class (for errdefs.Class) and the cause.
func (e *fsError) Unwrap() []error { return []error{e.class, e.err} }

// fsErr wraps err, the result of operation op on the sandbox path p.
// Errors that already carry a class (an fsError or an errdefs-wrapped
// error) are returned unchanged.
func fsErr(op, p string, err error) error {
	if err == nil {
		return nil
	}
	var fe *fsError
	if errors.As(err, &fe) {
		return err
	}
	if c := errdefs.Class(err); c != errdefs.ErrInternal {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return &fsError{op: op, path: p, err: errors.New("failed"), class: errdefs.ErrInternal}
	}
	var cause error = errno
	if errno == unix.ENOSPC || errno == unix.EDQUOT {
		cause = fmt.Errorf("%w: %s", errno, diskFullAdvice)
	}
	return &fsError{op: op, path: p, err: cause, class: fsErrnoClass(errno)}
}

// diskFullAdvice follows "no space left on device" in errors: the
// sandbox's files live on its own disk, sized by its disk limit.
const diskFullAdvice = "the sandbox's disk is full; delete files, or create the sandbox with a larger disk limit (limits.disk_mb)"

// fsInvalid reports a request that cannot apply to the sandbox path p.
func fsInvalid(op, p, why string) error {
	return &fsError{op: op, path: p, err: errors.New(why), class: errdefs.ErrInvalidArgument}
}

// fsErrnoClass maps an errno onto an error class.
//
// The choice between InvalidArgument and FailedPrecondition: errors that
// follow from the request itself (a path through a file, a directory where
// a file is needed, a symlink loop, an over-long name) are
// InvalidArgument; errors that depend on state that may change (a
// directory that is not empty, a busy mount point, a cross-device move)
// are FailedPrecondition. A full disk (or a file larger than it) is
// FailedPrecondition too, not ResourceExhausted (429, which clients retry
// on their own): it stays full until the caller deletes files.
func fsErrnoClass(errno unix.Errno) error {
	switch errno {
	case unix.ENOENT:
		return errdefs.ErrNotFound
	case unix.EEXIST:
		return errdefs.ErrAlreadyExists
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return errdefs.ErrPermissionDenied
	case unix.ENOSPC, unix.EDQUOT, unix.EFBIG:
		return errdefs.ErrFailedPrecondition
	case unix.EMFILE, unix.ENFILE, unix.ENOMEM, unix.EMLINK:
		return errdefs.ErrResourceExhausted
	case unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.ENAMETOOLONG, unix.EINVAL:
		return errdefs.ErrInvalidArgument
	case unix.ENOTEMPTY, unix.EBUSY, unix.EXDEV, unix.ETXTBSY:
		return errdefs.ErrFailedPrecondition
	case unix.EAGAIN:
		return errdefs.ErrUnavailable
	case unix.EOPNOTSUPP, unix.ENOSYS:
		return errdefs.ErrNotSupported
	}
	return errdefs.ErrInternal
}

// errFSClosed is returned once the file service has been closed.
var errFSClosed = fmt.Errorf("file service is closed: %w", errdefs.ErrUnavailable)
