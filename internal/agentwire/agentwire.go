// Package agentwire is what both ends of the agent socket share: the
// HTTP/2 settings and the one mapping between error classes and Connect
// codes, in both directions (as containerd's errgrpc does for gRPC). The
// agent (internal/agent) and its client (internal/agentclient) import it;
// neither imports the other.
package agentwire

import (
	"errors"
	"fmt"
	"net/http"

	"connectrpc.com/connect"

	"github.com/airlock-sandbox/airlock/internal/errdefs"
)

// HTTP2Config is the HTTP/2 configuration of both ends of the agent
// socket. The defaults are made for the internet: 16 KiB frames and small
// flow-control windows cost a 1 MiB file hundreds of frames, system calls
// and window updates. On a local socket large frames and windows cost
// nothing; memory stays bounded by the per-stream window.
func HTTP2Config() *http.HTTP2Config {
	return &http.HTTP2Config{
		MaxReadFrameSize:              1 << 20,
		MaxReceiveBufferPerStream:     4 << 20,
		MaxReceiveBufferPerConnection: 16 << 20,
	}
}

// codes maps each error class to its Connect code; FromConnect inverts it.
var codes = []struct {
	class error
	code  connect.Code
}{
	{errdefs.ErrNotFound, connect.CodeNotFound},
	{errdefs.ErrAlreadyExists, connect.CodeAlreadyExists},
	{errdefs.ErrInvalidArgument, connect.CodeInvalidArgument},
	{errdefs.ErrUnauthenticated, connect.CodeUnauthenticated},
	{errdefs.ErrPermissionDenied, connect.CodePermissionDenied},
	{errdefs.ErrResourceExhausted, connect.CodeResourceExhausted},
	{errdefs.ErrFailedPrecondition, connect.CodeFailedPrecondition},
	{errdefs.ErrUnavailable, connect.CodeUnavailable},
	{errdefs.ErrTimeout, connect.CodeDeadlineExceeded},
	{errdefs.ErrCanceled, connect.CodeCanceled},
	{errdefs.ErrNotSupported, connect.CodeUnimplemented},
	{errdefs.ErrInternal, connect.CodeInternal},
}

// ToConnect maps err onto a Connect error with its class's code, keeping
// its message (which the agent keeps short and free of host details). A
// Connect error passes through.
func ToConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	class := errdefs.Class(err)
	for _, c := range codes {
		if c.class == class {
			return connect.NewError(c.code, err)
		}
	}
	return connect.NewError(connect.CodeInternal, err)
}

// FromConnect maps a Connect error from the agent onto its error class,
// keeping the agent's message. Codes the agent does not send map to their
// nearest class. An error that is not a Connect error (the connection
// failed) is unavailable.
func FromConnect(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return fmt.Errorf("agent: %w: %v", errdefs.ErrUnavailable, err)
	}
	class := errdefs.ErrInternal
	switch code := ce.Code(); code {
	case connect.CodeOutOfRange:
		class = errdefs.ErrInvalidArgument
	case connect.CodeAborted:
		class = errdefs.ErrFailedPrecondition
	default:
		for _, c := range codes {
			if c.code == code {
				class = c.class
				break
			}
		}
	}
	return fmt.Errorf("%w: %s", class, ce.Message())
}
