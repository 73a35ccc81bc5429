package agentclient

import (
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// fromConnect maps a Connect error from the agent onto an errdefs class,
// keeping the agent's message. This is the one place agent RPC codes become
// error classes.
func fromConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("agent: %w: %v", errdefs.ErrUnavailable, err)
	}
	var class error
	switch ce.Code() {
	case connect.CodeNotFound:
		class = errdefs.ErrNotFound
	case connect.CodeAlreadyExists:
		class = errdefs.ErrAlreadyExists
	case connect.CodeInvalidArgument, connect.CodeOutOfRange:
		class = errdefs.ErrInvalidArgument
	case connect.CodePermissionDenied, connect.CodeUnauthenticated:
		class = errdefs.ErrPermissionDenied
	case connect.CodeResourceExhausted:
		class = errdefs.ErrResourceExhausted
	case connect.CodeFailedPrecondition:
		class = errdefs.ErrFailedPrecondition
	case connect.CodeUnavailable:
		class = errdefs.ErrUnavailable
	case connect.CodeDeadlineExceeded:
		class = errdefs.ErrTimeout
	case connect.CodeCanceled:
		class = errdefs.ErrCanceled
	case connect.CodeUnimplemented:
		class = errdefs.ErrNotSupported
	default:
		class = errdefs.ErrInternal
	}
	return fmt.Errorf("%w: %s", class, ce.Message())
}
