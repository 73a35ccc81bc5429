package client

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
)

// Sentinel errors. An *APIError matches (errors.Is) the one that fits its
// code, or its status when the code is unknown to this client.
var (
	// ErrInvalid: the request was malformed or a value is out of range
	// (400 invalid_argument).
	ErrInvalid = errors.New("airlock: invalid request")
	// ErrUnauthorized: the API key is missing or not valid (401).
	ErrUnauthorized = errors.New("airlock: unauthorized")
	// ErrForbidden: the key lacks the scope, or the sandbox refused the
	// operation (403).
	ErrForbidden = errors.New("airlock: forbidden")
	// ErrNotFound: no such sandbox (for this tenant), file or route (404).
	ErrNotFound = errors.New("airlock: not found")
	// ErrConflict: the object exists already, or is not in a state that
	// allows the operation, e.g. the sandbox is stopped, its disk is full
	// or it has as many code contexts as it may (409); retrying alone
	// does not help.
	ErrConflict = errors.New("airlock: conflict")
	// ErrTooLarge: the request body is larger than the server accepts
	// (413).
	ErrTooLarge = errors.New("airlock: request too large")
	// ErrRateLimited: too many requests with this key; retry later (429
	// rate_limited).
	ErrRateLimited = errors.New("airlock: rate limited")
	// ErrQuotaExceeded: a quota or capacity is used up, e.g. the tenant's
	// sandbox quota (429 resource_exhausted).
	ErrQuotaExceeded = errors.New("airlock: quota exceeded")
	// ErrNotSupported: the server does not support what was asked (501).
	ErrNotSupported = errors.New("airlock: not supported")
	// ErrUnavailable: the server or sandbox is temporarily unavailable
	// (503).
	ErrUnavailable = errors.New("airlock: unavailable")
	// ErrTimeout: the operation timed out on the server (504, 408).
	ErrTimeout = errors.New("airlock: timeout")
	// ErrInternal: the server failed (500 and other 5xx).
	ErrInternal = errors.New("airlock: internal server error")
	// ErrResponseTooLarge: a response was larger than the client's cap
	// (a client-side error, not an *APIError).
	ErrResponseTooLarge = errors.New("airlock: response too large")
)

// APIError is an error response of the server:
// {"error":{"code":...,"message":...}}.
type APIError struct {
	// Status is the HTTP status code.
	Status int
	// Code is the stable public error code, e.g. "not_found".
	Code string
	// Message says what went wrong, for people.
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("airlock: %s (%d %s)", e.Message, e.Status, e.Code)
}

// codeErrors maps the server's codes (package api's Code constants) onto
// the sentinels. The codes left out, upgrade_required and canceled, go by
// their status.
var codeErrors = map[string]error{
	api.CodeInvalidArgument:      ErrInvalid,
	api.CodeUnauthenticated:      ErrUnauthorized,
	api.CodePermissionDenied:     ErrForbidden,
	api.CodeNotFound:             ErrNotFound,
	api.CodeMethodNotAllowed:     ErrInvalid,
	api.CodeAlreadyExists:        ErrConflict,
	api.CodeFailedPrecondition:   ErrConflict,
	api.CodeRequestTooLarge:      ErrTooLarge,
	api.CodeUnsupportedMediaType: ErrInvalid,
	api.CodeRateLimited:          ErrRateLimited,
	api.CodeResourceExhausted:    ErrQuotaExceeded,
	api.CodeNotSupported:         ErrNotSupported,
	api.CodeBadGateway:           ErrUnavailable,
	api.CodeUnavailable:          ErrUnavailable,
	api.CodeTimeout:              ErrTimeout,
	api.CodeInternal:             ErrInternal,
}

// Is reports whether target is the sentinel for e.
func (e *APIError) Is(target error) bool {
	return target != nil && e.sentinel() == target
}

func (e *APIError) sentinel() error {
	if s, ok := codeErrors[e.Code]; ok {
		return s
	}
	switch s := e.Status; {
	case s == http.StatusUnauthorized:
		return ErrUnauthorized
	case s == http.StatusForbidden:
		return ErrForbidden
	case s == http.StatusNotFound:
		return ErrNotFound
	case s == http.StatusConflict:
		return ErrConflict
	case s == http.StatusRequestEntityTooLarge:
		return ErrTooLarge
	case s == http.StatusTooManyRequests:
		return ErrRateLimited
	case s == http.StatusServiceUnavailable:
		return ErrUnavailable
	case s == http.StatusGatewayTimeout || s == http.StatusRequestTimeout:
		return ErrTimeout
	case s == http.StatusNotImplemented:
		return ErrNotSupported
	case s >= 500:
		return ErrInternal
	case s >= 400:
		return ErrInvalid
	}
	return nil
}

// decodeError turns an unexpected response into an *APIError. A body that
// is not the API's error shape (a proxy's page) keeps the status with a
// generic message.
func decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBytes))
	return errorFrom(resp.StatusCode, b)
}

func errorFrom(status int, body []byte) *APIError {
	e := &APIError{Status: status}
	var eb api.Error
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		e.Code, e.Message = eb.Error.Code, eb.Error.Message
		return e
	}
	e.Message = http.StatusText(status)
	if e.Message == "" {
		e.Message = fmt.Sprintf("unexpected status %d", status)
	}
	if t := strings.TrimSpace(string(body)); t != "" && len(t) < 200 {
		e.Message += ": " + t
	}
	return e
}
