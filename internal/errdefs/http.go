package errdefs

import (
	"net/http"
	"strings"
)

// StatusClientClosedRequest is the status of a request whose client went
// away (ErrCanceled): logged, never seen by a client.
const StatusClientClosedRequest = 499

// HTTP is the one mapping of an error to the HTTP status, the public
// code (one of package api's Code* constants, which this package cannot
// import: its test checks they agree) and the message an HTTP answer carries: the REST API's
// and the tool gateway's. The class (Class) decides the status and code.
// Internal and unavailable errors get a fixed message, since theirs may
// carry host details, unless they carry one written for the caller
// (Public); every other class keeps its message (StripClass), which the
// layers below keep free of host details. The message is not capped:
// callers cap it to their answers' size.
func HTTP(err error) (status int, code, msg string) {
	class := Class(err)
	text := func() string { return StripClass(err.Error(), class) }
	switch class {
	case ErrNotFound:
		return http.StatusNotFound, "not_found", text()
	case ErrAlreadyExists:
		return http.StatusConflict, "already_exists", text()
	case ErrInvalidArgument:
		return http.StatusBadRequest, "invalid_argument", text()
	case ErrUnauthenticated:
		return http.StatusUnauthorized, "unauthenticated", text()
	case ErrPermissionDenied:
		return http.StatusForbidden, "permission_denied", text()
	case ErrResourceExhausted:
		return http.StatusTooManyRequests, "resource_exhausted", text()
	case ErrFailedPrecondition:
		return http.StatusConflict, "failed_precondition", text()
	case ErrTimeout:
		return http.StatusGatewayTimeout, "timeout", text()
	case ErrCanceled:
		return StatusClientClosedRequest, "canceled", "the request was canceled"
	case ErrNotSupported:
		return http.StatusNotImplemented, "not_supported", text()
	case ErrUnavailable:
		if msg, ok := PublicMessage(err); ok {
			return http.StatusServiceUnavailable, "unavailable", msg
		}
		return http.StatusServiceUnavailable, "unavailable", "the service or sandbox is temporarily unavailable; try again"
	default:
		if msg, ok := PublicMessage(err); ok {
			return http.StatusInternalServerError, "internal", msg
		}
		return http.StatusInternalServerError, "internal", "internal error"
	}
}

// StripClass removes the class's text from msg where it is noise, the
// code saying it all: at the start (the agent client's "not found:
// ..."), and at the end ("...: failed precondition"). "sandbox X: not
// found", "template X: already exists" and "open /x: permission denied"
// keep their endings, which read as sentences or are the system's own
// words. A message that is only the class stays.
func StripClass(msg string, class error) string {
	c := class.Error()
	out := strings.TrimPrefix(msg, c+": ")
	switch class {
	case ErrNotFound, ErrAlreadyExists, ErrPermissionDenied:
		// Sentences ("sandbox X: not found"), or the system's own words
		// ("open /x: permission denied").
	default:
		out = strings.TrimSuffix(out, ": "+c)
	}
	if out == "" {
		return msg
	}
	return out
}
