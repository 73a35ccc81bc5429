// Package errdefs defines Airlock's closed set of error classes.
//
// Every error that crosses a package boundary wraps exactly one of these
// sentinels with context, for example
//
//	fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
//
// and callers test the class with errors.Is. The mapping from classes to HTTP
// status codes and Connect codes lives in one place each (HTTP here, which
// the API and the tool gateway answer with, and the agent's RPC layer);
// nothing else inspects error strings.
package errdefs

import (
	"errors"
	"fmt"
)

// The error classes. The set is closed: add a class only together with its
// HTTP and Connect mappings.
var (
	ErrNotFound           = errors.New("not found")
	ErrAlreadyExists      = errors.New("already exists")
	ErrInvalidArgument    = errors.New("invalid argument")
	ErrUnauthenticated    = errors.New("unauthenticated")
	ErrPermissionDenied   = errors.New("permission denied")
	ErrResourceExhausted  = errors.New("resource exhausted")
	ErrFailedPrecondition = errors.New("failed precondition")
	ErrUnavailable        = errors.New("unavailable")
	ErrTimeout            = errors.New("timeout")
	ErrCanceled           = errors.New("canceled")
	ErrNotSupported       = errors.New("not supported")
	ErrInternal           = errors.New("internal error")
)

// classes lists every class, in the order Class reports them.
var classes = []error{
	ErrNotFound, ErrAlreadyExists, ErrInvalidArgument, ErrUnauthenticated, ErrPermissionDenied,
	ErrResourceExhausted, ErrFailedPrecondition, ErrUnavailable, ErrTimeout,
	ErrCanceled, ErrNotSupported, ErrInternal,
}

// Classes returns every class, in the order Class reports them.
func Classes() []error { return append([]error(nil), classes...) }

// Class returns the class sentinel that err wraps, or ErrInternal when err
// wraps none of them. Class(nil) is nil.
func Class(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return ErrInternal
}

// Public is an error whose message is written for the API's callers and
// holds no host detail, so that it is shown whatever its class: the
// messages of unavailable and internal errors are otherwise replaced by
// a fixed text, since they may name host paths or addresses.
type Public struct {
	Msg   string
	Class error // one of the classes
}

func (p *Public) Error() string { return p.Msg + ": " + p.Class.Error() }

// Unwrap returns the class.
func (p *Public) Unwrap() error { return p.Class }

// Publicf returns a Public error of class with the formatted message.
func Publicf(class error, format string, args ...any) error {
	return &Public{Msg: fmt.Sprintf(format, args...), Class: class}
}

// PublicMessage returns the message of the Public error err wraps, if any.
func PublicMessage(err error) (string, bool) {
	var p *Public
	if errors.As(err, &p) {
		return p.Msg, true
	}
	return "", false
}
