package agent

import (
	"errors"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// toConnect maps an error class onto a Connect error. This is the one place
// in the agent where error classes become RPC codes. Messages must be short
// and must not reveal host details.
func toConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	code := connect.CodeInternal
	switch errdefs.Class(err) {
	case errdefs.ErrNotFound:
		code = connect.CodeNotFound
	case errdefs.ErrAlreadyExists:
		code = connect.CodeAlreadyExists
	case errdefs.ErrInvalidArgument:
		code = connect.CodeInvalidArgument
	case errdefs.ErrPermissionDenied:
		code = connect.CodePermissionDenied
	case errdefs.ErrResourceExhausted:
		code = connect.CodeResourceExhausted
	case errdefs.ErrFailedPrecondition:
		code = connect.CodeFailedPrecondition
	case errdefs.ErrUnavailable:
		code = connect.CodeUnavailable
	case errdefs.ErrTimeout:
		code = connect.CodeDeadlineExceeded
	case errdefs.ErrCanceled:
		code = connect.CodeCanceled
	case errdefs.ErrNotSupported:
		code = connect.CodeUnimplemented
	}
	return connect.NewError(code, err)
}
